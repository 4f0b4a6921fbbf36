// nibble: the NEON operations the kernel bodies need beyond xsimd 8.1 (with and without the
// dotprod extension): int8 dot products (lane i = sum of products of bytes 4i..4i+3, the same
// grouping as the x86 kernels, so integer partial sums agree across ISAs), table lookups (tbl),
// fp16 / bf16 loads, IEEE division, square root and rounding for the quantizers. The only file of
// the NEON kernels with intrinsics.
#pragma once

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/simd.hpp"

#if defined(NIBBLE_K_NEON)
// ===================================================================== the helper vocabulary
// NEON implementations of the operations xsimd 8.1 lacks (see intrin-x86.hpp for the contract of
// each; the same names, the same results).
namespace nibble::kernels {
namespace {

template <class Tag>
inline VI32<Tag> dot_u8s8(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s) {
  // u <= 127 on every caller, so it is also a valid signed byte.
  const int8x16_t us = vreinterpretq_s8_u8(u);
#if defined(__ARM_FEATURE_DOTPROD)
  if constexpr (Tag::dotprod) return VI32<Tag>(vdotq_s32(acc, us, s));
#endif
  const int16x8_t lo = vmull_s8(vget_low_s8(us), vget_low_s8(s));
  const int16x8_t hi = vmull_high_s8(us, s);
  return VI32<Tag>(vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))));
}

template <class Tag>
struct S8Dot {
  static constexpr int kBias = 0;
  static constexpr bool kAbsAct = false;  ///< signed x signed products need no |a| (x86 only)
  static VI8<Tag> prep(const VI8<Tag>& w) { return w; }
  static VI32<Tag> dot_prepped(const VI32<Tag>& acc, const VI8<Tag>& wp, const VI8<Tag>& a) {
    return dot(acc, wp, a);
  }
  static VI32<Tag> dot(const VI32<Tag>& acc, const VI8<Tag>& w, const VI8<Tag>& a) {
#if defined(__ARM_FEATURE_DOTPROD)
    if constexpr (Tag::dotprod) return VI32<Tag>(vdotq_s32(acc, w, a));
#endif
    const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
    const int16x8_t hi = vmull_high_s8(w, a);
    return VI32<Tag>(vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))));
  }
};

template <class Tag>
struct S8SumDot {
  static constexpr int kBias = 0;
  struct W {
    VI8<Tag> w;
  };
  static W prep(const VI8<Tag>& w) { return {w}; }
  static VI32<Tag> dot(const VI32<Tag>& acc, const W& w, const VI8<Tag>& a) {
#if defined(__ARM_FEATURE_DOTPROD)
    if constexpr (Tag::dotprod) return VI32<Tag>(vdotq_s32(acc, w.w, a));
#endif
    // smull + smlal2 (int16: two products, at most 2 * 128 * 127) + sadalp.
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w.w), vget_low_s8(a)), w.w, a);
    return VI32<Tag>(vpadalq_s16(acc, p));
  }
};

template <class Tag>
inline VI16<Tag> madd_u8s8(const VU8<Tag>& u, const VI8<Tag>& s) {
  const int8x16_t us = vreinterpretq_s8_u8(u);
  const int16x8_t lo = vmull_s8(vget_low_s8(us), vget_low_s8(s));
  const int16x8_t hi = vmull_high_s8(us, s);
  return VI16<Tag>(vpaddq_s16(lo, hi));
}

template <class Tag>
inline VI32<Tag> madd_i16(const VI16<Tag>& a, const VI16<Tag>& b) {
  const int32x4_t lo = vmull_s16(vget_low_s16(a), vget_low_s16(b));
  const int32x4_t hi = vmull_high_s16(a, b);
  return VI32<Tag>(vpaddq_s32(lo, hi));
}

/// NEON: indices >= 16 give 0 (x86: the low 4 bits are used); callers pass indices < 16.
template <class Tag>
inline VI8<Tag> lookup16(const VI8<Tag>& table, const VU8<Tag>& idx) {
  return VI8<Tag>(vqtbl1q_s8(table, idx));
}

