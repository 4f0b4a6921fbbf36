// nibble: W8A8 (SmoothQuant) kernels: int8 weights (one fp32 scale per output row) times int8
// activations (one fp32 scale per activation row), exact int32 sums, fp32 output.
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp).
//
// Bit-identical results on every ISA: the integer dot product of a weight row and an activation
// row is exact on every path (whatever the lane grouping), and every path then produces the
// output with the same scalar operations, w8a8_out(): Y = (float(sum) * w_scale) * a_scale.
//
// Value ranges the kernels rely on: W any int8, A in [-127, 127] (nibble's quantizers never
// produce -128), cols <= 131072 so that |sum| <= 128 * 127 * cols fits in int32.
// Integer products: a plain int32 loop on the scalar path; one SIMD body for every other ISA over
// S8SumDot (kernels/detail/intrin-*.hpp): without VNNI the sign trick, maddubs(|w|, a * sign(w))
// + madd(., 1) (int16 pair sums below 2 * 128 * 127, no saturation); with VNNI (AVX-512 VNNI and
// AVX-VNNI) vpdpbusd on (w + 128) as unsigned bytes times a, minus 128 * sum(a) per activation
// row (computed once per call; the lanes wrap modulo 2^32, the final value is exact); NEON sdot
// with dotprod, otherwise smull + smlal2 + sadalp.
// Tails (cols not a multiple of the vector width): masked loads on 64-byte tags, else a scalar
// loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

/// One output value: the float operation order shared by every ISA.
inline float w8a8_out(std::int32_t sum, float w_scale, float a_scale) {
  return (static_cast<float>(sum) * w_scale) * a_scale;
}

/// sum_{k in [k0, cols)} w[k] * a[k] (exact in int32 within the documented ranges).
inline std::int32_t w8a8_dot_scalar(const std::int8_t* w, const std::int8_t* a, std::int64_t k0,
                                    std::int64_t cols) {
  std::int32_t s = 0;
  for (std::int64_t k = k0; k < cols; ++k)
    s += static_cast<std::int32_t>(w[k]) * static_cast<std::int32_t>(a[k]);
  return s;
}

