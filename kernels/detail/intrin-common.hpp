// nibble: helpers shared by the kernel bodies of every ISA. Everything is in an anonymous
// namespace: each per-ISA TU gets its own copy, compiled with its own flags (ODR safety; see
// arch.hpp). Kernel code must call these, not the inline functions of nibble/core or
// nibble/formats, from SIMD TUs.
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/table.hpp"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define NIBBLE_K_X86 1
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define NIBBLE_K_NEON 1
#include <arm_neon.h>
#endif

namespace nibble::kernels {
namespace {

/// Unaligned little-endian loads from a byte pointer.
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

/// binary16 -> binary32 (exact; the same values as nibble::fp16_to_fp32).
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

/// Family of an ISA tag, for `if constexpr` inside kernel templates.
enum class Family { scalar, x86, neon };
template <class Tag>
struct TagInfo {
  static constexpr Family family = Family::scalar;
  static constexpr bool wide = false;  // 512-bit float vectors
  static constexpr bool vnni = false;
  static constexpr bool dot = false;
};
#if defined(NIBBLE_K_X86)
template <>
struct TagInfo<Avx2Tag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#if defined(__AVXVNNI__)
template <>
struct TagInfo<AvxVnniTag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#endif
#endif
#if defined(NIBBLE_K_X86) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512DQ__) && defined(__AVX512VL__)
#define NIBBLE_K_AVX512 1
template <>
struct TagInfo<Avx512Tag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = true, vnni = false, dot = false;
};
#if defined(__AVX512VNNI__)
#define NIBBLE_K_AVX512VNNI 1
template <>
struct TagInfo<Avx512VnniTag> {
  static constexpr Family family = Family::x86;
  static constexpr bool wide = true, vnni = true, dot = false;
};
#endif
#endif
#if defined(NIBBLE_K_NEON)
template <>
struct TagInfo<NeonTag> {
  static constexpr Family family = Family::neon;
  static constexpr bool wide = false, vnni = false, dot = false;
};
#if defined(__ARM_FEATURE_DOTPROD)
#define NIBBLE_K_NEONDOT 1
template <>
struct TagInfo<NeonDotTag> {
  static constexpr Family family = Family::neon;
  static constexpr bool wide = false, vnni = false, dot = true;
};
#endif
#endif

/// The entry of format `f` in `t`.
inline FormatKernels& entry(KernelTable& t, Format f) {
  return t.fmt[static_cast<int>(f)];
}

}  // namespace
}  // namespace nibble::kernels

namespace nibble::kernels {
namespace {

/// Calls K::template run<rr, cc>(args...) for run-time rr in [1, R], cc in [1, C] (register
/// tiles of every size up to R x C are compiled; the tail tiles of a matrix use the smaller ones).
template <class K, int R, int C, class... Args>
inline void tile_dispatch_c(int cc, Args... a) {
  if (cc == C) {
    K::template run<R, C>(a...);
  } else if constexpr (C > 1) {
    tile_dispatch_c<K, R, C - 1>(cc, a...);
  }
}
template <class K, int R, int C, class... Args>
inline void tile_dispatch(int rr, int cc, Args... a) {
  if (rr == R) {
    tile_dispatch_c<K, R, C>(cc, a...);
  } else if constexpr (R > 1) {
    tile_dispatch<K, R - 1, C>(rr, cc, a...);
  }
}

/// Walks the output of a row-range GEMM in cache blocks and register tiles:
/// for each block of kRowBlock weight rows, for each block of kColBlock activation rows, tiles
/// of R x C (n == 1: R1 x 1). tile(r, c, rr, cc) computes Y for rows r.., activation rows c...
/// The blocking never changes which operations produce one output value.
template <int R, int C, int R1, class Tile>
inline void walk_tiles(std::int64_t r0, std::int64_t r1, std::int64_t n, Tile&& tile) {
  constexpr std::int64_t kRowBlock = 64, kColBlock = 64;
  if (n == 1) {
    for (std::int64_t r = r0; r < r1; r += R1) {
      tile(r, std::int64_t{0}, static_cast<int>(r1 - r < R1 ? r1 - r : R1), 1);
    }
    return;
  }
  for (std::int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const std::int64_t re = rb + kRowBlock < r1 ? rb + kRowBlock : r1;
    for (std::int64_t cb = 0; cb < n; cb += kColBlock) {
      const std::int64_t ce = cb + kColBlock < n ? cb + kColBlock : n;
      for (std::int64_t r = rb; r < re; r += R) {
        const int rr = static_cast<int>(re - r < R ? re - r : R);
        for (std::int64_t c = cb; c < ce; c += C) {
          tile(r, c, rr, static_cast<int>(ce - c < C ? ce - c : C));
        }
      }
    }
  }
}

}  // namespace
}  // namespace nibble::kernels
