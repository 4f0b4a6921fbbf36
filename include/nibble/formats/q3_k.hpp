// nibble: GGUF Q3_K (256 values, 110 bytes): 16 sub-blocks of 16 values with signed 6-bit
// scales, one fp16 super-scale d, 3-bit quants (2 low bits in qs, the high bit in hmask).
// Scalar reference codec bit-identical to ggml's quantize_row_q3_K_ref (also
// ggml_quantize_chunk without quant_weights), dequantize_row_q3_K and the importance-weighted
// variant (ggml quantize_q3_K with quant_weights, quantize_row_q3_K_impl).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"
#include "nibble/formats/legacy_common.hpp"
#include "nibble/formats/q2_k.hpp"

namespace nibble {

/// Q3_K block: value v (0..255) = float(d) * (s[v/16] - 32) * (q - 4 * !hbit), with the 2-bit
/// q packed as in Q2_K, hbit = bit v/32 of hmask[v%32], and the 6-bit scale
/// s[j] = (j < 8 ? scales[j] & 15 : scales[j-8] >> 4) | (((scales[8 + j%4] >> 2*(j/4)) & 3) << 4).
struct BlockQ3_K {
  std::uint8_t hmask[32];
  std::uint8_t qs[64];
  std::uint8_t scales[12];
  fp16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes");

namespace ref {
namespace q3k {

/// The 6-bit scale (0..63, stored with a +32 bias) of sub-block j.
NIBBLE_INLINE int scale6(const std::uint8_t scales[12], int j) {
  const int lo = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  return lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/// ggml's make_q3_quants with do_rmse: symmetric levels -nmax..nmax-1 for 16 values with
/// weights x^2, then up to 5 rounds of per-value coordinate refinement. Writes L = level + nmax
/// and returns the least-squares scale (0 for an all-zero group).
NIBBLE_INLINE float search_q3(const float* x, std::int8_t* L) {
  constexpr int n = 16, nmax = 4;
  float amax = 0, vmax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      vmax = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / vmax;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = l < -nmax ? -nmax : (l > nmax - 1 ? nmax - 1 : l);
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = new_l < -nmax ? -nmax : (new_l > nmax - 1 ? nmax - 1 : new_l);
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// Re-rounds the levels L (level + 4) of one block on its final fp16 grid (sub-blocks whose
/// scale is 0 keep the search levels) and packs them into hmask / qs.
NIBBLE_INLINE void finish(const float* x, std::int8_t* L, BlockQ3_K& o) {
  for (int j = 0; j < 16; ++j) {
    const int sc = q3k::scale6(o.scales, j) - 32;
    const float d = fp16_to_fp32(o.d) * static_cast<float>(sc);
    if (!d) continue;
    for (int i = 0; i < 16; ++i) {
      int l = nearest_int(x[16 * j + i] / d);
      l = l < -4 ? -4 : (l > 3 ? 3 : l);
      L[16 * j + i] = static_cast<std::int8_t>(l + 4);
    }
  }
  for (int k = 0; k < 32; ++k) o.hmask[k] = 0;
  std::uint8_t U[256];
  for (int v = 0; v < 256; ++v) {
    int l = L[v];
    if (l > 3) {
      o.hmask[v % 32] = static_cast<std::uint8_t>(o.hmask[v % 32] | (1u << (v / 32)));
      l -= 4;
    }
    U[v] = static_cast<std::uint8_t>(l);
  }
  kq_low::pack_2bit(U, o.qs);
}

}  // namespace q3k

/// Reference Q3_K quantizer (ggml quantize_row_q3_K_ref): per sub-block of 16 the x^2-weighted
/// refined symmetric search (levels -4..3); the 16 scales quantized to 6 bits against the one
/// of largest magnitude (d = 1 / (-32 / max_scale)); levels re-rounded on the fp16 grid.
NIBBLE_INLINE void quantize_q3_K(const float* x, BlockQ3_K* y, std::int64_t n) {
  detail::check_row("quantize_q3_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    std::int8_t L[256];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = q3k::search_q3(x + 16 * j, L + 16 * j);
      const float s = std::fabs(scales[j]);
      if (s > amax) {
        amax = s;
        max_scale = scales[j];
      }
    }
    BlockQ3_K& o = y[b];
    for (int k = 0; k < 12; ++k) o.scales[k] = 0;
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        int l = static_cast<std::int8_t>(nearest_int(iscale * scales[j]));  // int8 as in ggml
        l = (l < -32 ? -32 : (l > 31 ? 31 : l)) + 32;
        if (j < 8)
          o.scales[j] = static_cast<std::uint8_t>(l & 0xF);
        else
          o.scales[j - 8] = static_cast<std::uint8_t>(o.scales[j - 8] | ((l & 0xF) << 4));
        l >>= 4;
        o.scales[j % 4 + 8] = static_cast<std::uint8_t>(o.scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      o.d = fp32_to_fp16(1 / iscale);
    } else {
      o.d = fp32_to_fp16(0.f);
    }
    q3k::finish(x, L, o);
  }
}

/// Importance-weighted Q3_K quantizer of one row of `n` values (ggml quantize_q3_K(x, y, 1, n,
/// qw)): weights qw * sqrt(2 * mean(x^2) + x^2) per super-block, the weighted symmetric search
/// (levels -4..3, 19 candidates) per sub-block of 16, the 16 sub-block scales quantized to
/// 6 bits by the same search (levels -32..31, weights = sub-block weight sums), values
/// re-rounded on the fp16 grid.
NIBBLE_INLINE void quantize_q3_K_imatrix(const float* x, BlockQ3_K* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q3_K_imatrix", n, 256);
  legacy::check_weights("quantize_q3_K_imatrix", qw, n);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    std::uint8_t Lu[256], Ls[16];
    std::int8_t L[256];
    float scales[16], weight[16], sw[16];
    float sumx2 = 0;
    for (int j = 0; j < 256; ++j) sumx2 += x[j] * x[j];
    const float sigma2 = 2 * sumx2 / 256;
    for (int j = 0; j < 16; ++j) {
      const float* w = qw + 256 * b + 16 * j;
      for (int l = 0; l < 16; ++l)
        weight[l] = w[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 16; ++l) sumw += weight[l];
      sw[j] = sumw;
      scales[j] = legacy::search_symmetric_scale(16, 4, x + 16 * j, Lu + 16 * j, weight);
    }
    for (int i = 0; i < 256; ++i) L[i] = static_cast<std::int8_t>(Lu[i]);
    BlockQ3_K& o = y[b];
    for (int k = 0; k < 12; ++k) o.scales[k] = 0;
    const float d_block = legacy::search_symmetric_scale(16, 32, scales, Ls, sw);
    for (int j = 0; j < 16; ++j) {
      int l = Ls[j];
      if (j < 8)
        o.scales[j] = static_cast<std::uint8_t>(l & 0xF);
      else
        o.scales[j - 8] = static_cast<std::uint8_t>(o.scales[j - 8] | ((l & 0xF) << 4));
      l >>= 4;
      o.scales[j % 4 + 8] = static_cast<std::uint8_t>(o.scales[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    o.d = fp32_to_fp16(d_block);
    q3k::finish(x, L, o);
  }
}

/// Reference Q3_K dequantizer: y = (float(d) * (s - 32)) * (q - (hbit ? 0 : 4)).
NIBBLE_INLINE void dequantize_q3_K(const BlockQ3_K* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q3_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d_all = fp16_to_fp32(x[b].d);
    for (int v = 0; v < 256; ++v) {
      const float dl = d_all * static_cast<float>(q3k::scale6(x[b].scales, v / 16) - 32);
      const int hi = (x[b].hmask[v % 32] >> (v / 32)) & 1;
      *y++ = dl * static_cast<float>(kq_low::level_2bit(x[b].qs, v) - (hi ? 0 : 4));
    }
  }
}

}  // namespace ref
}  // namespace nibble
