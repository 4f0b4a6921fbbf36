// nibble: the x86 operations the kernel bodies need beyond xsimd 8.1 (AVX2, AVX-VNNI, AVX-512,
// AVX-512 VNNI): int8 dot products (4-byte groups into int32 lanes, the same grouping on every
// ISA, so the integer partial sums are identical everywhere), in-lane byte lookups, fp16 / bf16
// loads, code-book lookups, saturating narrowing, lane shuffles and masked loads and stores. The
// only file of the x86 kernels with intrinsics: every kernel body is written over xsimd batches
// and calls these (intrin-neon.hpp has the same names for NEON).
#pragma once

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/simd.hpp"

#if defined(NIBBLE_K_X86)
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
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if constexpr (Tag::vnni) {  // EVEX (the ymm view of an AVX-512 tag)
      return VI32<Tag>(_mm256_dpbusd_epi32(__m256i(acc), __m256i(u), __m256i(s)));
    }
#elif defined(__AVXVNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpbusd_avx_epi32(acc, u, s));
#else
    static_assert(!Tag::vnni, "a 32-byte VNNI tag needs AVX-VNNI or AVX-512 VNNI in this TU");
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
  /// Whether a body should use madd_abs (without VNNI): the activations' magnitudes prepared
  /// once per activation row, the weights take the activations' signs.
  static constexpr bool kAbsAct = !Tag::vnni;
  /// Without VNNI: per int16 lane the sum of two products |a| * (w * sign(a)) = w * a, with
  /// a_abs = |a| as unsigned bytes (<= 128) and w in [-127, 127] (|sum| <= 2 * 128 * 127 < 2^15):
  /// dot() without its |w|, for bodies that read |a| from their prepared activations.
  static VI16<Tag> madd_abs(const VU8<Tag>& a_abs, const VI8<Tag>& w, const VI8<Tag>& a) {
    static_assert(!Tag::vnni, "VNNI tags use dot_prepped");
    if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      const __m512i ws = _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(a), _mm512_setzero_si512(), w);
      return VI16<Tag>(_mm512_maddubs_epi16(a_abs, ws));
#endif
    } else {
      return VI16<Tag>(_mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(w, a)));
    }
  }
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

/// Signed x signed int8 dot for bodies that reuse one weight vector against several activation
/// vectors and need only the total over all int32 lanes (the grouping of products into lanes is
/// not part of the contract): prep once per weight vector, dot per pair. w any int8, |a| <= 127.
/// VNNI: vpdpbusd on w + 128 (kBias = 128: the caller subtracts 128 * sum(a), e.g. from
/// dot_u8s8 of bytes 128 with a); without VNNI: |w| times a with w's sign (maddubs + madd; the
/// int16 pair sums stay below 2 * 128 * 127), the sign as a mask on 64-byte registers.
template <class Tag>
struct S8SumDot {
  static constexpr int kBias = Tag::vnni ? 128 : 0;
  struct W {
    VU8<Tag> u;         ///< w + 128 (VNNI) or |w|
    VI8<Tag> w;         ///< w (32-byte, no VNNI)
    std::uint64_t neg;  ///< sign bits of w (64-byte, no VNNI)
  };
  static W prep(const VI8<Tag>& w) {
    if constexpr (Tag::vnni) {
      return {as<std::uint8_t>(w ^ VI8<Tag>(static_cast<std::int8_t>(-128))), w, 0};
    } else if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      return {VU8<Tag>(_mm512_abs_epi8(w)), w, _mm512_movepi8_mask(w)};
#endif
    } else {
      return {VU8<Tag>(_mm256_abs_epi8(w)), w, 0};
    }
  }
  static VI32<Tag> dot(const VI32<Tag>& acc, const W& w, const VI8<Tag>& a) {
    if constexpr (Tag::vnni) {
#if defined(__GNUC__) && defined(__AVX512VNNI__)
      if constexpr (Tag::bytes == 64) {
        // In-place accumulate: with the intrinsic GCC copies every accumulator of a 4 x 4 tile
        // around each vpdpbusd and spills some (W8A8 GEMM about 1.3x slower).
        __m512i r = acc;
        __asm__("vpdpbusd %2, %1, %0"
                : "+v"(r)
                : "v"(static_cast<__m512i>(w.u)), "v"(static_cast<__m512i>(a)));
        return VI32<Tag>(r);
      }
#endif
      return dot_u8s8<Tag>(acc, w.u, a);
    } else if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      return dot_u8s8<Tag>(acc, w.u,
                           VI8<Tag>(_mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a)));
