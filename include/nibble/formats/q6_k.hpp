// nibble: GGUF Q6_K (256 values, 210 bytes).
#pragma once

#include <cstdint>

#include "nibble/core/fp16.hpp"

namespace nibble {

/// Q6_K block: 16 sub-blocks of 16 values, signed int8 scales, fp16 super-scale d (last).
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

}  // namespace nibble
