// nibble: the x86 pieces the kernel bodies need beyond plain C++ (AVX2, AVX-512, AVX-512 VNNI):
// float vectors of 8 or 16 lanes, fp16 loads, the 16-entry code-book lookup and the int8 dot
// product of 32 bytes into 8 int32 lanes (lane i = sum of products of bytes 4i..4i+3, the same
// grouping on every ISA, so the integer partial sums are identical everywhere).
#pragma once

#include "nibble/kernels/detail/intrin-common.hpp"

#if defined(NIBBLE_K_X86)
namespace nibble::kernels {
namespace {

/// 8 packed bytes -> their 16 nibbles in element order (high nibble first), one per byte.
inline __m128i nibbles16(const std::uint8_t* p) {
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  const __m128i lo = _mm_and_si128(v, m);
  return _mm_unpacklo_epi8(hi, lo);
}

/// Float vectors for a tag: 8 lanes (AVX2) or 16 lanes (AVX-512).
template <bool Wide>
struct X86Float;

template <>
struct X86Float<false> {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  /// L binary16 values from p (exact conversion).
  static V load_half(const std::uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static float hsum(V v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  /// Code-book lookup of 16 4-bit indices (bytes 0..15 of idx, one per byte) into two vectors.
  struct Book {
    __m256 lo, hi;
  };
  static Book book(const float* cb) { return {_mm256_loadu_ps(cb), _mm256_loadu_ps(cb + 8)}; }
  static V lookup8(const Book& b, __m256i i) {
    const __m256 a = _mm256_permutevar8x32_ps(b.lo, i);
    const __m256 c = _mm256_permutevar8x32_ps(b.hi, i);
    return _mm256_blendv_ps(a, c, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
  }
  static constexpr int kPer16 = 2;  // vectors per 16 values
  static __m128i nibbles(const std::uint8_t* p) { return nibbles16(p); }
  /// 16 packed bytes (32 codes, high nibble first) -> 4 vectors of code-book values. The
  /// index bytes keep garbage above bit 3, which the lookups ignore.
  static void lookup32(const Book& b, const std::uint8_t* p, V out[4]) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_srli_epi16(v, 4);
    const __m128i i0 = _mm_unpacklo_epi8(hi, v), i1 = _mm_unpackhi_epi8(hi, v);
    out[0] = lookup8(b, _mm256_cvtepu8_epi32(i0));
    out[1] = lookup8(b, _mm256_cvtepu8_epi32(_mm_srli_si128(i0, 8)));
    out[2] = lookup8(b, _mm256_cvtepu8_epi32(i1));
    out[3] = lookup8(b, _mm256_cvtepu8_epi32(_mm_srli_si128(i1, 8)));
  }
  static void lookup16(const Book& b, __m128i idx, V out[2]) {
    out[0] = lookup8(b, _mm256_cvtepu8_epi32(idx));
    out[1] = lookup8(b, _mm256_cvtepu8_epi32(_mm_srli_si128(idx, 8)));
  }
};

#if defined(NIBBLE_K_AVX512)
template <>
struct X86Float<true> {
  using V = __m512;
  static constexpr int L = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_half(const std::uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float hsum(V v) {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    return X86Float<false>::hsum(h);
  }
  struct Book {
    __m512 t;
  };
  static Book book(const float* cb) { return {_mm512_loadu_ps(cb)}; }
  static constexpr int kPer16 = 1;
  static __m128i nibbles(const std::uint8_t* p) { return nibbles16(p); }
  /// 16 packed bytes (32 codes) -> 2 vectors (vpermps reads only bits 0..3 of each index).
  static void lookup32(const Book& b, const std::uint8_t* p, V out[2]) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_srli_epi16(v, 4);
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, v)), b.t);
    out[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(hi, v)), b.t);
  }
  static void lookup16(const Book& b, __m128i idx, V out[1]) {
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(idx), b.t);
  }
};
#endif

/// The 32-byte int8 dot product in three steps so that a register tile can prepare each weight
/// and each activation vector once: prep_w (per weight vector), prep_a (per activation vector),
/// dot (per pair). Result: 8 int32 lanes, lane i = sum over bytes 4i..4i+3 of w * a.
/// Without VNNI: sign trick (|w| unsigned times a with w's sign) via maddubs + madd; |a| <= 127.
/// With VNNI: (w + 128) unsigned times a, accumulated onto -128 * (sum of a) by vpdpbusd.
template <bool Vnni>
struct X86I8 {
  struct W {
    __m256i w, u;  // raw weights and their unsigned form
  };
  struct A {
    __m256i a, base;
  };
  static W prep_w(__m256i w) {
    if constexpr (Vnni) {
      return {w, _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)))};
    } else {
      return {w, _mm256_sign_epi8(w, w)};
    }
  }
  static A prep_a(__m256i a) {
#if defined(NIBBLE_K_AVX512VNNI)
    if constexpr (Vnni) {
      const __m256i s =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)), a);
      return {a, _mm256_sub_epi32(_mm256_setzero_si256(), s)};
    }
#endif
    return {a, _mm256_setzero_si256()};
  }
  static __m256i dot(const W& w, const A& a) {
#if defined(NIBBLE_K_AVX512VNNI)
    if constexpr (Vnni) return _mm256_dpbusd_epi32(a.base, w.u, a.a);
#endif
    const __m256i p = _mm256_maddubs_epi16(w.u, _mm256_sign_epi8(a.a, w.w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  }
};

}  // namespace
}  // namespace nibble::kernels
#endif  // NIBBLE_K_X86
