// nibble: the x86 pieces the kernel bodies need beyond plain C++ (AVX2, AVX-512, AVX-512 VNNI):
// float vectors of 8 or 16 lanes, fp16 loads, the 16-entry code-book lookup and the int8 dot
// product of 32 bytes into 8 int32 lanes (lane i = sum of products of bytes 4i..4i+3, the same
// grouping on every ISA, so the integer partial sums are identical everywhere).
#pragma once

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/simd.hpp"

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

// ===================================================================== the helper vocabulary
// One function per operation xsimd 8.1 lacks; AVX2 / AVX-VNNI (32-byte) and AVX-512 (64-byte)
// implementations selected by Tag::bytes and Tag::vnni. Kernel bodies call only these.
namespace nibble::kernels {
namespace {

/// acc + per 4-byte group sum of u[i] * s[i] (u unsigned, s signed). Without VNNI (maddubs) the
/// pair sums saturate at int16: callers keep u <= 127 there (every K-quant level does).
template <class Tag>
inline VI32<Tag> dot_u8s8(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512VNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm512_dpbusd_epi32(acc, u, s));
#endif
#if defined(__AVX512BW__)
    const __m512i p = _mm512_maddubs_epi16(u, s);
    return VI32<Tag>(_mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1))));
#endif
  } else {
#if defined(__AVXVNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpbusd_avx_epi32(acc, u, s));
#endif
    const __m256i p = _mm256_maddubs_epi16(u, s);
    return VI32<Tag>(_mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1))));
  }
}

/// Signed x signed int8 dot: acc + per 4-byte group sum of (w[i] + kBias) * a[i], with w in
/// [-127, 127]. VNNI: one vpdpbusd on w + 128 (kBias = 128: the caller subtracts 128 * sum(a)
/// of the group, a per-activation constant); without VNNI: |w| times a with w's sign (kBias = 0).
template <class Tag>
struct S8Dot {
  static constexpr int kBias = Tag::vnni ? 128 : 0;
  /// The weights in the form dot_prepped wants (VNNI: w + 128 as unsigned bytes; else w).
  static VI8<Tag> prep(const VI8<Tag>& w) {
    if constexpr (Tag::vnni) return w ^ VI8<Tag>(static_cast<std::int8_t>(-128));
    return w;
  }
  static VI32<Tag> dot_prepped(const VI32<Tag>& acc, const VI8<Tag>& wp, const VI8<Tag>& a) {
    if constexpr (Tag::vnni) return dot_u8s8<Tag>(acc, as<std::uint8_t>(wp), a);
    return dot(acc, wp, a);
  }
  static VI32<Tag> dot(const VI32<Tag>& acc, const VI8<Tag>& w, const VI8<Tag>& a) {
    if constexpr (Tag::vnni) {
      return dot_u8s8<Tag>(acc, as<std::uint8_t>(w ^ VI8<Tag>(static_cast<std::int8_t>(-128))), a);
    } else if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
      return dot_u8s8<Tag>(acc, VU8<Tag>(_mm512_abs_epi8(w)), VI8<Tag>(sa));
#endif
    } else {
      return dot_u8s8<Tag>(acc, VU8<Tag>(_mm256_abs_epi8(w)), VI8<Tag>(_mm256_sign_epi8(a, w)));
    }
  }
};

/// u8 x s8 products summed in adjacent pairs to int16 (saturating; u <= 127 keeps it exact).
template <class Tag>
inline VI16<Tag> madd_u8s8(const VU8<Tag>& u, const VI8<Tag>& s) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VI16<Tag>(_mm512_maddubs_epi16(u, s));
#endif
  } else {
    return VI16<Tag>(_mm256_maddubs_epi16(u, s));
  }
}

/// int16 x int16 products summed in adjacent pairs to int32 (pmaddwd).
template <class Tag>
inline VI32<Tag> madd_i16(const VI16<Tag>& a, const VI16<Tag>& b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VI32<Tag>(_mm512_madd_epi16(a, b));
#endif
  } else {
    return VI32<Tag>(_mm256_madd_epi16(a, b));
  }
}

