// nibble: pieces shared by the Q4_K / Q5_K / Q6_K kernels (kernels/q{4,5,6}_k-inl.hpp).
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp):
// nothing here may call an inline function or template with external linkage that could be
// compiled with wider ISA flags than its caller (so: no std containers, own fp16 conversion).
//
// The integer scheme (see docs of KERNEL-NOTES): activations are Q8_K rows; per 256-value block
// the weight quants (unsigned) are multiplied with the int8 activations into int32 sums per
// sub-block, the sub-block scales are applied, and only then is the block converted to float
// with the super-scales. Q4_K/Q5_K mins use the activation bsums; Q6_K's -32 offset is applied
// as -32 * bsum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/table.hpp"
#include "nibble/kernels/detail/q45-inl.hpp"
#include "nibble/kernels/detail/q45-packed-inl.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nibble::kernels {
namespace {
namespace kq {

// ---------------------------------------------------------------- scalar helpers

/// fp16 -> fp32 (exact), private copy so that no external-linkage inline function is compiled
/// with this TU's ISA flags.
inline float h2f(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  std::uint32_t bits;
  if (e == 0x1F) {
    bits = sign | 0x7F800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else {
      const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24
      return sign ? -v : v;
    }
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The eight 6-bit scales and mins of a Q4_K/Q5_K block, as two little-endian 8-byte words
/// (byte j of *sc8 = sc[j], byte j of *m8 = m[j]).
inline void unpack_scales_mins(const std::uint8_t* s12, std::uint64_t* sc8, std::uint64_t* m8) {
  std::uint32_t u[3];
  std::memcpy(u, s12, 12);
  const std::uint32_t sc_lo = u[0] & 0x3F3F3F3Fu;
  const std::uint32_t m_lo = u[1] & 0x3F3F3F3Fu;
  const std::uint32_t sc_hi = (u[2] & 0x0F0F0F0Fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const std::uint32_t m_hi = ((u[2] >> 4) & 0x0F0F0F0Fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  *sc8 = static_cast<std::uint64_t>(sc_lo) | (static_cast<std::uint64_t>(sc_hi) << 32);
  *m8 = static_cast<std::uint64_t>(m_lo) | (static_cast<std::uint64_t>(m_hi) << 32);
}

inline void unpack_scales_mins(const std::uint8_t* s12, std::uint8_t sc[8], std::uint8_t m[8]) {
  std::uint64_t a, b;
  unpack_scales_mins(s12, &a, &b);
  std::memcpy(sc, &a, 8);
  std::memcpy(m, &b, 8);
}

/// 64-byte aligned scratch memory (no std containers: see the file comment).
struct Scratch {
  void* p = nullptr;
  explicit Scratch(std::size_t bytes) : p(::operator new(bytes, std::align_val_t(64))) {}
  ~Scratch() { ::operator delete(p, std::align_val_t(64)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// ---------------------------------------------------------------- dequantization
// Plain loops (the compiler vectorizes them); -ffp-contract=off keeps every ISA bit-identical
// to the reference order: (float(d) * sc) * q - float(dmin) * m, resp. (float(d) * sc) * (q-32).

inline void dequant_q4_K(const void* src, std::int64_t n, float* y) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
    std::uint8_t sc[8], m[8];
    unpack_scales_mins(x[b].scales, sc, m);
    for (int g = 0; g < 4; ++g) {
      const std::uint8_t* q = x[b].qs + 32 * g;
      const float d0 = d * static_cast<float>(sc[2 * g]), m0 = dmin * static_cast<float>(m[2 * g]);
      const float d1 = d * static_cast<float>(sc[2 * g + 1]);
      const float m1 = dmin * static_cast<float>(m[2 * g + 1]);
      float* o = y + 256 * b + 64 * g;
      for (int l = 0; l < 32; ++l) o[l] = d0 * static_cast<float>(q[l] & 0x0F) - m0;
      for (int l = 0; l < 32; ++l) o[32 + l] = d1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

inline void dequant_q5_K(const void* src, std::int64_t n, float* y) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(src);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
    std::uint8_t sc[8], m[8];
    unpack_scales_mins(x[b].scales, sc, m);
    const std::uint8_t* qh = x[b].qh;
    for (int g = 0; g < 4; ++g) {
      const std::uint8_t* q = x[b].qs + 32 * g;
      const float d0 = d * static_cast<float>(sc[2 * g]), m0 = dmin * static_cast<float>(m[2 * g]);
      const float d1 = d * static_cast<float>(sc[2 * g + 1]);
      const float m1 = dmin * static_cast<float>(m[2 * g + 1]);
      float* o = y + 256 * b + 64 * g;
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] & 0x0F) | (((qh[l] >> (2 * g)) & 1) << 4);
        o[l] = d0 * static_cast<float>(v) - m0;
      }
      for (int l = 0; l < 32; ++l) {
        const int v = (q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
        o[32 + l] = d1 * static_cast<float>(v) - m1;
      }
    }
  }
}

inline void dequant_q6_K(const void* src, std::int64_t n, float* y) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
  for (std::int64_t b = 0; b < n / 256; ++b) {
    const float d = h2f(x[b].d);
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* ql = x[b].ql + 64 * h;
      const std::uint8_t* qh = x[b].qh + 32 * h;
      const std::int8_t* sc = x[b].scales + 8 * h;
      float* o = y + 256 * b + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        o[l] = (d * static_cast<float>(sc[is + 0])) * static_cast<float>(q0);
        o[l + 32] = (d * static_cast<float>(sc[is + 2])) * static_cast<float>(q1);
        o[l + 64] = (d * static_cast<float>(sc[is + 4])) * static_cast<float>(q2);
        o[l + 96] = (d * static_cast<float>(sc[is + 6])) * static_cast<float>(q3);
      }
    }
  }
}

// ---------------------------------------------------------------- scalar dots
// Same semantics (integer sums and float order) as ggml's generic C vec_dot: the products of
// each block are gathered into 8 int32 lanes (lane l = positions l mod 8), scaled per sub-block,
// each lane is added to a float lane accumulator with d = float(w.d) * a.d; the mins are
// subtracted from a separate float sum; the lanes are added to it at the end, in order.

/// Unsigned quants (0..31) of one Q4_K (HighBit=false) or Q5_K block in value order.
inline void q45_levels(const std::uint8_t* qs, const std::uint8_t* qh, std::int8_t* a) {
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * g + l] & 0x0F, hi = qs[32 * g + l] >> 4;
      if (qh) {
        lo |= ((qh[l] >> (2 * g)) & 1) << 4;
        hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
      }
      a[64 * g + l] = static_cast<std::int8_t>(lo);
      a[64 * g + 32 + l] = static_cast<std::int8_t>(hi);
    }
  }
}

