// nibble: GGUF MXFP4 (32 values, 17 bytes): an E8M0 shared exponent e and 32 FP4 (E2M1)
// codes; value = kvalues[code] * 2^(e - 128) with ggml's doubled E2M1 table {0, 1, 2, 3, 4, 6,
// 8, 12, -0, -1, ...}. Scalar reference codec bit-identical to ggml's quantize_row_mxfp4_ref
// (also quantize_mxfp4, which ignores importance weights) and dequantize_row_mxfp4.
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// MXFP4 block: e (E8M0 exponent), qs[j] holds code j (low nibble) and code j + 16 (high).
struct BlockMXFP4 {
  std::uint8_t e;
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block must be 17 bytes");

namespace ref {
namespace mxfp4 {

/// ggml's kvalues_mxfp4 (twice the E2M1 values).
inline constexpr std::int8_t kValues[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

/// 2^(e - 128) as ggml's ggml_e8m0_to_fp32_half: subnormal for e < 2.
NIBBLE_INLINE float e8m0_half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<std::uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Code whose value times d is nearest to x (the first one on ties).
NIBBLE_INLINE int best_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kValues[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kValues[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace mxfp4

/// Reference MXFP4 quantizer (ggml quantize_row_mxfp4_ref): e = (uint8)(floor(log2f(amax)) -
/// 2 + 127) (0 for an all-zero block), then each value takes the nearest code at scale
/// 2^(e - 128). Uses the C library's log2f as ggml does. `n`: multiple of 32.
NIBBLE_INLINE void quantize_mxfp4(const float* x, BlockMXFP4* y, std::int64_t n) {
  detail::check_row("quantize_mxfp4", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    const auto e = static_cast<std::uint8_t>(
        amax > 0.0f ? legacy::trunc_u8(std::floor(std::log2(amax)) - 2 + 127) : 0);
    const float d = mxfp4::e8m0_half(e);
    y[b].e = e;
    for (int j = 0; j < 16; ++j) {
      const int c0 = mxfp4::best_index(x[j], d);
      const int c1 = mxfp4::best_index(x[j + 16], d);
      y[b].qs[j] = static_cast<std::uint8_t>(c0 | (c1 << 4));
    }
  }
}

/// Reference MXFP4 dequantizer: y = float(kvalues[code]) * 2^(e - 128).
NIBBLE_INLINE void dequantize_mxfp4(const BlockMXFP4* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_mxfp4", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = mxfp4::e8m0_half(x[b].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(mxfp4::kValues[x[b].qs[j] & 0x0F]) * d;
      y[j + 16] = static_cast<float>(mxfp4::kValues[x[b].qs[j] >> 4]) * d;
    }
  }
}

}  // namespace ref
}  // namespace nibble