/// Table lookup of bytes: result byte i = table[idx[i] & 15] within each 16-byte lane (the
/// table is repeated in every lane; idx bytes must be < 128).
template <class Tag>
inline VI8<Tag> lookup16(const VI8<Tag>& table, const VU8<Tag>& idx) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VI8<Tag>(_mm512_shuffle_epi8(table, idx));
#endif
  } else {
    return VI8<Tag>(_mm256_shuffle_epi8(table, idx));
  }
}

/// A 16-entry byte table repeated in every 16-byte lane (for lookup16).
template <class Tag>
inline VI8<Tag> table16(const std::int8_t* t16) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t16));
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VI8<Tag>(_mm512_broadcast_i32x4(t));
#endif
  } else {
    return VI8<Tag>(_mm256_broadcastsi128_si256(t));
  }
}

/// Tag::bytes / 2 binary16 values from p, converted exactly to fp32.
template <class Tag>
inline VF<Tag> load_f16(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VF<Tag>(_mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))));
#endif
  } else {
    return VF<Tag>(_mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
}

/// Tag::bytes / 2 bytes from lo followed by Tag::bytes / 2 bytes from hi.
template <class Tag>
inline VU8<Tag> load_halves(const void* lo, const void* hi) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    const __m512i l = _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo)));
    return VU8<Tag>(_mm512_inserti64x4(l, _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1));
#endif
  } else {
    return VU8<Tag>(
        _mm256_loadu2_m128i(static_cast<const __m128i*>(hi), static_cast<const __m128i*>(lo)));
  }
}

/// Floats: the lower half of the lanes a, the upper half b.
template <class Tag>
inline VF<Tag> set_halves(float a, float b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512DQ__)
    return VF<Tag>(_mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1));
#endif
  } else {
    return VF<Tag>(_mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a)));
  }
}

/// Four int32 vectors narrowed with signed saturation to int8, in element order (v[0] first).
template <class Tag>
inline VI8<Tag> narrow_i32_i8(const VI32<Tag> v[4]) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    const __m512i p =
        _mm512_packs_epi16(_mm512_packs_epi32(v[0], v[1]), _mm512_packs_epi32(v[2], v[3]));
    // 128-bit lane l of p holds dwords: v0[4l..], v1[4l..], v2[4l..], v3[4l..] (4 bytes each)
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return VI8<Tag>(_mm512_permutexvar_epi32(idx, p));
#endif
  } else {
    const __m256i p =
        _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return VI8<Tag>(_mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

/// Float lanes rounded to the nearest integer, ties to even (the default rounding mode).
template <class Tag>
inline VI32<Tag> round_i32(const VF<Tag>& x) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VI32<Tag>(_mm512_cvtps_epi32(x));
#endif
  } else {
    return VI32<Tag>(_mm256_cvtps_epi32(x));
  }
}

/// Lane i of the result = v[idx[i]] (32-bit lanes, across the whole register).
template <class Tag>
inline VF<Tag> permute_f32(const VF<Tag>& v, const VI32<Tag>& idx) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VF<Tag>(_mm512_permutexvar_ps(idx, v));
#endif
  } else {
    return VF<Tag>(_mm256_permutevar8x32_ps(v, idx));
  }
}
template <class Tag>
inline VI32<Tag> permute_i32(const VI32<Tag>& v, const VI32<Tag>& idx) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VI32<Tag>(_mm512_permutexvar_epi32(idx, v));
#endif
  } else {
    return VI32<Tag>(_mm256_permutevar8x32_epi32(v, idx));
  }
}

/// A 16-entry float table held in registers; lookup(idx) gives lane i = table[idx[i] & 15] (only
/// the low 4 bits of each lane are used): one vpermps on AVX-512, two vpermps and a blend on AVX2.
template <class Tag>
struct Book16 {
  VF<Tag> t[Tag::bytes == 64 ? 1 : 2];
  explicit Book16(const float* p) {
    for (int i = 0; i < (Tag::bytes == 64 ? 1 : 2); ++i) t[i] = VF<Tag>::load_unaligned(p + 8 * i);
  }
  VF<Tag> lookup(const VI32<Tag>& idx) const {
    if constexpr (Tag::bytes == 64) {
      return permute_f32<Tag>(t[0], idx);
    } else {
      const __m256 lo = _mm256_permutevar8x32_ps(t[0], idx);
      const __m256 hi = _mm256_permutevar8x32_ps(t[1], idx);
      return VF<Tag>(_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28))));
    }
  }
};

