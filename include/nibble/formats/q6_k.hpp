// nibble: GGUF Q6_K (256 values, 210 bytes) and its scalar reference codec.
//
// The reference functions below reproduce ggml's output byte for byte (ggml-org/ggml d99724f:
// the reference row quantizer, the importance-weighted quantizer used by ggml_quantize_chunk,
// the dequantizer, and the x86 AVX2 Q6_K x Q8_K dot product including its float summation
// order). They are plain scalar code, header-only, with no dependency beyond the standard
// library. Bit-exactness needs IEEE float32 arithmetic without FMA contraction
// (-ffp-contract=off, which nibble::headers adds to its consumers' flags).
#pragma once

#include "nibble/core/config.hpp"
#include <cmath>
#include <cstdint>
#include <cstring>

#include "nibble/core/fp16.hpp"
#include "nibble/formats/q8_k.hpp"

namespace nibble {

/// Q6_K block: 16 sub-blocks of 16 values, signed int8 scales, fp16 super-scale d (last).
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

namespace ref {

namespace q6k_detail {

/// Values per super-block and per sub-block.
constexpr int kBlock = 256;
constexpr int kSub = 16;
/// ggml's threshold below which a group counts as all zero.
constexpr float kGroupEps = 1e-15f;

/// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the low mantissa bits
/// (ggml's nearest_int; valid for |v| <= 4194303, and reproduced bit for bit outside too).
NIBBLE_INLINE int round_magic(float v) {
  const float shifted = v + 12582912.0f;
  std::int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

NIBBLE_INLINE int clamp_q6(int l) {
  return l < -32 ? -32 : (l > 31 ? 31 : l);
}

/// Scale search of one 16-value sub-block (ggml's make_qx_quants with nmax = 32 and squared
/// weights, or the caller's weights when `qw` is non-null). Writes unsigned quants 0..63 to
/// `L` and returns the chosen scale (0 for an all-zero group).
NIBBLE_INLINE float search_sub_block(const float* x, std::int8_t* L, const float* qw) {
  float amax = 0.0f;
  float vmax = 0.0f;  // the value of largest magnitude, first one on ties
  for (int i = 0; i < kSub; ++i) {
    const float a = std::fabs(x[i]);
    if (a > amax) {
      amax = a;
      vmax = x[i];
    }
  }
  if (amax < kGroupEps) {
    for (int i = 0; i < kSub; ++i) L[i] = 0;
    return 0.0f;
  }

  // Weighted sums of candidate quants for one inverse scale (float32, value order).
  auto accumulate = [&](float inv, float& sumlx, float& suml2) {
    sumlx = 0.0f;
    suml2 = 0.0f;
    for (int i = 0; i < kSub; ++i) {
      const float l = static_cast<float>(clamp_q6(round_magic(inv * x[i])));
      const float w = qw ? qw[i] : x[i] * x[i];
      sumlx += (w * x[i]) * l;
      suml2 += (w * l) * l;
    }
  };
  auto store = [&](float inv) {
    for (int i = 0; i < kSub; ++i)
      L[i] = static_cast<std::int8_t>(clamp_q6(round_magic(inv * x[i])) + 32);
  };

  float inv = -32.0f / vmax;
  float sumlx, suml2;
  accumulate(inv, sumlx, suml2);
  store(inv);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inv = -(32.0f + 0.1f * static_cast<float>(step)) / vmax;
    accumulate(inv, sumlx, suml2);
    // With huge inputs both products overflow to inf and the candidate is rejected, as in ggml.
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      store(inv);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// Quantizes one super-block; `qw` (256 weights or null) feeds the sub-block scale search.
NIBBLE_INLINE void quantize_block(const float* x, BlockQ6_K& y, const float* qw) {
  std::int8_t L[kBlock];
  float scales[kBlock / kSub];
  float max_scale = 0.0f;
  float max_abs_scale = 0.0f;
  for (int j = 0; j < kBlock / kSub; ++j) {
    const float s = search_sub_block(x + kSub * j, L + kSub * j, qw ? qw + kSub * j : nullptr);
    scales[j] = s;
    if (std::fabs(s) > max_abs_scale) {
      max_abs_scale = std::fabs(s);
      max_scale = s;
    }
  }
  if (max_abs_scale < kGroupEps) {
    std::memset(&y, 0, sizeof y);
    return;
  }

  const float iscale = -128.0f / max_scale;
  y.d = fp32_to_fp16(1.0f / iscale);
  for (int j = 0; j < kBlock / kSub; ++j) {
    const int s = round_magic(iscale * scales[j]);
    y.scales[j] = static_cast<std::int8_t>(s > 127 ? 127 : s);
  }

  // Recompute the quants against the stored (rounded) scales; a zero product keeps the search.
  const float d_stored = fp16_to_fp32(y.d);
  for (int j = 0; j < kBlock / kSub; ++j) {
    const float d = d_stored * static_cast<float>(y.scales[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < kSub; ++i) {
      const int l = clamp_q6(round_magic(x[kSub * j + i] / d));
      L[kSub * j + i] = static_cast<std::int8_t>(l + 32);
    }
  }

  // Pack: per 128-value half, ql byte l holds values l (low) and l+64 (high) and byte l+32
  // holds values l+32 and l+96; qh byte l holds the top two bits of l, l+32, l+64, l+96.
  for (int h = 0; h < 2; ++h) {
    const std::int8_t* Lh = L + 128 * h;
    std::uint8_t* ql = y.ql + 64 * h;
    std::uint8_t* qh = y.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      const int a = Lh[l], b = Lh[l + 32], c = Lh[l + 64], e = Lh[l + 96];
      ql[l] = static_cast<std::uint8_t>((a & 0xF) | ((c & 0xF) << 4));
      ql[l + 32] = static_cast<std::uint8_t>((b & 0xF) | ((e & 0xF) << 4));
      qh[l] =
          static_cast<std::uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
    }
  }
}

/// Unsigned 6-bit quant (0..63) of value i (0..255) of a block.
NIBBLE_INLINE int get_q(const BlockQ6_K& b, int i) {
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const std::uint8_t lo_byte = b.ql[64 * h + l + (quarter & 1) * 32];
  const int lo = (quarter < 2) ? (lo_byte & 0xF) : (lo_byte >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
  return lo | (hi << 4);
}

}  // namespace q6k_detail

/// Quantizes n values (n a multiple of 256) to n/256 Q6_K blocks, byte-identical to ggml's
/// quantize_row_q6_K_ref (also what ggml_quantize_chunk stores without an importance matrix).
/// Precondition (unchecked): x holds n finite values, y has room for n/256 blocks.
NIBBLE_INLINE void quantize_q6_K(const float* x, BlockQ6_K* y, std::int64_t n) {
  const std::int64_t nb = n / q6k_detail::kBlock;
  for (std::int64_t i = 0; i < nb; ++i)
    q6k_detail::quantize_block(x + q6k_detail::kBlock * i, y[i], nullptr);
}

/// Importance-weighted Q6_K quantization of ONE row of n values (n a multiple of 256),
/// byte-identical to ggml's quantize_q6_K with quant_weights (quantize_row_q6_K_impl): the
/// sub-block scale search weighs value k by qw[k] instead of x[k]^2. qw has n entries.
/// Precondition (unchecked): finite x, finite non-negative qw.
NIBBLE_INLINE void quantize_q6_K_imatrix(const float* x, BlockQ6_K* y, std::int64_t n,
                                         const float* qw) {
  const std::int64_t nb = n / q6k_detail::kBlock;
  for (std::int64_t i = 0; i < nb; ++i)
    q6k_detail::quantize_block(x + q6k_detail::kBlock * i, y[i],
                               qw ? qw + q6k_detail::kBlock * i : nullptr);
}

/// Dequantizes n values (n a multiple of 256): y = (float(d) * scale) * (q - 32), float32,
/// identical to ggml's dequantize_row_q6_K (zero values keep the sign of that product).
NIBBLE_INLINE void dequantize_q6_K(const BlockQ6_K* x, float* y, std::int64_t n) {
  const std::int64_t nb = n / q6k_detail::kBlock;
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    float* out = y + q6k_detail::kBlock * i;
    for (int k = 0; k < q6k_detail::kBlock; ++k) {
      const float ds = d * static_cast<float>(x[i].scales[k / 16]);
      out[k] = ds * static_cast<float>(q6k_detail::get_q(x[i], k) - 32);
    }
  }
}

/// Dot product of n values (n a multiple of 256) of Q6_K weights with Q8_K activations,
/// bit-identical to ggml's x86 AVX2/AVX-512 build of ggml_vec_dot_q6_K_q8_K: per block, eight
/// int32 lane sums (lane m gathers bytes 4m..4m+3 of every 32-value chunk, minus the -32 offset
/// via bsums), each added to a float lane accumulator with a fused multiply-add by
/// d = a.d * float(w.d); the eight lanes are reduced as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
NIBBLE_INLINE float dot_q6_K_q8_K(std::int64_t n, const BlockQ6_K* w, const BlockQ8_K* a) {
  const std::int64_t nb = n / q6k_detail::kBlock;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < nb; ++i) {
    const float d = a[i].d * fp16_to_fp32(w[i].d);
    std::int32_t lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < q6k_detail::kBlock; ++k) {
      const int q = q6k_detail::get_q(w[i], k);
      lane[(k % 32) / 4] += static_cast<std::int32_t>(w[i].scales[k / 16]) * q * a[i].qs[k];
    }
    for (int m = 0; m < 8; ++m) {
      const std::int32_t offset =
          static_cast<std::int32_t>(a[i].bsums[2 * m]) * w[i].scales[2 * m] +
          static_cast<std::int32_t>(a[i].bsums[2 * m + 1]) * w[i].scales[2 * m + 1];
      const std::int32_t s = lane[m] - offset * 32;
      acc[m] = std::fma(d, static_cast<float>(s), acc[m]);
    }
  }
  const float r0 = acc[0] + acc[4], r1 = acc[1] + acc[5], r2 = acc[2] + acc[6],
              r3 = acc[3] + acc[7];
  return (r0 + r2) + (r1 + r3);
}

}  // namespace ref
}  // namespace nibble
