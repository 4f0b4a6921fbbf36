// nibble: GGUF IQ4_NL (32 values, 18 bytes) and IQ4_XS (256 values, 136 bytes): 4-bit indices
// into ggml's fixed non-linear code book {-127 .. 113} times a block scale (IQ4_NL: fp16 d per
// 32 values; IQ4_XS: fp16 d per 256 values times a 6-bit signed sub-scale per 32 values).
// Scalar reference codecs bit-identical to ggml's quantize_row_iq4_nl_ref, quantize_iq4_nl,
// quantize_iq4_xs (= quantize_row_iq4_xs_ref) and the two dequantizers.
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// IQ4_NL block: qs[j] holds the index of value j (low nibble) and of value j + 16 (high).
struct BlockIQ4_NL {
  fp16_t d;
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block must be 18 bytes");

/// IQ4_XS block: sub-block ib (0..7) of 32 values has the 6-bit scale
/// ls = ((scales_l[ib/2] >> 4*(ib%2)) & 15) | (((scales_h >> 2*ib) & 3) << 4), value =
/// d * (ls - 32) * codebook[index]; qs[16*ib + j] packs the indices as in IQ4_NL.
struct BlockIQ4_XS {
  fp16_t d;
  std::uint16_t scales_h;
  std::uint8_t scales_l[4];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block must be 136 bytes");

namespace ref {
namespace iq4 {

/// ggml's kvalues_iq4nl: the 16 non-linear levels.
inline constexpr std::int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/// Index of the level nearest to x (ties to the upper level only when strictly nearer),
/// by bisection as ggml's best_index_int8.
NIBBLE_INLINE int best_index(float x) {
  if (x <= static_cast<float>(kValues[0])) return 0;
  if (x >= static_cast<float>(kValues[15])) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < static_cast<float>(kValues[mid]))
      hi = mid;
    else
      lo = mid;
  }
  return x - static_cast<float>(kValues[hi - 1]) < static_cast<float>(kValues[hi]) - x ? hi - 1
                                                                                       : hi;
}

/// Scale search of one super-block of `sbs` values (32: IQ4_NL, 256: IQ4_XS) in sub-blocks of
/// 32, ggml's quantize_row_iq4_nl_impl. `qw` (sbs importance values) or null (weights x^2);
/// `ntry` > 0: 2*ntry+1 extra inverse-scale candidates and a final re-rounding (what
/// quantize_iq4_nl / quantize_iq4_xs use); ntry = -1: the single-candidate IQ4_NL reference.
/// Writes the fp16 scale to *dh, the packed indices to q4 (sbs/2 bytes) and, for sbs > 32, the
/// 6-bit sub-scales to *scales_h / scales_l. `L` (sbs bytes) is the caller's index scratch: an
/// all-zero block of the ntry <= 0 path keeps the indices already there (ggml reuses one
/// buffer across the blocks of a row; every other path overwrites all of them).
NIBBLE_INLINE void quantize_superblock(int sbs, const float* x, fp16_t* dh, std::uint8_t* q4,
                                       std::uint16_t* scales_h, std::uint8_t* scales_l,
                                       const float* qw, int ntry, std::uint8_t* L) {
  const int nsub = sbs / 32;
  float scales[8];
  float weight[32];
  float sigma2 = 0;
  for (int j = 0; j < sbs; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / static_cast<float>(sbs);
  for (int j = 0; j < sbs / 2; ++j) q4[j] = 0;
  *dh = fp32_to_fp16(0.f);

  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < nsub; ++ib) {
    const float* xb = x + 32 * ib;
    std::uint8_t* Lb = L + 32 * ib;
    if (qw) {
      for (int j = 0; j < 32; ++j) weight[j] = qw[32 * ib + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0, vmax = 0;
    for (int j = 0; j < 32; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        vmax = xb[j];
      }
    }
    if (amax < 1e-15f) {
      scales[ib] = 0;
      continue;
    }
    const float v0 = static_cast<float>(kValues[0]);
    float d = ntry > 0 ? -vmax / v0 : vmax / v0;
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = best_index(id * xb[j]);
      Lb[j] = static_cast<std::uint8_t>(l);
      const float q = static_cast<float>(kValues[l]);
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = static_cast<float>(itry + kValues[0]) / vmax;
      sumqx = sumq2 = 0;
      for (int j = 0; j < 32; ++j) {
        const float q = static_cast<float>(kValues[best_index(id * xb[j])]);
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    const float abs_d = std::fabs(d);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = d;
    }
  }

  if (nsub > 1) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = fp32_to_fp16(d);
    const float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < nsub; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * static_cast<float>(l);
      const float idl = dl ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j)
        L[32 * ib + j] = static_cast<std::uint8_t>(best_index(idl * x[32 * ib + j]));
      l += 32;
      const auto l_l = static_cast<std::uint8_t>(l & 0xf);
      const auto l_h = static_cast<std::uint16_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] = static_cast<std::uint8_t>(scales_l[ib / 2] | (l_l << 4));
      *scales_h = static_cast<std::uint16_t>(*scales_h | (l_h << (2 * (ib % 8))));
    }
  } else {
    *dh = fp32_to_fp16(scales[0]);
    if (ntry > 0) {
      const float id = scales[0] ? 1 / scales[0] : 0;
      for (int j = 0; j < 32; ++j) L[j] = static_cast<std::uint8_t>(best_index(id * x[j]));
    }
  }
  for (int i = 0; i < nsub; ++i)
    for (int j = 0; j < 16; ++j)
      q4[16 * i + j] = static_cast<std::uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

}  // namespace iq4