/// acc + pmaddwd(a, b): per int32 lane, acc + a[2i] * b[2i] + a[2i+1] * b[2i+1] (vpdpwssd
/// with VNNI; pmaddwd and an add without). Wraps on int32 overflow: callers bound the sums.
template <class Tag>
inline VI32<Tag> dot_i16(const VI32<Tag>& acc, const VI16<Tag>& a, const VI16<Tag>& b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512VNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm512_dpwssd_epi32(acc, a, b));
#endif
  } else {
    const __m256i c = acc, x = a, y = b;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpwssd_epi32(c, x, y));
#elif defined(__AVXVNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpwssd_avx_epi32(c, x, y));
#endif
    (void)c, (void)x, (void)y;
  }
  return acc + madd_i16<Tag>(a, b);
}

/// The first n bytes at p (0 < n < Tag::bytes) and zeros above; reads nothing past p + n. Only
/// for tags with byte-masked loads (AVX-512 BW, also on 32-byte vectors: HasEvex).
template <class Tag>
inline VU8<Tag> load_first(const void* p, int n) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VU8<Tag>(_mm512_maskz_loadu_epi8((std::uint64_t{1} << n) - 1, p));
#endif
  } else {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return VU8<Tag>(_mm256_maskz_loadu_epi8((std::uint32_t{1} << n) - 1, p));
#endif
  }
}

/// A 16-entry int16 table in registers, two ways to look it up:
///  - lookup(idx): lane i = table[idx[i] & 15] for 16-bit lanes (vpermw; tags with AVX-512 BW:
///    HasEvex or 64-byte, kWords true);
///  - lookup_bytes(idx, lo, hi): for byte indices (0..15, one per byte), lo holds the entries of
///    bytes 0..7 of every 16-byte lane and hi those of bytes 8..15, as 16-bit lanes in byte order
///    (two pshufb on the low and high bytes of the entries, then unpack; every tag).
template <class Tag>
struct Table16I16 {
  static constexpr bool kWords = Tag::bytes == 64 || HasEvex<Tag>::value;
  VI16<Tag> w;      ///< the 16 entries (repeated to fill the register)
  VI8<Tag> lo, hi;  ///< the low and high bytes of the entries, in every 16-byte lane
  explicit Table16I16(const std::int16_t* t) {
    alignas(64) std::int16_t rep[Tag::bytes / 2];
    alignas(16) std::int8_t l[16], h[16];
    for (int i = 0; i < Tag::bytes / 2; ++i) rep[i] = t[i % 16];
    for (int i = 0; i < 16; ++i) {
      const auto u = static_cast<std::uint16_t>(t[i]);
      l[i] = static_cast<std::int8_t>(u & 0xFF);
      h[i] = static_cast<std::int8_t>(u >> 8);
    }
    w = VI16<Tag>::load_aligned(rep);
    lo = table16<Tag>(l);
    hi = table16<Tag>(h);
  }
  NIBBLE_K_INLINE VI16<Tag> lookup(const VU16<Tag>& idx) const {
    static_assert(kWords, "16-bit lane lookups need AVX-512 BW");
    if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      return VI16<Tag>(_mm512_permutexvar_epi16(idx, w));  // 32-entry: the table twice
#endif
    } else {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
      return VI16<Tag>(_mm256_permutexvar_epi16(idx, w));
#endif
    }
  }
  NIBBLE_K_INLINE void lookup_bytes(const VU8<Tag>& idx, VI16<Tag>& a, VI16<Tag>& b) const {
    const VI8<Tag> l = lookup16<Tag>(lo, idx), h = lookup16<Tag>(hi, idx);
    if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      a = VI16<Tag>(_mm512_unpacklo_epi8(l, h));
      b = VI16<Tag>(_mm512_unpackhi_epi8(l, h));
#endif
    } else {
      a = VI16<Tag>(_mm256_unpacklo_epi8(l, h));
      b = VI16<Tag>(_mm256_unpackhi_epi8(l, h));
    }
  }
};

