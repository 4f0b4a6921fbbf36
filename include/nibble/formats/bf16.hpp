// nibble: bfloat16 rows (GGUF type 30): the upper 16 bits of an IEEE binary32. Conversions
// bit-identical to ggml's ggml_compute_fp32_to_bf16 / ggml_compute_bf16_to_fp32.
#pragma once

#include "nibble/core/config.hpp"
#include <cstdint>
#include <cstring>

#include "nibble/formats/kquant_common.hpp"

namespace nibble {

/// One bfloat16 value (raw bits).
struct bf16_t {
  std::uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2, "bf16 must be 2 bytes");

/// fp32 -> bf16, round to nearest even; NaN keeps its top bits and is forced quiet.
NIBBLE_INLINE bf16_t fp32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((u >> 16) | 64)};
  return {static_cast<std::uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16)};
}

/// bf16 -> fp32 (exact).
NIBBLE_INLINE float bf16_to_fp32(bf16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace ref {

/// Row of `n` fp32 values to bf16 (ggml_fp32_to_bf16_row_ref).
NIBBLE_INLINE void quantize_bf16(const float* x, bf16_t* y, std::int64_t n) {
  detail::check_row("quantize_bf16", n, 1);
  for (std::int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

/// Row of `n` bf16 values to fp32.
NIBBLE_INLINE void dequantize_bf16(const bf16_t* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_bf16", n, 1);
  for (std::int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

}  // namespace ref
}  // namespace nibble
