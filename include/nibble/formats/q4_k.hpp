// nibble: GGUF Q4_K (256 values, 144 bytes) with its scalar reference codec, bit-identical to
// ggml's quantize_row_q4_K_ref, quantize_q4_K with quant_weights and dequantize_row_q4_K, the
// Q4_K x Q8_K dot product, and the building blocks for rounding onto a chosen Q4_K grid (GPTQ).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"
#include "nibble/formats/q8_k.hpp"

namespace nibble {

/// Q4_K block: 8 sub-blocks of 32 values, 6-bit scales and mins (packed in scales[12]),
/// fp16 super-scales d and dmin, 4-bit quants (see docs/formats.md).
struct BlockQ4_K {
  fp16_t d;
  fp16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");

namespace ref {

/// Level q (0..15) of value i (0..255) of a Q4_K block.
NIBBLE_INLINE int q4_K_get_q(const BlockQ4_K& blk, int i) {
  const std::uint8_t byte = blk.qs[32 * (i / 64) + (i % 32)];
  return (i % 64) < 32 ? (byte & 0x0F) : (byte >> 4);
}

/// Sets the level of value i (0..255) of a Q4_K block to q (0..15; only the low 4 bits kept).
NIBBLE_INLINE void q4_K_set_q(BlockQ4_K& blk, int i, int q) {
  std::uint8_t& byte = blk.qs[32 * (i / 64) + (i % 32)];
  if ((i % 64) < 32)
    byte = static_cast<std::uint8_t>((byte & 0xF0) | (q & 0x0F));
  else
    byte = static_cast<std::uint8_t>((byte & 0x0F) | ((q & 0x0F) << 4));
}

/// Effective float grid of sub-block `sub` (0..7): value = (*scale) * q - (*min), with
/// *scale = float(d) * sc[sub] and *min = float(dmin) * m[sub] (the products the reference
/// dequantizer and quantizer use).
NIBBLE_INLINE void q4_K_grid(const BlockQ4_K& blk, int sub, float* scale, float* min) {
  std::uint8_t sc, m;
  get_scale_min_k4(sub, blk.scales, &sc, &m);
  *scale = fp16_to_fp32(blk.d) * static_cast<float>(sc);
  *min = fp16_to_fp32(blk.dmin) * static_cast<float>(m);
}

/// Chooses d, dmin and the 6-bit scales/mins of one Q4_K super-block for the 256 values x256
/// and fills qs with the plain rounding of x256 on that grid. `weights256_or_null` null: the
/// reference algorithm (quantize_row_q4_K_ref); non-null: ggml's importance-weighted algorithm
/// with these 256 importance values (what quantize_q4_K does with quant_weights). The result
/// is byte-identical to the corresponding whole-row quantizer's block. For GPTQ-style use:
/// choose the grid once on the (updated) weights, then re-round individual values with
/// q4_K_grid + kquant_round(x, scale, min, 15) + q4_K_set_q.
NIBBLE_INLINE void q4_K_choose_scales(const float* x256, const float* weights256_or_null,
                                      BlockQ4_K* blk) {
  KQuantHeader hdr;
  std::uint8_t L[256];
  kquant_choose_block(x256, weights256_or_null, 15, &hdr, L);
  blk->d = hdr.d;
  blk->dmin = hdr.dmin;
  for (int k = 0; k < 12; ++k) blk->scales[k] = hdr.scales[k];
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l)
      blk->qs[32 * g + l] = static_cast<std::uint8_t>(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
}

/// Reference Q4_K quantizer (ggml quantize_row_q4_K_ref, also quantize_q4_K without
/// importance). `n`: multiple of 256 (throws nibble::Error otherwise).
NIBBLE_INLINE void quantize_q4_K(const float* x, BlockQ4_K* y, std::int64_t n) {
  detail::check_row("quantize_q4_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) q4_K_choose_scales(x + 256 * b, nullptr, y + b);
}

/// Importance-weighted Q4_K quantizer of one row of `n` values: ggml quantize_q4_K(x, y, 1, n,
/// qw) (quantize_row_q4_K_impl). `qw` holds n importance values, one per column.
NIBBLE_INLINE void quantize_q4_K_imatrix(const float* x, BlockQ4_K* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q4_K_imatrix", n, 256);
  if (!qw && n > 0)
    nibble::detail::fail("quantize_q4_K_imatrix: qw is null, expected n = ", n,
                         " importance values");
  for (std::int64_t b = 0; b < n / 256; ++b) q4_K_choose_scales(x + 256 * b, qw + 256 * b, y + b);
}

/// Reference Q4_K dequantizer: y = (float(d)*sc) * q - float(dmin)*m.
NIBBLE_INLINE void dequantize_q4_K(const BlockQ4_K* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q4_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    for (int g = 0; g < 4; ++g) {
      float s0, m0, s1, m1;
      q4_K_grid(x[b], 2 * g, &s0, &m0);
      q4_K_grid(x[b], 2 * g + 1, &s1, &m1);
      const std::uint8_t* q = x[b].qs + 32 * g;
      for (int l = 0; l < 32; ++l) *y++ = s0 * static_cast<float>(q[l] & 0x0F) - m0;
      for (int l = 0; l < 32; ++l) *y++ = s1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

namespace detail {
/// Shared float tail of the Q4_K/Q5_K x Q8_K dots: mins term per pair of sub-blocks as ggml's
/// _mm_madd_epi16(mins, hadd(bsums)) computes it (int16 pair sums wrap as in hadd_epi16).
NIBBLE_INLINE void kquant_min_products(const std::uint8_t* m, const std::int16_t* bsums,
                                       int prod[4]) {
  int s[8];
  for (int t = 0; t < 8; ++t)
    s[t] = static_cast<std::int16_t>(static_cast<std::uint16_t>(bsums[2 * t]) +
                                     static_cast<std::uint16_t>(bsums[2 * t + 1]));
  for (int k = 0; k < 4; ++k) prod[k] = m[2 * k] * s[2 * k] + m[2 * k + 1] * s[2 * k + 1];
}
}  // namespace detail

/// Q4_K x Q8_K dot product over `n` values (multiple of 256), reproducing the float order of
/// ggml's AVX2 vec_dot_q4_K_q8_K (the kernel also used on AVX-512 machines): per block,
/// d = a.d*float(w.d), dmin = -a.d*float(w.dmin); 8 float lanes acc[k] = fma(d, isum_k, acc[k])
/// with isum_k the scaled integer products of bytes 4k..4k+3 of each 32-byte chunk, and 4 lanes
/// accm[k] = fma(dmin, mins[2k]*bsum32[2k] + mins[2k+1]*bsum32[2k+1], accm[k]); the result is
/// hsum8(acc) + ((accm0+accm2)+(accm1+accm3)). Bit-identical to the golden dots.
NIBBLE_INLINE float dot_q4_K_q8_K(std::int64_t n, const BlockQ4_K* w, const BlockQ8_K* a) {
  detail::check_row("dot_q4_K_q8_K", n, 256);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float accm[4] = {0, 0, 0, 0};
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const BlockQ4_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * fp16_to_fp32(x.d);
    const float dmin = -y.d * fp16_to_fp32(x.dmin);
    std::uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, x.scales, &sc[j], &m[j]);
    int prod[4];
    detail::kquant_min_products(m, y.bsums, prod);
    for (int k = 0; k < 4; ++k) accm[k] = std::fma(dmin, static_cast<float>(prod[k]), accm[k]);
    int isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int g = 0; g < 4; ++g) {
      const std::uint8_t* q4 = x.qs + 32 * g;
      const std::int8_t* q8 = y.qs + 64 * g;
      for (int k = 0; k < 8; ++k) {
        int lo = 0, hi = 0;
        for (int t = 4 * k; t < 4 * k + 4; ++t) {
          lo += (q4[t] & 0x0F) * q8[t];
          hi += (q4[t] >> 4) * q8[32 + t];
        }
        isum[k] += sc[2 * g] * lo + sc[2 * g + 1] * hi;
      }
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(isum[k]), acc[k]);
  }
  const float m = (accm[0] + accm[2]) + (accm[1] + accm[3]);
  return detail::hsum8_ggml(acc) + m;
}

}  // namespace ref
}  // namespace nibble
