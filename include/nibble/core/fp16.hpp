// nibble: IEEE binary16 <-> binary32 conversion, bit-identical to ggml's reference conversion
// (round to nearest even, subnormals kept, overflow to infinity, NaN -> quiet NaN 0x7E00 with
// the sign kept).
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/core/config.hpp"

namespace nibble {

/// Raw IEEE binary16 bit pattern, as stored in GGUF blocks.
using fp16_t = std::uint16_t;

namespace detail {
NIBBLE_INLINE std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
NIBBLE_INLINE float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

/// float -> binary16, round to nearest even. Overflow gives +-inf, NaN gives (sign | 0x7E00).
NIBBLE_INLINE fp16_t fp32_to_fp16(float f) {
  const std::uint32_t x = detail::f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<fp16_t>(sign | 0x7E00u);   // NaN
  if (ax >= 0x477FF000u) return static_cast<fp16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (ax < 0x38800000u) {
    // Result is subnormal (or zero) in binary16: value = m * 2^-24, m = round(|f| * 2^24).
    if (ax < 0x33000000u) return static_cast<fp16_t>(sign);  // < 2^-25: rounds to 0
    const std::uint32_t e = ax >> 23;                        // 102..112
    const std::uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // |f| * 2^24 = mant * 2^(e - 150 + 24)
    std::uint32_t m = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (m & 1u))) ++m;
    return static_cast<fp16_t>(sign | m);
  }
  // Normal: rebias exponent (127 -> 15), round the 23-bit mantissa to 10 bits.
  std::uint32_t h = ((ax >> 13) - ((127u - 15u) << 10));
  const std::uint32_t rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may roll into the exponent
  return static_cast<fp16_t>(sign | h);
}

/// binary16 -> float (exact).
NIBBLE_INLINE float fp16_to_fp32(fp16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  std::uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return detail::f32_from_bits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return detail::f32_from_bits(sign);
    // subnormal: m * 2^-24
    float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return detail::f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace nibble
