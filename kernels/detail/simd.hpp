// nibble: the vector vocabulary of the kernel bodies. A kernel body is written once, as a
// template on an ISA tag (kernels/arch.hpp), over xsimd 8.1 `batch` types of the tag's arch for
// everything xsimd expresses (loads, stores, integer and float arithmetic, FMA, bitwise ops,
// shifts, conversions, reductions). The few operations xsimd 8.1 lacks (int8 dot products,
// in-lane byte table lookups, fp16 loads, saturating narrowing, half-register loads) are the
// named helpers of kernels/detail/intrin-x86.hpp and intrin-neon.hpp, one per operation, each
// with one implementation per ISA; no kernel body calls an intrinsic.
//
// Vector widths: NEON 16 bytes, AVX2 / AVX-VNNI 32, AVX-512 64. Bodies that need a layout per
// width derive it from Tag::bytes (for example the order in which activations are prepared to
// match the weight bytes of one register).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

#if defined(__x86_64__) || defined(__aarch64__)
template <class Tag>
using VF = xsimd::batch<float, typename Tag::xarch>;
template <class Tag>
using VI32 = xsimd::batch<std::int32_t, typename Tag::xarch>;
template <class Tag>
using VU32 = xsimd::batch<std::uint32_t, typename Tag::xarch>;
template <class Tag>
using VI16 = xsimd::batch<std::int16_t, typename Tag::xarch>;
template <class Tag>
using VU16 = xsimd::batch<std::uint16_t, typename Tag::xarch>;
template <class Tag>
using VI8 = xsimd::batch<std::int8_t, typename Tag::xarch>;
template <class Tag>
using VU8 = xsimd::batch<std::uint8_t, typename Tag::xarch>;
template <class Tag>
using VU64 = xsimd::batch<std::uint64_t, typename Tag::xarch>;

/// Reinterprets the bits of a batch as another element type of the same arch.
template <class To, class T, class A>
inline xsimd::batch<To, A> as(const xsimd::batch<T, A>& v) {
  return xsimd::bitwise_cast<xsimd::batch<To, A>>(v);
}

/// Unaligned load of a full register of T from a byte pointer.
template <class T, class Tag>
inline xsimd::batch<T, typename Tag::xarch> loadu(const void* p) {
  return xsimd::batch<T, typename Tag::xarch>::load_unaligned(static_cast<const T*>(p));
}

/// The low and high nibbles of every byte (x & 15, x >> 4), as unsigned bytes.
template <class Tag>
inline void split_nibbles(const VU8<Tag>& v, VU8<Tag>& lo, VU8<Tag>& hi) {
  const VU8<Tag> m(static_cast<std::uint8_t>(0x0F));
  lo = v & m;
  hi = as<std::uint8_t>(as<std::uint16_t>(v) >> 4) & m;
}
#endif

/// Calls f(std::integral_constant<int, i>) for i = 0 .. N-1 (a loop whose index is a constant
/// expression in the body).
template <int N, class F, int... I>
inline void static_for_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void static_for(F&& f) {
  static_for_impl<N>(f, std::make_integer_sequence<int, N>{});
}

/// Always inline (GCC and Clang; nothing elsewhere): as a lambda attribute, after the parameter
/// list; in front of a function, NIBBLE_K_INLINE (intrin-common.hpp).
#if defined(__GNUC__)
#define NIBBLE_LAMBDA_INLINE __attribute__((always_inline))
#else
#define NIBBLE_LAMBDA_INLINE
#endif