#endif
    } else {
      return dot_u8s8<Tag>(acc, w.u, VI8<Tag>(_mm256_sign_epi8(a, w.w)));
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

/// The 16 signed scale bytes at p, 256-bit registers only: returned as int16 in order, and in
/// t[2] as int16 pairs (s, s), one per dword, for pmaddwd patterns that permute_i32 picks per
/// lane. t[0] holds scales 0-3 and 8-11, t[1] scales 4-7 and 12-15 (unpacklo / unpackhi work
/// within 16-byte lanes).
template <class Tag>
inline VI16<Tag> scale_pairs16(const std::int8_t* p, VI32<Tag>* t) {
  static_assert(Tag::bytes == 32, "256-bit registers");
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  t[0] = VI32<Tag>(_mm256_unpacklo_epi16(s, s));
  t[1] = VI32<Tag>(_mm256_unpackhi_epi16(s, s));
  return VI16<Tag>(s);
}

/// The 16 signed scale bytes at p as one int32 lane each, in the form of a pmaddwd multiplier:
/// the scale as int16 in the low half of the lane and, Pairs, also in the high half (for int16
/// pair sums), else 0 there (for int32 sums within int16 range). Picked per lane by
/// permute_i32 (64-byte registers).
template <class Tag, bool Pairs>
inline VI32<Tag> scale_dwords16(const std::int8_t* p) {
  static_assert(Tag::bytes == 64, "64-byte registers");
#if defined(__AVX512F__)
  const __m512i d = _mm512_cvtepu16_epi32(
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  return VI32<Tag>(Pairs ? _mm512_or_si512(d, _mm512_slli_epi32(d, 16)) : d);
#endif
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

/// Adjacent int32 pairs summed, per 16-byte lane: [a0 + a1, a2 + a3, b0 + b1, b2 + b3] (phaddd;
/// 32-byte tags).
template <class Tag>
inline VI32<Tag> hadd_pairs_i32(const VI32<Tag>& a, const VI32<Tag>& b) {
  static_assert(Tag::bytes == 32, "32-byte tags");
  return VI32<Tag>(_mm256_hadd_epi32(a, b));
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
    // The upper half by a masked load of the 64 bytes ending at hi + 32 (masked-out bytes are
    // not read): one load, where vinserti64x4 from memory also takes a shuffle slot.
    const __m512i l = _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo)));
    return VU8<Tag>(
        _mm512_mask_loadu_epi8(l, 0xFFFFFFFF00000000ull, static_cast<const char*>(hi) - 32));
#endif
  } else {
    return VU8<Tag>(
        _mm256_loadu2_m128i(static_cast<const __m128i*>(hi), static_cast<const __m128i*>(lo)));
  }
}

/// The Tag::bytes / 2 bytes at p in both halves of the register (one broadcast load).
template <class Tag>
inline VU8<Tag> load_twice(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VU8<Tag>(_mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p))));
#endif
  } else {
    return VU8<Tag>(_mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
}

/// The 16 bytes at p in every 16-byte lane (one broadcast load).
template <class Tag>
inline VU8<Tag> load_lane_all(const void* p) {
  const __m128i v = _mm_loadu_si128(static_cast<const __m128i*>(p));
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    return VU8<Tag>(_mm512_broadcast_i32x4(v));
#endif
  } else {
    return VU8<Tag>(_mm256_broadcastsi128_si256(v));
  }
}

/// A 16-entry byte table repeated in every 16-byte lane (for lookup16).
template <class Tag>
inline VI8<Tag> table16(const std::int8_t* t16) {
  return as<std::int8_t>(load_lane_all<Tag>(t16));
}

/// Floats: the lower half of the lanes a, the upper half b.
template <class Tag>
inline VF<Tag> set_halves(float a, float b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512DQ__)
    return VF<Tag>(_mm512_mask_broadcastss_ps(_mm512_set1_ps(a), 0xFF00, _mm_set_ss(b)));
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
/// 32 4-bit codes from the 16 bytes at p (code 2i in the high nibble of byte i, 2i + 1 in the low
/// one) looked up in b: 32 / lanes vectors of floats in code order. The index lanes keep garbage
/// above bit 3, which Book16 ignores.
template <class Tag>
inline void lookup_codes32(const Book16<Tag>& b, const std::uint8_t* p, VF<Tag>* out) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_srli_epi16(v, 4);
  const __m128i i0 = _mm_unpacklo_epi8(hi, v), i1 = _mm_unpackhi_epi8(hi, v);
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    out[0] = b.lookup(VI32<Tag>(_mm512_cvtepu8_epi32(i0)));
    out[1] = b.lookup(VI32<Tag>(_mm512_cvtepu8_epi32(i1)));
#endif
  } else {
    out[0] = b.lookup(VI32<Tag>(_mm256_cvtepu8_epi32(i0)));
    out[1] = b.lookup(VI32<Tag>(_mm256_cvtepu8_epi32(_mm_srli_si128(i0, 8))));
    out[2] = b.lookup(VI32<Tag>(_mm256_cvtepu8_epi32(i1)));
    out[3] = b.lookup(VI32<Tag>(_mm256_cvtepu8_epi32(_mm_srli_si128(i1, 8))));
  }
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

