// nibble: GGUF Q8_0 (32 values, 34 bytes): fp16 scale + 32 int8 quants, with its scalar
// reference codec (bit-identical to ggml's quantize_row_q8_0_ref / dequantize_row_q8_0), the
// CPU-backend activation quantizer and the Q8_0 x Q8_0 dot product.
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"

namespace nibble {

/// Q8_0 block: value j = qs[j] * fp16_to_fp32(d).
struct BlockQ8_0 {
  fp16_t d;
  std::int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

namespace ref {

/// Reference Q8_0 quantizer (ggml quantize_row_q8_0_ref): per 32 values, d = amax/127,
/// id = 1/d (0 if d == 0), qs = roundf(x*id) (ties away from zero), stored d = fp16(d).
/// `n` must be a multiple of 32 (throws nibble::Error otherwise).
NIBBLE_INLINE void quantize_q8_0(const float* x, BlockQ8_0* y, std::int64_t n) {
  detail::check_row("quantize_q8_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = detail::abs_max32(x);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j)
      y[b].qs[j] = static_cast<std::int8_t>(cvt_trunc_i32(std::round(x[j] * id)));
  }
}

/// Q8_0 activation quantizer of ggml's CPU backend (quantize_row_q8_0, x86 AVX path), the one
/// that produced the golden NAME.q8_0_q8_0.act.blocks: d = amax/127, id = 127/amax (0 if
/// amax == 0), qs = round-half-even(x*id) saturated to int8. Differs from quantize_q8_0 only
/// when x*id lands on an exact .5 or the two inverse scales round differently.
NIBBLE_INLINE void quantize_q8_0_act(const float* x, BlockQ8_0* y, std::int64_t n) {
  detail::check_row("quantize_q8_0_act", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = detail::abs_max32(x);
    y[b].d = fp32_to_fp16(amax / 127.f);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float r = std::nearbyint(x[j] * id);
      // cvtps2dq gives INT_MIN for NaN / out of range; packs then saturates to [-128, 127].
      int v = cvt_trunc_i32(r);
      v = v < -128 ? -128 : (v > 127 ? 127 : v);
      y[b].qs[j] = static_cast<std::int8_t>(v);
    }
  }
}

/// Reference Q8_0 dequantizer: y = qs * float(d), one float multiply per value.
NIBBLE_INLINE void dequantize_q8_0(const BlockQ8_0* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q8_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 32; ++j) *y++ = static_cast<float>(x[b].qs[j]) * d;
  }
}

/// Q8_0 x Q8_0 dot product over `n` values (multiple of 32), reproducing the float order of
/// ggml's AVX2/AVX-512 vec_dot_q8_0_q8_0: 8 float lanes, lane k of block b accumulates
/// fma(float(w.d)*float(a.d), sum of qs products 4k..4k+3, acc[k]); then ggml's 8-lane
/// horizontal sum. Bit-identical to the golden dots.
NIBBLE_INLINE float dot_q8_0_q8_0(std::int64_t n, const BlockQ8_0* w, const BlockQ8_0* a) {
  detail::check_row("dot_q8_0_q8_0", n, 32);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float d = fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d);
    for (int k = 0; k < 8; ++k) {
      int s = 0;
      for (int t = 4 * k; t < 4 * k + 4; ++t) s += int(w[b].qs[t]) * int(a[b].qs[t]);
      acc[k] = std::fma(d, static_cast<float>(s), acc[k]);
    }
  }
  return detail::hsum8_ggml(acc);
}

}  // namespace ref
}  // namespace nibble
