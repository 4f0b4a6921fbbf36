// nibble: GGUF Q4_1 (32 values, 20 bytes): fp16 scale d, fp16 minimum m + 32 4-bit quants,
// value = q * d + m. Scalar reference codec bit-identical to ggml's quantize_row_q4_1_ref,
// quantize_q4_1 with quant_weights (quantize_row_q4_1_impl) and dequantize_row_q4_1.
#pragma once

#include "nibble/core/config.hpp"
#include <cfloat>
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// Q4_1 block: qs[j] holds value j in its low nibble and value j + 16 in its high nibble.
struct BlockQ4_1 {
  fp16_t d;
  fp16_t m;
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");

namespace ref {

/// Reference Q4_1 quantizer (ggml quantize_row_q4_1_ref): per block, d = (max - min) / 15,
/// id = 1/d (0 if d == 0), q = min(15, (int8)((x - min)*id + 0.5)) (truncation), stored
/// d = fp16(d), m = fp16(min). `n` must be a multiple of 32.
NIBBLE_INLINE void quantize_q4_1(const float* x, BlockQ4_1* y, std::int64_t n) {
  detail::check_row("quantize_q4_1", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < mn) mn = x[j];
      if (x[j] > mx) mx = x[j];
    }
    const float d = (mx - mn) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, legacy::trunc_i8((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, legacy::trunc_i8((x[16 + j] - mn) * id + 0.5f));
      y[b].qs[j] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(q0) | (q1 << 4));
    }
  }
}

/// Importance-weighted Q4_1 quantizer of one row of `n` values (ggml quantize_q4_1(x, y, 1, n,
/// qw)): weights qw[j] * sqrt(sigma^2 + x[j]^2), then the 37-candidate weighted scale/min
/// search (rmin -0.9, step 0.05) with levels 0..15; m = fp16(fitted minimum).
NIBBLE_INLINE void quantize_q4_1_imatrix(const float* x, BlockQ4_1* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q4_1_imatrix", n, 32);
  legacy::check_weights("quantize_q4_1_imatrix", qw, n);
  if (n == 0) return;
  const float sigma2 = legacy::row_sigma2(x, n);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float w[32];
    std::uint8_t L[32], Laux[32];
    legacy::block_weights(x + 32 * b, qw + 32 * b, sigma2, w);
    float neg_min;
    const float d =
        search_scale_min(32, 15, x + 32 * b, w, L, &neg_min, Laux, -0.9f, 0.05f, 36, false);
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(-neg_min);
    for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
  }
}

/// Reference Q4_1 dequantizer: y = float(q) * float(d) + float(m).
NIBBLE_INLINE void dequantize_q4_1(const BlockQ4_1* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q4_1", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[b].qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(x[b].qs[j] >> 4) * d + m;
    }
  }
}

}  // namespace ref
}  // namespace nibble
