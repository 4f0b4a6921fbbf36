// nibble: weight quantizers (fp32 -> Q8_0 / Q4_K / Q5_K / Q6_K / NF4 / FP4 blocks), templated
// on an ISA tag from arch.hpp. Included only by the per-ISA TUs in src/isa/, inside an
// anonymous namespace (see arch.hpp).
//
// Every quantizer here is byte-identical to the scalar reference in nibble/formats (ggml's
// reference quantizers). The SIMD versions get their speed by running the reference operation
// sequence of one 32-value sub-block per vector lane: the K-quant scale/min search is a long
// chain of dependent float operations on 32 values, so vectorizing *across* independent
// sub-blocks keeps every lane's arithmetic identical to the scalar code (same operations, same
// order, no reassociation, no FMA; branches become per-lane selects). The per-super-block tail
// (6-bit scale quantization, fp16 rounding, packing) is cheap and stays scalar; the final
// re-rounding of the 256 values on the chosen grid is vectorized along the values.
// Q8_0 is vectorized inside each block (blocks holding NaN take a scalar copy of the reference,
// since there the order of the max matters).
//
// Q6_K (quantize_q6_k-inl.hpp) runs one 16-value sub-block per lane the same way; NF4/FP4
// (quantize_nf4-inl.hpp) are vectorized along the 64 values of each block.
//
// ScalarTag registers the reference functions themselves. The x86 (AVX2, AVX-512) and NEON
// tags register the SIMD code (NEON: IEEE division / square root / rounding through the
// AArch64 instructions, since xsimd 8.1 approximates float division and square root there);
// the SIMD code never calls a reference inline function, so none is compiled with wider ISA
// flags than the scalar TU (ODR safety).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/formats/nf4.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/table.hpp"

#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"

#if defined(NIBBLE_K_X86)
#define NIBBLE_QZ_SIMD 1
#define NIBBLE_QZ_X86 1
#elif defined(NIBBLE_K_NEON)
#define NIBBLE_QZ_SIMD 1
#endif

