// nibble: ggml Q8_K (256 values, 292 bytes), the activation format of the K-quant dot products,
// with its scalar reference codec (bit-identical to ggml's quantize_row_q8_K_ref, which is also
// what ggml's x86 CPU backend uses for activations, and dequantize_row_q8_K).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/formats/kquant_common.hpp"

namespace nibble {

/// Q8_K block: value i = d * qs[i]; bsums[k] = sum of qs[16k .. 16k+15].
struct BlockQ8_K {
  float d;
  std::int8_t qs[256];
  std::int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block must be 292 bytes");

namespace ref {

/// Reference Q8_K quantizer: per 256 values, take the value `max` of largest magnitude (first
/// one on ties); an all-zero block gets d = 0, qs = 0, bsums = 0. Otherwise iscale = -127/max,
/// qs = min(127, round-half-even(iscale*x)), d = 1/iscale (so d has the sign opposite to max,
/// which is stored as -127), bsums = sums of 16 quants. `n`: multiple of 256.
NIBBLE_INLINE void quantize_q8_K(const float* x, BlockQ8_K* y, std::int64_t n) {
  detail::check_row("quantize_q8_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b, x += 256) {
    float mx = 0;
    float amax = 0;
    for (int j = 0; j < 256; ++j) {
      const float a = std::fabs(x[j]);
      if (a > amax) {
        amax = a;
        mx = x[j];
      }
    }
    BlockQ8_K& o = y[b];
    if (!amax) {
      o.d = 0;
      for (int j = 0; j < 256; ++j) o.qs[j] = 0;
      for (int k = 0; k < 16; ++k) o.bsums[k] = 0;
      continue;
    }
    const float iscale = -127.f / mx;
    for (int j = 0; j < 256; ++j) {
      const int v = nearest_int(iscale * x[j]);
      o.qs[j] = static_cast<std::int8_t>(v < 127 ? v : 127);
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int t = 0; t < 16; ++t) s += o.qs[16 * k + t];
      o.bsums[k] = static_cast<std::int16_t>(s);
    }
    o.d = 1 / iscale;
  }
}

/// Reference Q8_K dequantizer: y = d * qs.
NIBBLE_INLINE void dequantize_q8_K(const BlockQ8_K* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q8_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b)
    for (int j = 0; j < 256; ++j) *y++ = x[b].d * static_cast<float>(x[b].qs[j]);
}

}  // namespace ref
}  // namespace nibble
