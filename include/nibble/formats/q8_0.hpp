// nibble: GGUF Q8_0 (32 values, 34 bytes): fp16 scale + 32 int8 quants.
#pragma once

#include <cstdint>

#include "nibble/core/fp16.hpp"

namespace nibble {

/// Q8_0 block: value j = qs[j] * fp16_to_fp32(d).
struct BlockQ8_0 {
  fp16_t d;
  std::int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

}  // namespace nibble
