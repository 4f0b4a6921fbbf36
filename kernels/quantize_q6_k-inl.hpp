// nibble: SIMD Q6_K weight quantizer (fp32 -> BlockQ6_K), byte-identical to
// nibble::ref::quantize_q6_K / quantize_q6_K_imatrix. Included by quantize-inl.hpp (which
// defines NIBBLE_QZ_SIMD, qz::nint and qz::to_lanes; div_ieee / round_even come from
// kernels/detail/intrin-*.hpp); see the notes there.
//
// One lane per 16-value sub-block: every lane runs the reference's scale search (the value of
// largest magnitude, then 19 candidate inverse scales, each a float32 sum in value order) with
// the same operations in the same order; the reference's branches become per-lane selects.
// Instead of copying the levels of each accepted candidate, a lane remembers the accepted
// inverse scale and recomputes its levels once at the end (the levels are a function of it).
// Groups whose values are all finite use a cheaper exact rounding (round-half-even instruction,
// clamps only where a lane's range can reach them). The per-super-block tail (int8 sub-block
// scales, fp16 super-scale) is scalar; the final re-rounding against the stored scales and the
// 6-bit packing are vectorized along the values of each sub-block.
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/formats/q6_k.hpp"

namespace nibble::kernels {
namespace {
namespace qz {

#if defined(NIBBLE_QZ_SIMD)

/// clamp(nearest_int(v), -32, 31) per lane, as float (the reference's clamp_q6(round_magic)).
template <class A>
inline xsimd::batch<float, A> q6_level(const xsimd::batch<float, A>& v) {
  using V = xsimd::batch<float, A>;
  using VI = xsimd::batch<std::int32_t, A>;
  const VI bits = xsimd::bitwise_cast<VI>(v + V(12582912.f));
  VI r = (bits & VI(0x007FFFFF)) - VI(0x00400000);
  r = xsimd::min(xsimd::max(r, VI(-32)), VI(31));
  return xsimd::to_float(r);
}

/// One candidate of the search on finite groups: sums of w*x*l and (w*l)*l with
/// l = clamp(round-half-even(v), -32, 31), v = inv * x (equal to the reference's
/// clamp_q6(round_magic(v)) for |v| < 2^22; the rounding mode is the default nearest-even); LOW /
/// HIGH: whether the clamp at -32 / 31 can act.
template <class A, int U, int S, bool LOW, bool HIGH>
inline void fast_pass(const float* xt, const float* wt, const float* wxt,
                      const xsimd::batch<float, A>* inv, xsimd::batch<float, A>* slx,
                      xsimd::batch<float, A>* sl2) {
  using V = xsimd::batch<float, A>;
  constexpr int W = static_cast<int>(V::size);
  const V lo(-32.f), hi(31.f);
  for (int i = 0; i < 16; ++i) {
    for (int u = 0; u < U; ++u) {
      const int k = i * S + u * W;
      V l = round_even<A>(inv[u] * V::load_aligned(xt + k));
      if (LOW) l = xsimd::max(l, lo);
      if (HIGH) l = xsimd::min(l, hi);
      slx[u] = slx[u] + V::load_aligned(wxt + k) * l;
      sl2[u] = sl2[u] + (V::load_aligned(wt + k) * l) * l;
    }
  }
}

/// Quantizes nb (<= S/16) super-blocks starting at x; qw: 256 importance weights per
/// super-block or null (weights x^2).
template <class A, int U>
inline void q6k_group(const float* x, const float* qw, int nb, BlockQ6_K* y) {
  using V = xsimd::batch<float, A>;
  using B = xsimd::batch_bool<float, A>;
  using VI = xsimd::batch<std::int32_t, A>;
  constexpr int W = static_cast<int>(V::size);
  constexpr int S = W * U;
  static_assert(S % 16 == 0, "lanes must cover whole super-blocks");
  alignas(64) float xt[16 * S];
  alignas(64) float wt[16 * S];   // weight w_i
  alignas(64) float wxt[16 * S];  // w_i * x_i (the reference recomputes the same product)
  alignas(64) float scl[S];
  alignas(64) float dl[S];
  to_lanes<S, 16>(x, 16 * nb, 0.f, xt);
  if (qw) {
    to_lanes<S, 16>(qw, 16 * nb, 0.f, wt);
    for (int k = 0; k < 16 * S; k += W) {
      const V v = V::load_aligned(xt + k);
      (V::load_aligned(wt + k) * v).store_aligned(wxt + k);
    }
  } else {
    for (int k = 0; k < 16 * S; k += W) {
      const V v = V::load_aligned(xt + k);
      const V w = v * v;
      w.store_aligned(wt + k);
      (w * v).store_aligned(wxt + k);
    }
  }
  const V zero(0.f);
  V amax[U], vmax[U], xlo[U], xhi[U];
  B nan[U];
  for (int u = 0; u < U; ++u) {
    amax[u] = zero;
    vmax[u] = zero;
    xlo[u] = zero;
    xhi[u] = zero;
    nan[u] = zero != zero;
  }
  for (int i = 0; i < 16; ++i) {
    for (int u = 0; u < U; ++u) {
      const V v = V::load_aligned(xt + i * S + u * W);
      nan[u] = nan[u] || (v != v);
      xlo[u] = xsimd::min(xlo[u], v);  // only used when the group has no NaN
      xhi[u] = xsimd::max(xhi[u], v);
      const V a = xsimd::abs(v);
      const B m = a > amax[u];
      amax[u] = xsimd::select(m, a, amax[u]);
      vmax[u] = xsimd::select(m, v, vmax[u]);
    }
  }
  B zgrp[U];
  for (int u = 0; u < U; ++u) zgrp[u] = amax[u] < V(1e-15f);

  // Fast rounding when every value of the group is finite: then |inv * x| <= 33 in every lane
  // that is not all-zero (those lanes are discarded at the end; NaN values never
  // set amax, hence the separate check), where nearest_int(v) is round-half-even(v) exactly,
  // and the clamp can be done with float min/max.
  bool finite = true;
  for (int u = 0; u < U; ++u)
    finite = finite && xsimd::all(amax[u] < V(3.4e38f)) && !xsimd::any(nan[u]);
  V slx[U], sl2[U];
  auto accumulate = [&](const V* inv) {
    for (int u = 0; u < U; ++u) {
      slx[u] = zero;
      sl2[u] = zero;
    }
    if (finite) {
      // Which clamps can change a level: inv * x is monotone in x, so the products of every
      // lane lie between inv * xlo and inv * xhi; nearest_int(v) >= -32 iff v >= -32.5 and
      // nearest_int(v) <= 31 iff v < 31.5. All-zero lanes (discarded) are left out.
      bool low = false, high = false;
      for (int u = 0; u < U; ++u) {
        const V a = inv[u] * xlo[u], b = inv[u] * xhi[u];
        const V mn = xsimd::select(zgrp[u], zero, xsimd::min(a, b));
        const V mx = xsimd::select(zgrp[u], zero, xsimd::max(a, b));
        low = low || !xsimd::all(mn >= V(-32.5f));
        high = high || !xsimd::all(mx < V(31.5f));
      }
      if (low && high)
        fast_pass<A, U, S, true, true>(xt, wt, wxt, inv, slx, sl2);
      else if (low)
        fast_pass<A, U, S, true, false>(xt, wt, wxt, inv, slx, sl2);
      else if (high)
        fast_pass<A, U, S, false, true>(xt, wt, wxt, inv, slx, sl2);
      else
        fast_pass<A, U, S, false, false>(xt, wt, wxt, inv, slx, sl2);
      return;
    }
    for (int i = 0; i < 16; ++i) {
      for (int u = 0; u < U; ++u) {
        const int k = i * S + u * W;
        const V l = q6_level<A>(inv[u] * V::load_aligned(xt + k));
        slx[u] = slx[u] + V::load_aligned(wxt + k) * l;
        sl2[u] = sl2[u] + (V::load_aligned(wt + k) * l) * l;
      }
    }
  };
  V inv[U], best_inv[U], scale[U], best[U];
  for (int u = 0; u < U; ++u) inv[u] = div_ieee<A>(V(-32.0f), vmax[u]);
  accumulate(inv);
  for (int u = 0; u < U; ++u) {
    best_inv[u] = inv[u];
    scale[u] = xsimd::select(sl2[u] != zero, div_ieee<A>(slx[u], sl2[u]), zero);
    best[u] = scale[u] * slx[u];
  }
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    const V num(-(32.0f + 0.1f * static_cast<float>(step)));
    for (int u = 0; u < U; ++u) inv[u] = div_ieee<A>(num, vmax[u]);
    accumulate(inv);
    for (int u = 0; u < U; ++u) {
      const B upd = (sl2[u] > zero) && (slx[u] * slx[u] > best[u] * sl2[u]);
      const V ns = div_ieee<A>(slx[u], sl2[u]);
      best_inv[u] = xsimd::select(upd, inv[u], best_inv[u]);
      scale[u] = xsimd::select(upd, ns, scale[u]);
      best[u] = xsimd::select(upd, ns * slx[u], best[u]);
    }
  }
  alignas(64) float zl[S];
  bool lane_zero[S];
  for (int u = 0; u < U; ++u) {
    xsimd::select(zgrp[u], zero, scale[u]).store_aligned(scl + u * W);
    xsimd::select(zgrp[u], V(1.f), zero).store_aligned(zl + u * W);
  }
  for (int p = 0; p < S; ++p) lane_zero[p] = zl[p] != 0.f;

