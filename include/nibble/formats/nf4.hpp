// nibble: bitsandbytes NF4/FP4 4-bit formats and their scalar reference codecs.
//
// Follows bitsandbytes 95f9af3 (quantize_4bit / dequantize_4bit, compress_statistics) as
// specified in docs (ALGORITHMS.md section 5): fp32 absmax per block of `blocksize` values,
// values scaled by the fp32 reciprocal of absmax and clamped to [-1, 1], nearest 4-bit code,
// two codes per byte with element 2i in the HIGH nibble. Double quantization stores the absmax
// values as 8-bit codes of the 256-entry signed dynamic map, per nested block of 256.
// Header-only, standard library only.
#pragma once

#include "nibble/core/config.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace nibble {

/// nibble's row-block form of NF4/FP4 with blocksize 64 (used by nibble::quantize and the
/// kernels): fp32 absmax, then 32 bytes of codes, element 2i in the high nibble of qs[i].
struct BlockNF4 {
  float absmax;
  std::uint8_t qs[32];
};
static_assert(sizeof(BlockNF4) == 36, "NF4 block must be 36 bytes");

namespace ref {

/// NF4 code book (bitsandbytes' hard-coded table, fp32), indexed by the 4-bit code. Sorted
/// ascending; code 7 is exactly 0, code 0 is -1, code 15 is +1.
inline constexpr float nf4_codebook[16] = {
    -0x1p+0f,        -0x1.647362p-1f, -0x1.0cd66p-1f,  -0x1.94654p-2f,
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0.0f,
    0x1.45f5fep-4f,  0x1.4995c6p-3f,  0x1.f809bap-3f,  0x1.5a0674p-2f,
    0x1.c3497p-2f,   0x1.200f56p-1f,  0x1.722766p-1f,  0x1p+0f};

// clang-format off
/// FP4 code book (sign bit 3, two exponent bits, one mantissa bit, values divided by 12):
/// codes 0..7 are 0, 1/192, 2/3, 1, 1/3, 1/2, 1/6, 1/4; codes 8..15 the same negated
/// (code 8 is -0.0).
inline constexpr float fp4_codebook[16] = {
    0.0f,  0x1.555556p-8f,  0x1.555556p-1f,  0x1p+0f,  0x1.555556p-2f,  0x1p-1f,  0x1.555556p-3f,  0x1p-2f,
    -0.0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1p+0f, -0x1.555556p-2f, -0x1p-1f, -0x1.555556p-3f, -0x1p-2f};
// clang-format on

/// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(signed=True, 7 exponent bits,
/// 8 bits)) as fp32, sorted ascending: no -1.0, index 127 is 0, index 255 is +1.0. Used for the
/// nested (double) quantization of the absmax values.
inline constexpr float dynamic_map[256] = {
    -0x1.fc6666p-1f,  -0x1.f53332p-1f,  -0x1.eep-1f,      -0x1.e6ccccp-1f,   // 0
    -0x1.df9998p-1f,  -0x1.d86666p-1f,  -0x1.d13334p-1f,  -0x1.cap-1f,       // 4
    -0x1.c2ccccp-1f,  -0x1.bb9998p-1f,  -0x1.b46666p-1f,  -0x1.ad3332p-1f,   // 8
    -0x1.a6p-1f,      -0x1.9eccccp-1f,  -0x1.979998p-1f,  -0x1.906666p-1f,   // 12
    -0x1.893334p-1f,  -0x1.82p-1f,      -0x1.7acccep-1f,  -0x1.73999ap-1f,   // 16
    -0x1.6c6668p-1f,  -0x1.653334p-1f,  -0x1.5ep-1f,      -0x1.56cccep-1f,   // 20
    -0x1.4f999ap-1f,  -0x1.486666p-1f,  -0x1.413334p-1f,  -0x1.3ap-1f,       // 24
    -0x1.32ccccp-1f,  -0x1.2b999ap-1f,  -0x1.246668p-1f,  -0x1.1d3334p-1f,   // 28
    -0x1.16p-1f,      -0x1.0eccccp-1f,  -0x1.07999ap-1f,  -0x1.006666p-1f,   // 32
    -0x1.f26668p-2f,  -0x1.e4p-2f,      -0x1.d59998p-2f,  -0x1.c73334p-2f,   // 36
    -0x1.b8ccccp-2f,  -0x1.aa6664p-2f,  -0x1.9cp-2f,      -0x1.8d9998p-2f,   // 40
    -0x1.7f3334p-2f,  -0x1.70ccccp-2f,  -0x1.626664p-2f,  -0x1.54p-2f,       // 44
    -0x1.459998p-2f,  -0x1.373334p-2f,  -0x1.28ccccp-2f,  -0x1.1a6668p-2f,   // 48
    -0x1.0cp-2f,      -0x1.fb3334p-3f,  -0x1.de6668p-3f,  -0x1.c1999ap-3f,   // 52
    -0x1.a4ccccp-3f,  -0x1.88p-3f,      -0x1.6b3332p-3f,  -0x1.4e6666p-3f,   // 56
    -0x1.31999ap-3f,  -0x1.14ccccp-3f,  -0x1.fp-4f,       -0x1.b66668p-4f,   // 60
    -0x1.93d70ap-4f,  -0x1.8851eap-4f,  -0x1.7ccccep-4f,  -0x1.7147aep-4f,   // 64
    -0x1.65c29p-4f,   -0x1.5a3d7p-4f,   -0x1.4eb85p-4f,   -0x1.433334p-4f,   // 68
    -0x1.37ae14p-4f,  -0x1.2c28f6p-4f,  -0x1.20a3d6p-4f,  -0x1.151ebap-4f,   // 72
    -0x1.09999ap-4f,  -0x1.fc28f4p-5f,  -0x1.e51ebap-5f,  -0x1.ce147ap-5f,   // 76
    -0x1.b70a3ep-5f,  -0x1.ap-5f,       -0x1.88f5c2p-5f,  -0x1.71eb86p-5f,   // 80
    -0x1.5ae146p-5f,  -0x1.43d70ap-5f,  -0x1.2ccccep-5f,  -0x1.15c28ep-5f,   // 84
    -0x1.fd70a4p-6f,  -0x1.cf5c26p-6f,  -0x1.a147aep-6f,  -0x1.733334p-6f,   // 88
    -0x1.451eb8p-6f,  -0x1.170a3ep-6f,  -0x1.d1eb86p-7f,  -0x1.75c29p-7f,    // 92
    -0x1.3e76c8p-7f,  -0x1.2c083p-7f,   -0x1.19999ap-7f,  -0x1.072b02p-7f,   // 96
    -0x1.e978d4p-8f,  -0x1.c49ba6p-8f,  -0x1.9fbe76p-8f,  -0x1.7ae148p-8f,   // 100
    -0x1.56041ap-8f,  -0x1.3126e8p-8f,  -0x1.0c49bap-8f,  -0x1.ced914p-9f,   // 104
    -0x1.851eb8p-9f,  -0x1.3b645ap-9f,  -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,  // 108
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f,   -0x1.3dd982p-11f,  // 112
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,  // 116
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,  // 120
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,              // 124
    0x1.27476ep-21f,  0x1.b43528p-19f,  0x1.040bfep-17f,  0x1.64840cp-16f,   // 128
    0x1.6f0068p-15f,  0x1.15df66p-14f,  0x1.743e96p-14f,  0x1.47ae16p-13f,   // 132
    0x1.19ce0ap-12f,  0x1.8fc506p-12f,  0x1.02de02p-11f,  0x1.3dd982p-11f,   // 136
    0x1.78d5p-11f,    0x1.b3d07cp-11f,  0x1.eecbfep-11f,  0x1.4fdf3ap-10f,   // 140
    0x1.e353f8p-10f,  0x1.3b645ap-9f,   0x1.851eb8p-9f,   0x1.ced914p-9f,    // 144
    0x1.0c49bap-8f,   0x1.3126e8p-8f,   0x1.56041ap-8f,   0x1.7ae148p-8f,    // 148
    0x1.9fbe76p-8f,   0x1.c49ba6p-8f,   0x1.e978d4p-8f,   0x1.072b02p-7f,    // 152
    0x1.19999ap-7f,   0x1.2c083p-7f,    0x1.3e76c8p-7f,   0x1.75c29p-7f,     // 156
    0x1.d1eb86p-7f,   0x1.170a3ep-6f,   0x1.451eb8p-6f,   0x1.733334p-6f,    // 160
    0x1.a147aep-6f,   0x1.cf5c26p-6f,   0x1.fd70a4p-6f,   0x1.15c28ep-5f,    // 164
    0x1.2ccccep-5f,   0x1.43d70ap-5f,   0x1.5ae146p-5f,   0x1.71eb86p-5f,    // 168
    0x1.88f5c2p-5f,   0x1.ap-5f,        0x1.b70a3ep-5f,   0x1.ce147ap-5f,    // 172
    0x1.e51ebap-5f,   0x1.fc28f4p-5f,   0x1.09999ap-4f,   0x1.151ebap-4f,    // 176
    0x1.20a3d6p-4f,   0x1.2c28f6p-4f,   0x1.37ae14p-4f,   0x1.433334p-4f,    // 180
    0x1.4eb85p-4f,    0x1.5a3d7p-4f,    0x1.65c29p-4f,    0x1.7147aep-4f,    // 184
    0x1.7ccccep-4f,   0x1.8851eap-4f,   0x1.93d70ap-4f,   0x1.b66668p-4f,    // 188
    0x1.fp-4f,        0x1.14ccccp-3f,   0x1.31999ap-3f,   0x1.4e6666p-3f,    // 192
    0x1.6b3332p-3f,   0x1.88p-3f,       0x1.a4ccccp-3f,   0x1.c1999ap-3f,    // 196
    0x1.de6668p-3f,   0x1.fb3334p-3f,   0x1.0cp-2f,       0x1.1a6668p-2f,    // 200
    0x1.28ccccp-2f,   0x1.373334p-2f,   0x1.459998p-2f,   0x1.54p-2f,        // 204
    0x1.626664p-2f,   0x1.70ccccp-2f,   0x1.7f3334p-2f,   0x1.8d9998p-2f,    // 208
    0x1.9cp-2f,       0x1.aa6664p-2f,   0x1.b8ccccp-2f,   0x1.c73334p-2f,    // 212
    0x1.d59998p-2f,   0x1.e4p-2f,       0x1.f26668p-2f,   0x1.006666p-1f,    // 216
    0x1.07999ap-1f,   0x1.0eccccp-1f,   0x1.16p-1f,       0x1.1d3334p-1f,    // 220
    0x1.246668p-1f,   0x1.2b999ap-1f,   0x1.32ccccp-1f,   0x1.3ap-1f,        // 224
    0x1.413334p-1f,   0x1.486666p-1f,   0x1.4f999ap-1f,   0x1.56cccep-1f,    // 228
    0x1.5ep-1f,       0x1.653334p-1f,   0x1.6c6668p-1f,   0x1.73999ap-1f,    // 232
    0x1.7acccep-1f,   0x1.82p-1f,       0x1.893334p-1f,   0x1.906666p-1f,    // 236
    0x1.979998p-1f,   0x1.9eccccp-1f,   0x1.a6p-1f,       0x1.ad3332p-1f,    // 240
    0x1.b46666p-1f,   0x1.bb9998p-1f,   0x1.c2ccccp-1f,   0x1.cap-1f,        // 244
    0x1.d13334p-1f,   0x1.d86666p-1f,   0x1.df9998p-1f,   0x1.e6ccccp-1f,    // 248
    0x1.eep-1f,       0x1.f53332p-1f,   0x1.fc6666p-1f,   0x1p+0f,           // 252
};

namespace nf4_detail {

/// fp32 midpoints (c[k] + c[k+1]) / 2 of adjacent NF4 codes (the CUDA decision thresholds).
inline constexpr float nf4_midpoints[15] = {
    -0x1.b239bp-1f,  -0x1.38a4ep-1f,  -0x1.d709p-2f,  -0x1.5bd4ecp-2f, -0x1.e079d8p-3f,
    -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f, 0x1.ec90c4p-4f,  0x1.a0cfcp-3f,
    0x1.2b05a8p-2f,  0x1.8ea7f2p-2f,  0x1.00da08p-1f, 0x1.491b5ep-1f,  0x1.b913b4p-1f};

/// fp32 midpoints of the sorted FP4 magnitudes 0, 1/192, 1/6, 1/4, 1/3, 1/2, 2/3, 1 ...
inline constexpr float fp4_midpoints[7] = {0x1.555556p-9f, 0x1.6p-4f,      0x1.aaaaacp-3f,
                                           0x1.2aaaacp-2f, 0x1.aaaaacp-2f, 0x1.2aaaacp-1f,
                                           0x1.aaaaacp-1f};
/// ... and the code (without sign) of each sorted magnitude.
NIBBLE_INLINE constexpr std::uint8_t fp4_sorted_codes[8] = {0, 1, 6, 7, 4, 5, 2, 3};

/// Guard of the reciprocal (the torch/CPU backend's max(absmax, 1e-38)): a zero block maps to
/// the code of 0.0 (NF4 7, FP4 0).
constexpr float kReciprocalFloor = 1e-38f;

}  // namespace nf4_detail

/// NF4 code of a scaled value v in [-1, 1]: the number of NF4 midpoints strictly below v, so a
/// value equal to a midpoint takes the lower code.
NIBBLE_INLINE std::uint8_t encode_nf4(float v) {
  std::uint8_t code = 0;
  for (float m : nf4_detail::nf4_midpoints) code = static_cast<std::uint8_t>(code + (v > m));
  return code;
}

/// FP4 code of a scaled value v in [-1, 1] (CUDA semantics): sign bit 8 when v < 0 (so -0.0
/// and +0.0 give code 0), magnitude rounded to the nearest FP4 magnitude, a magnitude equal to a
/// midpoint taking the smaller magnitude. The midpoints are the fp32 midpoints of the sorted
/// magnitudes; bitsandbytes' CUDA kernel uses decimal constants that differ from them by at
/// most 2 ulp (only values within 2 ulp of a midpoint can be coded differently).
NIBBLE_INLINE std::uint8_t encode_fp4(float v) {
  const float a = std::fabs(v);
  int k = 0;
  for (float m : nf4_detail::fp4_midpoints) k += (a > m);
  const std::uint8_t sign = v < 0.0f ? 8 : 0;
  return static_cast<std::uint8_t>(sign | nf4_detail::fp4_sorted_codes[k]);
}

/// Code of a scaled value for the chosen code book.
NIBBLE_INLINE std::uint8_t encode_4bit(float v, bool fp4) {
  return fp4 ? encode_fp4(v) : encode_nf4(v);
}

/// Index of the dynamic-map entry nearest to y (exact nearest, computed against the exact
/// midpoints of adjacent entries in double; a value exactly half way takes the lower index).
/// This is the CUDA / torch-default semantics; bitsandbytes' CPU C++ kernel uses a lookup table
/// and can pick a neighbouring code.
NIBBLE_INLINE std::uint8_t encode_dynamic(float y) {
  int lo = 0, hi = 255;  // answer = number of midpoints strictly below y, in [0, 255]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const double m = (static_cast<double>(dynamic_map[mid]) + dynamic_map[mid + 1]) * 0.5;
    if (m < static_cast<double>(y))
      lo = mid + 1;
    else
      hi = mid;
  }
  return static_cast<std::uint8_t>(lo);
}