namespace nibble::kernels {
namespace {
namespace qz {

// ------------------------------------------------------------------ scalar pieces (private)

/// ggml's nearest_int (round half to even through the 1.5*2^23 trick).
inline int nint(float v) {
  const float b = v + 12582912.f;
  std::uint32_t u;
  std::memcpy(&u, &b, 4);
  return static_cast<int>(u & 0x007FFFFFu) - 0x00400000;
}

inline void unpack_sm(int j, const std::uint8_t* q, std::uint8_t* sc, std::uint8_t* m) {
  if (j < 4) {
    *sc = static_cast<std::uint8_t>(q[j] & 63);
    *m = static_cast<std::uint8_t>(q[j + 4] & 63);
  } else {
    *sc = static_cast<std::uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

inline void pack_sm(const std::uint8_t ls[8], const std::uint8_t lm[8], std::uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = ls[j];
    s[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = static_cast<std::uint8_t>((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
    s[j - 4] = static_cast<std::uint8_t>(s[j - 4] | ((ls[j] >> 4) << 6));
    s[j] = static_cast<std::uint8_t>(s[j] | ((lm[j] >> 4) << 6));
  }
}

/// make_qp_quants (same operation order as nibble::ref::search_positive_scale).
inline float qp_search(const float* x, std::uint8_t* L, const float* qw) {
  constexpr int n = 8, nmax = 63;
  float mx = 0;
  for (int i = 0; i < n; ++i) mx = mx > x[i] ? mx : x[i];
  if (mx < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = 63.f / mx;
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(nint(iscale * x[i]));
  const float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float isc = (0.1f * static_cast<float>(is) + 63.f) / mx;
    const float sc = 1 / isc;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      int l = nint(isc * x[i]);
      l = l < nmax ? l : nmax;
      const float diff = x[i] - sc * static_cast<float>(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best) {
      best = mse;
      iscale = isc;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nint(iscale * x[i]);
    l = l < nmax ? l : nmax;
    L[i] = static_cast<std::uint8_t>(l);
    const float fl = static_cast<float>(l);
    sumlx += qw[i] * x[i] * fl;
    suml2 += qw[i] * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      float sl2 = suml2 - w * li * li;
      if (slx > 0 && sl2 > 0) {
        int nl = nint(x[i] * sl2 / slx);
        nl = nl < nmax ? nl : nmax;
        if (nl != static_cast<int>(L[i])) {
          const float fl = static_cast<float>(nl);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::uint8_t>(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// One Q8_0 block, scalar (used for blocks holding NaN, where the order of the max matters).
inline void q8_0_block_scalar(const float* x, BlockQ8_0* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    std::uint32_t u;
    std::memcpy(&u, &x[j], 4);
    u &= 0x7FFFFFFFu;  // fabsf without calling an external inline function
    float a;
    std::memcpy(&a, &u, 4);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  y->d = float_to_half(d);
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    // roundf: half away from zero, then the x86 float -> int conversion (INT_MIN if invalid)
    int r;
    if (v >= -2147483648.f && v < 2147483648.f) {
      const int t = static_cast<int>(v);
      const float f = v - static_cast<float>(t);
      r = t + (f >= 0.5f ? 1 : (f <= -0.5f ? -1 : 0));
    } else {
      r = -2147483647 - 1;
    }
    y->qs[j] = static_cast<std::int8_t>(r);
  }
}

// ------------------------------------------------------------------ SIMD pieces

#if defined(NIBBLE_QZ_SIMD)

/// nearest_int per lane, returned as float (exact: the result is an integer below 2^23).
template <class A>
inline xsimd::batch<float, A> nint_v(const xsimd::batch<float, A>& v) {
  using VI = xsimd::batch<std::int32_t, A>;
  const VI bits = xsimd::bitwise_cast<VI>(v + xsimd::batch<float, A>(12582912.f));
  return xsimd::to_float((bits & VI(0x007FFFFF)) - VI(0x00400000));
}

/// Levels l_i = clamp(nearest_int(isc * (x_i - lo)), 0, nmax) of the 32 values of one vector
/// of lanes (stored to `lv`) and the weighted sums sum w*l, sum w*l*l, sum w*l*x of the
/// candidate fit.
/// Mode 0: ggml's bit-trick rounding, exact for any input.
/// Modes 1..4: every product is known to be finite with magnitude < 2^20, where
/// nearest_int(v) == (v + 1.5*2^23) - 1.5*2^23 exactly (a float add and subtract instead of the
/// bit extraction and int -> float conversion). Mode = 1 + skip_low + 2*skip_high: skip_low when
/// every product is >= -0.5 (the clamp at 0 is a no-op), skip_high when every product is
/// < nmax + 0.5 (the clamp at nmax is a no-op; nmax + 0.5 itself would round up to even).
template <class A, int Mode, int S>
inline void level_pass(const float* xt, const float* wt, const xsimd::batch<float, A>& lo,
                       const xsimd::batch<float, A>& isc, const xsimd::batch<float, A>& vmax,
                       float* lv, xsimd::batch<float, A>& sl, xsimd::batch<float, A>& sl2,
                       xsimd::batch<float, A>& sxl) {
  using V = xsimd::batch<float, A>;
  const V zero(0.f), magic(12582912.f);
  V a = zero, b = zero, c = zero;
  for (int i = 0; i < 32; ++i) {
    const V x = V::load_aligned(xt + i * S);
    const V v = isc * (x - lo);
    V l = Mode ? (v + magic) - magic : nint_v(v);
    if (Mode == 0 || Mode == 1 || Mode == 3) l = xsimd::max(l, zero);
    if (Mode <= 2) l = xsimd::min(l, vmax);
    l.store_aligned(lv + i * S);
    const V w = V::load_aligned(wt + i * S);
    const V wl = w * l;
    a = a + wl;
    b = b + wl * l;
    c = c + wl * x;
  }
  sl = a;
  sl2 = b;
  sxl = c;
}

/// Lane-parallel make_qkx2/qkx3 search (nibble::ref::search_scale_min with weights, use_mad =
/// false) over S = W*U sub-blocks. xt/wt: values and weights, [32][S] (value i of sub-block p
/// at [i*S + p]); Lt: levels out, same layout (as floats); scale/the_min out, S each.
template <class A, int U>
inline void search_lanes(const float* xt, const float* wt, float nmax, float rmin, float rdelta,
                         int nstep, float* Lt, float* scale_out, float* min_out) {
  using V = xsimd::batch<float, A>;
  constexpr int W = static_cast<int>(V::size);
  constexpr int S = W * U;
  alignas(64) float laux[32 * S];
  const V zero(0.f), vmax(nmax), lim(1048576.f);
  V lo[U], hi[U], xmin[U], sum_w[U], sum_x[U];
  bool has_nan = false;
  for (int u = 0; u < U; ++u) {
    const V x0 = V::load_aligned(xt + u * W);
    const V w0 = V::load_aligned(wt + u * W);
    lo[u] = x0;
    hi[u] = x0;
    sum_w[u] = w0;
    sum_x[u] = w0 * x0;
    auto nan = x0 != x0;
    for (int i = 1; i < 32; ++i) {
      const V x = V::load_aligned(xt + i * S + u * W);
      const V w = V::load_aligned(wt + i * S + u * W);
      nan = nan || (x != x);
      lo[u] = xsimd::select(x < lo[u], x, lo[u]);
      hi[u] = xsimd::select(x > hi[u], x, hi[u]);
      sum_w[u] = sum_w[u] + w;
      sum_x[u] = sum_x[u] + w * x;
    }
    has_nan = has_nan || xsimd::any(nan);
    xmin[u] = lo[u];
  }
  // Rounding mode of a candidate for the whole group (see level_pass): the products
  // isc*(x - lo) are monotone in x, so both ends of [xmin, hi] of every lane bound them.
  // Degenerate lanes (constant sub-blocks, hi == lo) are ignored: their levels and fits are
  // discarded at the end.
  xsimd::batch_bool<float, A> degen[U];
  auto pass_mode = [&](const V* isc) {
    if (has_nan) return 0;
    bool low = true, high = true;
    for (int u = 0; u < U; ++u) {
      const V a = xsimd::select(degen[u], zero, isc[u] * (xmin[u] - lo[u]));
      const V b = xsimd::select(degen[u], zero, isc[u] * (hi[u] - lo[u]));
      if (!xsimd::all((xsimd::abs(a) < lim) && (xsimd::abs(b) < lim))) return 0;
      const V mn = xsimd::min(a, b), mx = xsimd::max(a, b);
      low = low && xsimd::all(mn >= V(-0.5f));
      high = high && xsimd::all(mx < vmax + V(0.5f));
    }
    return 1 + (low ? 1 : 0) + (high ? 2 : 0);
  };
  auto run_pass = [&](int mode, int u, const V& is, float* lv, V& a, V& b, V& c) {
    const float* x = xt + u * W;
    const float* w = wt + u * W;
    switch (mode) {
      case 1:
        level_pass<A, 1, S>(x, w, lo[u], is, vmax, lv, a, b, c);
        break;
      case 2:
        level_pass<A, 2, S>(x, w, lo[u], is, vmax, lv, a, b, c);
        break;
      case 3:
        level_pass<A, 3, S>(x, w, lo[u], is, vmax, lv, a, b, c);
        break;
      case 4:
        level_pass<A, 4, S>(x, w, lo[u], is, vmax, lv, a, b, c);
        break;
      default:
        level_pass<A, 0, S>(x, w, lo[u], is, vmax, lv, a, b, c);
    }
  };
  V scale[U], best[U], isc[U], sl[U], sl2[U], sxl[U];
  for (int u = 0; u < U; ++u) {
    lo[u] = xsimd::select(lo[u] > zero, zero, lo[u]);
    degen[u] = hi[u] <= lo[u];
    isc[u] = div_ieee<A>(vmax, hi[u] - lo[u]);
    scale[u] = div_ieee<A>(V(1.f), isc[u]);
  }
  V best_isc[U], best_lo[U];
  for (int u = 0; u < U; ++u) {
    best_isc[u] = isc[u];
    best_lo[u] = lo[u];
  }
  const int mode0 = pass_mode(isc);
  for (int u = 0; u < U; ++u) {
    run_pass(mode0, u, isc[u], Lt + u * W, sl[u], sl2[u], sxl[u]);
    best[u] = zero;
    for (int i = 0; i < 32; ++i) {
      const V x = V::load_aligned(xt + i * S + u * W);
      const V w = V::load_aligned(wt + i * S + u * W);
      const V l = V::load_aligned(Lt + i * S + u * W);
      V diff = scale[u] * l + lo[u] - x;
      diff = diff * diff;
      best[u] = best[u] + w * diff;
    }
  }
  for (int is = 0; is <= nstep; ++is) {
    const V num(rmin + rdelta * static_cast<float>(is) + nmax);
    for (int u = 0; u < U; ++u) isc[u] = div_ieee<A>(num, hi[u] - lo[u]);
    const int mode = pass_mode(isc);
    for (int u = 0; u < U; ++u) run_pass(mode, u, isc[u], laux + u * W, sl[u], sl2[u], sxl[u]);
    V ts[U], tm[U], err[U];
    xsimd::batch_bool<float, A> dpos[U];
    bool anyd = false;
    for (int u = 0; u < U; ++u) {
      const V D = sum_w[u] * sl2[u] - sl[u] * sl[u];
      dpos[u] = (D > zero) && !degen[u];
      anyd = anyd || xsimd::any(dpos[u]);
      ts[u] = div_ieee<A>(sum_w[u] * sxl[u] - sum_x[u] * sl[u], D);
      tm[u] = div_ieee<A>(sl2[u] * sum_x[u] - sl[u] * sxl[u], D);
      const auto mpos = tm[u] > zero;
      tm[u] = xsimd::select(mpos, zero, tm[u]);
      ts[u] = xsimd::select(mpos, div_ieee<A>(sxl[u], sl2[u]), ts[u]);
      err[u] = zero;
    }
    if (!anyd) continue;
    for (int i = 0; i < 32; ++i) {
      for (int u = 0; u < U; ++u) {
        const V x = V::load_aligned(xt + i * S + u * W);
        const V w = V::load_aligned(wt + i * S + u * W);
        const V l = V::load_aligned(laux + i * S + u * W);
        V diff = ts[u] * l + tm[u] - x;
        diff = diff * diff;
        err[u] = err[u] + w * diff;
      }
    }
    for (int u = 0; u < U; ++u) {
      const auto upd = dpos[u] && (err[u] < best[u]);
      // The levels are a function of (isc, lo): keep those of the best candidate and
      // recompute its levels once at the end instead of copying 32 vectors per update.
      best_isc[u] = xsimd::select(upd, isc[u], best_isc[u]);
      best_lo[u] = xsimd::select(upd, lo[u], best_lo[u]);
      best[u] = xsimd::select(upd, err[u], best[u]);
      scale[u] = xsimd::select(upd, ts[u], scale[u]);
      lo[u] = xsimd::select(upd, tm[u], lo[u]);
    }
  }
  for (int u = 0; u < U; ++u) {
    for (int i = 0; i < 32; ++i) {
      const V x = V::load_aligned(xt + i * S + u * W);
      const V l = xsimd::min(xsimd::max(nint_v(best_isc[u] * (x - best_lo[u])), zero), vmax);
      xsimd::select(degen[u], zero, l).store_aligned(Lt + i * S + u * W);
    }
    xsimd::select(degen[u], zero, scale[u]).store_aligned(scale_out + u * W);
    (-lo[u]).store_aligned(min_out + u * W);  // degenerate lanes never update lo
  }
}

/// Transposes rows of R floats into lane order: dst[i*S + p] = src[R*p + i] for p < rows
/// (rows and R multiples of 8), `pad` for rows..S-1. 8x8 transposes (transpose8_f32) on x86.
template <int S, int R = 32>
inline void to_lanes(const float* src, int rows, float pad, float* dst) {
#if !defined(NIBBLE_QZ_X86)
  for (int p = 0; p < rows; ++p)
    for (int i = 0; i < R; ++i) dst[i * S + p] = src[R * p + i];
#else
  for (int p0 = 0; p0 < rows; p0 += 8)
    for (int i0 = 0; i0 < R; i0 += 8) transpose8_f32(src + R * p0 + i0, R, dst + i0 * S + p0, S);
#endif
  for (int p = rows; p < S; ++p)
    for (int i = 0; i < R; ++i) dst[i * S + p] = pad;
}

/// Quantizes `nb` super-blocks (nb <= S/8) starting at x into Q4_K (NMAX 15) or Q5_K (31)
/// blocks, with importance qw (256 per super-block) or without (qw null).
template <class A, int U, int NMAX, class Block>
inline void kquant_group(const float* x, const float* qw, int nb, Block* y) {
  using V = xsimd::batch<float, A>;
  constexpr int W = static_cast<int>(V::size);
  constexpr int S = W * U;
  constexpr int NB = S / 8;
  static_assert(S % 8 == 0, "lanes must cover whole super-blocks");
  alignas(64) float xt[32 * S];
  alignas(64) float wt[32 * S];
  alignas(64) float Lt[32 * S];
  alignas(64) float scales[S];
  alignas(64) float mins[S];
  alignas(64) float sw[S];
  // Transpose: sub-block p = 8*b + j of the group goes to lane p (missing blocks: zeros).
  to_lanes<S>(x, 8 * nb, 0.f, xt);
  const float fmax = static_cast<float>(NMAX);
  if (!qw) {
    // weights = sqrt(mean(x^2) over the sub-block) + |x|
    for (int u = 0; u < U; ++u) {
      V s2(0.f);
      for (int i = 0; i < 32; ++i) {
        const V v = V::load_aligned(xt + i * S + u * W);
        s2 = s2 + v * v;
      }
      const V av = sqrt_ieee<A>(div_ieee<A>(s2, V(32.f)));
      for (int i = 0; i < 32; ++i)
        (av + xsimd::abs(V::load_aligned(xt + i * S + u * W))).store_aligned(wt + i * S + u * W);
    }
    search_lanes<A, U>(xt, wt, fmax, NMAX == 15 ? -1.f : -0.5f, 0.1f, NMAX == 15 ? 20 : 15, Lt,
                       scales, mins);
  } else {
    alignas(64) float sig[S];
    alignas(64) float qt[32 * S];
    for (int b = 0; b < NB; ++b) {
      float sum_x2 = 0;
      if (b < nb)
        for (int l = 0; l < 256; ++l) sum_x2 += x[256 * b + l] * x[256 * b + l];
      const float sigma2 = 2 * sum_x2 / 256;
      for (int j = 0; j < 8; ++j) sig[8 * b + j] = sigma2;
    }
    to_lanes<S>(qw, 8 * nb, 1.f, qt);
    for (int u = 0; u < U; ++u) {
      const V s2 = V::load_aligned(sig + u * W);
      V acc(0.f);
      for (int i = 0; i < 32; ++i) {
        const V v = V::load_aligned(xt + i * S + u * W);
        const V w = V::load_aligned(qt + i * S + u * W) * sqrt_ieee<A>(s2 + v * v);
        w.store_aligned(wt + i * S + u * W);
        acc = acc + w;
      }
      acc.store_aligned(sw + u * W);
    }
    search_lanes<A, U>(xt, wt, fmax, -0.9f, 0.05f, 36, Lt, scales, mins);
  }
  // Per super-block: 6-bit scales, fp16 super-scales, final rounding, packing.
  for (int b = 0; b < nb; ++b) {
    const float* xb = x + 256 * b;
    const float* sc8 = scales + 8 * b;
    const float* mn8 = mins + 8 * b;
    std::uint8_t ls[8], lm[8], packed[12];
    std::uint16_t dh, mh;
    if (!qw) {
      float max_scale = 0, max_min = 0;
      for (int j = 0; j < 8; ++j) {
        if (sc8[j] > max_scale) max_scale = sc8[j];
        if (mn8[j] > max_min) max_min = mn8[j];
      }
      const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
      const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
      for (int j = 0; j < 8; ++j) {
        const auto s = static_cast<std::uint8_t>(nint(inv_scale * sc8[j]));
        const auto m = static_cast<std::uint8_t>(nint(inv_min * mn8[j]));
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
      }
      dh = float_to_half(max_scale / 63.f);
      mh = float_to_half(max_min / 63.f);
    } else {
      const float d_block = qp_search(sc8, ls, sw + 8 * b);
      const float m_block = qp_search(mn8, lm, sw + 8 * b);
      if (NMAX == 31) {
        for (int j = 0; j < 8; ++j) {
          ls[j] = ls[j] < 63 ? ls[j] : 63;
          lm[j] = lm[j] < 63 ? lm[j] : 63;
        }
      }
      dh = float_to_half(d_block);
      mh = float_to_half(m_block);
    }
    pack_sm(ls, lm, packed);
    const float dd = half_to_float(dh);
    const float dm = half_to_float(mh);
    alignas(64) std::int32_t L[256];
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc, m;
      unpack_sm(j, packed, &sc, &m);
      const float s = dd * static_cast<float>(sc);
      if (!s) {
        for (int i = 0; i < 32; ++i)
          L[32 * j + i] = static_cast<std::int32_t>(Lt[i * S + 8 * b + j]);
        continue;
      }
      const V vs(s), vm(dm * static_cast<float>(m)), zero(0.f), vmax(fmax);
      for (int i = 0; i < 32; i += W) {
        const V v = div_ieee<A>(V::load_unaligned(xb + 32 * j + i) + vm, vs);
        xsimd::to_int(xsimd::min(xsimd::max(nint_v(v), zero), vmax)).store_aligned(L + 32 * j + i);
      }
    }
    Block& o = y[b];
    o.d = dh;
    o.dmin = mh;
    std::memcpy(o.scales, packed, 12);
    if constexpr (NMAX == 15) {
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l)
          o.qs[32 * g + l] = static_cast<std::uint8_t>(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    } else {
      std::uint8_t qh[32] = {};
      for (int g = 0; g < 4; ++g) {
        for (int l = 0; l < 32; ++l) {
          const int lo = L[64 * g + l];
          const int hi = L[64 * g + 32 + l];
          o.qs[32 * g + l] = static_cast<std::uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
          qh[l] = static_cast<std::uint8_t>(qh[l] | ((lo >> 4) << (2 * g)) |
                                            ((hi >> 4) << (2 * g + 1)));
        }
      }
      std::memcpy(o.qh, qh, 32);
    }
  }
}

/// Lane groups interleaved per search (hides the latency of the dependent float chains).
constexpr int kInterleave = 2;

template <class A, int NMAX, class Block, int U = kInterleave>
void kquant_simd(const float* src, std::int64_t n, void* dst, const float* importance) {
  constexpr int NB = static_cast<int>(xsimd::batch<float, A>::size) * U / 8;
  auto* y = static_cast<Block*>(dst);
  const std::int64_t nb = n / 256;
  for (std::int64_t b = 0; b < nb; b += NB) {
    const int cnt = static_cast<int>(nb - b < NB ? nb - b : NB);
    kquant_group<A, U, NMAX>(src + 256 * b, importance ? importance + 256 * b : nullptr, cnt,
                             y + b);
  }
}

/// Q8_0 (reference rounding: roundf, ties away from zero), vectorized inside each block.
template <class A>
void q8_0_simd(const float* src, std::int64_t n, void* dst, const float* /*importance*/) {
  using V = xsimd::batch<float, A>;
  using VI = xsimd::batch<std::int32_t, A>;
  constexpr int W = static_cast<int>(V::size);
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + 32 * b;
    V v[32 / W];
    V mx(0.f);
    bool nan = false;
    for (int k = 0; k < 32 / W; ++k) {
      v[k] = V::load_unaligned(x + k * W);
      nan = nan || xsimd::any(xsimd::isnan(v[k]));
      mx = xsimd::max(mx, xsimd::abs(v[k]));
    }
    if (nan) {
      q8_0_block_scalar(x, y + b);
      continue;
    }
    alignas(64) float m[W];
    mx.store_aligned(m);
    float amax = 0.0f;
    for (int k = 0; k < W; ++k) amax = amax > m[k] ? amax : m[k];
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = float_to_half(d);
    alignas(64) std::int32_t q[32];
    const V vid(id), half(0.5f), one(1.f), zero(0.f);
    for (int k = 0; k < 32 / W; ++k) {
      const V t = v[k] * vid;
      const V r = xsimd::trunc(t);
      const V f = t - r;
      const V adj = xsimd::select(f >= half, one, xsimd::select(f <= -half, -one, zero));
      const VI qi = xsimd::to_int(r + adj);  // truncating conversion (INT_MIN if invalid)
      qi.store_aligned(q + k * W);
    }
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<std::int8_t>(q[j]);
  }
}

#endif  // NIBBLE_QZ_SIMD

}  // namespace qz
}  // namespace
}  // namespace nibble::kernels

#include "nibble/kernels/quantize_nf4-inl.hpp"
#include "nibble/kernels/quantize_q6_k-inl.hpp"

namespace nibble::kernels {
namespace {

template <class Tag>
void register_quantizers(KernelTable& t) {
  if constexpr (std::is_same_v<Tag, ScalarTag>) {
    t.fmt[static_cast<int>(Format::q8_0)].quantize = [](const float* s, std::int64_t n, void* d,
                                                        const float*) {
      ref::quantize_q8_0(s, static_cast<BlockQ8_0*>(d), n);
    };
    t.fmt[static_cast<int>(Format::q4_K)].quantize = [](const float* s, std::int64_t n, void* d,
                                                        const float* w) {
      if (w)
        ref::quantize_q4_K_imatrix(s, static_cast<BlockQ4_K*>(d), n, w);
      else
        ref::quantize_q4_K(s, static_cast<BlockQ4_K*>(d), n);
    };
    t.fmt[static_cast<int>(Format::q5_K)].quantize = [](const float* s, std::int64_t n, void* d,
                                                        const float* w) {
      if (w)
        ref::quantize_q5_K_imatrix(s, static_cast<BlockQ5_K*>(d), n, w);
      else
        ref::quantize_q5_K(s, static_cast<BlockQ5_K*>(d), n);
    };
    t.fmt[static_cast<int>(Format::q6_K)].quantize = [](const float* s, std::int64_t n, void* d,
                                                        const float* w) {
      if (w)
        ref::quantize_q6_K_imatrix(s, static_cast<BlockQ6_K*>(d), n, w);
      else
        ref::quantize_q6_K(s, static_cast<BlockQ6_K*>(d), n);
    };
    t.fmt[static_cast<int>(Format::nf4)].quantize = [](const float* s, std::int64_t n, void* d,
                                                       const float*) {
      ref::quantize_nf4(s, static_cast<BlockNF4*>(d), n, false);
    };
    t.fmt[static_cast<int>(Format::fp4)].quantize = [](const float* s, std::int64_t n, void* d,
                                                       const float*) {
      ref::quantize_nf4(s, static_cast<BlockNF4*>(d), n, true);
    };
  } else {
#if defined(NIBBLE_QZ_SIMD)
    if constexpr (TagInfo<Tag>::family == Family::x86 || TagInfo<Tag>::family == Family::neon) {
      using A = typename Tag::xarch;
      t.fmt[static_cast<int>(Format::q8_0)].quantize = &qz::q8_0_simd<A>;
      t.fmt[static_cast<int>(Format::q4_K)].quantize = &qz::kquant_simd<A, 15, BlockQ4_K>;
      t.fmt[static_cast<int>(Format::q5_K)].quantize = &qz::kquant_simd<A, 31, BlockQ5_K>;
      t.fmt[static_cast<int>(Format::q6_K)].quantize = &qz::q6k_simd<A>;
      t.fmt[static_cast<int>(Format::nf4)].quantize = &qz::nf4_simd<A, false>;
      t.fmt[static_cast<int>(Format::fp4)].quantize = &qz::nf4_simd<A, true>;
    }
#else
    (void)t;
#endif
  }
}

}  // namespace
}  // namespace nibble::kernels