/// acc + madd_i16(a, b) (pmaddwd then add; one vpdpwssd with VNNI).
template <class Tag>
inline VI32<Tag> madd_acc_i16(const VI32<Tag>& acc, const VI16<Tag>& a, const VI16<Tag>& b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512VNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm512_dpwssd_epi32(acc, a, b));
#endif
  } else {
    const __m256i c = acc, x = a, y = b;
#if defined(__AVXVNNI__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpwssd_avx_epi32(c, x, y));
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if constexpr (Tag::vnni) return VI32<Tag>(_mm256_dpwssd_epi32(c, x, y));
#endif
    (void)c, (void)x, (void)y;
  }
  return acc + madd_i16<Tag>(a, b);
}

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
    return acc_dots(acc, dot_u8s8<Tag>(z, ulo, slo), dot_u8s8<Tag>(z, uhi, shi), pat);
  }
  /// The two int32 dots dl, dh narrowed (signed saturation) to int16 and interleaved per 16-byte
  /// lane: int16 0-3 of a lane from dl's 4 int32 lanes, 4-7 from dh's (vpackssdw).
  static VI16<Tag> pack(const VI32<Tag>& dl, const VI32<Tag>& dh) {
    if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
      return VI16<Tag>(_mm512_packs_epi32(dl, dh));
#endif
    } else {
      return VI16<Tag>(_mm256_packs_epi32(dl, dh));
    }
  }
  /// As acc with the dots already made (|dl|, |dh| must fit int16).
  static VI32<Tag> acc_dots(const VI32<Tag>& acc, const VI32<Tag>& dl, const VI32<Tag>& dh,
                            const VI8<Tag>& pat) {
    return madd_acc_i16<Tag>(acc, pack(dl, dh), as<std::int16_t>(pat));
  }
  /// acc + pmaddwd(pk, pat) for an already packed pk (vpdpwssd).
  static VI32<Tag> acc_packed(const VI32<Tag>& acc, const VI16<Tag>& pk, const VI8<Tag>& pat) {
    return madd_acc_i16<Tag>(acc, pk, as<std::int16_t>(pat));
  }
  /// As acc_dots onto a zero accumulator (pmaddwd: no register to clear).
  static VI32<Tag> first_dots(const VI32<Tag>& dl, const VI32<Tag>& dh, const VI8<Tag>& pat) {
    return madd_i16<Tag>(pack(dl, dh), as<std::int16_t>(pat));
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

/// The lower and upper halves of a 64-byte int32 register added lane by lane: lane i of the
/// 32-byte result = v[i] + v[i + 8].
template <class Tag>
inline VI32<Ymm<Tag>> add_halves_i32(const VI32<Tag>& v) {
  static_assert(Tag::bytes == 64, "64-byte registers only");
#if defined(__AVX512F__)
  const __m512i x = v;
  return VI32<Ymm<Tag>>(
      _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1)));
#endif
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

/// An empty asm statement that the compiler must assume reads and changes v, so that a sum
/// accumulated into v stays a chain in program order. Without it GCC's reassociation may
/// compute every addend first and add them up at the end, which keeps them all live at once
/// (the packed Q6_K GEMV on AVX2 made 187 stack accesses; docs/kernels.md, "Register
/// pressure on 256-bit").
template <class T, class A>
[[gnu::always_inline]] inline void keep_order(xsimd::batch<T, A>& v) {
  typename xsimd::batch<T, A>::register_type r = v;
  __asm__("" : "+v"(r));
  v = xsimd::batch<T, A>(r);
}

/// A loaded value made a register operand: the empty asm statement takes v in a register, so a
/// vector loaded once and used several times is one load, where GCC otherwise folds the load into
/// every use (a memory operand each, that is one more load per use). On a Zen 5 core loads,
/// plain, folded or broadcast, issue at about two per cycle, and the packed GEMV bodies were
/// bound by them (docs/kernels.md, "Packed units held in registers"). The same empty asm
/// statement as keep_order, which it reuses.
template <class T, class A>
[[gnu::always_inline]] inline void in_register(xsimd::batch<T, A>& v) {
  keep_order(v);
}

/// The 4 bytes at p repeated in every 32-bit lane.
template <class Tag>
inline VI8<Tag> bcast4(const void* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return as<std::int8_t>(VI32<Tag>(v));
}

