// nibble: GGUF Q4_K (256 values, 144 bytes).
#pragma once

#include <cstdint>

#include "nibble/core/fp16.hpp"

namespace nibble {

/// Q4_K block: 8 sub-blocks of 32 values, 6-bit scales and mins (packed in scales[12]),
/// fp16 super-scales d and dmin, 4-bit quants (see docs/formats.md).
struct BlockQ4_K {
  fp16_t d;
  fp16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");

}  // namespace nibble