/// Code (0..15) of element k of a packed 4-bit stream (high nibble for even k).
NIBBLE_INLINE std::uint8_t packed_code(const std::uint8_t* packed, std::int64_t k) {
  const std::uint8_t b = packed[k / 2];
  return static_cast<std::uint8_t>((k % 2 == 0) ? (b >> 4) : (b & 0x0F));
}

/// bitsandbytes quantize_4bit on n values: absmax[b] = max |x| of block b (the last block may
/// be partial), codes of clamp(x * (1 / max(absmax, 1e-38)), -1, 1), packed two per byte with
/// element 2i in the high nibble of packed[i]; for odd n the final low nibble is the code of
/// 0.0 (NF4 7, FP4 0). Writes (n+1)/2 bytes and ceil(n / blocksize) absmax values.
/// Preconditions (unchecked): n >= 0, blocksize > 0, finite x.
NIBBLE_INLINE void quantize_4bit(const float* x, std::int64_t n, std::int64_t blocksize, bool fp4,
                                 std::uint8_t* packed, float* absmax) {
  const std::uint8_t pad = fp4 ? 0 : 7;
  for (std::int64_t start = 0, b = 0; start < n; start += blocksize, ++b) {
    const std::int64_t len = std::min(blocksize, n - start);
    float amax = 0.0f;
    for (std::int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[start + i]));
    absmax[b] = amax;
    const float inv = 1.0f / std::max(amax, nf4_detail::kReciprocalFloor);
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int64_t k = start + i;
      const float v = std::min(1.0f, std::max(-1.0f, x[k] * inv));
      const std::uint8_t code = encode_4bit(v, fp4);
      if (k % 2 == 0)
        packed[k / 2] = static_cast<std::uint8_t>((code << 4) | pad);
      else
        packed[k / 2] = static_cast<std::uint8_t>((packed[k / 2] & 0xF0) | code);
    }
  }
}

