// nibble: ggml Q8_K (256 values, 292 bytes), the activation format of the K-quant dot products.
#pragma once

#include <cstdint>

namespace nibble {

/// Q8_K block: value i = d * qs[i]; bsums[k] = sum of qs[16k .. 16k+15].
struct BlockQ8_K {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block must be 292 bytes");

}  // namespace nibble