/// dot_u8s8(acc, u, bcast4(base + kOff)): on AVX-512 VNNI one `vpdpbusd` with the 4 bytes at
/// base + kOff as its embedded broadcast ({1to16}) operand, which GCC 12 does not form from the
/// intrinsics (it emits a `vpbroadcastd` load and a register `vpdpbusd`): one instruction less per
/// dot. The packed Q2_K / Q3_K GEMV bodies, 64 dots per group block, measured on a Zen 5 core
/// (in-process pairs against the separate broadcast, each core, median of the per-pair time
/// ratios new / old): q3_K.x16 cold 4096 x 4096 0.89-0.96 (with the offset pair add of
/// kq23-packed-inl.hpp), L2-resident 1.02-1.04; q2_K.x16 cold 0.98-1.01, L2-resident 0.93
/// (docs/kernels.md, "Packed Q2_K / Q3_K: the activation broadcast inside the dot").
/// The offset is a constant of the instruction (base in a register): given as one memory operand
/// per dot, GCC 12 made each of the 64 addresses of a block a register of its own once two
/// streams' inlined steps shared them, and spilled them (packed_gemv_streams).
template <class Tag, int kOff>
[[gnu::always_inline]] inline VI32<Tag> dot_u8s8_b4(const VI32<Tag>& acc, const VU8<Tag>& u,
                                                    const std::uint8_t* base) {
#if defined(__GNUC__) && defined(__AVX512VNNI__)
  if constexpr (Tag::bytes == 64 && Tag::vnni) {
    __m512i r = acc;
    // operand 4 tells the compiler which bytes the instruction reads; the template does not use it
    __asm__("vpdpbusd %c3(%2)%{1to16%}, %1, %0"
            : "+v"(r)
            : "v"(static_cast<__m512i>(u)), "r"(base), "i"(kOff),
              "m"(*reinterpret_cast<const std::uint8_t(*)[kOff + 4]>(base)));
    return VI32<Tag>(r);
  }
#endif
  return dot_u8s8<Tag>(acc, u, bcast4<Tag>(base + kOff));
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

// ======================================== helpers of the legacy / low-bit K-quant / IQ4 bodies
// (kernels/detail/legacy-q-inl.hpp, kq23-inl.hpp, iq4-inl.hpp, kernels/bf16-inl.hpp). Kept in a
// section of their own.
namespace nibble::kernels {
namespace {

/// Compile-time word indices of lane_fields on AVX-512: for dword lane j of the result (16-byte
/// lane k = j / 4), the words of the Bytes-byte field at Off + k * Stride (Bytes 1 or 2: the word
/// holding the field, twice; Bytes 4: its two words).
template <int Stride, int Off, int Bytes>
struct LaneWordIdx {
  alignas(64) std::uint16_t w[32];
  alignas(64) std::uint32_t shift[16];  ///< Bytes 1: 8 for a field in the word's upper byte
  constexpr LaneWordIdx() : w{}, shift{} {
    for (int j = 0; j < 16; ++j) {
      const int pos = Off + (j / 4) * Stride;
      w[2 * j] = static_cast<std::uint16_t>(pos / 2);
      w[2 * j + 1] = static_cast<std::uint16_t>(Bytes == 4 ? pos / 2 + 1 : pos / 2);
      shift[j] = static_cast<std::uint32_t>(8 * (pos % 2));
    }
  }
};

#if defined(NIBBLE_K_AVX512)
/// Bytes [p + 64 * i, p + 64 * i + 64) of which the first `n` are needed and the first `avail`
/// readable: a plain load when all 64 are, else a masked load of the needed ones (zeros above).
template <int N, int Avail>
inline __m512i load_part512(const std::uint8_t* p) {
  if constexpr (Avail >= 64) {
    return _mm512_loadu_si512(p);
  } else {
    constexpr int k = N < 64 ? N : 64;
    const __mmask64 m = k == 64 ? ~__mmask64{0} : ((__mmask64{1} << k) - 1);
    return _mm512_maskz_loadu_epi8(m, p);
  }
}

/// The 16-bit words of [p, p + End) gathered by the index table `idx`; bytes from p + Avail on
/// are not read (masked loads; words there read as 0). Identical loads of several gathers from
/// one p are shared by the compiler.
template <int End, int Avail>
inline __m512i gather_words512(const std::uint8_t* p, const std::uint16_t* idx) {
  const __m512i i = _mm512_load_si512(idx);
  if constexpr (End <= 64) {
    return _mm512_permutexvar_epi16(i, load_part512<End, Avail>(p));
  } else {
    static_assert(End <= 128, "two registers at most");
    return _mm512_permutex2var_epi16(load_part512<64, Avail>(p), i,
                                     load_part512<End - 64, Avail - 64>(p + 64));
  }
}
#endif

/// Per 16-byte lane k (k < Tag::bytes / 16): the little-endian Bytes-byte field (1, 2 or 4) at
/// p + Off + k * Stride, zero-extended, in every int32 lane of lane k. Reads within [p, p +
/// Avail) only, Avail >= the end of the last field (default: exactly that).
template <class Tag, int Stride, int Off, int Bytes, int Avail = Off + 3 * Stride + Bytes>
inline VU32<Tag> lane_fields(const std::uint8_t* p) {
  static_assert(Bytes == 1 || Bytes == 2 || Bytes == 4, "field size");
  auto ld = [p](int k) {
    std::uint32_t v = 0;
    std::memcpy(&v, p + Off + k * Stride, Bytes);
    return v;
  };
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    static_assert(Bytes == 1 || (Off % 2 == 0 && Stride % 2 == 0), "word-aligned fields");
    static constexpr LaneWordIdx<Stride, Off, Bytes> kIdx{};
    // Words that straddle the end of the span read zeros there (masked load).
    __m512i v = gather_words512<Off + 3 * Stride + Bytes, Avail>(p, kIdx.w);
    if constexpr (Bytes == 1) {
      v = _mm512_srlv_epi32(v, _mm512_load_si512(kIdx.shift));
      return VU32<Tag>(_mm512_and_si512(v, _mm512_set1_epi32(0xFF)));
    } else if constexpr (Bytes == 2) {
      return VU32<Tag>(_mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)));
    } else {
      return VU32<Tag>(v);
    }
#endif
  } else {
    const std::uint32_t f0 = ld(0), f1 = ld(1);
    return VU32<Tag>(_mm256_setr_epi32(
        static_cast<int>(f0), static_cast<int>(f0), static_cast<int>(f0), static_cast<int>(f0),
        static_cast<int>(f1), static_cast<int>(f1), static_cast<int>(f1), static_cast<int>(f1)));
  }
}

/// Per 16-byte lane k: the 16 bytes at p + Off + k * Stride (k < Tag::bytes / 16). Reads within
/// [p, p + Avail) only (Avail >= the end of the last lane's bytes). AVX-512: four 16-byte loads
/// into the lanes (load_lanes). A word gather from the step's bytes (two 64-byte loads, the
/// second masked, and one vpermt2w) computed as fast from L2 but streamed cold rows at half
/// the rate or less on Zen 5: Q4_0 / Q4_1 / Q5_0 / IQ4_NL GEMV, 4096 x 4096 and 4096 x 11008,
/// 1 thread pinned, 3 alternated rounds, 1.24-2.05x with the loads into lanes (0.45-0.75 ->
/// 0.79-1.00 of `membw`), warm L2 level (docs/kernels.md, "The plain 32-value bodies on
/// AVX-512: loads into lanes").
template <class Tag, int Stride, int Off, int Avail = Off + 3 * Stride + 16>
inline VU8<Tag> lane_blocks(const std::uint8_t* p) {
  static_assert(Off + (Tag::bytes / 16 - 1) * Stride + 16 <= Avail, "reads past Avail");
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    const void* q[4] = {p + Off, p + Off + Stride, p + Off + 2 * Stride, p + Off + 3 * Stride};
    return load_lanes<Tag>(q);
#endif
  } else {
    return VU8<Tag>(_mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + Off + Stride),
                                        reinterpret_cast<const __m128i*>(p + Off)));
  }
}

