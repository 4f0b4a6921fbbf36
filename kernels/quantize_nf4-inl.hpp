// nibble: SIMD NF4/FP4 weight quantizer (fp32 -> BlockNF4, blocksize 64), byte-identical to
// nibble::ref::quantize_nf4. Included by quantize-inl.hpp (which defines NIBBLE_QZ_SIMD).
//
// Per 64-value block: absmax as a per-lane running max (select on a > m, which ignores NaN just
// like the reference's std::max(amax, |x|)), then the reference's exact operations per value:
// inv = 1 / max(absmax, 1e-38), v = min(1, max(-1, x * inv)) with std::min/std::max's operand
// order (NaN becomes -1), and the code = number of midpoints strictly below v (NF4), or below
// |v| mapped through the FP4 magnitude order plus the sign bit (FP4), found by a branchless
// binary search over the sorted midpoints.
#pragma once

#include <cstdint>

#include "nibble/formats/nf4.hpp"

namespace nibble::kernels {
namespace {
namespace qz {

#if defined(NIBBLE_QZ_SIMD)

template <class A, bool FP4>
void nf4_simd(const float* src, std::int64_t n, void* dst, const float* /*importance*/) {
  using V = xsimd::batch<float, A>;
  using B = xsimd::batch_bool<float, A>;
  using VI = xsimd::batch<std::int32_t, A>;
  constexpr int W = static_cast<int>(V::size);
  constexpr int K = 64 / W;
  auto* y = static_cast<BlockNF4*>(dst);
  const V zero(0.f), one(1.f), mone(-1.f);
  for (std::int64_t b = 0; b < n / 64; ++b) {
    const float* x = src + 64 * b;
    V v[K];
    V m = zero;
    for (int k = 0; k < K; ++k) {
      v[k] = V::load_unaligned(x + k * W);
      const V a = xsimd::abs(v[k]);
      m = xsimd::select(a > m, a, m);
    }
    alignas(64) float ml[W];
    m.store_aligned(ml);
    float amax = 0.f;  // lanes hold no NaN, so the order of this max does not matter
    for (int k = 0; k < W; ++k) amax = amax < ml[k] ? ml[k] : amax;
    y[b].absmax = amax;
    const float inv = 1.0f / (amax < 1e-38f ? 1e-38f : amax);
    const V vinv(inv);
    alignas(64) std::int32_t code[64];
    for (int k = 0; k < K; ++k) {
      V t = v[k] * vinv;
      t = xsimd::select(mone < t, t, mone);  // std::max(-1.0f, t)
      t = xsimd::select(t < one, t, one);    // std::min(1.0f, t)
      // Number of sorted midpoints strictly below the value, by a branchless binary search
      // whose thresholds are chosen with selects on the earlier comparisons.
      if constexpr (FP4) {
        const float* mid = ref::nf4_detail::fp4_midpoints;  // 7 sorted midpoints
        const V a = xsimd::abs(t);
        const B c1 = a > V(mid[3]);
        const B c2 = a > xsimd::select(c1, V(mid[5]), V(mid[1]));
        const V t3 = xsimd::select(c1, xsimd::select(c2, V(mid[6]), V(mid[4])),
                                   xsimd::select(c2, V(mid[2]), V(mid[0])));
        const B c3 = a > t3;
        const V kf = (xsimd::select(c1, V(4.f), zero) + xsimd::select(c2, V(2.f), zero)) +
                     xsimd::select(c3, one, zero);
        const VI kk = xsimd::to_int(kf);
        // sorted magnitude index -> code: {0,1,6,7,4,5,2,3} = k ^ ((k & 2) << 1)
        const VI c = kk ^ ((kk & VI(2)) << 1);
        const VI sign = xsimd::to_int(xsimd::select(t < zero, V(8.f), zero));
        (c | sign).store_aligned(code + k * W);
      } else {
        const float* mid = ref::nf4_detail::nf4_midpoints;  // 15 sorted midpoints
        const B c1 = t > V(mid[7]);
        const B c2 = t > xsimd::select(c1, V(mid[11]), V(mid[3]));
        const V t3 = xsimd::select(c1, xsimd::select(c2, V(mid[13]), V(mid[9])),
                                   xsimd::select(c2, V(mid[5]), V(mid[1])));
        const B c3 = t > t3;
        const V t4 = xsimd::select(c1,
                                   xsimd::select(c2, xsimd::select(c3, V(mid[14]), V(mid[12])),
                                                 xsimd::select(c3, V(mid[10]), V(mid[8]))),
                                   xsimd::select(c2, xsimd::select(c3, V(mid[6]), V(mid[4])),
                                                 xsimd::select(c3, V(mid[2]), V(mid[0]))));
        const B c4 = t > t4;
        const V kf = (xsimd::select(c1, V(8.f), zero) + xsimd::select(c2, V(4.f), zero)) +
                     (xsimd::select(c3, V(2.f), zero) + xsimd::select(c4, one, zero));
        xsimd::to_int(kf).store_aligned(code + k * W);
      }
    }
    for (int i = 0; i < 32; ++i)
      y[b].qs[i] = static_cast<std::uint8_t>((code[2 * i] << 4) | code[2 * i + 1]);
  }
}

#endif  // NIBBLE_QZ_SIMD

}  // namespace qz
}  // namespace
}  // namespace nibble::kernels