inline void w8a8_gemm_scalar(const std::int8_t* W, const float* w_scale, std::int64_t r0,
                             std::int64_t r1, std::int64_t cols, const std::int8_t* A,
                             const float* a_scale, std::int64_t n, float* Y, std::int64_t ldy) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int8_t* w = W + r * cols;
    for (std::int64_t j = 0; j < n; ++j) {
      Y[j * ldy + r] = w8a8_out(w8a8_dot_scalar(w, A + j * cols, 0, cols), w_scale[r], a_scale[j]);
    }
  }
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
/// The SIMD body, one for every ISA tag: register tiles of R weight rows x C activation rows over
/// the whole row length, the int8 products by S8SumDot (intrin-*.hpp). 64-byte tags load the tail
/// of a row with masked loads; the others finish it with the scalar loop.
template <class Tag>
struct W8A8Tile {
  using D = S8SumDot<Tag>;
  static constexpr int kStep = Tag::bytes;
  static constexpr bool kMaskedTail = Tag::bytes == 64;
  /// D::kBias * sum(a) over the part of the row the vector loop covers (what the VNNI sums carry
  /// on top of the dot product; 0 without a bias).
  static std::int32_t offset(const std::int8_t* a, std::int64_t cols) {
    if constexpr (D::kBias == 0) {
      (void)a;
      (void)cols;
      return 0;
    } else {
      const VU8<Tag> bias(static_cast<std::uint8_t>(D::kBias));
      VI32<Tag> acc(0);
      std::int64_t k = 0;
      for (; k + kStep <= cols; k += kStep)
        acc = dot_u8s8<Tag>(acc, bias, loadu<std::int8_t, Tag>(a + k));
      if constexpr (kMaskedTail) {
        if (k < cols)
          acc = dot_u8s8<Tag>(acc, bias,
                              as<std::int8_t>(load_first<Tag>(a + k, static_cast<int>(cols - k))));
      }
      return static_cast<std::int32_t>(xsimd::hadd(as<std::uint32_t>(acc)));
    }
  }
  /// Writes Y[c * ldy + r] for r < R, c < C; `corr` (C entries or null) is subtracted from each
  /// sum (the offsets above). The R rows are rs rows apart (W, ws and Y alike; 1: adjacent). GEMV
  /// (C == 1) with far == kRowStreams (the rows are far-apart streams, gemv_groups) prefetches
  /// each row's lines kStreamAhead on into L1; with another non-zero `far` it prefetches the next
  /// row group into L2 in address order (prefetch_linear; per row it read 5-13 % slower on Zen 5, 1
  /// thread): once per 64 bytes of a row, so that every line of the group gets a prefetch. No L1
  /// prefetch on x86: 512 bytes ahead of each row it cost 10-18 % (Zen 5, cold, 1 thread, 3
  /// alternated rounds, 4096 / 11008 columns, GB/s: avx512 30.7 / 29.9 -> 33.9 / 32.8, avx2
  /// 30.3 / 28.6 -> 33.5 / 33.4, avxvnni 29.9 / 28.4 -> 34.1 / 30.7; two threads within
  /// noise). NEON keeps it (not measured there).
  template <int R, int C>
  static void run(const std::int8_t* W, const std::int8_t* A, std::int64_t cols,
                  const std::int32_t* corr, const float* ws, const float* as_, float* Y,
                  std::int64_t ldy, std::size_t far, std::int64_t rs) {
    constexpr std::int64_t kPrefetch = TagInfo<Tag>::family == Family::x86 ? 0 : 512;
    const auto row = [&](int r) { return W + static_cast<std::int64_t>(r) * rs * cols; };
    VI32<Tag> acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = VI32<Tag>(0);
    std::int64_t k = 0;
    for (; k + kStep <= cols; k += kStep) {
      if constexpr (C == 1) {
        if (k % 64 == 0) {
          if constexpr (kPrefetch > 0)
            for (int r = 0; r < R; ++r) prefetch_l1(row(r) + k + kPrefetch);
          if (far == kRowStreams) {
            for (int r = 0; r < R; ++r)
              prefetch_far(reinterpret_cast<const std::uint8_t*>(row(r) + k), far);
          } else if (far) {
            prefetch_linear(reinterpret_cast<const std::uint8_t*>(W) + far, R,
                            static_cast<std::size_t>(k), 64);
          }
        }
      }
      typename D::W w[R];
      for (int r = 0; r < R; ++r) w[r] = D::prep(loadu<std::int8_t, Tag>(row(r) + k));
      for (int c = 0; c < C; ++c) {
        const VI8<Tag> a = loadu<std::int8_t, Tag>(A + c * cols + k);
        for (int r = 0; r < R; ++r) acc[r][c] = D::dot(acc[r][c], w[r], a);
      }
    }
    if constexpr (kMaskedTail) {
      if (k < cols) {
        const int len = static_cast<int>(cols - k);
        typename D::W w[R];
        for (int r = 0; r < R; ++r)
          w[r] = D::prep(as<std::int8_t>(load_first<Tag>(row(r) + k, len)));
        for (int c = 0; c < C; ++c) {
          const VI8<Tag> a = as<std::int8_t>(load_first<Tag>(A + c * cols + k, len));
          for (int r = 0; r < R; ++r) acc[r][c] = D::dot(acc[r][c], w[r], a);
        }
        k = cols;
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        std::uint32_t s = xsimd::hadd(as<std::uint32_t>(acc[r][c]));  // modulo 2^32
        if (k < cols)
          s += static_cast<std::uint32_t>(w8a8_dot_scalar(row(r), A + c * cols, k, cols));
        if (corr != nullptr) s -= static_cast<std::uint32_t>(corr[c]);
        Y[c * ldy + r * rs] = w8a8_out(static_cast<std::int32_t>(s), ws[r * rs], as_[c]);
      }
    }
  }
};