/// Per 16-byte lane k: the binary16 value at p + Off + k * Stride converted exactly to fp32, in
/// every float lane of lane k (Off and Stride even on AVX-512; reads as lane_fields).
template <class Tag, int Stride, int Off, int Avail = Off + 3 * Stride + 2>
inline VF<Tag> lane_f16(const std::uint8_t* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    static_assert(Off % 2 == 0 && Stride % 2 == 0, "word-aligned fields");
    // Words 0..15 of the permute: the 16 halves, each lane's value four times.
    struct Idx {
      alignas(64) std::uint16_t w[32];
      constexpr Idx() : w{} {
        for (int j = 0; j < 32; ++j)
          w[j] = static_cast<std::uint16_t>((Off + ((j % 16) / 4) * Stride) / 2);
      }
    };
    static constexpr Idx kHalf{};
    const __m512i v = gather_words512<Off + 3 * Stride + 2, Avail>(p, kHalf.w);
    return VF<Tag>(_mm512_cvtph_ps(_mm512_castsi512_si256(v)));
#endif
  } else {
    std::uint16_t h0, h1;
    std::memcpy(&h0, p + Off, 2);
    std::memcpy(&h1, p + Off + Stride, 2);
    const __m128i h =
        _mm_setr_epi16(static_cast<short>(h0), static_cast<short>(h0), static_cast<short>(h0),
                       static_cast<short>(h0), static_cast<short>(h1), static_cast<short>(h1),
                       static_cast<short>(h1), static_cast<short>(h1));
    return VF<Tag>(_mm256_cvtph_ps(h));
  }
}

#if defined(NIBBLE_K_AVX512)
/// h with the words selected by m replaced by the words of [p, p + End) that idx picks (bytes
/// from p + Avail on are not read).
template <int End, int Avail>
inline __m512i merge_words512(__m512i h, __mmask32 m, const __m512i& idx, const std::uint8_t* p) {
  if constexpr (End <= 64) {
    return _mm512_mask_permutexvar_epi16(h, m, idx, load_part512<End, Avail>(p));
  } else {
    static_assert(End <= 128, "two registers at most");
    const __m512i t = _mm512_permutex2var_epi16(load_part512<64, Avail>(p), idx,
                                                load_part512<End - 64, Avail - 64>(p + 64));
    return _mm512_mask_mov_epi16(h, m, t);
  }
}
#endif

/// Row-interleaved block fields: for R <= 4 rows (row r at p + r * wrb), int32 lane 4k + r =
/// the zero-extended little-endian Bytes-byte field (1, 2 or 4) of block k of row r, at
/// p + r * wrb + Off + k * Stride (k < Tag::bytes / 16); lanes of rows >= R are 0. Reads within
/// [row, row + Avail) of each row.
template <class Tag, int Stride, int Off, int Bytes, int Avail, int R>
inline VU32<Tag> rows_fields(const std::uint8_t* p, std::size_t wrb) {
  static_assert(R >= 1 && R <= 4, "one row per int32 lane of a 16-byte lane");
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    static_assert(Bytes == 1 || (Off % 2 == 0 && Stride % 2 == 0), "word-aligned fields");
    struct Idx {
      alignas(64) std::uint16_t w[32];
      alignas(64) std::uint32_t shift[16];
      constexpr Idx() : w{}, shift{} {
        for (int j = 0; j < 16; ++j) {
          const int pos = Off + (j / 4) * Stride;
          w[2 * j] = static_cast<std::uint16_t>(pos / 2);
          w[2 * j + 1] = static_cast<std::uint16_t>(Bytes == 4 ? pos / 2 + 1 : 32);
          shift[j] = static_cast<std::uint32_t>(8 * (pos % 2));
        }
      }
    };
    static constexpr Idx kI{};
    constexpr int kEnd = Off + 3 * Stride + Bytes;
    const __m512i wi = _mm512_load_si512(kI.w);
    __m512i h = _mm512_setzero_si512();
    for (int r = 0; r < R; ++r) {
      // word 2j, 2j + 1 of lane j = 4k + r (mask: the two words of those lanes)
      const __mmask32 m = static_cast<__mmask32>(0x03030303u << (2 * r));
      h = merge_words512<kEnd, Avail>(h, m, wi, p + r * wrb);
    }
    if constexpr (Bytes == 1) {
      h = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_load_si512(kI.shift)),
                           _mm512_set1_epi32(0xFF));
    } else if constexpr (Bytes == 2) {
      h = _mm512_and_si512(h, _mm512_set1_epi32(0xFFFF));
    }
    return VU32<Tag>(h);
#endif
  } else {
    // Packed in general-purpose registers (measured faster than a dword gather here).
    std::uint64_t q[4] = {0, 0, 0, 0};  // q[2k + r / 2]: lanes 4k + r, 4k + r + 1
    for (int k = 0; k < 2; ++k)
      for (int r = 0; r < R; ++r) {
        std::uint32_t v = 0;
        std::memcpy(&v, p + r * wrb + Off + k * Stride, Bytes);
        q[2 * k + r / 2] |= static_cast<std::uint64_t>(v) << (32 * (r % 2));
      }
    return VU32<Tag>(_mm256_setr_epi64x(static_cast<long long>(q[0]), static_cast<long long>(q[1]),
                                        static_cast<long long>(q[2]),
                                        static_cast<long long>(q[3])));
  }
}