/// lo = bytes 0..7 of a and b interleaved (a0 b0 a1 b1 ...), hi = bytes 8..15 (zip1 / zip2).
template <class Tag>
inline void zip8_lanes(const VI8<Tag>& a, const VI8<Tag>& b, VI16<Tag>& lo, VI16<Tag>& hi) {
  lo = VI16<Tag>(vreinterpretq_s16_s8(vzip1q_s8(a, b)));
  hi = VI16<Tag>(vreinterpretq_s16_s8(vzip2q_s8(a, b)));
}

template <class Tag>
inline VI8<Tag> table16(const std::int8_t* t16) {
  return VI8<Tag>(vld1q_s8(t16));
}

template <class Tag>
inline VF<Tag> load_f16(const void* p) {
  return VF<Tag>(
      vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const std::uint16_t*>(p)))));
}

template <class Tag>
inline VU8<Tag> load_halves(const void* lo, const void* hi) {
  return VU8<Tag>(vcombine_u8(vld1_u8(static_cast<const std::uint8_t*>(lo)),
                              vld1_u8(static_cast<const std::uint8_t*>(hi))));
}

/// The first n bytes at p (0 < n < 16) and zeros above; reads nothing past p + n (through a
/// zeroed stack copy: NEON has no masked loads).
template <class Tag>
inline VU8<Tag> load_first(const void* p, int n) {
  alignas(16) std::uint8_t b[16] = {};
  std::memcpy(b, p, static_cast<std::size_t>(n));
  return VU8<Tag>(vld1q_u8(b));
}

template <class Tag>
inline VU8<Tag> load_twice(const void* p) {
  const uint8x8_t h = vld1_u8(static_cast<const std::uint8_t*>(p));
  return VU8<Tag>(vcombine_u8(h, h));
}

template <class Tag>
inline VU8<Tag> load_lane_all(const void* p) {
  return VU8<Tag>(vld1q_u8(static_cast<const std::uint8_t*>(p)));
}

template <class Tag>
inline VF<Tag> set_halves(float a, float b) {
  return VF<Tag>(vcombine_f32(vdup_n_f32(a), vdup_n_f32(b)));
}

template <class Tag>
inline VI8<Tag> narrow_i32_i8(const VI32<Tag> v[4]) {
  const int16x8_t a = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
  const int16x8_t b = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
  return VI8<Tag>(vcombine_s8(vqmovn_s16(a), vqmovn_s16(b)));
}

template <class Tag>
inline VI32<Tag> round_i32(const VF<Tag>& x) {
  return VI32<Tag>(vcvtnq_s32_f32(x));
}

/// Byte indices selecting 32-bit lanes idx[i] (for tbl).
inline uint8x16_t lane_bytes(int32x4_t idx) {
  static const std::uint8_t rep[16] = {0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12};
  static const std::uint8_t off[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  const uint8x16_t b = vreinterpretq_u8_s32(vshlq_n_s32(idx, 2));
  return vaddq_u8(vqtbl1q_u8(b, vld1q_u8(rep)), vld1q_u8(off));
}

template <class Tag>
inline VF<Tag> permute_f32(const VF<Tag>& v, const VI32<Tag>& idx) {
  return VF<Tag>(vreinterpretq_f32_u8(vqtbl1q_u8(vreinterpretq_u8_f32(v), lane_bytes(idx))));
}
template <class Tag>
inline VI32<Tag> permute_i32(const VI32<Tag>& v, const VI32<Tag>& idx) {
  return VI32<Tag>(vreinterpretq_s32_u8(vqtbl1q_u8(vreinterpretq_u8_s32(v), lane_bytes(idx))));
}

template <class Tag>
inline VI32<Tag> widen_u8_i32(const void* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  const uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(w));
  return VI32<Tag>(vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(b)))));
}

template <class Tag>
inline VI16<Tag> widen_u8_i16(const void* p) {
  return VI16<Tag>(vreinterpretq_s16_u16(vmovl_u8(vld1_u8(static_cast<const std::uint8_t*>(p)))));
}

template <class Tag>
inline VF<Tag> swap_halves(const VF<Tag>& v) {
  return VF<Tag>(vextq_f32(v, v, 2));
}