template <class Block, bool HighBit>
inline float dot_q45_scalar(const Block* x, const BlockQ8_K* y, std::int64_t nb) {
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sumf = 0.0f;
  std::int8_t aux8[256];
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint8_t* qh = nullptr;
    if constexpr (HighBit) qh = x[i].qh;
    q45_levels(x[i].qs, qh, aux8);
    std::uint8_t sc[8], m[8];
    unpack_scales_mins(x[i].scales, sc, m);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += y[i].bsums[j] * m[j / 2];
    std::int32_t aux32[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const std::int8_t* q8 = y[i].qs;
    const std::int8_t* a = aux8;
    for (int j = 0; j < 8; ++j) {
      const std::int32_t scale = sc[j];
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 8; ++l) aux32[l] += scale * (q8[l] * a[l]);
        q8 += 8;
        a += 8;
      }
    }
    const float d = h2f(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
    const float dmin = h2f(x[i].dmin) * y[i].d;
    sumf -= dmin * static_cast<float>(sumi);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

inline float dot_q6_scalar(const BlockQ6_K* x, const BlockQ8_K* y, std::int64_t nb) {
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int8_t aux8[256];
  for (std::int64_t i = 0; i < nb; ++i) {
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* ql = x[i].ql + 64 * h;
      const std::uint8_t* qh = x[i].qh + 32 * h;
      std::int8_t* a = aux8 + 128 * h;
      for (int l = 0; l < 32; ++l) {
        a[l] = static_cast<std::int8_t>(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
        a[l + 32] =
            static_cast<std::int8_t>(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
        a[l + 64] = static_cast<std::int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        a[l + 96] = static_cast<std::int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    std::int32_t aux32[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const std::int8_t* q8 = y[i].qs;
    const std::int8_t* a = aux8;
    for (int j = 0; j < 16; ++j) {
      const int scale = x[i].scales[j];
      for (int k = 0; k < 2; ++k) {
        for (int l = 0; l < 8; ++l) aux32[l] += scale * (q8[l] * a[l]);
        q8 += 8;
        a += 8;
      }
    }
    const float d = h2f(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(aux32[l]);
  }
  float sumf = 0.0f;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

/// gemm from a row x column dot function: Y[j*ldy + r] = Dot(W row r, A row j).
template <class Block, float (*Dot)(const Block*, const BlockQ8_K*, std::int64_t)>
void gemm_by_dot(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
                 std::int64_t cols, const void* A, std::size_t a_row_bytes, std::int64_t n,
                 float* Y, std::int64_t ldy) {
  const std::int64_t nb = cols / 256;
  const std::uint8_t* w = static_cast<const std::uint8_t*>(W);
  const std::uint8_t* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t j = 0; j < n; ++j) {
    const BlockQ8_K* aj = reinterpret_cast<const BlockQ8_K*>(a + j * a_row_bytes);
    for (std::int64_t r = r0; r < r1; ++r) {
      Y[j * ldy + r] = Dot(reinterpret_cast<const Block*>(w + r * w_row_bytes), aj, nb);
    }
  }
}

// ---------------------------------------------------------------- AVX-512 tile engine
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)

/// u8 x s8 dot of 4-byte groups added to int32 lanes: vpdpbusd, or maddubs + madd without VNNI
/// (no saturation: every K-quant level is <= 63, so a pair sum is <= 2 * 63 * 128).
template <bool Vnni>
inline __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
  if constexpr (Vnni) return _mm512_dpbusd_epi32(acc, u, s);
#endif
  const __m512i p = _mm512_maddubs_epi16(u, s);
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
}

/// One activation block prepared for the tile engine: the 256 int8 quants permuted into the
/// weight layout of the format policy, 16 per-lane extras (format-specific) and the scale.
struct alignas(64) PrepBlock {
  std::int8_t qs[256];
  std::int32_t extra[16];
  float da;
  float pad[15];
};
static_assert(sizeof(PrepBlock) == 384, "PrepBlock layout");

/// One weight block unpacked by Fmt::unpack (kept in L1 while all activation columns use it).
struct alignas(64) Unpacked512 {
  __m512i v[4];
  __m512 fs, fm;
};

/// R unpacked weight rows (wu[b * R + i]) x C activation columns, all blocks.
template <class Fmt, bool Vnni, int R, int C>
inline void tile512u(const Unpacked512* wu, std::int64_t nb, const PrepBlock* p, float* y,
                     std::int64_t ldy) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[i][c] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const Unpacked512& u = wu[b * R + i];
      const __m512i v0 = _mm512_load_si512(&u.v[0]), v1 = _mm512_load_si512(&u.v[1]);
      const __m512i v2 = _mm512_load_si512(&u.v[2]), v3 = _mm512_load_si512(&u.v[3]);
      const __m512 fs = u.fs;
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const PrepBlock& pb = p[c * nb + b];
        __m512i s = Fmt::kHasMin ? _mm512_setzero_si512() : _mm512_load_si512(pb.extra);
        s = dpbusd512<Vnni>(s, v0, _mm512_load_si512(pb.qs));
        s = dpbusd512<Vnni>(s, v1, _mm512_load_si512(pb.qs + 64));
        s = dpbusd512<Vnni>(s, v2, _mm512_load_si512(pb.qs + 128));
        s = dpbusd512<Vnni>(s, v3, _mm512_load_si512(pb.qs + 192));
        if constexpr (Fmt::kHasMin) {
          acc[i][c] = _mm512_fmadd_ps(
              u.fm, _mm512_load_ps(reinterpret_cast<const float*>(pb.extra)), acc[i][c]);
        }
        acc[i][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(fs, _mm512_set1_ps(pb.da)),
                                    acc[i][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[c * ldy + i] = _mm512_reduce_add_ps(acc[i][c]);
}

/// All column tiles of `cn` prepared columns against R unpacked rows.
template <class Fmt, bool Vnni, int R>
inline void cols512u(const Unpacked512* wu, std::int64_t nb, const PrepBlock* p, std::int64_t cn,
                     float* y, std::int64_t ldy) {
  constexpr int kC = 5;  // 4 x 5 accumulators + 6 unpacked weight vectors in registers
  std::int64_t c = 0;
  for (; c + kC <= cn; c += kC) tile512u<Fmt, Vnni, R, kC>(wu, nb, p + c * nb, y + c * ldy, ldy);
  const PrepBlock* pc = p + c * nb;
  float* yc = y + c * ldy;
  switch (cn - c) {
    case 7:
      tile512u<Fmt, Vnni, R, 7>(wu, nb, pc, yc, ldy);
      break;
    case 6:
      tile512u<Fmt, Vnni, R, 6>(wu, nb, pc, yc, ldy);
      break;
    case 5:
      tile512u<Fmt, Vnni, R, 5>(wu, nb, pc, yc, ldy);
      break;
    case 4:
      tile512u<Fmt, Vnni, R, 4>(wu, nb, pc, yc, ldy);
      break;
    case 3:
      tile512u<Fmt, Vnni, R, 3>(wu, nb, pc, yc, ldy);
      break;
    case 2:
      tile512u<Fmt, Vnni, R, 2>(wu, nb, pc, yc, ldy);
      break;
    case 1:
      tile512u<Fmt, Vnni, R, 1>(wu, nb, pc, yc, ldy);
      break;
    default:
      break;
  }
}

template <class Fmt, int R>
inline void unpack_rows512(const std::uint8_t* w, std::size_t wrb, std::int64_t nb,
                           Unpacked512* wu) {
  for (std::int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < R; ++i) {
      Unpacked512& u = wu[b * R + i];
      __m512i v0, v1, v2, v3;
      __m512 fs, fm;
      Fmt::unpack(w + i * wrb + b * Fmt::kBlockBytes, v0, v1, v2, v3, fs, fm);
      _mm512_store_si512(&u.v[0], v0);
      _mm512_store_si512(&u.v[1], v1);
      _mm512_store_si512(&u.v[2], v2);
      _mm512_store_si512(&u.v[3], v3);
      u.fs = fs;
      u.fm = fm;
    }
}

#if defined(__AVX512VNNI__)
/// In-register 16 x 16 transpose of dwords: r[j] lane i <- old r[i] lane j.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4q + k] lane (128-bit chunk) c, dword e = row 4q + e, dword 4c + k
  for (int q = 0; q < 4; q += 2)
    for (int k = 0; k < 4; ++k) {
      t[4 * q + k] = _mm512_shuffle_i32x4(r[4 * q + k], r[4 * q + 4 + k], 0x88);
      t[4 * q + 4 + k] = _mm512_shuffle_i32x4(r[4 * q + k], r[4 * q + 4 + k], 0xDD);
    }
  // t[4q + k] (q = 0, 2) chunks: (rows 4q, chunk 0), (4q, 2), (4q+4, 0), (4q+4, 2) for dword k
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xDD);
    r[4 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0xDD);
  }
}

/// Q4_K / Q5_K GEMM (n > 1) with weight rows in int32 lanes: a tile of 16 rows is repacked once
/// per call so that zmm (block b, sub-block sb, step t) holds, in lane i, the 4 unsigned levels
/// 32 * sb + 4t .. 4t + 3 of row i; each vpdpbusd multiplies it with 4 activation bytes of one
/// column broadcast from the Q8_K row as is (16 rows x 4 values x 1 column). Per sub-block the
/// int32 lanes are converted once and scaled by d * sc (float, per row lane); the mins enter as
/// -dmin * m * (bsum pair) per sub-block; a.d is applied once per block.
template <bool HighBit>
struct Q45Rows16 {
  using Block = typename std::conditional<HighBit, BlockQ5_K, BlockQ4_K>::type;
  static constexpr int kZ = 80;    ///< zmm per block in the tile: 64 level vectors, 8 fs, 8 -fm
  static constexpr int kC = 8;     ///< activation columns per pass
  static constexpr int kMinN = 6;  ///< fewest columns this engine is used for

  /// Repacks block b of rows w + i * wrb (i < nr; rows past nr repeat the last one) into tile.
  static inline void repack_block(const std::uint8_t* w, std::size_t wrb, int nr, std::int64_t b,
                                  __m512i* dst) {
    const Block* x[16];
    for (int i = 0; i < 16; ++i)
      x[i] =
          reinterpret_cast<const Block*>(w + static_cast<std::size_t>(i < nr ? i : nr - 1) * wrb) +
          b;
    __m512i lo[16], hi[16], qh[16];
    for (int i = 0; i < 16; ++i) {
      lo[i] = _mm512_loadu_si512(x[i]->qs);
      hi[i] = _mm512_loadu_si512(x[i]->qs + 64);
    }
    transpose16(lo);
    transpose16(hi);
    if constexpr (HighBit) {
      for (int i = 0; i < 16; ++i)
        qh[i] =
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i]->qh)));
      transpose16(qh);
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int D = 0; D < 32; ++D) {
      const __m512i T = D < 16 ? lo[D] : hi[D - 16];
      const int g = D / 8, t = D % 8;
      __m512i L = _mm512_and_si512(T, m4);
      __m512i H = _mm512_and_si512(_mm512_srli_epi16(T, 4), m4);
      if constexpr (HighBit) {
        const __m512i sixteen = _mm512_set1_epi8(16);
        L = _mm512_mask_add_epi8(
            L, _mm512_test_epi8_mask(qh[t], _mm512_set1_epi8(static_cast<char>(1 << (2 * g)))), L,
            sixteen);
        H = _mm512_mask_add_epi8(
            H, _mm512_test_epi8_mask(qh[t], _mm512_set1_epi8(static_cast<char>(2 << (2 * g)))), H,
            sixteen);
      }
      _mm512_store_si512(dst + 16 * g + t, L);
      _mm512_store_si512(dst + 16 * g + 8 + t, H);
    }
    // d, dmin and the 12 scale bytes (the first 16 bytes of a block) of the 16 rows,
    // transposed: h[0] lane i = d | dmin << 16 of row i, h[1..3] = scale dwords u[0..2].
    __m512i h[16];
    for (int i = 0; i < 16; ++i)
      h[i] = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i])));
    transpose16(h);
    const __m512i k3f = _mm512_set1_epi32(0x3F3F3F3F), k0f = _mm512_set1_epi32(0x0F0F0F0F);
    const __m512i k03 = _mm512_set1_epi32(0x03030303);
    // bytes of sv[0] / sv[1]: sc[0..3] / sc[4..7]; of mv[0] / mv[1]: m[0..3] / m[4..7]
    // (the same bit formulas as unpack_scales_mins, 16 rows at a time)
    const __m512i sv[2] = {
        _mm512_and_si512(h[1], k3f),
        _mm512_or_si512(_mm512_and_si512(h[3], k0f),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[1], 6), k03), 4))};
    const __m512i mv[2] = {
        _mm512_and_si512(h[2], k3f),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), k0f),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[2], 6), k03), 4))};
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    const __m512 ndmin = _mm512_sub_ps(
        _mm512_setzero_ps(), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16))));
    const __m512i kff = _mm512_set1_epi32(0xFF);
    for (int sb = 0; sb < 8; ++sb) {
      const int sh = 8 * (sb % 4);
      const __m512 scf =
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(sv[sb / 4], sh), kff));
      const __m512 mf =
          _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(mv[sb / 4], sh), kff));
      _mm512_store_ps(reinterpret_cast<float*>(dst + 64 + sb), _mm512_mul_ps(d, scf));
      _mm512_store_ps(reinterpret_cast<float*>(dst + 72 + sb), _mm512_mul_ps(ndmin, mf));
    }
  }

  /// C columns (Q8_K rows a[c], bsum-pair floats bs[c][b * 8 + sb]) against the repacked tile.
  template <int C>
  static inline void cols(const __m512i* tile, std::int64_t nb, const BlockQ8_K* const* a,
                          const float* const* bs, float* y, std::int64_t ldy, __mmask16 mask) {
    __m512 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      const __m512i* t = tile + b * kZ;
      __m512 blk[C];
#pragma GCC unroll 8
      for (int sb = 0; sb < 8; ++sb) {
        __m512i s[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) s[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m512i wv = _mm512_load_si512(t + 8 * sb + k);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            std::int32_t av;
            std::memcpy(&av, a[c][b].qs + 32 * sb + 4 * k, 4);
            s[c] = _mm512_dpbusd_epi32(s[c], wv, _mm512_set1_epi32(av));
          }
        }
        const __m512 fs = _mm512_load_ps(reinterpret_cast<const float*>(t + 64 + sb));
        const __m512 fm = _mm512_load_ps(reinterpret_cast<const float*>(t + 72 + sb));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m512 f = _mm512_cvtepi32_ps(s[c]);
          blk[c] = sb == 0 ? _mm512_mul_ps(f, fs) : _mm512_fmadd_ps(f, fs, blk[c]);
          blk[c] = _mm512_fmadd_ps(fm, _mm512_set1_ps(bs[c][b * 8 + sb]), blk[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[c] = _mm512_fmadd_ps(blk[c], _mm512_set1_ps(a[c][b].d), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy, mask, acc[c]);
  }

  /// Per-column extras of block a: the 8 bsum pairs (float).
  static constexpr int kExtra = 8;
  static inline void extra(const BlockQ8_K& a, float* e) {
    for (int sb = 0; sb < 8; ++sb)
      e[sb] = static_cast<float>(a.bsums[2 * sb] + a.bsums[2 * sb + 1]);
  }
};

/// gemm (FormatKernels::gemm) of a 16-row-lane policy P (Q45Rows16, Q6Rows16): each 16-row
/// tile is repacked once (P::repack_block) and run against the columns kC at a time.
template <class P>
void gemm_rows16(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
                 std::int64_t cols_, const void* A, std::size_t a_row_bytes, std::int64_t n,
                 float* Y, std::int64_t ldy) {
  constexpr int kC = P::kC, kZ = P::kZ, kE = P::kExtra;
  const std::int64_t nb = cols_ / 256;
  Scratch tbuf(static_cast<std::size_t>(nb * kZ) * 64);
  Scratch bbuf(static_cast<std::size_t>(n * nb * kE) * sizeof(float));
  __m512i* tile = static_cast<__m512i*>(tbuf.p);
  float* bsf = static_cast<float*>(bbuf.p);
  const std::uint8_t* a8 = static_cast<const std::uint8_t*>(A);
  for (std::int64_t j = 0; j < n; ++j) {
    const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(a8 + j * a_row_bytes);
    for (std::int64_t b = 0; b < nb; ++b) P::extra(ab[b], bsf + (j * nb + b) * kE);
  }
  const std::uint8_t* w = static_cast<const std::uint8_t*>(W);
  for (std::int64_t r = r0; r < r1; r += 16) {
    const int nr = static_cast<int>(r1 - r < 16 ? r1 - r : 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << nr) - 1u);
    for (std::int64_t b = 0; b < nb; ++b)
      P::repack_block(w + r * w_row_bytes, w_row_bytes, nr, b, tile + b * kZ);
    for (std::int64_t j = 0; j < n; j += kC) {
      const BlockQ8_K* ap[kC];
      const float* bp[kC];
      for (int c = 0; c < kC; ++c) {
        const std::int64_t jc = j + c < n ? j + c : j;
        ap[c] = reinterpret_cast<const BlockQ8_K*>(a8 + jc * a_row_bytes);
        bp[c] = bsf + jc * nb * kE;
      }
      float* yj = Y + j * ldy + r;
      switch (n - j) {
        case 1:
          P::template cols<1>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 2:
          P::template cols<2>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 3:
          P::template cols<3>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 4:
          P::template cols<4>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 5:
          P::template cols<5>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 6:
          P::template cols<6>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        case 7:
          P::template cols<7>(tile, nb, ap, bp, yj, ldy, mask);
          break;
        default:
          P::template cols<8>(tile, nb, ap, bp, yj, ldy, mask);
          break;
      }
    }
  }
}
#endif  // VNNI

