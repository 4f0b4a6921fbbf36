// nibble: GGUF Q5_K (256 values, 176 bytes) with its scalar reference codec, bit-identical to
// ggml's quantize_row_q5_K_ref, quantize_q5_K with quant_weights and dequantize_row_q5_K, the
// Q5_K x Q8_K dot product, and the building blocks for rounding onto a chosen Q5_K grid (GPTQ).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/kquant_common.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q8_k.hpp"

namespace nibble {

/// Q5_K block: as Q4_K plus a fifth bit per value in qh[32].
struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");

namespace ref {

/// Level q (0..31) of value i (0..255) of a Q5_K block.
NIBBLE_INLINE int q5_K_get_q(const BlockQ5_K& blk, int i) {
  const int g = i / 64, l = i % 32, hi = (i % 64) >= 32;
  const std::uint8_t byte = blk.qs[32 * g + l];
  const int low = hi ? (byte >> 4) : (byte & 0x0F);
  return low | (((blk.qh[l] >> (2 * g + hi)) & 1) << 4);
}

/// Sets the level of value i (0..255) of a Q5_K block to q (0..31; only the low 5 bits kept).
NIBBLE_INLINE void q5_K_set_q(BlockQ5_K& blk, int i, int q) {
  const int g = i / 64, l = i % 32, hi = (i % 64) >= 32;
  std::uint8_t& byte = blk.qs[32 * g + l];
  if (hi)
    byte = static_cast<std::uint8_t>((byte & 0x0F) | ((q & 0x0F) << 4));
  else
    byte = static_cast<std::uint8_t>((byte & 0xF0) | (q & 0x0F));
  const int bit = 1 << (2 * g + hi);
  blk.qh[l] = static_cast<std::uint8_t>((q & 0x10) ? (blk.qh[l] | bit) : (blk.qh[l] & ~bit));
}

/// Effective float grid of sub-block `sub` (0..7): value = (*scale) * q - (*min), with
/// *scale = float(d) * sc[sub] and *min = float(dmin) * m[sub].
NIBBLE_INLINE void q5_K_grid(const BlockQ5_K& blk, int sub, float* scale, float* min) {
  std::uint8_t sc, m;
  get_scale_min_k4(sub, blk.scales, &sc, &m);
  *scale = fp16_to_fp32(blk.d) * static_cast<float>(sc);
  *min = fp16_to_fp32(blk.dmin) * static_cast<float>(m);
}

/// Chooses d, dmin and the 6-bit scales/mins of one Q5_K super-block for the 256 values x256
/// and fills qs/qh with the plain rounding of x256 on that grid. `weights256_or_null` null: the
/// reference algorithm (quantize_row_q5_K_ref); non-null: ggml's importance-weighted algorithm
/// with these 256 importance values. Byte-identical to the whole-row quantizers' block. For
/// GPTQ-style use: q5_K_grid + kquant_round(x, scale, min, 31) + q5_K_set_q.
NIBBLE_INLINE void q5_K_choose_scales(const float* x256, const float* weights256_or_null,
                                      BlockQ5_K* blk) {
  KQuantHeader hdr;
  std::uint8_t L[256];
  kquant_choose_block(x256, weights256_or_null, 31, &hdr, L);
  blk->d = hdr.d;
  blk->dmin = hdr.dmin;
  for (int k = 0; k < 12; ++k) blk->scales[k] = hdr.scales[k];
  for (int l = 0; l < 32; ++l) blk->qh[l] = 0;
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
      blk->qs[32 * g + l] = static_cast<std::uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      blk->qh[l] = static_cast<std::uint8_t>(blk->qh[l] | ((lo >> 4) << (2 * g)) |
                                             ((hi >> 4) << (2 * g + 1)));
    }
  }
}

