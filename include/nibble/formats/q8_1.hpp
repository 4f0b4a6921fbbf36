// nibble: GGUF Q8_1 (32 values, 36 bytes): fp16 scale d, fp16 s = d * sum(qs), 32 int8 quants;
// ggml's activation format for Q4_1/Q5_1 dot products. Scalar reference codec bit-identical to
// ggml's quantize_row_q8_1_ref; the dequantizer is qs * d (ggml has none: s is derived data).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// Q8_1 block: value j = qs[j] * fp16_to_fp32(d); s = fp16(d * sum of qs).
struct BlockQ8_1 {
  fp16_t d;
  fp16_t s;
  std::int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block must be 36 bytes");

namespace ref {

/// Reference Q8_1 quantizer (ggml quantize_row_q8_1_ref): d = amax/127, id = 1/d (0 if
/// d == 0), qs = (int8)roundf(x*id) (ties away from zero), stored d = fp16(d) and
/// s = fp16(float(sum qs) * d). `n` must be a multiple of 32.
NIBBLE_INLINE void quantize_q8_1(const float* x, BlockQ8_1* y, std::int64_t n) {
  detail::check_row("quantize_q8_1", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = detail::abs_max32(x);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[b].qs[j] = static_cast<std::int8_t>(legacy::trunc_i8(std::round(x[j] * id)));
      sum += y[b].qs[j];
    }
    y[b].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

/// Q8_1 activation quantizer of ggml's CPU backend (quantize_row_q8_1, x86 AVX2 path; the
/// rounding of the NEON path too), what ggml feeds its q4_1 / q5_1 dot products: as
/// quantize_q8_0_act (d = amax/127, id = 127/amax or 0, qs = round-half-even(x*id) saturated to
/// int8), with s = fp16(d * float(sum qs)) from the unrounded d. Differs from quantize_q8_1 only
/// when x*id lands on an exact .5 or the two inverse scales round differently.
NIBBLE_INLINE void quantize_q8_1_act(const float* x, BlockQ8_1* y, std::int64_t n) {
  detail::check_row("quantize_q8_1_act", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = detail::abs_max32(x);
    const float d = amax / 127.f;
    y[b].d = fp32_to_fp16(d);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      int v = cvt_trunc_i32(std::nearbyint(x[j] * id));
      v = v < -128 ? -128 : (v > 127 ? 127 : v);
      y[b].qs[j] = static_cast<std::int8_t>(v);
      sum += v;
    }
    y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

/// Q8_1 dequantizer: y = float(qs) * float(d) (s is not used).
NIBBLE_INLINE void dequantize_q8_1(const BlockQ8_1* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q8_1", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 32; ++j) *y++ = static_cast<float>(x[b].qs[j]) * d;
  }
}

}  // namespace ref
}  // namespace nibble