/// bitsandbytes dequantize_4bit: out[k] = codebook[code_k] * absmax[k / blocksize] (fp32).
NIBBLE_INLINE void dequantize_4bit(const std::uint8_t* packed, const float* absmax, std::int64_t n,
                                   std::int64_t blocksize, bool fp4, float* out) {
  const float* book = fp4 ? fp4_codebook : nf4_codebook;
  for (std::int64_t k = 0; k < n; ++k)
    out[k] = book[packed_code(packed, k)] * absmax[k / blocksize];
}

/// Offset of the double quantization: the mean of the absmax values, summed in index order in
/// double and rounded once to fp32 (bitsandbytes uses torch's mean, whose summation order can
/// change the last bit; checkpoints store the offset, so loading never recomputes it).
/// Returns 0 for nblocks == 0.
NIBBLE_INLINE float double_quant_offset(const float* absmax, std::int64_t nblocks) {
  if (nblocks <= 0) return 0.0f;
  double sum = 0.0;
  for (std::int64_t i = 0; i < nblocks; ++i) sum += absmax[i];
  return static_cast<float>(sum / static_cast<double>(nblocks));
}

/// Nested quantization of the statistics (quantize_blockwise with the dynamic map, blocksize
/// 256): r = absmax - offset (fp32); per 256-block nested_absmax = max |r|; qabsmax = nearest
/// dynamic-map index of clamp(r * (1 / max(nested_absmax, 1e-38)), -1, 1). Writes nblocks codes
/// and ceil(nblocks / 256) nested maxima.
NIBBLE_INLINE void quantize_absmax(const float* absmax, std::int64_t nblocks, float offset,
                                   std::uint8_t* qabsmax, float* nested_absmax) {
  for (std::int64_t start = 0, b = 0; start < nblocks; start += 256, ++b) {
    const std::int64_t len = std::min<std::int64_t>(256, nblocks - start);
    float amax = 0.0f;
    for (std::int64_t i = 0; i < len; ++i)
      amax = std::max(amax, std::fabs(absmax[start + i] - offset));
    nested_absmax[b] = amax;
    const float inv = 1.0f / std::max(amax, nf4_detail::kReciprocalFloor);
    for (std::int64_t i = 0; i < len; ++i) {
      const float r = absmax[start + i] - offset;
      qabsmax[start + i] = encode_dynamic(std::min(1.0f, std::max(-1.0f, r * inv)));
    }
  }
}