/// Reference Q5_K quantizer (ggml quantize_row_q5_K_ref, also quantize_q5_K without
/// importance). `n`: multiple of 256 (throws nibble::Error otherwise).
NIBBLE_INLINE void quantize_q5_K(const float* x, BlockQ5_K* y, std::int64_t n) {
  detail::check_row("quantize_q5_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) q5_K_choose_scales(x + 256 * b, nullptr, y + b);
}

/// Importance-weighted Q5_K quantizer of one row of `n` values: ggml quantize_q5_K(x, y, 1, n,
/// qw) (quantize_row_q5_K_impl). `qw` holds n importance values, one per column.
NIBBLE_INLINE void quantize_q5_K_imatrix(const float* x, BlockQ5_K* y, std::int64_t n,
                                         const float* qw) {
  detail::check_row("quantize_q5_K_imatrix", n, 256);
  if (!qw && n > 0)
    nibble::detail::fail("quantize_q5_K_imatrix: qw is null, expected n = ", n,
                         " importance values");
  for (std::int64_t b = 0; b < n / 256; ++b) q5_K_choose_scales(x + 256 * b, qw + 256 * b, y + b);
}

/// Reference Q5_K dequantizer: y = (float(d)*sc) * q - float(dmin)*m, q = nibble + 16*bit.
NIBBLE_INLINE void dequantize_q5_K(const BlockQ5_K* x, float* y, std::int64_t n) {
  detail::check_row("dequantize_q5_K", n, 256);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    for (int g = 0; g < 4; ++g) {
      float s0, m0, s1, m1;
      q5_K_grid(x[b], 2 * g, &s0, &m0);
      q5_K_grid(x[b], 2 * g + 1, &s1, &m1);
      const std::uint8_t* q = x[b].qs + 32 * g;
      const std::uint8_t* h = x[b].qh;
      for (int l = 0; l < 32; ++l)
        *y++ = s0 * static_cast<float>((q[l] & 0x0F) + (((h[l] >> (2 * g)) & 1) << 4)) - m0;
      for (int l = 0; l < 32; ++l)
        *y++ = s1 * static_cast<float>((q[l] >> 4) + (((h[l] >> (2 * g + 1)) & 1) << 4)) - m1;
    }
  }
}

/// Q5_K x Q8_K dot product over `n` values (multiple of 256), reproducing the float order of
/// ggml's AVX2 vec_dot_q5_K_q8_K: 8 float lanes acc[k] = fma(a.d*float(w.d), isum_k, acc[k])
/// as for Q4_K, and a scalar mins accumulator summs = fma(-a.d*float(w.dmin), sum of
/// mins*bsums, summs) (ggml's C statement `summs += dmin * isum` contracted to an FMA by its
/// -march=native build); result hsum8(acc) + summs. Bit-identical to the golden dots.
NIBBLE_INLINE float dot_q5_K_q8_K(std::int64_t n, const BlockQ5_K* w, const BlockQ8_K* a) {
  detail::check_row("dot_q5_K_q8_K", n, 256);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float summs = 0.f;
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const BlockQ5_K& x = w[b];
    const BlockQ8_K& y = a[b];
    const float d = y.d * fp16_to_fp32(x.d);
    const float dmin = -y.d * fp16_to_fp32(x.dmin);
    std::uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, x.scales, &sc[j], &m[j]);
    int prod[4];
    detail::kquant_min_products(m, y.bsums, prod);
    const int msum = (prod[0] + prod[1]) + (prod[2] + prod[3]);
    summs = std::fma(dmin, static_cast<float>(msum), summs);
    int isum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int g = 0; g < 4; ++g) {
      const std::uint8_t* q5 = x.qs + 32 * g;
      const std::int8_t* q8 = y.qs + 64 * g;
      for (int k = 0; k < 8; ++k) {
        int lo = 0, hi = 0;
        for (int t = 4 * k; t < 4 * k + 4; ++t) {
          lo += ((q5[t] & 0x0F) | (((x.qh[t] >> (2 * g)) & 1) << 4)) * q8[t];
          hi += ((q5[t] >> 4) | (((x.qh[t] >> (2 * g + 1)) & 1) << 4)) * q8[32 + t];
        }
        isum[k] += sc[2 * g] * lo + sc[2 * g + 1] * hi;
      }
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(isum[k]), acc[k]);
  }
  return detail::hsum8_ggml(acc) + summs;
}

}  // namespace ref
}  // namespace nibble