/// The gemm entry of the tile engine (see FormatKernels::gemm).
template <class Fmt, bool Vnni>
void gemm512(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
             std::int64_t cols, const void* A, std::size_t a_row_bytes, std::int64_t n, float* Y,
             std::int64_t ldy) {
  constexpr int kR = 4;
  const std::int64_t nb = cols / 256;
  if (nb <= 0 || r1 <= r0 || n <= 0) return;
#if defined(__AVX512VNNI__)
  // The 16-row engine pays a repack per row tile: used from P::kMinN columns on (measured
  // break-even; below it the unpacked-tile engine is as fast or faster).
  if constexpr (Vnni && Fmt::kHasRows16) {
    using P = typename Fmt::Rows16;
    if (n >= P::kMinN) {
      gemm_rows16<P>(W, w_row_bytes, r0, r1, cols, A, a_row_bytes, n, Y, ldy);
      return;
    }
  }
#endif
  // Columns are prepared in chunks that keep the prepared activations around 512 KiB.
  std::int64_t jc = (512 * 1024) / (nb * static_cast<std::int64_t>(sizeof(PrepBlock)));
  jc = jc < 8 ? 8 : jc;
  if (jc > n) jc = n;
  Scratch buf(static_cast<std::size_t>(jc * nb) * sizeof(PrepBlock));
  PrepBlock* p = static_cast<PrepBlock*>(buf.p);
  const std::uint8_t* w = static_cast<const std::uint8_t*>(W) + r0 * w_row_bytes;
  const std::uint8_t* a = static_cast<const std::uint8_t*>(A);
  const std::int64_t rows = r1 - r0;
  Scratch wbuf(static_cast<std::size_t>(kR * nb) * sizeof(Unpacked512));
  Unpacked512* wu = static_cast<Unpacked512*>(wbuf.p);
  for (std::int64_t j0 = 0; j0 < n; j0 += jc) {
    const std::int64_t cn = (n - j0 < jc) ? n - j0 : jc;
    for (std::int64_t c = 0; c < cn; ++c) {
      const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(a + (j0 + c) * a_row_bytes);
      for (std::int64_t b = 0; b < nb; ++b) Fmt::prep(ab[b], p[c * nb + b]);
    }
    float* yj = Y + j0 * ldy + r0;
    std::int64_t r = 0;
    for (; r + kR <= rows; r += kR) {
      unpack_rows512<Fmt, kR>(w + r * w_row_bytes, w_row_bytes, nb, wu);
      cols512u<Fmt, Vnni, kR>(wu, nb, p, cn, yj + r, ldy);
    }
    switch (rows - r) {
      case 3:
        unpack_rows512<Fmt, 3>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, Vnni, 3>(wu, nb, p, cn, yj + r, ldy);
        break;
      case 2:
        unpack_rows512<Fmt, 2>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, Vnni, 2>(wu, nb, p, cn, yj + r, ldy);
        break;
      case 1:
        unpack_rows512<Fmt, 1>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, Vnni, 1>(wu, nb, p, cn, yj + r, ldy);
        break;
      default:
        break;
    }
  }
}

