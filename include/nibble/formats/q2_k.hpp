// nibble: GGUF Q2_K (256 values, 84 bytes): 16 sub-blocks of 16 values with 4-bit scales and
// 4-bit mins, fp16 super-scales d and dmin, 2-bit quants. Scalar reference codec bit-identical
// to ggml's quantize_row_q2_K_ref (also ggml_quantize_chunk without quant_weights) and
// dequantize_row_q2_K, and the importance-weighted variant (ggml quantize_q2_K with
// quant_weights, quantize_row_q2_K_impl).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// Q2_K block: scales[j] = scale (low nibble) | min (high nibble) of sub-block j; value v
/// (0..255) has its 2-bit level in bits 2*((v%128)/32) of qs[32*(v/128) + v%32];
/// value = float(d)*scale * q - float(dmin)*min.
struct BlockQ2_K {
  std::uint8_t scales[16];
  std::uint8_t qs[64];
  fp16_t d;
  fp16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes");

namespace ref {
namespace kq_low {
/// Packs 256 2-bit levels as Q2_K / Q3_K store them (4 levels 32 apart per byte).
NIBBLE_INLINE void pack_2bit(const std::uint8_t* L, std::uint8_t qs[64]) {
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}
/// The 2-bit level of value v (0..255).
NIBBLE_INLINE int level_2bit(const std::uint8_t qs[64], int v) {
  return (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
}
}  // namespace kq_low

/// Reference Q2_K quantizer (ggml quantize_row_q2_K_ref): per sub-block of 16, the |x|-weighted
/// scale/min search (levels 0..3, rmin -0.5, 16 candidates, absolute error); scales and mins
/// quantized to 4 bits against their maxima; levels re-rounded on the fp16 grid.
NIBBLE_INLINE void quantize_q2_K(const float* x, BlockQ2_K* y, std::int64_t n) {
  detail::check_row("quantize_q2_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256], Laux[16];
    float weights[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = search_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f,
                                   0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    BlockQ2_K& o = y[b];
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j)
        o.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
      o.d = fp32_to_fp16(max_scale / 15.f);
    } else {
      for (int j = 0; j < 16; ++j) o.scales[j] = 0;
      o.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j)
        o.scales[j] = static_cast<std::uint8_t>(o.scales[j] | (nearest_int(iscale * mins[j]) << 4));
      o.dmin = fp32_to_fp16(max_min / 15.f);
    } else {
      o.dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(o.d) * static_cast<float>(o.scales[j] & 0xF);
      if (!d) continue;
      const float dm = fp16_to_fp32(o.dmin) * static_cast<float>(o.scales[j] >> 4);
      for (int i = 0; i < 16; ++i) {
        int l = nearest_int((x[16 * j + i] + dm) / d);
        l = l < 0 ? 0 : (l > 3 ? 3 : l);
        L[16 * j + i] = static_cast<std::uint8_t>(l);
      }
    }
    kq_low::pack_2bit(L, o.qs);
  }
}

/// Importance-weighted Q2_K quantizer of one row of `n` values (ggml quantize_q2_K(x, y, 1, n,
/// qw)): per super-block weights qw * sqrt(sigma^2 + x^2) (sigma^2 = mean square of the 256
/// values), the 37-candidate weighted scale/min search per sub-block of 16 (levels 0..3), the
/// 4-bit scales and mins chosen by the weighted positive-scale search (sub-block weight sums),
/// then every value re-rounded on the fp16 grid.
NIBBLE_INLINE void quantize_q2_K_imatrix(const float* x, BlockQ2_K* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q2_K_imatrix", n, 256);
  legacy::check_weights("quantize_q2_K_imatrix", qw, n);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t L[256], Laux[16], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], weight[16];
    float sumx2 = 0;
    for (int j = 0; j < 256; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = sumx2 / 256;
    for (int j = 0; j < 16; ++j) {
      const float* w = qw + 256 * b + 16 * j;
      for (int l = 0; l < 16; ++l)
        weight[l] = w[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      sw[j] = 0;
      for (int l = 0; l < 16; ++l) sw[j] += weight[l];
      scales[j] = search_scale_min(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f,
                                   0.05f, 36, false);
    }
    BlockQ2_K& o = y[b];
    o.d = fp32_to_fp16(search_positive_scale(16, 15, scales, Ls, sw));
    o.dmin = fp32_to_fp16(search_positive_scale(16, 15, mins, Lm, sw));
    const float dm = fp16_to_fp32(o.d), mm = fp16_to_fp32(o.dmin);
    for (int j = 0; j < 16; ++j) o.scales[j] = static_cast<std::uint8_t>(Ls[j] | (Lm[j] << 4));
    for (int j = 0; j < 16; ++j) {
      const float d = dm * static_cast<float>(o.scales[j] & 0xF);
      if (!d) continue;
      const float m = mm * static_cast<float>(o.scales[j] >> 4);
      for (int i = 0; i < 16; ++i) {
        int l = nearest_int((x[16 * j + i] + m) / d);
        l = l < 0 ? 0 : (l > 3 ? 3 : l);
        L[16 * j + i] = static_cast<std::uint8_t>(l);
      }
    }
    kq_low::pack_2bit(L, o.qs);
  }
}

/// Reference Q2_K dequantizer: y = (float(d) * scale) * q - float(dmin) * min.
NIBBLE_INLINE void dequantize_q2_K(const BlockQ2_K* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q2_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float mn = fp16_to_fp32(x[b].dmin);
    for (int v = 0; v < 256; ++v) {
      const std::uint8_t sc = x[b].scales[v / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = mn * static_cast<float>(sc >> 4);
      *y++ = dl * static_cast<float>(kq_low::level_2bit(x[b].qs, v)) - ml;
    }
  }
}

}  // namespace ref
}  // namespace nibble