/// Reference IQ4_NL quantizer (ggml quantize_row_iq4_nl_ref): per block, the x^2-weighted
/// least-squares scale of the indices chosen at d = max / -127, no further search. For an
/// all-zero block ggml keeps the indices of the previous block (d = 0, so they decode to +-0);
/// before the first non-zero block of a row ggml's are uninitialised, nibble's are 0.
NIBBLE_INLINE void quantize_iq4_nl_ref(const float* x, BlockIQ4_NL* y, std::int64_t n) {
  detail::check_row("quantize_iq4_nl_ref", n, 32);
  std::uint8_t L[32] = {};
  for (std::int64_t b = 0; b < n / 32; ++b)
    iq4::quantize_superblock(32, x + 32 * b, &y[b].d, y[b].qs, nullptr, nullptr, nullptr, -1, L);
}

/// IQ4_NL quantizer of ggml's quantize_iq4_nl (what ggml_quantize_chunk and llama-quantize
/// store): 15 extra inverse-scale candidates, weights `qw` (n values) or x^2 when null, final
/// re-rounding on the chosen scale.
NIBBLE_INLINE void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, std::int64_t n,
                                   const float* qw = nullptr) {
  detail::check_row("quantize_iq4_nl", n, 32);
  std::uint8_t L[32] = {};
  for (std::int64_t b = 0; b < n / 32; ++b)
    iq4::quantize_superblock(32, x + 32 * b, &y[b].d, y[b].qs, nullptr, nullptr,
                             qw ? qw + 32 * b : nullptr, 7, L);
}

/// Reference IQ4_NL dequantizer: y = float(d) * codebook[index].
NIBBLE_INLINE void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_iq4_nl", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(iq4::kValues[x[b].qs[j] & 0xf]);
      y[j + 16] = d * static_cast<float>(iq4::kValues[x[b].qs[j] >> 4]);
    }
  }
}

/// IQ4_XS quantizer (ggml quantize_iq4_xs, also quantize_row_iq4_xs_ref when qw is null):
/// per 256 values, the IQ4_NL search per sub-block of 32, then one fp16 d = -max_scale/32 and
/// 6-bit sub-scales, indices re-rounded on the final grid. `qw`: n importance values or null.
NIBBLE_INLINE void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, std::int64_t n,
                                   const float* qw = nullptr) {
  detail::check_row("quantize_iq4_xs", n, 256);
  std::uint8_t L[256] = {};
  for (std::int64_t b = 0; b < n / 256; ++b)
    iq4::quantize_superblock(256, x + 256 * b, &y[b].d, y[b].qs, &y[b].scales_h, y[b].scales_l,
                             qw ? qw + 256 * b : nullptr, 7, L);
}

/// Reference IQ4_XS dequantizer: y = (float(d) * (ls - 32)) * codebook[index].
NIBBLE_INLINE void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_iq4_xs", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const std::uint8_t* qs = x[b].qs;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      const int ls = ((x[b].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                     (((x[b].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(iq4::kValues[qs[j] & 0xf]);
        y[j + 16] = dl * static_cast<float>(iq4::kValues[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace ref
}  // namespace nibble