template <class Tag>
inline float h2f(std::uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

template <class Tag>
inline VI32<Tag> widen_i8_i32(const void* p) {
  std::int32_t w;
  std::memcpy(&w, p, 4);
  const int8x8_t b = vreinterpret_s8_s32(vdup_n_s32(w));
  return VI32<Tag>(vmovl_s16(vget_low_s16(vmovl_s8(b))));
}

template <class Tag>
inline VF<Tag> fmadd(const VF<Tag>& a, const VF<Tag>& b, const VF<Tag>& c) {
  return VF<Tag>(vfmaq_f32(c, a, b));
}

template <class Tag>
inline VU8<Tag> bcast_u64x2(std::uint64_t lo, std::uint64_t hi) {
  return VU8<Tag>(vcombine_u8(vcreate_u8(lo), vcreate_u8(hi)));
}

template <class Tag>
struct ScaledDot {
  static constexpr bool kPairs = false;  // lane bytes (scale, 0, 0, 0): an int32 multiplier
  static VI32<Tag> acc(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                       const VI8<Tag>& pat) {
    return VI32<Tag>(vmlaq_s32(acc, dot_u8s8<Tag>(VI32<Tag>(0), u, s), vreinterpretq_s32_s8(pat)));
  }
  static constexpr int kCode[4] = {0, 1, 1, 1};  // the scale sign-extended to int32
  using Init = VI32<Tag>;
  static VI32<Tag> acc_init(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                            const Init& init, const VI8<Tag>& pat) {
    return VI32<Tag>(vmlaq_s32(acc, dot_u8s8<Tag>(init, u, s), vreinterpretq_s32_s8(pat)));
  }
};

/// NEON applies the int32 scale of each dot with one mla (ScaledDot): no packed form.
template <class Tag>
struct ScaledDot2 {
  static constexpr bool kPacked = false;
};

template <class Tag>
struct Book16 {
  uint8x16x4_t t;
  explicit Book16(const float* p) {
    for (int i = 0; i < 4; ++i) t.val[i] = vreinterpretq_u8_f32(vld1q_f32(p + 4 * i));
  }
  VF<Tag> lookup(const VI32<Tag>& idx) const {
    // byte k of lane i = table byte 4 * (idx[i] & 15) + k
    const uint32x4_t b =
        vmlaq_n_u32(vdupq_n_u32(0x03020100u),
                    vandq_u32(vreinterpretq_u32_s32(idx), vdupq_n_u32(15)), 0x04040404u);
    return VF<Tag>(vreinterpretq_f32_u8(vqtbl4q_u8(t, vreinterpretq_u8_u32(b))));
  }
};

template <class Tag>
inline void lookup_codes32(const Book16<Tag>& b, const std::uint8_t* p, VF<Tag>* out) {
  // Byte tables: the codes in order (high nibble first), each spread to the 4 bytes of its entry.
  static const std::uint8_t rep[64] = {
      0,  0,  0,  0,  1,  1,  1,  1,  2,  2,  2,  2,  3,  3,  3,  3,  4,  4,  4,  4,  5,  5,
      5,  5,  6,  6,  6,  6,  7,  7,  7,  7,  8,  8,  8,  8,  9,  9,  9,  9,  10, 10, 10, 10,
      11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
  const uint8x16_t v = vld1q_u8(p);
  const uint8x16x2_t z = vzipq_u8(vshrq_n_u8(v, 4), vandq_u8(v, vdupq_n_u8(0x0F)));
  const uint8x16_t off = vreinterpretq_u8_u32(vdupq_n_u32(0x03020100u));
  for (int h = 0; h < 2; ++h) {
    const uint8x16_t idx4 = vshlq_n_u8(z.val[h], 2);
    for (int g = 0; g < 4; ++g) {
      const uint8x16_t bytes = vaddq_u8(vqtbl1q_u8(idx4, vld1q_u8(rep + 16 * g)), off);
      out[4 * h + g] = VF<Tag>(vreinterpretq_f32_u8(vqtbl4q_u8(b.t, bytes)));
    }
  }
}

template <class Tag>
inline VU8<Tag> load_lanes(const void* const* p) {
  return VU8<Tag>(vld1q_u8(static_cast<const std::uint8_t*>(p[0])));
}

template <class Tag>
inline VU8<Tag> bcast_lane(const VU8<Tag>& v, int) {
  return v;
}

template <class Tag>
inline VF<Tag> spread_lanes(const float* v) {
  return VF<Tag>(vdupq_n_f32(v[0]));
}

template <class Tag>
inline void h2f_pair(const void* p, float* a, float* b) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  const float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(w)));
  *a = vgetq_lane_f32(f, 0);
  *b = vgetq_lane_f32(f, 1);
}

