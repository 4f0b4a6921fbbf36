// nibble: helpers shared by the K-quant reference codecs (Q4_K, Q5_K, Q8_K): ggml's
// round-to-nearest trick, the weighted scale/min searches, the 6-bit scale/min packing and
// the block-level scale selection used by both Q4_K and Q5_K.
//
// Everything here is plain float32 arithmetic written in the same order as ggml's
// reference code (ggml-quants.c at ggml d99724f / llama.cpp c392e50), so results are
// bit-identical when compiled with -ffp-contract=off (the library's interface flag).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/core/error.hpp"
#include "nibble/core/fp16.hpp"

namespace nibble::ref {

/// Number of values per K-quant super-block.
constexpr int kQK_K = 256;

/// Round to nearest, ties to even, exactly as ggml's `nearest_int`: adds 1.5 * 2^23 and reads
/// the low mantissa bits back. Exact for |v| <= 4194303; outside that range (and for inf/NaN)
/// it returns the same deterministic garbage ggml does, which is what bit-exactness needs.
NIBBLE_INLINE int nearest_int(float v) {
  const float biased = v + 12582912.f;
  std::uint32_t bits;
  std::memcpy(&bits, &biased, sizeof bits);
  return static_cast<int>(bits & 0x007FFFFFu) - 0x00400000;
}

/// float -> int32 as x86 cvttss2si does it: truncation toward zero, and INT_MIN for NaN and
/// values outside the int32 range (what a C float -> small-int conversion compiles to in ggml).
NIBBLE_INLINE int cvt_trunc_i32(float v) {
  if (v >= -2147483648.f && v < 2147483648.f) return static_cast<int>(v);
  return -2147483647 - 1;
}

/// Unpacks the 6-bit scale `*sc` and 6-bit min `*m` of sub-block `j` (0..7) from the 12-byte
/// Q4_K/Q5_K `scales` field (layout: see tests/data/MANIFEST.md, "6-bit packing").
NIBBLE_INLINE void get_scale_min_k4(int j, const std::uint8_t* scales, std::uint8_t* sc,
                                    std::uint8_t* m) {
  if (j < 4) {
    *sc = static_cast<std::uint8_t>(scales[j] & 63);
    *m = static_cast<std::uint8_t>(scales[j + 4] & 63);
  } else {
    *sc = static_cast<std::uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

/// Packs eight 6-bit scales `ls` and mins `lm` into the 12-byte `scales` field; the inverse of
/// get_scale_min_k4 for values 0..63. Values above 63 are packed with the same truncation ggml
/// applies (its importance-weighted Q4_K path can produce them), so bytes stay identical.
NIBBLE_INLINE void pack_scale_min_k4(const std::uint8_t ls[8], const std::uint8_t lm[8],
                                     std::uint8_t scales[12]) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = ls[j];
    scales[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    scales[j + 4] = static_cast<std::uint8_t>((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
    scales[j - 4] = static_cast<std::uint8_t>(scales[j - 4] | ((ls[j] >> 4) << 6));
    scales[j] = static_cast<std::uint8_t>(scales[j] | ((lm[j] >> 4) << 6));
  }
}

/// Weighted search for an asymmetric grid value = scale * L - the_min, L in 0..nmax, over the
/// `n` values `x`. `weights` may be null, meaning w = x*x. Returns the scale, stores -min in
/// `*the_min` and the chosen levels in `L`; `Laux` (n bytes) is scratch. Starts from the
/// min/max grid, then tries nstep+1 candidate inverse scales (rmin + rdelta*is + nmax)/range and
/// keeps the weighted least-squares fit with the smallest weighted error (squared, or absolute
/// when `use_mad`). This is ggml's make_qkx2_quants (weights given) and make_qkx3_quants
/// (weights optional); for finite inputs the two are the same computation.
NIBBLE_INLINE float search_scale_min(int n, int nmax, const float* x, const float* weights,
                                     std::uint8_t* L, float* the_min, std::uint8_t* Laux,
                                     float rmin, float rdelta, int nstep, bool use_mad) {
  auto weight = [&](int i) { return weights ? weights[i] : x[i] * x[i]; };
  float lo = x[0];
  float hi = x[0];
  float sum_w = weight(0);
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    const float w = weight(i);
    sum_w += w;
    sum_x += w * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi <= lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -lo;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1 / iscale;
  float best_err = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - lo));
    l = l < 0 ? 0 : (l > nmax ? nmax : l);
    L[i] = static_cast<std::uint8_t>(l);
    float diff = scale * static_cast<float>(L[i]) + lo - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_err += weight(i) * diff;
  }
  if (nstep < 1) {
    *the_min = -lo;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    // `lo` is the min of the best fit so far (as in ggml, later candidates start from it).
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - lo));
      l = l < 0 ? 0 : (l > nmax ? nmax : l);
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weight(i);
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        err += weight(i) * diff;
      }
      if (err < best_err) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_err = err;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *the_min = -lo;
  return scale;
}