/// Zero-extends Tag::bytes / 4 bytes from p to int32 lanes.
template <class Tag>
inline VI32<Tag> widen_u8_i32(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VI32<Tag>(_mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
#endif
  } else {
    return VI32<Tag>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
}

/// Zero-extends Tag::bytes / 2 bytes from p to int16 lanes.
template <class Tag>
inline VI16<Tag> widen_u8_i16(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VI16<Tag>(_mm512_cvtepu8_epi16(_mm256_loadu_si256(static_cast<const __m256i*>(p))));
#endif
  } else {
    return VI16<Tag>(_mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
}

/// The two halves of the register swapped (lanes L/2.. first).
template <class Tag>
inline VF<Tag> swap_halves(const VF<Tag>& v) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VF<Tag>(_mm512_shuffle_f32x4(v, v, 0x4E));
#endif
  } else {
    return VF<Tag>(_mm256_permute2f128_ps(v, v, 0x01));
  }
}

/// One binary16 value converted exactly to fp32 (F16C).
template <class Tag>
inline float h2f(std::uint16_t h) {
  return _cvtsh_ss(h);
}

/// Sign-extends Tag::bytes / 4 bytes from p to int32 lanes.
template <class Tag>
inline VI32<Tag> widen_i8_i32(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VI32<Tag>(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
#endif
  } else {
    return VI32<Tag>(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
}

/// a * b + c with one rounding. (xsimd 8.1's fma on avx512bw is a multiply and an add: two
/// roundings, two instructions.)
template <class Tag>
inline VF<Tag> fmadd(const VF<Tag>& a, const VF<Tag>& b, const VF<Tag>& c) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VF<Tag>(_mm512_fmadd_ps(a, b, c));
#endif
  } else {
    return VF<Tag>(_mm256_fmadd_ps(a, b, c));
  }
}

/// Bytes: each 16-byte lane holds lo (little-endian, bytes 0-7) then hi (bytes 8-15).
template <class Tag>
inline VU8<Tag> bcast_u64x2(std::uint64_t lo, std::uint64_t hi) {
  const __m128i v = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VU8<Tag>(_mm512_broadcast_i32x4(v));
#endif
  } else {
    return VU8<Tag>(_mm256_broadcastsi128_si256(v));
  }
}

/// acc + per int32 lane: scale * (sum of the 4 products u * s of the lane), where the scale of
/// the lane comes from `pat`, built by lookup16 with ScaledDot<Tag>::kPairs patterns: kPairs
/// false: the lane's bytes are (scale, 0, 0, 0) (VNNI: the int32 dot, then pmaddwd); true:
/// (scale, 0, scale, 0) (maddubs' int16 pair sums, then pmaddwd). u <= 31, scale <= 127.
template <class Tag>
struct ScaledDot {
  static constexpr bool kPairs = !Tag::vnni;
  static VI32<Tag> acc(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                       const VI8<Tag>& pat) {
    if constexpr (Tag::vnni) {
      return acc + madd_i16<Tag>(as<std::int16_t>(dot_u8s8<Tag>(VI32<Tag>(0), u, s)),
                                 as<std::int16_t>(pat));
    } else {
      return acc + madd_i16<Tag>(madd_u8s8<Tag>(u, s), as<std::int16_t>(pat));
    }
  }
  /// Signed scales: the pattern byte at position k of an int32 lane is the scale (code 0), its
  /// sign byte 0x00 / 0xFF (code 1) or zero (code 2), kCode[k].
  static constexpr int kCode[4] = {0, 1, kPairs ? 0 : 2, kPairs ? 1 : 2};
  /// The type of a per-lane starting value: the int16 pair sums (kPairs) or the int32 lanes.
  using Init = std::conditional_t<kPairs, VI16<Tag>, VI32<Tag>>;
  /// acc + per int32 lane: scale * (init + sum of the 4 products u * s), signed scales (kCode
  /// patterns). |init + products| must stay within int16 for every lane (kPairs: every pair).
  static VI32<Tag> acc_init(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                            const Init& init, const VI8<Tag>& pat) {
    if constexpr (Tag::vnni) {
      return acc +
             madd_i16<Tag>(as<std::int16_t>(dot_u8s8<Tag>(init, u, s)), as<std::int16_t>(pat));
    } else {
      return acc + madd_i16<Tag>(madd_u8s8<Tag>(u, s) + init, as<std::int16_t>(pat));
    }
  }
};