template <class Tag>
inline VU16<Tag> shr_halves(const VU16<Tag>& v, int a, int) {
  return VU16<Tag>(vshlq_u16(v, vdupq_n_s16(static_cast<std::int16_t>(-a))));
}

template <class Tag>
inline void transpose_i32(VI32<Tag>* r) {
  const int32x4_t a = vtrn1q_s32(r[0], r[1]), b = vtrn2q_s32(r[0], r[1]);
  const int32x4_t c = vtrn1q_s32(r[2], r[3]), d = vtrn2q_s32(r[2], r[3]);
  r[0] = VI32<Tag>(
      vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(a), vreinterpretq_s64_s32(c))));
  r[2] = VI32<Tag>(
      vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(a), vreinterpretq_s64_s32(c))));
  r[1] = VI32<Tag>(
      vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(b), vreinterpretq_s64_s32(d))));
  r[3] = VI32<Tag>(
      vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(b), vreinterpretq_s64_s32(d))));
}

template <class Tag>
inline VI8<Tag> bcast4(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return VI8<Tag>(vreinterpretq_s8_s32(vdupq_n_s32(v)));
}

/// dot_u8s8(acc, u, bcast4(base + kOff)) (one instruction on AVX-512 VNNI, intrin-x86.hpp).
template <class Tag, int kOff>
inline VI32<Tag> dot_u8s8_b4(const VI32<Tag>& acc, const VU8<Tag>& u, const std::uint8_t* base) {
  return dot_u8s8<Tag>(acc, u, bcast4<Tag>(base + kOff));
}

template <class Tag>
inline void store_halves(void* lo, void* hi, const VU8<Tag>& v) {
  vst1_u8(static_cast<std::uint8_t*>(lo), vget_low_u8(v));
  vst1_u8(static_cast<std::uint8_t*>(hi), vget_high_u8(v));
}

template <class Tag>
inline VF<Tag> h2f_lo16(const VU32<Tag>& v) {
  return VF<Tag>(vcvt_f32_f16(vreinterpret_f16_u16(vmovn_u32(v))));
}

}  // namespace
}  // namespace nibble::kernels

// ======================================== helpers of the legacy / low-bit K-quant / IQ4 bodies
// (see the section of the same name in intrin-x86.hpp; one 16-byte lane per register here).
namespace nibble::kernels {
namespace {

template <class Tag, int Stride, int Off, int Bytes, int Avail = 0>
inline VU32<Tag> lane_fields(const std::uint8_t* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p + Off, Bytes);
  return VU32<Tag>(vdupq_n_u32(v));
}

template <class Tag, int Stride, int Off, int Avail = 0>
inline VU8<Tag> lane_blocks(const std::uint8_t* p) {
  return VU8<Tag>(vld1q_u8(p + Off));
}

template <class Tag, int Stride, int Off, int Avail = 0>
inline VF<Tag> lane_f16(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p + Off, 2);
  return VF<Tag>(vdupq_n_f32(h2f<Tag>(h)));
}

template <class Tag, int Stride, int Off, int Bytes, int Avail, int R>
inline VU32<Tag> rows_fields(const std::uint8_t* p, std::size_t wrb) {
  alignas(16) std::uint32_t v[4] = {};
  for (int r = 0; r < R; ++r) std::memcpy(&v[r], p + r * wrb + Off, Bytes);
  return VU32<Tag>(vld1q_u32(v));
}

template <class Tag, int Stride, int Off, int Avail, int R>
inline VF<Tag> rows_f16(const std::uint8_t* p, std::size_t wrb) {
  std::uint64_t q = 0;
  for (int r = 0; r < R; ++r) {
    std::uint16_t h;
    std::memcpy(&h, p + r * wrb + Off, 2);
    q |= static_cast<std::uint64_t>(h) << (16 * r);
  }
  return VF<Tag>(vcvt_f32_f16(vreinterpret_f16_u64(vdup_n_u64(q))));
}

template <class Tag>
inline VI32<Tag> swap_halves64(const VI32<Tag>& v) {
  return VI32<Tag>(vextq_s32(v, v, 2));
}

