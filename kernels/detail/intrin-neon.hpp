// nibble: the NEON pieces the kernel bodies need (with and without the dotprod extension):
// float vectors of 4 lanes, fp16 loads, the 16-entry code-book lookup (tbl) and the int8 dot
// product of 16 bytes into 4 int32 lanes (lane i = sum of products of bytes 4i..4i+3, the same
// grouping as the x86 kernels, so integer partial sums agree across ISAs).
#pragma once

#include "nibble/kernels/detail/intrin-common.hpp"

#if defined(NIBBLE_K_NEON)
namespace nibble::kernels {
namespace {

/// 8 packed bytes -> their 16 nibbles in element order (high nibble first).
inline uint8x16_t nibbles16(const std::uint8_t* p) {
  const uint8x8_t v = vld1_u8(p);
  const uint8x8_t hi = vshr_n_u8(v, 4);
  const uint8x8_t lo = vand_u8(v, vdup_n_u8(0x0F));
  const uint8x8x2_t z = vzip_u8(hi, lo);
  return vcombine_u8(z.val[0], z.val[1]);
}

struct NeonFloat {
  using V = float32x4_t;
  static constexpr int L = 4;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V set1(float x) { return vdupq_n_f32(x); }
  static V load(const float* p) { return vld1q_f32(p); }
  static V load_half(const std::uint8_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const std::uint16_t*>(p))));
  }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static float hsum(V v) {
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
  }
  struct Book {
    uint8x16x4_t t;
  };
  static Book book(const float* cb) {
    const std::uint8_t* b = reinterpret_cast<const std::uint8_t*>(cb);
    return {{{vld1q_u8(b), vld1q_u8(b + 16), vld1q_u8(b + 32), vld1q_u8(b + 48)}}};
  }
  static constexpr int kPer16 = 4;
  static uint8x16_t nibbles(const std::uint8_t* p) { return nibbles16(p); }
  /// 16 packed bytes (32 codes, high nibble first) -> 8 vectors of code-book values.
  static void lookup32(const Book& b, const std::uint8_t* p, V out[8]) {
    const uint8x16_t v = vld1q_u8(p);
    const uint8x16x2_t z = vzipq_u8(vshrq_n_u8(v, 4), vandq_u8(v, vdupq_n_u8(0x0F)));
    lookup16(b, z.val[0], out);
    lookup16(b, z.val[1], out + 4);
  }
  /// 16 indices (0..15, one per byte) -> 4 vectors of code-book floats.
  static void lookup16(const Book& b, uint8x16_t idx, V out[4]) {
    static const std::uint8_t rep[64] = {
        0,  0,  0,  0,  1,  1,  1,  1,  2,  2,  2,  2,  3,  3,  3,  3,  4,  4,  4,  4,  5,  5,
        5,  5,  6,  6,  6,  6,  7,  7,  7,  7,  8,  8,  8,  8,  9,  9,  9,  9,  10, 10, 10, 10,
        11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
    const uint8x16_t idx4 = vshlq_n_u8(idx, 2);
    const uint8x16_t off = vreinterpretq_u8_u32(vdupq_n_u32(0x03020100u));
    for (int g = 0; g < 4; ++g) {
      const uint8x16_t bytes = vaddq_u8(vqtbl1q_u8(idx4, vld1q_u8(rep + 16 * g)), off);
      out[g] = vreinterpretq_f32_u8(vqtbl4q_u8(b.t, bytes));
    }
  }
};

/// 16-byte int8 dot product into 4 int32 lanes added to acc (lane i: bytes 4i..4i+3).
template <bool Dot>
inline int32x4_t neon_dot16(int32x4_t acc, int8x16_t w, int8x16_t a) {
#if defined(NIBBLE_K_NEONDOT)
  if constexpr (Dot) return vdotq_s32(acc, w, a);
#endif
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(a));
  const int16x8_t hi = vmull_s8(vget_high_s8(w), vget_high_s8(a));
  const int32x4_t pl = vpaddlq_s16(lo);  // pairs 0+1, 2+3, 4+5, 6+7
  const int32x4_t ph = vpaddlq_s16(hi);
  return vaddq_s32(acc, vpaddq_s32(pl, ph));
}

}  // namespace
}  // namespace nibble::kernels
#endif  // NIBBLE_K_NEON