/// Two int8 dots with per-lane scales in one step: acc + sum over int32 lanes of
/// scale * (sum of the 4 products of the lane), for a "lo" dot (u_lo x s_lo) and a "hi" dot
/// (u_hi x s_hi). With VNNI (kPacked): the two dots are narrowed to int16 and interleaved per
/// 16-byte lane (int16 0-3: the lo dot's 4 int32 lanes, 4-7: the hi dot's), then one vpdpwssd
/// applies `pat`, whose bytes are (scale, 0) per int16. |dot| must fit int16 (u <= 31 with
/// |s| <= 128 does). Without VNNI, ScaledDot's two patterns are used instead.
template <class Tag>
struct ScaledDot2 {
  static constexpr bool kPacked = Tag::vnni;
  static VI32<Tag> acc(const VI32<Tag>& acc, const VU8<Tag>& ulo, const VI8<Tag>& slo,
                       const VU8<Tag>& uhi, const VI8<Tag>& shi, const VI8<Tag>& pat) {
    const VI32<Tag> z(0);
    const VI32<Tag> dl = dot_u8s8<Tag>(z, ulo, slo), dh = dot_u8s8<Tag>(z, uhi, shi);
    if constexpr (Tag::bytes == 64) {
#if defined(__AVX512VNNI__)
      return VI32<Tag>(_mm512_dpwssd_epi32(acc, _mm512_packs_epi32(dl, dh), pat));
#endif
    } else {
#if defined(__AVXVNNI__)
      return VI32<Tag>(_mm256_dpwssd_avx_epi32(acc, _mm256_packs_epi32(dl, dh), pat));
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
      return VI32<Tag>(_mm256_dpwssd_epi32(acc, _mm256_packs_epi32(dl, dh), pat));
#endif
    }
  }
};

/// 16 bytes from each of the Tag::bytes / 16 pointers, one per 16-byte lane (lane i from p[i]).
template <class Tag>
inline VU8<Tag> load_lanes(const void* const* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    auto ld = [](const void* q) { return _mm_loadu_si128(static_cast<const __m128i*>(q)); };
    __m512i v = _mm512_castsi128_si512(ld(p[0]));
    v = _mm512_inserti32x4(v, ld(p[1]), 1);
    v = _mm512_inserti32x4(v, ld(p[2]), 2);
    return VU8<Tag>(_mm512_inserti32x4(v, ld(p[3]), 3));
#endif
  } else {
    return VU8<Tag>(
        _mm256_loadu2_m128i(static_cast<const __m128i*>(p[1]), static_cast<const __m128i*>(p[0])));
  }
}

/// 16-byte lane `i` of v repeated in every lane.
template <class Tag>
inline VU8<Tag> bcast_lane(const VU8<Tag>& v, int i) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    switch (i) {
      case 0:
        return VU8<Tag>(_mm512_shuffle_i32x4(v, v, 0x00));
      case 1:
        return VU8<Tag>(_mm512_shuffle_i32x4(v, v, 0x55));
      case 2:
        return VU8<Tag>(_mm512_shuffle_i32x4(v, v, 0xAA));
      default:
        return VU8<Tag>(_mm512_shuffle_i32x4(v, v, 0xFF));
    }
#endif
  } else {
    return i == 0 ? VU8<Tag>(_mm256_permute2x128_si256(v, v, 0x00))
                  : VU8<Tag>(_mm256_permute2x128_si256(v, v, 0x11));
  }
}