template <class Tag, int Mask4>
inline VI32<Tag> blend4_i32(const VI32<Tag>& a, const VI32<Tag>& b) {
  alignas(16) static const std::uint32_t m[4] = {(Mask4 & 1) ? ~0u : 0u, (Mask4 & 2) ? ~0u : 0u,
                                                 (Mask4 & 4) ? ~0u : 0u, (Mask4 & 8) ? ~0u : 0u};
  return VI32<Tag>(vbslq_s32(vld1q_u32(m), b, a));
}

template <class Tag, int Stride, int Off>
inline void or_bits16(VU8<Tag>& lo, VU8<Tag>& hi, const std::uint8_t* p, const VU8<Tag>& v) {
  std::uint32_t q;
  std::memcpy(&q, p + Off, 4);
  static const std::uint8_t il[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static const std::uint8_t ih[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  static const std::uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t qv = vreinterpretq_u8_u32(vdupq_n_u32(q));
  const uint8x16_t b = vld1q_u8(bits);
  lo = VU8<Tag>(vorrq_u8(lo, vandq_u8(vtstq_u8(vqtbl1q_u8(qv, vld1q_u8(il)), b), v)));
  hi = VU8<Tag>(vorrq_u8(hi, vandq_u8(vtstq_u8(vqtbl1q_u8(qv, vld1q_u8(ih)), b), v)));
}

template <class Tag>
inline VU32<Tag> shr_var_u32(const VU32<Tag>& v, const VU32<Tag>& n) {
  return VU32<Tag>(vshlq_u32(v, vnegq_s32(vreinterpretq_s32_u32(n))));
}

template <class Tag>
inline VI32<Tag> madd_acc_i16(const VI32<Tag>& acc, const VI16<Tag>& a, const VI16<Tag>& b) {
  return acc + madd_i16<Tag>(a, b);
}

/// NEON: the int32 dot (sdot) times an int32 scale pattern (bytes (scale, 0, 0, 0)), as
/// ScaledDot.
template <class Tag>
struct PairScaledDot {
  static constexpr bool kPairs = false;
  static VI32<Tag> acc(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                       const VI8<Tag>& pat) {
    return ScaledDot<Tag>::acc(acc, u, s, pat);
  }
};

template <class Tag>
inline VI16<Tag> madd_s8s8(const VI8<Tag>& w, const VI8<Tag>& a) {
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
  const int16x8_t hi = vmull_high_s8(w, a);
  return VI16<Tag>(vpaddq_s16(lo, hi));
}

template <class Tag>
inline VF<Tag> load_bf16(const void* p) {
  return VF<Tag>(
      vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(static_cast<const std::uint16_t*>(p)), 16)));
}

// Helpers of the weight quantizers (see intrin-x86.hpp). xsimd 8.1 implements float division and
// square root on NEON with reciprocal estimates and Newton steps (not correctly rounded) and
// nearbyint with a generic emulation, so these use the AArch64 instructions.
template <class A>
inline xsimd::batch<float, A> div_ieee(const xsimd::batch<float, A>& a,
                                       const xsimd::batch<float, A>& b) {
  return xsimd::batch<float, A>(vdivq_f32(a, b));
}
template <class A>
inline xsimd::batch<float, A> sqrt_ieee(const xsimd::batch<float, A>& a) {
  return xsimd::batch<float, A>(vsqrtq_f32(a));
}
/// See intrin-x86.hpp: the sum accumulated into v stays a chain in program order.
template <class T, class A>
[[gnu::always_inline]] inline void keep_order(xsimd::batch<T, A>& v) {
  typename xsimd::batch<T, A>::register_type r = v;
  __asm__("" : "+w"(r));
  v = xsimd::batch<T, A>(r);
}

/// See intrin-x86.hpp. Arm has no load-operate instructions, so nothing to do.
template <class T, class A>
[[gnu::always_inline]] inline void in_register(xsimd::batch<T, A>&) {}

template <class A>
inline xsimd::batch<float, A> round_even(const xsimd::batch<float, A>& a) {
  return xsimd::batch<float, A>(vrndnq_f32(a));
}

}  // namespace
}  // namespace nibble::kernels
#endif  // NIBBLE_K_NEON