/// Q4_K (HighBit = false) and Q5_K (HighBit = true) policy of the tile engine. Layout of the 4
/// level vectors: byte k of vector t is value (32 * sb + 8 * t + k % 8) with sb = k / 8, so
/// int32 lanes 2sb and 2sb+1 hold sub-block sb; fs/fm lanes: float(d)*sc[sb], float(dmin)*m[sb];
/// extra lanes (float): -(a.d * 0.5 * (bsums[2sb] + bsums[2sb+1])), half the min term per lane.
template <bool HighBit, bool Vnni>
struct Q45Fmt512 {
  using Block = typename std::conditional<HighBit, BlockQ5_K, BlockQ4_K>::type;
  static constexpr bool kHasMin = true;
#if defined(__AVX512VNNI__)
  static constexpr bool kHasRows16 = true;
  using Rows16 = Q45Rows16<HighBit>;
#else
  static constexpr bool kHasRows16 = false;
#endif
  /// Q4_K with vpdpbusd: the high nibbles are used as 16 * q (no shift; u8 products do not
  /// saturate in vpdpbusd) and the factor 1/16 goes into fs of the odd sub-blocks.
  static constexpr bool kHiTrick = !HighBit && Vnni;
  static constexpr std::size_t kBlockBytes = sizeof(Block);

