// nibble: GGUF Q4_0 (32 values, 18 bytes): fp16 scale d + 32 4-bit quants, value = (q - 8) * d.
// Scalar reference codec bit-identical to ggml's quantize_row_q4_0_ref, quantize_q4_0 with
// quant_weights (quantize_row_q4_0_impl) and dequantize_row_q4_0.
#pragma once

#include "nibble/core/config.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// Q4_0 block: qs[j] holds value j in its low nibble and value j + 16 in its high nibble.
struct BlockQ4_0 {
  fp16_t d;
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");

namespace ref {

/// Reference Q4_0 quantizer (ggml quantize_row_q4_0_ref): per block, m = the value of largest
/// magnitude (first on ties), d = m / -8, id = 1/d (0 if d == 0), q = min(15, (int8)(x*id +
/// 8.5)) (truncation), stored d = fp16(d). `n` must be a multiple of 32.
NIBBLE_INLINE void quantize_q4_0(const float* x, BlockQ4_0* y, std::int64_t n) {
  detail::check_row("quantize_q4_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float d = vmax / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, legacy::trunc_i8(x[j] * id + 8.5f));
      const int q1 = std::min(15, legacy::trunc_i8(x[16 + j] * id + 8.5f));
      y[b].qs[j] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(q0) | (q1 << 4));
    }
  }
}

/// Importance-weighted Q4_0 quantizer of one row of `n` values (ggml quantize_q4_0(x, y, 1, n,
/// qw)): weights qw[j] * sqrt(sigma^2 + x[j]^2) with sigma^2 the row's mean square, then the
/// weighted symmetric scale search with levels -8..7 per block.
NIBBLE_INLINE void quantize_q4_0_imatrix(const float* x, BlockQ4_0* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q4_0_imatrix", n, 32);
  legacy::check_weights("quantize_q4_0_imatrix", qw, n);
  if (n == 0) return;
  const float sigma2 = legacy::row_sigma2(x, n);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float w[32];
    std::uint8_t L[32];
    legacy::block_weights(x + 32 * b, qw + 32 * b, sigma2, w);
    const float d = legacy::search_symmetric_scale(32, 8, x + 32 * b, L, w);
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

/// Reference Q4_0 dequantizer: y = float(q - 8) * float(d).
NIBBLE_INLINE void dequantize_q4_0(const BlockQ4_0* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q4_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((x[b].qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace ref
}  // namespace nibble