/// Importance-weighted choice of one positive super-scale for `n` non-negative values `x`
/// (the 8 sub-block scales or mins of a K-quant block), levels 0..nmax in `L` (8-bit wrapped
/// as in ggml), weights `qw`. Returns the super-scale (0 when max(x) < 1e-15). ggml's
/// make_qp_quants: 9 candidate inverse scales, then up to 5 rounds of coordinate refinement.
NIBBLE_INLINE float search_positive_scale(int n, int nmax, const float* x, std::uint8_t* L,
                                          const float* qw) {
  float mx = 0;
  for (int i = 0; i < n; ++i) mx = mx > x[i] ? mx : x[i];  // MAX(mx, x[i]) as ggml writes it
  if (mx < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / mx;
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + fnmax) / mx;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale_is * x[i]);
      l = l < nmax ? l : nmax;
      const float diff = x[i] - scale_is * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = l < nmax ? l : nmax;
    L[i] = static_cast<std::uint8_t>(l);
    const float fl = static_cast<float>(l);
    sumlx += qw[i] * x[i] * fl;
    suml2 += qw[i] * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = new_l < nmax ? new_l : nmax;
        if (new_l != static_cast<int>(L[i])) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// Scale/min header of one Q4_K/Q5_K super-block, as chosen by kquant_choose_block.
struct KQuantHeader {
  fp16_t d = 0;                  ///< fp16 super-scale of the 6-bit scales
  fp16_t dmin = 0;               ///< fp16 super-scale of the 6-bit mins
  std::uint8_t scales[12] = {};  ///< packed 6-bit scales and mins
};

/// Chooses the header of one 256-value Q4_K (nmax = 15) or Q5_K (nmax = 31) super-block and
/// the per-value levels L[256] (0..nmax), exactly as ggml does:
/// - `qw == nullptr`: quantize_row_q{4,5}_K_ref (per sub-block weights rms + |x|, make_qkx2
///   search with rmin = -1 (Q4_K) / -0.5 (Q5_K), 20 / 15 steps; 6-bit scales against the maxima);
/// - `qw != nullptr` (256 importance values for this block): quantize_row_q{4,5}_K_impl
///   (weights qw * sqrt(2*mean(x^2) + x^2), 37-candidate make_qkx3 search, make_qp_quants for
///   the 6-bit scales and mins).
/// The final levels are re-rounded against the fp16-rounded grid (sub-blocks whose effective
/// scale is 0 keep the levels of the search).
NIBBLE_INLINE void kquant_choose_block(const float* x, const float* qw, int nmax, KQuantHeader* hdr,
                                       std::uint8_t L[256]) {
  float scales[8];
  float mins[8];
  std::uint8_t ls[8];
  std::uint8_t lm[8];
  std::uint8_t Laux[32];
  float weights[32];
  if (!qw) {
    const float rmin = nmax == 15 ? -1.f : -0.5f;
    const int nstep = nmax == 15 ? 20 : 15;
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
      scales[j] = search_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                   nstep, false);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
      const auto s = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
      const auto m = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
      ls[j] = s < 63 ? s : 63;
      lm[j] = m < 63 ? m : 63;
    }
    pack_scale_min_k4(ls, lm, hdr->scales);
    hdr->d = fp32_to_fp16(max_scale / 63.f);
    hdr->dmin = fp32_to_fp16(max_min / 63.f);
  } else {
    float sw[8];
    float sum_x2 = 0;
    for (int l = 0; l < 256; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / 256;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      const float* q = qw + 32 * j;
      for (int l = 0; l < 32; ++l) weights[l] = q[l] * std::sqrt(sigma2 + xs[l] * xs[l]);
      float sumw = 0;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[j] = sumw;
      scales[j] = search_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f,
                                   36, false);
    }
    const float d_block = search_positive_scale(8, 63, scales, ls, sw);
    const float m_block = search_positive_scale(8, 63, mins, lm, sw);
    if (nmax == 31) {  // ggml clamps the levels to 63 on the Q5_K path only
      for (int j = 0; j < 8; ++j) {
        ls[j] = ls[j] < 63 ? ls[j] : 63;
        lm[j] = lm[j] < 63 ? lm[j] : 63;
      }
    }
    pack_scale_min_k4(ls, lm, hdr->scales);
    hdr->d = fp32_to_fp16(d_block);
    hdr->dmin = fp32_to_fp16(m_block);
  }
  // Re-round every value on the final (fp16-rounded) grid.
  const float dd = fp16_to_fp32(hdr->d);
  const float dm = fp16_to_fp32(hdr->dmin);
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    get_scale_min_k4(j, hdr->scales, &sc, &m);
    const float s = dd * static_cast<float>(sc);
    if (!s) continue;
    const float mn = dm * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      int l = nearest_int((x[32 * j + i] + mn) / s);
      l = l < 0 ? 0 : (l > nmax ? nmax : l);
      L[32 * j + i] = static_cast<std::uint8_t>(l);
    }
  }
}

/// Level of one value on a fixed K-quant grid value = scale * q - min: q = clamp(round-half-even
/// ((x + min) / scale), 0, nmax); 0 when scale == 0. The same rounding the reference quantizers
/// apply after choosing the grid.
NIBBLE_INLINE int kquant_round(float x, float scale, float min, int nmax) {
  if (!scale) return 0;
  const int l = nearest_int((x + min) / scale);
  return l < 0 ? 0 : (l > nmax ? nmax : l);
}

namespace detail {
/// Throws unless n >= 0 and n is a multiple of `block`.
NIBBLE_INLINE void check_row(const char* fn, std::int64_t n, std::int64_t block) {
  if (n < 0 || n % block != 0)
    nibble::detail::fail(fn, ": n = ", n, " is not a non-negative multiple of ", block);
}

/// max |x[j]| over 32 values, in the reference quantizers' order (finite inputs: the same value as
/// any max tree).
NIBBLE_INLINE float abs_max32(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

/// ggml's hsum_float_8 order (x86 kernels): ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
NIBBLE_INLINE float hsum8_ggml(const float a[8]) {
  const float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}
}  // namespace detail

}  // namespace nibble::ref
