// nibble: GGUF Q5_0 (32 values, 22 bytes): fp16 scale d, 32 high bits qh, 32 low nibbles,
// value = (q - 16) * d. Scalar reference codec bit-identical to ggml's quantize_row_q5_0_ref,
// quantize_q5_0 with quant_weights (quantize_row_q5_0_impl) and dequantize_row_q5_0.
#pragma once

#include "nibble/core/config.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/legacy_common.hpp"

namespace nibble {

/// Q5_0 block: bit j of the little-endian uint32 qh is bit 4 of value j; qs[j] holds the low
/// 4 bits of value j (low nibble) and of value j + 16 (high nibble).
struct BlockQ5_0 {
  fp16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");

namespace ref {
namespace legacy {
/// Packs 32 five-bit levels L into qs / qh (shared by Q5_0 and Q5_1).
NIBBLE_INLINE void pack_q5(const std::uint8_t* L, std::uint8_t qs[16], std::uint8_t qh[4]) {
  std::uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<std::uint8_t>((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
    h |= ((L[j] & 0x10u) >> 4) << j;
    h |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<std::uint8_t>(h >> (8 * k));
}
/// The little-endian uint32 of a block's qh bytes.
NIBBLE_INLINE std::uint32_t load_qh(const std::uint8_t qh[4]) {
  return static_cast<std::uint32_t>(qh[0]) | (static_cast<std::uint32_t>(qh[1]) << 8) |
         (static_cast<std::uint32_t>(qh[2]) << 16) | (static_cast<std::uint32_t>(qh[3]) << 24);
}
/// The 5-bit level of value j (0..31) of a block with low nibbles qs and high bits h.
NIBBLE_INLINE int q5_level(const std::uint8_t qs[16], std::uint32_t h, int j) {
  const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((h >> j) & 1u) << 4);
}
}  // namespace legacy

/// Reference Q5_0 quantizer (ggml quantize_row_q5_0_ref): per block, m = the value of largest
/// magnitude (first on ties), d = m / -16, id = 1/d (0 if d == 0), q = min(31, (int8)(x*id +
/// 16.5)) (truncation), stored d = fp16(d). `n` must be a multiple of 32.
NIBBLE_INLINE void quantize_q5_0(const float* x, BlockQ5_0* y, std::int64_t n) {
  detail::check_row("quantize_q5_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float d = vmax / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    std::uint8_t L[32];
    for (int j = 0; j < 32; ++j)
      L[j] = static_cast<std::uint8_t>(std::min(31, legacy::trunc_i8(x[j] * id + 16.5f)));
    legacy::pack_q5(L, y[b].qs, y[b].qh);
  }
}

/// Importance-weighted Q5_0 quantizer of one row of `n` values (ggml quantize_q5_0(x, y, 1, n,
/// qw)): weights qw[j] * sqrt(sigma^2 + x[j]^2), then the weighted symmetric scale search with
/// levels -16..15 per block.
NIBBLE_INLINE void quantize_q5_0_imatrix(const float* x, BlockQ5_0* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q5_0_imatrix", n, 32);
  legacy::check_weights("quantize_q5_0_imatrix", qw, n);
  if (n == 0) return;
  const float sigma2 = legacy::row_sigma2(x, n);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float w[32];
    std::uint8_t L[32];
    legacy::block_weights(x + 32 * b, qw + 32 * b, sigma2, w);
    const float d = legacy::search_symmetric_scale(32, 16, x + 32 * b, L, w);
    y[b].d = fp32_to_fp16(d);
    legacy::pack_q5(L, y[b].qs, y[b].qh);
  }
}

/// Reference Q5_0 dequantizer: y = float(q - 16) * float(d).
NIBBLE_INLINE void dequantize_q5_0(const BlockQ5_0* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q5_0", n, 32);
  for (std::int64_t b = 0; b < n / 32; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    const std::uint32_t h = legacy::load_qh(x[b].qh);
    for (int j = 0; j < 32; ++j)
      y[j] = static_cast<float>(legacy::q5_level(x[b].qs, h, j) - 16) * d;
  }
}

}  // namespace ref
}  // namespace nibble
