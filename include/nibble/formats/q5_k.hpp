// nibble: GGUF Q5_K (256 values, 176 bytes).
#pragma once

#include <cstdint>

#include "nibble/core/fp16.hpp"

namespace nibble {

/// Q5_K block: as Q4_K plus a fifth bit per value in qh[32].
struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");

}  // namespace nibble