/// Row-interleaved fp16 fields converted exactly to fp32: float lane 4k + r = the binary16 value
/// at p + r * wrb + Off + k * Stride (R <= 4 rows; lanes of rows >= R are 0).
template <class Tag, int Stride, int Off, int Avail, int R>
inline VF<Tag> rows_f16(const std::uint8_t* p, std::size_t wrb) {
  static_assert(R >= 1 && R <= 4, "one row per int32 lane of a 16-byte lane");
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    static_assert(Off % 2 == 0 && Stride % 2 == 0, "word-aligned fields");
    struct Idx {
      alignas(64) std::uint16_t w[32];  // half j (j < 16): block j / 4
      constexpr Idx() : w{} {
        for (int j = 0; j < 32; ++j)
          w[j] = static_cast<std::uint16_t>((Off + ((j % 16) / 4) * Stride) / 2);
      }
    };
    static constexpr Idx kI{};
    constexpr int kEnd = Off + 3 * Stride + 2;
    const __m512i wi = _mm512_load_si512(kI.w);
    __m512i h = _mm512_setzero_si512();
    for (int r = 0; r < R; ++r) {
      const __mmask32 m = static_cast<__mmask32>(0x1111u << r);
      h = merge_words512<kEnd, Avail>(h, m, wi, p + r * wrb);
    }
    return VF<Tag>(_mm512_cvtph_ps(_mm512_castsi512_si256(h)));
#endif
  } else {
    std::uint64_t q[2] = {0, 0};  // q[k]: the 4 rows' halves of block k
    for (int k = 0; k < 2; ++k)
      for (int r = 0; r < R; ++r) {
        std::uint16_t h;
        std::memcpy(&h, p + r * wrb + Off + k * Stride, 2);
        q[k] |= static_cast<std::uint64_t>(h) << (16 * r);
      }
    const __m128i v = _mm_set_epi64x(static_cast<long long>(q[1]), static_cast<long long>(q[0]));
    return VF<Tag>(_mm256_cvtph_ps(v));
  }
}

/// The two 64-bit halves of every 16-byte lane swapped (int32 lanes 2, 3, 0, 1 of each).
template <class Tag>
inline VI32<Tag> swap_halves64(const VI32<Tag>& v) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    return VI32<Tag>(_mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x4E)));
#endif
  } else {
    return VI32<Tag>(_mm256_shuffle_epi32(v, 0x4E));
  }
}

/// Lane i of the result = b's if bit (i % 4) of Mask4 is set, else a's (int32 lanes; the same
/// 4-bit pattern in every 16-byte lane).
template <class Tag, int Mask4>
inline VI32<Tag> blend4_i32(const VI32<Tag>& a, const VI32<Tag>& b) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    constexpr __mmask16 m = static_cast<__mmask16>(Mask4 * 0x1111);
    return VI32<Tag>(_mm512_mask_blend_epi32(m, a, b));
#endif
  } else {
    return VI32<Tag>(_mm256_blend_epi32(a, b, Mask4 * 0x11));
  }
}

/// Q5-style fifth bits: per 16-byte lane k and byte j < 16, lo |= v where bit j of the
/// little-endian dword at p + Off + k * Stride is set, hi |= v where bit 16 + j is set (v's bits
/// must be clear in lo and hi). AVX-512: the four dwords gathered into their lanes by one word
/// permute (lane_fields), spread to bytes by an in-lane byte shuffle, a bit test (vptestmb) and
/// one masked add each (building the two 64-bit masks in general-purpose registers instead ran
/// the Q5_0 / Q5_1 GEMV 10-30 % slower on Zen 5); AVX2: the same shuffle and a compare.
template <class Tag, int Stride, int Off>
inline void or_bits16(VU8<Tag>& lo, VU8<Tag>& hi, const std::uint8_t* p, const VU8<Tag>& v) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    // Byte j of lane k: byte j / 8 (lo) or 2 + j / 8 (hi) of the lane's dword, tested against
    // 1 << (j % 8).
    struct Idx {
      alignas(64) std::uint8_t lo[64], hi[64], bit[64];
      constexpr Idx() : lo{}, hi{}, bit{} {
        for (int b = 0; b < 64; ++b) {
          lo[b] = static_cast<std::uint8_t>((b % 16) / 8);
          hi[b] = static_cast<std::uint8_t>(2 + (b % 16) / 8);
          bit[b] = static_cast<std::uint8_t>(1u << (b % 8));
        }
      }
    };
    static constexpr Idx kI{};
    const __m512i q = lane_fields<Tag, Stride, Off, 4>(p);
    const __m512i bit = _mm512_load_si512(kI.bit);
    const __mmask64 ml =
        _mm512_test_epi8_mask(_mm512_shuffle_epi8(q, _mm512_load_si512(kI.lo)), bit);
    const __mmask64 mh =
        _mm512_test_epi8_mask(_mm512_shuffle_epi8(q, _mm512_load_si512(kI.hi)), bit);
    lo = VU8<Tag>(_mm512_mask_add_epi8(lo, ml, lo, v));
    hi = VU8<Tag>(_mm512_mask_add_epi8(hi, mh, hi, v));
#endif
  } else {
    std::uint32_t q0, q1;
    std::memcpy(&q0, p + Off, 4);
    std::memcpy(&q1, p + Off + Stride, 4);
    const __m256i q =
        _mm256_setr_epi32(static_cast<int>(q0), 0, 0, 0, static_cast<int>(q1), 0, 0, 0);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i il = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0,
                                        0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m256i ih = _mm256_add_epi8(il, _mm256_set1_epi8(2));
    const __m256i bl = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(q, il), bit), bit);
    const __m256i bh = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(q, ih), bit), bit);
    lo = VU8<Tag>(_mm256_or_si256(lo, _mm256_and_si256(bl, v)));
    hi = VU8<Tag>(_mm256_or_si256(hi, _mm256_and_si256(bh, v)));
  }
}