  static inline void unpack(const std::uint8_t* blk, __m512i& v0, __m512i& v1, __m512i& v2,
                            __m512i& v3, __m512& fs, __m512& fm) {
    const Block* x = reinterpret_cast<const Block*>(blk);
    const __m512i z0 = _mm512_loadu_si512(x->qs);
    const __m512i z1 = _mm512_loadu_si512(x->qs + 64);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i za = _mm512_shuffle_i64x2(z0, z1, 0x88);  // qs[32q + 0..15] in lane q
    const __m512i zb = _mm512_shuffle_i64x2(z0, z1, 0xDD);  // qs[32q + 16..31] in lane q
    const __m512i la = _mm512_and_si512(za, m4);
    const __m512i lb = _mm512_and_si512(zb, m4);
    __m512i ha, hb;
    if constexpr (kHiTrick) {
      const __m512i mh = _mm512_set1_epi8(static_cast<char>(0xF0));
      ha = _mm512_and_si512(za, mh);
      hb = _mm512_and_si512(zb, mh);
    } else {
      ha = _mm512_and_si512(_mm512_srli_epi16(za, 4), m4);
      hb = _mm512_and_si512(_mm512_srli_epi16(zb, 4), m4);
    }
    v0 = _mm512_unpacklo_epi64(la, ha);
    v1 = _mm512_unpackhi_epi64(la, ha);
    v2 = _mm512_unpacklo_epi64(lb, hb);
    v3 = _mm512_unpackhi_epi64(lb, hb);
    if constexpr (HighBit) {
      const __m512i bitsel =
          _mm512_set_epi64(static_cast<long long>(0x8080808080808080ull), 0x4040404040404040ll,
                           0x2020202020202020ll, 0x1010101010101010ll, 0x0808080808080808ll,
                           0x0404040404040404ll, 0x0202020202020202ll, 0x0101010101010101ll);
      const __m512i sixteen = _mm512_set1_epi8(16);
      long long h8[4];
      std::memcpy(h8, x->qh, 32);
      v0 = _mm512_mask_add_epi8(v0, _mm512_test_epi8_mask(_mm512_set1_epi64(h8[0]), bitsel), v0,
                                sixteen);
      v1 = _mm512_mask_add_epi8(v1, _mm512_test_epi8_mask(_mm512_set1_epi64(h8[1]), bitsel), v1,
                                sixteen);
      v2 = _mm512_mask_add_epi8(v2, _mm512_test_epi8_mask(_mm512_set1_epi64(h8[2]), bitsel), v2,
                                sixteen);
      v3 = _mm512_mask_add_epi8(v3, _mm512_test_epi8_mask(_mm512_set1_epi64(h8[3]), bitsel), v3,
                                sixteen);
    }
    // 6-bit scales and mins in vector form: dwords of u = scales bytes 0-3, 4-7, 8-11; the
    // result bytes are sc[0..7], m[0..7] (see unpack_scales_mins).
    const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales));
    const __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(u, 0x98), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i b = _mm_srli_epi32(_mm_shuffle_epi32(u, 0x50), 2);
    const __m128i sm = _mm_or_si128(
        _mm_and_si128(a, _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F)),
        _mm_and_si128(b, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    const __m512i sci = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sm, sm));
    const __m512i mi = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(sm, sm));
    std::int32_t dpair;
    std::memcpy(&dpair, &x->d, 4);  // d, dmin
    const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(dpair));
    __m512 d = _mm512_broadcastss_ps(dd);
    if constexpr (kHiTrick) {
      d = _mm512_mul_ps(d, _mm512_setr_ps(1, 1, 0.0625f, 0.0625f, 1, 1, 0.0625f, 0.0625f, 1, 1,
                                          0.0625f, 0.0625f, 1, 1, 0.0625f, 0.0625f));
    }
    fs = _mm512_mul_ps(_mm512_cvtepi32_ps(sci), d);
    fm = _mm512_mul_ps(_mm512_cvtepi32_ps(mi), _mm512_broadcastss_ps(_mm_movehdup_ps(dd)));
  }

  static inline void prep(const BlockQ8_K& a, PrepBlock& p) {
    for (int t = 0; t < 4; ++t)
      for (int sb = 0; sb < 8; ++sb) std::memcpy(p.qs + 64 * t + 8 * sb, a.qs + 32 * sb + 8 * t, 8);
    for (int sb = 0; sb < 8; ++sb) {
      const float half = 0.5f * static_cast<float>(a.bsums[2 * sb] + a.bsums[2 * sb + 1]);
      const float e = -(a.d * half);
      std::memcpy(&p.extra[2 * sb], &e, 4);
      std::memcpy(&p.extra[2 * sb + 1], &e, 4);
    }
    p.da = a.d;
  }
};