/// Floats: lane j = v[j / 4] (one value per 16-byte lane; v holds Tag::bytes / 16 floats, read
/// as scalars: no vector load of recently stored floats).
template <class Tag>
inline VF<Tag> spread_lanes(const float* v) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return VF<Tag>(
        _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_setr_ps(v[0], v[1], v[2], v[3]))));
#endif
  } else {
    return VF<Tag>(_mm256_set_m128(_mm_set1_ps(v[1]), _mm_set1_ps(v[0])));
  }
}

/// Two binary16 values at p (little-endian pair) converted exactly to fp32.
template <class Tag>
inline void h2f_pair(const void* p, float* a, float* b) {
  std::int32_t w;
  std::memcpy(&w, p, 4);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(w));
  *a = _mm_cvtss_f32(f);
  *b = _mm_cvtss_f32(_mm_movehdup_ps(f));
}

/// Logical right shift of 16-bit lanes: the lower half of the register by a, the upper half by b
/// (AVX2 and NEON registers are used with a == b only).
template <class Tag>
inline VU16<Tag> shr_halves(const VU16<Tag>& v, int a, int b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    const __m512i n = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(a)),
                                         _mm256_set1_epi16(static_cast<short>(b)), 1);
    return VU16<Tag>(_mm512_srlv_epi16(v, n));
#endif
  } else {
    (void)b;
    return VU16<Tag>(_mm256_srli_epi16(v, a));
  }
}

/// In-register transpose of Tag::bytes / 4 vectors of int32: afterwards r[k] lane i = the old
/// r[i] lane k (8 x 8 on AVX2, 16 x 16 on AVX-512).
template <class Tag>
inline void transpose_i32(VI32<Tag>* r) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // u[4q + k]: 128-bit lane c holds rows 4q..4q+3, column 4c + k.
    for (int q = 0; q < 4; q += 2)
      for (int k = 0; k < 4; ++k) {
        t[4 * q + k] = _mm512_shuffle_i32x4(u[4 * q + k], u[4 * q + 4 + k], 0x88);
        t[4 * q + 4 + k] = _mm512_shuffle_i32x4(u[4 * q + k], u[4 * q + 4 + k], 0xDD);
      }
    for (int k = 0; k < 4; ++k) {
      r[k] = VI32<Tag>(_mm512_shuffle_i32x4(t[k], t[8 + k], 0x88));
      r[8 + k] = VI32<Tag>(_mm512_shuffle_i32x4(t[k], t[8 + k], 0xDD));
      r[4 + k] = VI32<Tag>(_mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0x88));
      r[12 + k] = VI32<Tag>(_mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0xDD));
    }
#endif
  } else {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int k = 0; k < 4; ++k) {
      r[k] = VI32<Tag>(_mm256_permute2x128_si256(u[k], u[4 + k], 0x20));
      r[4 + k] = VI32<Tag>(_mm256_permute2x128_si256(u[k], u[4 + k], 0x31));
    }
  }
}

/// The 4 bytes at p repeated in every 32-bit lane.
template <class Tag>
inline VI8<Tag> bcast4(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return as<std::int8_t>(VI32<Tag>(v));
}

/// Stores the lower half of v (Tag::bytes / 2 bytes) at lo and the upper half at hi.
template <class Tag>
inline void store_halves(void* lo, void* hi, const VU8<Tag>& v) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    _mm256_storeu_si256(static_cast<__m256i*>(lo), _mm512_castsi512_si256(v));
    _mm256_storeu_si256(static_cast<__m256i*>(hi), _mm512_extracti64x4_epi64(v, 1));
#endif
  } else {
    _mm_storeu_si128(static_cast<__m128i*>(lo), _mm256_castsi256_si128(v));
    _mm_storeu_si128(static_cast<__m128i*>(hi), _mm256_extracti128_si256(v, 1));
  }
}

/// Floats from the binary16 values in the low 16 bits of each 32-bit lane (exact).
template <class Tag>
inline VF<Tag> h2f_lo16(const VU32<Tag>& v) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VF<Tag>(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
#endif
  } else {
    const __m256i m = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    return VF<Tag>(_mm256_cvtph_ps(p));
  }
}

}  // namespace
}  // namespace nibble::kernels
#endif  // NIBBLE_K_X86