  // Per super-block: int8 scales and fp16 super-scale (scalar, the reference's order).
  bool all_zero[S / 16];
  for (int b = 0; b < S / 16; ++b) {
    all_zero[b] = true;
    for (int j = 0; j < 16; ++j) dl[16 * b + j] = 0.f;
    if (b >= nb) continue;
    const float* s = scl + 16 * b;
    float max_scale = 0.f, max_abs = 0.f;
    for (int j = 0; j < 16; ++j) {
      const float a = s[j] < 0.f ? -s[j] : s[j];
      if (a > max_abs) {
        max_abs = a;
        max_scale = s[j];
      }
    }
    if (max_abs < 1e-15f) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    all_zero[b] = false;
    const float iscale = -128.0f / max_scale;
    const std::uint16_t dh = float_to_half(1.0f / iscale);
    std::memcpy(&y[b].d, &dh, 2);
    const float d_stored = half_to_float(dh);
    for (int j = 0; j < 16; ++j) {
      const int q = nint(iscale * s[j]);
      y[b].scales[j] = static_cast<std::int8_t>(q > 127 ? 127 : q);
      dl[16 * b + j] = d_stored * static_cast<float>(y[b].scales[j]);
    }
  }

  // Final levels, in value order (one sub-block at a time): against the stored scale, or the
  // search's levels where that scale is 0 (0 for all-zero sub-blocks).
  alignas(64) float binv[S];
  for (int u = 0; u < U; ++u) best_inv[u].store_aligned(binv + u * W);
  const V off(32.f);
  for (int b = 0; b < nb; ++b) {
    if (all_zero[b]) continue;
    alignas(64) std::int32_t L[256];
    for (int j = 0; j < 16; ++j) {
      const int p = 16 * b + j;
      const float* xs = x + 256 * b + 16 * j;
      if (dl[p] != 0.f) {
        const V d(dl[p]);
        for (int i = 0; i < 16; i += W)
          xsimd::to_int(q6_level<A>(div_ieee<A>(V::load_unaligned(xs + i), d)) + off)
              .store_aligned(L + 16 * j + i);
      } else {
        const V bi(binv[p]);
        const bool zg = lane_zero[p];
        for (int i = 0; i < 16; i += W) {
          const V l = zg ? zero : q6_level<A>(bi * V::load_unaligned(xs + i)) + off;
          xsimd::to_int(l).store_aligned(L + 16 * j + i);
        }
      }
    }
    // Pack (layout: see nibble::ref::q6k_detail::quantize_block): per 128-value half, ql byte
    // l = e0 | e2 << 4 and byte l+32 = e1 | e3 << 4, qh byte l = top bits of e0..e3, with
    // e_k = L[l + 32k]. Computed in int32 lanes, then narrowed.
    alignas(64) std::int32_t pk[192];
    for (int h = 0; h < 2; ++h) {
      const std::int32_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; l += W) {
        const VI e0 = VI::load_aligned(Lh + l), e1 = VI::load_aligned(Lh + l + 32);
        const VI e2 = VI::load_aligned(Lh + l + 64), e3 = VI::load_aligned(Lh + l + 96);
        const VI m4(0xF);
        ((e0 & m4) | ((e2 & m4) << 4)).store_aligned(pk + 96 * h + l);
        ((e1 & m4) | ((e3 & m4) << 4)).store_aligned(pk + 96 * h + 32 + l);
        ((e0 >> 4) | ((e1 >> 4) << 2) | ((e2 >> 4) << 4) | ((e3 >> 4) << 6))
            .store_aligned(pk + 96 * h + 64 + l);
      }
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 64; ++l) y[b].ql[64 * h + l] = static_cast<std::uint8_t>(pk[96 * h + l]);
      for (int l = 0; l < 32; ++l)
        y[b].qh[32 * h + l] = static_cast<std::uint8_t>(pk[96 * h + 64 + l]);
    }
  }
}

/// Q6_K quantizer entry (FormatKernels::quantize): n a multiple of 256, importance optional.
template <class A>
void q6k_simd(const float* src, std::int64_t n, void* dst, const float* importance) {
  constexpr int W = static_cast<int>(xsimd::batch<float, A>::size);
  constexpr int U = W >= 16 ? 1 : (W >= 8 ? 2 : 16 / W);
  constexpr int NB = W * U / 16;
  auto* y = static_cast<BlockQ6_K*>(dst);
  const std::int64_t nb = n / 256;
  for (std::int64_t b = 0; b < nb; b += NB) {
    const int cnt = static_cast<int>(nb - b < NB ? nb - b : NB);
    q6k_group<A, U>(src + 256 * b, importance ? importance + 256 * b : nullptr, cnt, y + b);
  }
}

#endif  // NIBBLE_QZ_SIMD

}  // namespace qz
}  // namespace
}  // namespace nibble::kernels