/// Decodes nested statistics: absmax[i] = dynamic_map[qabsmax[i]] * nested_absmax[i / 256] +
/// offset (fp32 product, then sum).
NIBBLE_INLINE void dequantize_absmax(const std::uint8_t* qabsmax, const float* nested_absmax,
                                     float offset, std::int64_t nblocks, float* absmax) {
  for (std::int64_t i = 0; i < nblocks; ++i) {
    const float p = dynamic_map[qabsmax[i]] * nested_absmax[i / 256];
    absmax[i] = p + offset;
  }
}

/// Quantizes n values (n a multiple of 64) into n/64 BlockNF4 (blocksize 64, NF4 or FP4 code
/// book). Same bytes as quantize_4bit with blocksize 64. Preconditions (unchecked): finite x.
NIBBLE_INLINE void quantize_nf4(const float* x, BlockNF4* y, std::int64_t n, bool fp4) {
  for (std::int64_t b = 0; b < n / 64; ++b)
    quantize_4bit(x + 64 * b, 64, 64, fp4, y[b].qs, &y[b].absmax);
}

/// Dequantizes n values (n a multiple of 64) from n/64 BlockNF4.
NIBBLE_INLINE void dequantize_nf4(const BlockNF4* x, float* y, std::int64_t n, bool fp4) {
  for (std::int64_t b = 0; b < n / 64; ++b)
    dequantize_4bit(x[b].qs, &x[b].absmax, 64, 64, fp4, y + 64 * b);
}

}  // namespace ref
}  // namespace nibble