/// Logical right shift of each 32-bit lane by the count in the same lane of n (counts < 32).
template <class Tag>
inline VU32<Tag> shr_var_u32(const VU32<Tag>& v, const VU32<Tag>& n) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    return VU32<Tag>(_mm512_srlv_epi32(v, n));
#endif
  } else {
    return VU32<Tag>(_mm256_srlv_epi32(v, n));
  }
}

/// acc + per int32 lane: scale * (sum of the 4 products u * s of the lane), u <= 63 unsigned, s
/// signed, the scale (unsigned <= 127) from a lookup16 pattern with kPairs layout: bytes
/// (scale, 0, scale, 0) per int32 lane. x86: maddubs int16 pair sums, then pmaddwd + add (one
/// vpdpwssd with VNNI). Exact for 2 * 63 * 128 * 127 < 2^31.
template <class Tag>
struct PairScaledDot {
  static constexpr bool kPairs = true;
  static VI32<Tag> acc(const VI32<Tag>& acc, const VU8<Tag>& u, const VI8<Tag>& s,
                       const VI8<Tag>& pat) {
    return madd_acc_i16<Tag>(acc, madd_u8s8<Tag>(u, s), as<std::int16_t>(pat));
  }
};

/// s8 x s8 products summed in adjacent pairs to int16: |w| times a with w's sign (maddubs);
/// exact for |w|, |a| <= 127 (2 * 127 * 128 < 2^15).
template <class Tag>
inline VI16<Tag> madd_s8s8(const VI8<Tag>& w, const VI8<Tag>& a) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
    return VI16<Tag>(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sa));
#endif
  } else {
    return VI16<Tag>(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)));
  }
}

/// Tag::bytes / 4 bfloat16 values at p as fp32 (exact: the bits shifted into the upper half).
template <class Tag>
inline VF<Tag> load_bf16(const void* p) {
  if constexpr (Tag::bytes == 64) {
#if defined(NIBBLE_K_AVX512)
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    return VF<Tag>(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
#endif
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return VF<Tag>(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
}

// ======================================== helpers of the AVX-512 K-quant prefill engine
// (kernels/detail/kquant-inl.hpp, kernels/q6_k-inl.hpp)

/// The header of a Q4_K / Q5_K block at p (d, dmin: binary16; 12 bytes of packed 6-bit scales
/// and mins, ggml's get_scale_min_k4 layout) decoded for 64-byte tags: int32 lanes 2j and 2j + 1
/// of sc = sc[j], of m = m[j] (j < 8); d and dmin as floats (exact). Reads 20 bytes.
template <class Tag>
inline void kq_header_pairs(const void* p, VI32<Tag>& sc, VI32<Tag>& m, float& d, float& dmin) {
  static_assert(Tag::bytes == 64, "64-byte tags only");
#if defined(__AVX512F__)
  const std::uint8_t* b = static_cast<const std::uint8_t*>(p);
  // dwords of u: scale bytes 0-3, 4-7, 8-11 (and 4 bytes past them, unused)
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  const __m128i x = _mm_srlv_epi32(_mm_shuffle_epi32(u, 0x98), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i y = _mm_srli_epi32(_mm_shuffle_epi32(u, 0x50), 2);
  // bytes: sc[0..3] = u0 & 3F, sc[4..7] = (u2 & 0F) | ((u0 >> 2) & 30), m[0..3] = u1 & 3F,
  // m[4..7] = ((u2 >> 4) & 0F) | ((u1 >> 2) & 30)
  const __m128i sm =
      _mm_or_si128(_mm_and_si128(x, _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F)),
                   _mm_and_si128(y, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
  sc = VI32<Tag>(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sm, sm)));
  m = VI32<Tag>(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(sm, sm)));
  std::int32_t dd;
  std::memcpy(&dd, b, 4);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(dd));
  d = _mm_cvtss_f32(f);
  dmin = _mm_cvtss_f32(_mm_movehdup_ps(f));
#endif
}

/// Stores float lanes 0 .. n-1 of v at p (0 < n <= lanes; nothing is written past p + n). Only for
/// tags with masked stores (64-byte, or HasEvex).
template <class Tag>
inline void store_first(float* p, const VF<Tag>& v, int n) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
#endif
  } else {
#if defined(__AVX512F__) && defined(__AVX512VL__)
    _mm256_mask_storeu_ps(p, static_cast<__mmask8>((1u << n) - 1u), v);
#endif
  }
}

/// Per 16-byte lane: lo = (the low 8 bytes of a, the low 8 bytes of b), hi = (the high 8 bytes of
/// a, the high 8 bytes of b) (punpcklqdq / punpckhqdq).
template <class Tag>
inline void zip64_lanes(const VU8<Tag>& a, const VU8<Tag>& b, VU8<Tag>& lo, VU8<Tag>& hi) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    lo = VU8<Tag>(_mm512_unpacklo_epi64(a, b));
    hi = VU8<Tag>(_mm512_unpackhi_epi64(a, b));
#endif
  } else {
    lo = VU8<Tag>(_mm256_unpacklo_epi64(a, b));
    hi = VU8<Tag>(_mm256_unpackhi_epi64(a, b));
  }
}