/// static_for, itself always inlined: with a body marked NIBBLE_LAMBDA_INLINE the whole loop
/// lands in the caller. For a body inlined into a large caller (a GEMV driver's loop), where GCC
/// 12 otherwise kept the static_for instance or the body out of line and passed the sums through
/// memory (PackedIQ4XS::kInlineStep). Not the default: made so for every static_for, packed
/// q6_K / q2_K / q3_K / nf4 / fp4 read 1.19-2.04x slower L2-resident (Zen 5, in-process pairs),
/// their bodies split differently.
template <int N, class F, int... I>
[[gnu::always_inline]] inline void static_for_inline_impl(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
[[gnu::always_inline]] inline void static_for_inline(F&& f) {
  static_for_inline_impl<N>(f, std::make_integer_sequence<int, N>{});
}

/// Unaligned little-endian scalar loads from a byte pointer.
inline std::uint16_t ld_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float ld_f32(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

/// binary16 -> binary32 (exact; the same values as nibble::fp16_to_fp32). A private copy: kernel
/// code must not call inline functions with external linkage (see arch.hpp).
inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  std::uint32_t bits;
  if (e == 0x1F) {
    bits = sign | 0x7F800000u | (m << 13);
  } else if (e != 0) {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise the mantissa (value m * 2^-24).
    std::uint32_t mm = m;
    std::uint32_t ee = 113;  // exponent of 2^-14 biased for fp32, decremented per shift
    while ((mm & 0x400u) == 0) {
      mm <<= 1;
      --ee;
    }
    bits = sign | (ee << 23) | ((mm & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// binary32 -> binary16, round to nearest even, subnormals kept, overflow to infinity (the
/// same bits as nibble::fp32_to_fp16 for every input).
inline std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);
  if (ax >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t shift = 126u - (ax >> 23);
    const std::uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
    std::uint32_t q = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t h = (ax >> 13) - (112u << 10);
  const std::uint32_t rest = ax & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// Horizontal sum of 8 lanes in ggml's hsum_float_8 order.
inline float hsum8_ordered(const float a[8]) {
  const float r0 = a[0] + a[4], r1 = a[1] + a[5], r2 = a[2] + a[6], r3 = a[3] + a[7];
  return (r0 + r2) + (r1 + r3);
}

/// The entry of format `f` in `t`.
inline FormatKernels& entry(KernelTable& t, Format f) {
  return t.fmt[static_cast<int>(f)];
}

/// Prefetch hints (compiler builtins: they never fault, whatever the address).
inline void prefetch_l1(const void* p) {
  __builtin_prefetch(p, 0, 3);
}
inline void prefetch_l2(const void* p) {
  __builtin_prefetch(p, 0, 2);
}

/// Whether the integer GEMV bodies with several rows per group (q8_0, the 32-value legacy body,
/// Q2_K / Q3_K, IQ4_XS) prefetch the next group (gemv_groups' far) in address order
/// (prefetch_linear) or per row: in address order on 32-byte tags, per row on the others. Zen 5,
/// cold 4096 x 4096, 1 thread, 4 alternated rounds: q8_0 avx2 / avxvnni +6 / +8 %, q4_0 avx2
/// +6 %, q2_K avx2 +3 %; on AVX-512 q4_0 / mxfp4 lost 15-17 % and q2_K 5 % (q8_0 level).
/// IQ4_XS overrides it on AVX-512 (in address order, two groups ahead: see iq4-inl.hpp).
template <class Tag>
inline constexpr bool kLinearGroupPrefetch = Tag::bytes == 32;

/// Whether the tag has int8 dot instructions that sum into int32 lanes (VNNI vpdpbusd, NEON
/// sdot). Without them the integer bodies multiply with pmaddubsw / smull into int16 pairs and
/// add those up themselves.
template <class Tag>
inline constexpr bool kInt8Dots = Tag::vnni || Tag::dotprod;

/// Whether the Q4_K / Q5_K, Q6_K and IQ4_XS GEMV bodies prefetch the weights a few hundred bytes
/// ahead into L1: on 32-byte tags only. On AVX-512 the hardware prefetcher and the next group's
/// L2 prefetch feed them better alone (Zen 5, cold, 1 thread, 3 alternated rounds, GB/s: q6_K
/// 4096 x 4096 35.0 -> 38.2, 4096 x 11008 26.8 -> 30.0; q5_K 4096 x 11008 31.0 -> 35.3; iq4_xs
/// 4096 / 14336 x 4096 32.3 / 31.6 -> 34.5 / 35.0; q4_K 4096 x 11008 30.2 -> 34.3; model decode
/// step, Q4_K_M stack, 4 rounds: 29.5-30.5 -> 37.3-37.5 tokens/s on 1 thread, 57-59 -> 64-66 on
/// 2). The L1 lines evict the activation row, which for 11008 columns no longer fits beside
/// them. On AVX2 / AVX-VNNI the same change moved the rates by -4 to +6 %, and the legacy body
/// (Q4_0, Q5_0) lost 10-30 % without it on AVX-512: those keep theirs.
template <class Tag>
inline constexpr bool kKQuantL1Prefetch = Tag::bytes != 64;

/// gemv_groups' `far` when the R rows of a group are R far-apart streams (gemv_row_streams): each
/// row then prefetches its own lines kStreamAhead bytes on into L1 instead of the group ahead's
/// into L2. A body must never add it to a pointer: prefetch_far and far_group tell the cases apart.
inline constexpr std::size_t kRowStreams = ~std::size_t{0};
inline constexpr std::size_t kStreamAhead = 3072;

/// A GEMV body's per-row prefetch for the line at p (where the row is now), by gemv_groups' `far`:
/// nothing for 0; the line kStreamAhead on into L1 for kRowStreams; the group ahead's line (far
/// bytes on) into L2 otherwise.
inline void prefetch_far(const std::uint8_t* p, std::size_t far) {
  if (far == kRowStreams) {
    prefetch_l1(p + kStreamAhead);
  } else if (far) {
    prefetch_l2(p + far);
  }
}

/// Whether gemv_groups' `far` is the distance to a group ahead (neither 0 nor kRowStreams).
inline bool far_group(std::size_t far) {
  return far != 0 && far != kRowStreams;
}

/// The L2 prefetch of a group of R rows in address order: while a GEMV body is at byte `off` of
/// its rows (a step of `step` bytes), the lines of bytes [R * off, R * (off + step)) of the group
/// at g, so that the group ahead is fetched as one sequential stream rather than R streams.
inline void prefetch_linear(const std::uint8_t* g, int R, std::size_t off, std::size_t step) {
  const std::uintptr_t s = reinterpret_cast<std::uintptr_t>(g + R * off) & ~std::uintptr_t{63};
  const std::uintptr_t e = reinterpret_cast<std::uintptr_t>(g + R * (off + step) - 1);
  for (std::uintptr_t a = s; a <= e; a += 64) prefetch_l2(reinterpret_cast<const void*>(a));
}

}  // namespace
}  // namespace nibble::kernels
