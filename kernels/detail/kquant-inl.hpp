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

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"

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
// Written over a 64-byte ISA tag T (Avx512Tag, Avx512VnniTag) with xsimd batches and the helpers
// of kernels/detail/intrin-x86.hpp.
#if defined(NIBBLE_K_AVX512)

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
template <class T>
struct alignas(64) Unpacked512 {
  VU8<T> v[4];
  VF<T> fs, fm;
};

/// R unpacked weight rows (wu[b * R + i]) x C activation columns, all blocks. The int8 products
/// by dot_u8s8 (vpdpbusd, or maddubs + madd without VNNI: no saturation, every K-quant level is
/// <= 63, so a pair sum is <= 2 * 63 * 128).
template <class Fmt, class T, int R, int C>
inline void tile512u(const Unpacked512<T>* wu, std::int64_t nb, const PrepBlock* p, float* y,
                     std::int64_t ldy) {
  VF<T> acc[R][C];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[i][c] = VF<T>(0.f);
  for (std::int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const Unpacked512<T>& u = wu[b * R + i];
      const VU8<T> v0 = u.v[0], v1 = u.v[1], v2 = u.v[2], v3 = u.v[3];
      const VF<T> fs = u.fs;
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const PrepBlock& pb = p[c * nb + b];
        VI32<T> s = Fmt::kHasMin ? VI32<T>(0) : VI32<T>::load_aligned(pb.extra);
        s = dot_u8s8<T>(s, v0, VI8<T>::load_aligned(pb.qs));
        s = dot_u8s8<T>(s, v1, VI8<T>::load_aligned(pb.qs + 64));
        s = dot_u8s8<T>(s, v2, VI8<T>::load_aligned(pb.qs + 128));
        s = dot_u8s8<T>(s, v3, VI8<T>::load_aligned(pb.qs + 192));
        if constexpr (Fmt::kHasMin) {
          acc[i][c] = fmadd<T>(u.fm, VF<T>::load_aligned(reinterpret_cast<const float*>(pb.extra)),
                               acc[i][c]);
        }
        acc[i][c] = fmadd<T>(xsimd::to_float(s), fs * VF<T>(pb.da), acc[i][c]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) y[c * ldy + i] = xsimd::hadd(acc[i][c]);
}

/// All column tiles of `cn` prepared columns against R unpacked rows.
template <class Fmt, class T, int R>
inline void cols512u(const Unpacked512<T>* wu, std::int64_t nb, const PrepBlock* p, std::int64_t cn,
                     float* y, std::int64_t ldy) {
  constexpr int kC = 5;  // 4 x 5 accumulators + 6 unpacked weight vectors in registers
  std::int64_t c = 0;
  for (; c + kC <= cn; c += kC) tile512u<Fmt, T, R, kC>(wu, nb, p + c * nb, y + c * ldy, ldy);
  const PrepBlock* pc = p + c * nb;
  float* yc = y + c * ldy;
  switch (cn - c) {
    case 4:
      tile512u<Fmt, T, R, 4>(wu, nb, pc, yc, ldy);
      break;
    case 3:
      tile512u<Fmt, T, R, 3>(wu, nb, pc, yc, ldy);
      break;
    case 2:
      tile512u<Fmt, T, R, 2>(wu, nb, pc, yc, ldy);
      break;
    case 1:
      tile512u<Fmt, T, R, 1>(wu, nb, pc, yc, ldy);
      break;
    default:
      break;
  }
}

template <class Fmt, class T, int R>
inline void unpack_rows512(const std::uint8_t* w, std::size_t wrb, std::int64_t nb,
                           Unpacked512<T>* wu) {
  for (std::int64_t b = 0; b < nb; ++b)
    for (int i = 0; i < R; ++i) Fmt::unpack(w + i * wrb + b * Fmt::kBlockBytes, wu[b * R + i]);
}

#if defined(NIBBLE_K_AVX512VNNI)
/// Q4_K / Q5_K GEMM (n > 1) with weight rows in int32 lanes: a tile of 16 rows is repacked once
/// per call so that zmm (block b, sub-block sb, step t) holds, in lane i, the 4 unsigned levels
/// 32 * sb + 4t .. 4t + 3 of row i; each vpdpbusd multiplies it with 4 activation bytes of one
/// column broadcast from the Q8_K row as is (16 rows x 4 values x 1 column). Per sub-block the
/// int32 lanes are converted once and scaled by d * sc (float, per row lane); the mins enter as
/// -dmin * m * (bsum pair) per sub-block; a.d is applied once per block. T: a VNNI tag.
template <bool HighBit, class T>
struct Q45Rows16 {
  using Block = typename std::conditional<HighBit, BlockQ5_K, BlockQ4_K>::type;
  static constexpr int kZ = 80;    ///< zmm per block in the tile: 64 level vectors, 8 fs, 8 -fm
  static constexpr int kC = 8;     ///< activation columns per pass
  static constexpr int kMinN = 6;  ///< fewest columns this engine is used for

  /// Repacks block b of rows w + i * wrb (i < nr; rows past nr repeat the last one) into tile.
  static inline void repack_block(const std::uint8_t* w, std::size_t wrb, int nr, std::int64_t b,
                                  VU8<T>* dst) {
    const Block* x[16];
    for (int i = 0; i < 16; ++i)
      x[i] =
          reinterpret_cast<const Block*>(w + static_cast<std::size_t>(i < nr ? i : nr - 1) * wrb) +
          b;
    VI32<T> lo[16], hi[16], qh[16];
    for (int i = 0; i < 16; ++i) {
      lo[i] = loadu<std::int32_t, T>(x[i]->qs);
      hi[i] = loadu<std::int32_t, T>(x[i]->qs + 64);
    }
    transpose_i32<T>(lo);
    transpose_i32<T>(hi);
    if constexpr (HighBit) {
      // Only dwords 0-7 (the 32 qh bytes) of each row are used; the 64 bytes read stay inside
      // the block (qh is followed by the 128 bytes of qs).
      for (int i = 0; i < 16; ++i) qh[i] = loadu<std::int32_t, T>(x[i]->qh);
      transpose_i32<T>(qh);
    }
    const VU8<T> m4(static_cast<std::uint8_t>(0x0F));
    for (int D = 0; D < 32; ++D) {
      const VU8<T> Tv = as<std::uint8_t>(D < 16 ? lo[D] : hi[D - 16]);
      const int g = D / 8, t = D % 8;
      VU8<T> L = Tv & m4;
      VU8<T> H = as<std::uint8_t>(as<std::uint16_t>(Tv) >> 4) & m4;
      if constexpr (HighBit) {
        const VU8<T> q = as<std::uint8_t>(qh[t]);
        L = add_where<T>(L, q, VU8<T>(static_cast<std::uint8_t>(1 << (2 * g))), 16);
        H = add_where<T>(H, q, VU8<T>(static_cast<std::uint8_t>(2 << (2 * g))), 16);
      }
      L.store_aligned(reinterpret_cast<std::uint8_t*>(dst + 16 * g + t));
      H.store_aligned(reinterpret_cast<std::uint8_t*>(dst + 16 * g + 8 + t));
    }
    // d, dmin and the 12 scale bytes (the first 16 bytes of a block) of the 16 rows,
    // transposed: h[0] lane i = d | dmin << 16 of row i, h[1..3] = scale dwords u[0..2].
    VI32<T> h[16];
    // (64 bytes read per row, inside the block; dwords 0-3 are used)
    for (int i = 0; i < 16; ++i) h[i] = loadu<std::int32_t, T>(x[i]);
    transpose_i32<T>(h);
    const VU32<T> h0 = as<std::uint32_t>(h[0]), h1 = as<std::uint32_t>(h[1]);
    const VU32<T> h2 = as<std::uint32_t>(h[2]), h3 = as<std::uint32_t>(h[3]);
    const VU32<T> k3f(0x3F3F3F3Fu), k0f(0x0F0F0F0Fu), k03(0x03030303u);
    // bytes of sv[0] / sv[1]: sc[0..3] / sc[4..7]; of mv[0] / mv[1]: m[0..3] / m[4..7]
    // (the same bit formulas as unpack_scales_mins, 16 rows at a time)
    const VU32<T> sv[2] = {h1 & k3f, (h3 & k0f) | (((h1 >> 6) & k03) << 4)};
    const VU32<T> mv[2] = {h2 & k3f, ((h3 >> 4) & k0f) | (((h2 >> 6) & k03) << 4)};
    const VF<T> d = h2f_lo16<T>(h0);
    const VF<T> ndmin = VF<T>(0.f) - h2f_lo16<T>(h0 >> 16);
    const VU32<T> kff(0xFFu);
    for (int sb = 0; sb < 8; ++sb) {
      const int sh = 8 * (sb % 4);
      const VF<T> scf = xsimd::to_float(as<std::int32_t>((sv[sb / 4] >> sh) & kff));
      const VF<T> mf = xsimd::to_float(as<std::int32_t>((mv[sb / 4] >> sh) & kff));
      (d * scf).store_aligned(reinterpret_cast<float*>(dst + 64 + sb));
      (ndmin * mf).store_aligned(reinterpret_cast<float*>(dst + 72 + sb));
    }
  }

  /// C columns (Q8_K rows a[c], bsum-pair floats bs[c][b * 8 + sb]) against the repacked tile;
  /// writes rows 0 .. nr-1 of each column.
  template <int C>
  static inline void cols(const VU8<T>* tile, std::int64_t nb, const BlockQ8_K* const* a,
                          const float* const* bs, float* y, std::int64_t ldy, int nr) {
    VF<T> acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = VF<T>(0.f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const VU8<T>* t = tile + b * kZ;
      VF<T> blk[C];
#pragma GCC unroll 8
      for (int sb = 0; sb < 8; ++sb) {
        VI32<T> s[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) s[c] = VI32<T>(0);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const VU8<T> wv = t[8 * sb + k];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            s[c] = dot_u8s8<T>(s[c], wv, bcast4<T>(a[c][b].qs + 32 * sb + 4 * k));
        }
        const VF<T> fs = VF<T>::load_aligned(reinterpret_cast<const float*>(t + 64 + sb));
        const VF<T> fm = VF<T>::load_aligned(reinterpret_cast<const float*>(t + 72 + sb));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const VF<T> f = xsimd::to_float(s[c]);
          blk[c] = sb == 0 ? f * fs : fmadd<T>(f, fs, blk[c]);
          blk[c] = fmadd<T>(fm, VF<T>(bs[c][b * 8 + sb]), blk[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[c] = fmadd<T>(blk[c], VF<T>(a[c][b].d), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_first<T>(y + c * ldy, acc[c], nr);
  }

  /// Per-column extras of block a: the 8 bsum pairs (float).
  static constexpr int kExtra = 8;
  static inline void extra(const BlockQ8_K& a, float* e) {
    for (int sb = 0; sb < 8; ++sb)
      e[sb] = static_cast<float>(a.bsums[2 * sb] + a.bsums[2 * sb + 1]);
  }
};

/// gemm (FormatKernels::gemm) of a 16-row-lane policy P (Q45Rows16, Q6Rows16) on tag T: each
/// 16-row tile is repacked once (P::repack_block) and run against the columns kC at a time.
template <class P, class T>
void gemm_rows16(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
                 std::int64_t cols_, const void* A, std::size_t a_row_bytes, std::int64_t n,
                 float* Y, std::int64_t ldy) {
  constexpr int kC = P::kC, kZ = P::kZ, kE = P::kExtra;
  const std::int64_t nb = cols_ / 256;
  Scratch tbuf(static_cast<std::size_t>(nb * kZ) * 64);
  Scratch bbuf(static_cast<std::size_t>(n * nb * kE) * sizeof(float));
  VU8<T>* tile = static_cast<VU8<T>*>(tbuf.p);
  float* bsf = static_cast<float*>(bbuf.p);
  const std::uint8_t* a8 = static_cast<const std::uint8_t*>(A);
  for (std::int64_t j = 0; j < n; ++j) {
    const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(a8 + j * a_row_bytes);
    for (std::int64_t b = 0; b < nb; ++b) P::extra(ab[b], bsf + (j * nb + b) * kE);
  }
  const std::uint8_t* w = static_cast<const std::uint8_t*>(W);
  for (std::int64_t r = r0; r < r1; r += 16) {
    const int nr = static_cast<int>(r1 - r < 16 ? r1 - r : 16);
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
          P::template cols<1>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 2:
          P::template cols<2>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 3:
          P::template cols<3>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 4:
          P::template cols<4>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 5:
          P::template cols<5>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 6:
          P::template cols<6>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        case 7:
          P::template cols<7>(tile, nb, ap, bp, yj, ldy, nr);
          break;
        default:
          P::template cols<8>(tile, nb, ap, bp, yj, ldy, nr);
          break;
      }
    }
  }
}
#endif  // VNNI

/// The gemm entry of the tile engine (see FormatKernels::gemm).
template <class Fmt, class T>
void gemm512(const void* W, std::size_t w_row_bytes, std::int64_t r0, std::int64_t r1,
             std::int64_t cols, const void* A, std::size_t a_row_bytes, std::int64_t n, float* Y,
             std::int64_t ldy) {
  constexpr int kR = 4;
  const std::int64_t nb = cols / 256;
  if (nb <= 0 || r1 <= r0 || n <= 0) return;
#if defined(NIBBLE_K_AVX512VNNI)
  // The 16-row engine pays a repack per row tile: used from P::kMinN columns on (measured
  // break-even; below it the unpacked-tile engine is as fast or faster).
  if constexpr (T::vnni && Fmt::kHasRows16) {
    using P = typename Fmt::Rows16;
    if (n >= P::kMinN) {
      gemm_rows16<P, T>(W, w_row_bytes, r0, r1, cols, A, a_row_bytes, n, Y, ldy);
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
  Scratch wbuf(static_cast<std::size_t>(kR * nb) * sizeof(Unpacked512<T>));
  Unpacked512<T>* wu = static_cast<Unpacked512<T>*>(wbuf.p);
  for (std::int64_t j0 = 0; j0 < n; j0 += jc) {
    const std::int64_t cn = (n - j0 < jc) ? n - j0 : jc;
    for (std::int64_t c = 0; c < cn; ++c) {
      const BlockQ8_K* ab = reinterpret_cast<const BlockQ8_K*>(a + (j0 + c) * a_row_bytes);
      for (std::int64_t b = 0; b < nb; ++b) Fmt::prep(ab[b], p[c * nb + b]);
    }
    float* yj = Y + j0 * ldy + r0;
    std::int64_t r = 0;
    for (; r + kR <= rows; r += kR) {
      unpack_rows512<Fmt, T, kR>(w + r * w_row_bytes, w_row_bytes, nb, wu);
      cols512u<Fmt, T, kR>(wu, nb, p, cn, yj + r, ldy);
    }
    switch (rows - r) {
      case 3:
        unpack_rows512<Fmt, T, 3>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, T, 3>(wu, nb, p, cn, yj + r, ldy);
        break;
      case 2:
        unpack_rows512<Fmt, T, 2>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, T, 2>(wu, nb, p, cn, yj + r, ldy);
        break;
      case 1:
        unpack_rows512<Fmt, T, 1>(w + r * w_row_bytes, w_row_bytes, nb, wu);
        cols512u<Fmt, T, 1>(wu, nb, p, cn, yj + r, ldy);
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
template <bool HighBit, class T>
struct Q45Fmt512 {
  using Block = typename std::conditional<HighBit, BlockQ5_K, BlockQ4_K>::type;
  static constexpr bool kHasMin = true;
#if defined(NIBBLE_K_AVX512VNNI)
  static constexpr bool kHasRows16 = T::vnni;
  using Rows16 = Q45Rows16<HighBit, T>;
#else
  static constexpr bool kHasRows16 = false;
#endif
  /// Q4_K with vpdpbusd: the high nibbles are used as 16 * q (no shift; u8 products do not
  /// saturate in vpdpbusd) and the factor 1/16 goes into fs of the odd sub-blocks.
  static constexpr bool kHiTrick = !HighBit && T::vnni;
  static constexpr std::size_t kBlockBytes = sizeof(Block);

  static NIBBLE_K_INLINE void unpack(const std::uint8_t* blk, Unpacked512<T>& out) {
    const Block* x = reinterpret_cast<const Block*>(blk);
    const VU8<T> m4(static_cast<std::uint8_t>(0x0F));
    VU8<T> za, zb;  // za lane q: qs[32q + 0..15], zb lane q: qs[32q + 16..31]
    split_lanes<T>(loadu<std::uint8_t, T>(x->qs), loadu<std::uint8_t, T>(x->qs + 64), za, zb);
    const VU8<T> la = za & m4, lb = zb & m4;
    VU8<T> ha, hb;
    if constexpr (kHiTrick) {
      const VU8<T> mh(static_cast<std::uint8_t>(0xF0));
      ha = za & mh;
      hb = zb & mh;
    } else {
      ha = as<std::uint8_t>(as<std::uint16_t>(za) >> 4) & m4;
      hb = as<std::uint8_t>(as<std::uint16_t>(zb) >> 4) & m4;
    }
    VU8<T> v[4];
    zip64_lanes<T>(la, ha, v[0], v[1]);
    zip64_lanes<T>(lb, hb, v[2], v[3]);
    if constexpr (HighBit) {
      // Byte j of each 64-bit lane tests bit j of the qh bytes of that step.
      alignas(64) static constexpr std::uint64_t kBits[8] = {
          0x0101010101010101ull, 0x0202020202020202ull, 0x0404040404040404ull,
          0x0808080808080808ull, 0x1010101010101010ull, 0x2020202020202020ull,
          0x4040404040404040ull, 0x8080808080808080ull};
      const VU8<T> bitsel = as<std::uint8_t>(VU64<T>::load_aligned(kBits));
      for (int t = 0; t < 4; ++t) {
        std::uint64_t h8;
        std::memcpy(&h8, x->qh + 8 * t, 8);
        v[t] = add_where<T>(v[t], as<std::uint8_t>(VU64<T>(h8)), bitsel, 16);
      }
    }
    for (int t = 0; t < 4; ++t) out.v[t] = v[t];
    // 6-bit scales and mins, each spread to the two int32 lanes of its sub-block.
    VI32<T> sci, mi;
    float dv, dmv;
    kq_header_pairs<T>(x, sci, mi, dv, dmv);
    VF<T> d(dv);
    if constexpr (kHiTrick) {
      alignas(64) static constexpr float kHi[16] = {1, 1, 0.0625f, 0.0625f, 1, 1, 0.0625f, 0.0625f,
                                                    1, 1, 0.0625f, 0.0625f, 1, 1, 0.0625f, 0.0625f};
      d = d * VF<T>::load_aligned(kHi);
    }
    out.fs = xsimd::to_float(sci) * d;
    out.fm = xsimd::to_float(mi) * VF<T>(dmv);
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
#if defined(NIBBLE_K_X86)
  if constexpr (Tag::bytes == 32) {
    using K = Q45Simd<Tag, HighBit>;
    k.gemm = &K::template gemm<&RowsGemm<Tag, Q45Rows<HighBit>>::gemm>;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
#if defined(NIBBLE_K_AVX512)
  if constexpr (Tag::bytes == 64) {
    // AVX-512 prefill stays on the 16-row VNNI engine and the unpacked-tile engine above: side
    // by side with the rows engine they are 1.05-1.4x faster there (n = 8 and 64).
    using K = Q45Simd<Tag, HighBit>;
    k.gemm = &K::template gemm<&gemm512<Q45Fmt512<HighBit, Tag>, Tag>>;
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