/// Per 16-byte lane: lo = bytes 0..7 of a and b interleaved (a0 b0 a1 b1 ...), hi = bytes 8..15
/// (punpcklbw / punpckhbw); with b = the sign bytes of a, the int16 sign extensions of a.
template <class Tag>
inline void zip8_lanes(const VI8<Tag>& a, const VI8<Tag>& b, VI16<Tag>& lo, VI16<Tag>& hi) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    lo = VI16<Tag>(_mm512_unpacklo_epi8(a, b));
    hi = VI16<Tag>(_mm512_unpackhi_epi8(a, b));
#endif
  } else {
    lo = VI16<Tag>(_mm256_unpacklo_epi8(a, b));
    hi = VI16<Tag>(_mm256_unpackhi_epi8(a, b));
  }
}

/// 4 x 4 transpose of int32 within every 16-byte lane: afterwards r[k] dword i of a lane = the old
/// r[i] dword k of that lane.
template <class Tag>
inline void transpose4_lanes_i32(VI32<Tag>* r) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    r[0] = VI32<Tag>(_mm512_unpacklo_epi64(t0, t2));
    r[1] = VI32<Tag>(_mm512_unpackhi_epi64(t0, t2));
    r[2] = VI32<Tag>(_mm512_unpacklo_epi64(t1, t3));
    r[3] = VI32<Tag>(_mm512_unpackhi_epi64(t1, t3));
#endif
  } else {
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    r[0] = VI32<Tag>(_mm256_unpacklo_epi64(t0, t2));
    r[1] = VI32<Tag>(_mm256_unpackhi_epi64(t0, t2));
    r[2] = VI32<Tag>(_mm256_unpacklo_epi64(t1, t3));
    r[3] = VI32<Tag>(_mm256_unpackhi_epi64(t1, t3));
  }
}

/// The 16-byte lanes of a and b split by parity: even = lanes 0, 2, .. of a then of b; odd = lanes
/// 1, 3, .. of a then of b.
template <class Tag>
inline void split_lanes(const VU8<Tag>& a, const VU8<Tag>& b, VU8<Tag>& even, VU8<Tag>& odd) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512F__)
    even = VU8<Tag>(_mm512_shuffle_i64x2(a, b, 0x88));
    odd = VU8<Tag>(_mm512_shuffle_i64x2(a, b, 0xDD));
#endif
  } else {
    even = VU8<Tag>(_mm256_permute2x128_si256(a, b, 0x20));
    odd = VU8<Tag>(_mm256_permute2x128_si256(a, b, 0x31));
  }
}

/// Left shift of 16-bit lanes: the lower half of the register by a, the upper half by b.
template <class Tag>
inline VU16<Tag> shl_halves(const VU16<Tag>& v, int a, int b) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    const __m512i n = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(a)),
                                         _mm256_set1_epi16(static_cast<short>(b)), 1);
    return VU16<Tag>(_mm512_sllv_epi16(v, n));
#endif
  } else {
    const __m128i l = _mm_slli_epi16(_mm256_castsi256_si128(v), a);
    const __m128i h = _mm_slli_epi16(_mm256_extracti128_si256(v, 1), b);
    return VU16<Tag>(_mm256_inserti128_si256(_mm256_castsi128_si256(l), h, 1));
  }
}

/// v + c in the bytes where (x & bits) is non-zero, v elsewhere (AVX-512: vptestmb and a masked
/// add).
template <class Tag>
inline VU8<Tag> add_where(const VU8<Tag>& v, const VU8<Tag>& x, const VU8<Tag>& bits,
                          std::uint8_t c) {
  if constexpr (Tag::bytes == 64) {
#if defined(__AVX512BW__)
    return VU8<Tag>(_mm512_mask_add_epi8(v, _mm512_test_epi8_mask(x, bits), v,
                                         _mm512_set1_epi8(static_cast<char>(c))));
#endif
  } else {
    return xsimd::select((x & bits) != VU8<Tag>(0), v + VU8<Tag>(c), v);
  }
}

// ======================================== helpers of the weight quantizers
// (kernels/quantize*-inl.hpp, templated on the xsimd arch A rather than on a tag)

/// a / b per lane, correctly rounded (IEEE division; xsimd's own on x86).
template <class A>
inline xsimd::batch<float, A> div_ieee(const xsimd::batch<float, A>& a,
                                       const xsimd::batch<float, A>& b) {
  return a / b;
}
/// Square root per lane, correctly rounded.
template <class A>
inline xsimd::batch<float, A> sqrt_ieee(const xsimd::batch<float, A>& a) {
  return xsimd::sqrt(a);
}
/// Rounds each lane to the nearest integer, ties to even (the default rounding mode).
template <class A>
inline xsimd::batch<float, A> round_even(const xsimd::batch<float, A>& a) {
  return xsimd::nearbyint(a);
}

/// 8 x 8 float transpose between memory blocks: dst[k * ld_dst + p] = src[p * ld_src + k] for p,
/// k < 8 (unaligned loads; the 8 dst rows must be 32-byte aligned). Three shuffle stages of
/// 256-bit registers.
inline void transpose8_f32(const float* src, std::size_t ld_src, float* dst, std::size_t ld_dst) {
  __m256 r[8], t[8], q[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * ld_src);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    q[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    q[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    q[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    q[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_store_ps(dst + k * ld_dst, _mm256_permute2f128_ps(q[k], q[k + 4], 0x20));
    _mm256_store_ps(dst + (k + 4) * ld_dst, _mm256_permute2f128_ps(q[k], q[k + 4], 0x31));
  }
}

}  // namespace
}  // namespace nibble::kernels
#endif  // NIBBLE_K_X86