template <class Tag>
void w8a8_gemm_simd(const std::int8_t* W, const float* w_scale, std::int64_t r0, std::int64_t r1,
                    std::int64_t cols, const std::int8_t* A, const float* a_scale, std::int64_t n,
                    float* Y, std::int64_t ldy) {
  using K = W8A8Tile<Tag>;
  // Register tiles: GEMM R x C (16 ymm registers on AVX2: 2 x 4 accumulators), GEMV R1 x 1:
  // one row per group on 64-byte tags, two on the others. Zen 5, cold, 1 thread, 3 alternated
  // rounds against 4 rows (GB/s, 4096 / 11008 x 4096): AVX-512 26.2-26.5 -> 29.4-30.8 with one
  // row (two: no change); AVX2 27.9-29.7 -> 29.9-31.3 and AVX-VNNI 26.6-28.0 -> 27.2-30.4 with two.
  constexpr int R = Tag::bytes == 32 ? 2 : 4, C = 4, R1 = Tag::bytes == 64 ? 1 : 2;
  // Activation rows in blocks of kCB (the offsets of one block live on the stack; no heap
  // containers in ISA TUs).
  constexpr std::int64_t kCB = 64;
  std::int32_t corr[kCB];
  for (std::int64_t cb = 0; cb < n; cb += kCB) {
    const std::int64_t nb = n - cb < kCB ? n - cb : kCB;
    const std::int8_t* Ab = A + cb * cols;
    const std::int32_t* cp = nullptr;
    if constexpr (S8SumDot<Tag>::kBias != 0) {
      for (std::int64_t j = 0; j < nb; ++j) corr[j] = K::offset(Ab + j * cols, cols);
      cp = corr;
    }
    // Row streams (gemv_groups): group i is row i of kStreams equal runs of q rows; the rows
    // after them go through walk_tiles from rs0.
    constexpr int kStreams = 4;
    const std::int64_t q = nb == 1 ? row_stream_runs<kStreams>(r1 - r0) : 0;
    for (std::int64_t i = 0; i < q; ++i) {
      K::template run<kStreams, 1>(W + (r0 + i) * cols, Ab, cols, cp, w_scale + r0 + i,
                                   a_scale + cb, Y + cb * ldy + r0 + i, ldy, kRowStreams, q);
    }
    const std::int64_t rs0 = r0 + kStreams * q;
    walk_tiles<R, C, R1>(rs0, r1, nb, [&](std::int64_t r, std::int64_t c, int rr, int cc) {
      const std::int8_t* wr = W + r * cols;
      const std::int8_t* ac = Ab + c * cols;
      const std::int32_t* co = cp != nullptr ? cp + c : nullptr;
      float* y = Y + (cb + c) * ldy + r;
      if (nb == 1) {
        // The next group's rows (R1 further on) into L2 while this one computes; 0 for the last.
        const std::size_t far =
            r + 2 * R1 <= r1 ? static_cast<std::size_t>(R1 * cols) : std::size_t{0};
        tile_dispatch<K, R1, 1>(rr, cc, wr, ac, cols, co, w_scale + r, a_scale + cb + c, y, ldy,
                                far, std::int64_t{1});
      } else {
        tile_dispatch<K, R, C>(rr, cc, wr, ac, cols, co, w_scale + r, a_scale + cb + c, y, ldy,
                               std::size_t{0}, std::int64_t{1});
      }
    });
  }
}
#endif

template <class Tag>
void register_w8a8(KernelTable& t) {
  t.w8a8_gemm = &w8a8_gemm_scalar;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (Tag::bytes != 0) t.w8a8_gemm = &w8a8_gemm_simd<Tag>;
#endif
}

}  // namespace
}  // namespace nibble::kernels