#endif  // AVX-512

/// Registers dequant + gemm of Q4_K (HighBit = false) or Q5_K for ISA tag Tag.
template <class Tag, bool HighBit>
void register_q45(FormatKernels& k) {
  using Block = typename std::conditional<HighBit, BlockQ5_K, BlockQ4_K>::type;
  k.dequant = HighBit ? &dequant_q5_K : &dequant_q4_K;
  k.gemm = &gemm_by_dot<Block, &dot_q45_scalar<Block, HighBit>>;
#if defined(__AVX2__) || defined(__aarch64__)
  if constexpr (Tag::bytes >= 16) {
    using PK = PackedQ45<Tag, HighBit>;
    k.gemm_packed = &PK::gemm;
    k.packed_act_bytes = &PK::act_bytes;
    k.packed_act_relayout = &PK::relayout;
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (Tag::bytes == 32) {
    using K = Q45Simd<Tag, HighBit>;
    k.gemm = &K::template gemm<&RowsGemm<Tag, Q45Rows<HighBit>>::gemm>;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
  if constexpr (Tag::bytes == 64) {
    // AVX-512 prefill stays on the 16-row VNNI engine and the unpacked-tile engine above: side
    // by side with the rows engine they are 1.05-1.4x faster there (n = 8 and 64).
    using K = Q45Simd<Tag, HighBit>;
    k.gemm = &K::template gemm<&gemm512<Q45Fmt512<HighBit, Tag::vnni>, Tag::vnni>>;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
#if defined(__aarch64__)
  if constexpr (Tag::isa == Isa::neon) {
    using K = Q45Simd<Tag, HighBit>;
    k.gemm = &K::template gemm<&RowsGemm<Tag, Q45Rows<HighBit>>::gemm>;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
}

}  // namespace kq
}  // namespace
}  // namespace nibble::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
