// nibble: bitsandbytes NF4/FP4 4-bit formats.
#pragma once

#include <cstdint>

namespace nibble {

/// nibble's row-block form of NF4/FP4 with blocksize 64 (used by nibble::quantize and the
/// kernels): fp32 absmax, then 32 bytes of codes, element 2i in the high nibble of qs[i].
struct BlockNF4 {
  float absmax;
  std::uint8_t qs[32];
};
static_assert(sizeof(BlockNF4) == 36, "NF4 block must be 36 bytes");

}  // namespace nibble
