// nibble: kernels of the float-activation formats' shared machinery plus the f32 format.
//
// Float-activation GEMM (f32, f16, nf4, fp4): Y[j, r] = sum_k w[r, k] * x[j, k] with fp32
// activations. A register tile of R weight rows x C activation rows keeps one vector
// accumulator per output; each step decodes R weight vectors once (f16 -> fp32, or the 4-bit
// code-book lookup times the block's absmax) and reuses them for C activation rows. GEMV
// (n = 1) uses tiles of R1 rows, which streams R1 weight rows at once with R1 independent
// accumulator chains. An output's operations (its vector accumulation over k, the horizontal
// sum, the scalar tail) do not depend on the tile it is computed in, so results do not depend
// on the row split between threads.
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/core/cpu.hpp"
#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

/// Register-tile shapes (GEMM R x C, GEMV R1) per tag: sized to the register file.
template <class Tag>
struct FloatTileShape {
  static constexpr int R = TagInfo<Tag>::wide ? 4 : (TagInfo<Tag>::family == Family::neon ? 4 : 2);
  static constexpr int C = TagInfo<Tag>::wide ? 6 : (TagInfo<Tag>::family == Family::neon ? 4 : 4);
  static constexpr int R1 = 4;
};

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
/// Generic float-activation tile, written once over the ISA tag (VF<Tag>: 8 lanes on AVX2, 16 on
/// AVX-512, 4 on NEON). Src is the weight decoder:
///   Src::kStep             values per step (a multiple of the lanes)
///   Src::kVec              vectors per step (kStep / lanes)
///   Src::decode(row, k, V out[kVec])  weights k .. k + kStep - 1 of one row as fp32 vectors
///   Src::bytes(k)          byte offset of weight k in a row (k a multiple of kStep)
///   Src::value(row, k)     one weight as float (for the scalar tail; formats whose cols are a
///                          multiple of kStep never use it)
template <class Tag, class Src>
struct FloatTile {
  using V = VF<Tag>;
  static constexpr int kL = Tag::bytes / 4;
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const float* X, std::int64_t xs,
                  std::int64_t cols, float* Y, std::int64_t ldy) {
    V acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = V(0.0f);
    const std::int64_t kv = cols / Src::kStep * Src::kStep;
    for (std::int64_t k = 0; k < kv; k += Src::kStep) {
      V w[R][Src::kVec];
      if constexpr (C == 1) {  // GEMV: stream the weight rows ahead of use
        for (int r = 0; r < R; ++r) __builtin_prefetch(W + r * wrb + Src::bytes(k) + 1024);
      }
      for (int r = 0; r < R; ++r) Src::decode(W + r * wrb, k, w[r]);
      for (int v = 0; v < Src::kVec; ++v) {
        for (int c = 0; c < C; ++c) {
          const V x = V::load_unaligned(X + c * xs + k + v * kL);
          for (int r = 0; r < R; ++r) acc[r][c] = fmadd<Tag>(w[r][v], x, acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        float s = xsimd::hadd(acc[r][c]);
        for (std::int64_t k = kv; k < cols; ++k) s += Src::value(W + r * wrb, k) * X[c * xs + k];
        Y[c * ldy + r] = s;
      }
    }
  }
};

/// Row-range GEMM driver over FloatTile for SIMD tags.
template <class Tag, class Src, class Sh = FloatTileShape<Tag>>
void float_gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  using K = FloatTile<Tag, Src>;
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* x = static_cast<const float*>(A);
  const std::int64_t xs = static_cast<std::int64_t>(arb / sizeof(float));
  walk_tiles<Sh::R, Sh::C, Sh::R1>(r0, r1, n, [&](std::int64_t r, std::int64_t c, int rr, int cc) {
    const std::uint8_t* wr = w + static_cast<std::size_t>(r) * wrb;
    const float* xc = x + c * xs;
    float* y = Y + c * ldy + r;
    if (n == 1) {
      tile_dispatch<K, Sh::R1, 1>(rr, cc, wr, wrb, xc, xs, cols, y, ldy);
    } else {
      tile_dispatch<K, Sh::R, Sh::C>(rr, cc, wr, wrb, xc, xs, cols, y, ldy);
    }
  });
}

#endif

/// Scalar float-activation GEMM: one sequential float accumulator per output.
template <class ScalarSrc>
void float_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                       std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                       std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* x = static_cast<const float*>(A);
  const std::int64_t xs = static_cast<std::int64_t>(arb / sizeof(float));
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w + static_cast<std::size_t>(r) * wrb;
    for (std::int64_t j = 0; j < n; ++j) {
      const float* xj = x + j * xs;
      float s = 0.0f;
      for (std::int64_t k = 0; k < cols; ++k) s += ScalarSrc::value(row, k) * xj[k];
      Y[j * ldy + r] = s;
    }
  }
}

/// One bf16 weight as float (a private copy of nibble::bf16_to_fp32 for kernel code; bf16-inl.hpp
/// and FloatGemv's scalar tail).
inline float bf16_value(const std::uint8_t* p) {
  const std::uint32_t bits = static_cast<std::uint32_t>(ld_u16(p)) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- f32 ----
struct F32Value {
  static float value(const std::uint8_t* row, std::int64_t k) { return ld_f32(row + 4 * k); }
};

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
template <class Tag>
struct F32Src : F32Value {
  static constexpr int kStep = Tag::bytes / 4;
  static constexpr int kVec = 1;
  static std::size_t bytes(std::int64_t k) { return static_cast<std::size_t>(k) * 4; }
  static void decode(const std::uint8_t* row, std::int64_t k, VF<Tag> out[1]) {
    out[0] = VF<Tag>::load_unaligned(reinterpret_cast<const float*>(row) + k);
  }
};
#endif

inline void f32_dequant(const void* src, std::int64_t n, float* dst) {
  std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// Weight element type of FloatGemv.
enum class FloatElem { f32, f16, bf16 };

/// GEMV body of the float formats (f32, f16, bf16 weights; fp32 activations), written once over
/// the ISA tag: the rows of a group (1 or 2; on AMD cores 4 or 8, four_streams()) share each
/// activation load, kU independent accumulators per row hide the fma latency, the rows of the
/// next group are prefetched into L2 (gemv_groups). No L1 prefetch of the current rows: on a Zen 5
/// core it cost 5-20 % of the cold rate (alternated runs, 1 thread, 4096 x 4096 GB/s with /
/// without: f16 avx512 23-26 / 28-29, bf16 avx2 26-28 / 30-31, f32 avx2 23.5 / 27.3); the hardware
/// prefetcher follows one or two sequential streams on its own. f16 and bf16 weights are converted
/// exactly (load_f16, load_bf16). The tail of a row (cols not a multiple of the step) is summed in
/// scalar code. Within a scheme a row's operations do not depend on the group size, so neither do
/// the results (four_streams() says where the schemes differ).
///
/// On other x86 cores (Intel's) a group is kStreamRows rows from as many far-apart runs
/// (gemv_row_streams), each run one sequential stream prefetched into L1 (docs/kernels.md, "Row
/// streams for the plain layouts"); on AMD's the four_streams() groups are themselves cut into
/// far-apart runs the same way. Elsewhere (Arm) the group size is as follows.
///
/// Group size outside four_streams() and row streams: one row (a single sequential weight stream)
/// while the activation row fits in kOneRowX bytes, so that it stays in L1 next to the stream; two
/// rows above that, which halves the activation reads. Measured on an earlier Zen 5 host, before
/// the AMD scheme of four_streams() (cold, 1 thread, alternated runs, GB/s of f16 weights on AVX2 /
/// AVX-512): 4096 x 4096: 4 rows 29.6 / 27.5, 2 rows 31.3 / 28.9, 1 row 34.5 / 31.2;
/// 4096 x 11008: 4 rows 30.0 / 28.3, 2 rows 36.0 / 27.7, 1 row 23.4 / 22.5.
template <class Tag, FloatElem E>
struct FloatGemv {
  static constexpr int kL = Tag::bytes / 4;               ///< floats per register
  static constexpr int kU = 4;                            ///< registers per row and step
  static constexpr int kE = E == FloatElem::f32 ? 4 : 2;  ///< bytes per weight
  static constexpr std::int64_t kOneRowX = 16384;
  static constexpr int kStreamRows = Tag::bytes == 64 ? 4 : 2;  ///< rows per group, row streams

  static float value(const std::uint8_t* row, std::int64_t k) {
    if constexpr (E == FloatElem::f16) return half_to_float(ld_u16(row + 2 * k));
    if constexpr (E == FloatElem::bf16) return bf16_value(row + 2 * k);
    return ld_f32(row + 4 * k);
  }

  /// FormatKernels::gemm: n == 1 here, otherwise the register-tile GEMM (Gemm).
  template <void (*Gemm)(const void*, std::size_t, std::int64_t, std::int64_t, std::int64_t,
                         const void*, std::size_t, std::int64_t, float*, std::int64_t)>
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) return Gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
    const auto* w = static_cast<const std::uint8_t*>(W);
    const auto* a = static_cast<const std::uint8_t*>(A);
    if (four_streams()) {
      if (amd_family25_tuning() && cols * 4 <= one_row_x_family25()) {
        return gemv_groups<typename FloatGemv<Ymm<Tag>, E>::OneRow, 1, 1>(w, wrb, r0, r1, Y, a, arb,
                                                                          cols);
      }
      if constexpr (E == FloatElem::f32) {
        return gemv_groups<FourStreams, 4, kFourStreamRows>(w, wrb, r0, r1, Y, a, arb, cols);
      } else if constexpr (E == FloatElem::f16 || Tag::bytes == 64) {
        // Eight adjacent rows, or under row streams kFourStreamRows far-apart ones (not for f16
        // on AMD's family-25 cores, see four_streams()).
        using Eight = typename FloatGemv<Ymm<Tag>, E>::EightRows;
        if constexpr (E == FloatElem::f16) {
          if (amd_family25_tuning())
            return gemv_groups<Eight, 8, 1>(w, wrb, r0, r1, Y, a, arb, cols);
        }
        return gemv_groups<Eight, 8, kFourStreamRows>(w, wrb, r0, r1, Y, a, arb, cols);
      } else {
        return gemv_groups<FloatGemv, 4, kFourStreamRows>(w, wrb, r0, r1, Y, a, arb, cols);
      }
    }
    // Row streams (gemv_groups): four far-apart rows on 64-byte tags, two on 32-byte tags
    // (their 16 registers hold two rows' kU sums beside the activations and the weights).
    if (cols * 4 <= kOneRowX) {
      return gemv_groups<FloatGemv, 1, kStreamRows>(w, wrb, r0, r1, Y, a, arb, cols);
    }
    gemv_groups<FloatGemv, 2, kStreamRows>(w, wrb, r0, r1, Y, a, arb, cols);
  }

  /// Whether the GEMV takes the streaming scheme measured on AMD cores (decided from the CPU
  /// vendor, or by the tests' override 2, amd_family25_tuning; Intel cores keep the scheme above,
  /// which they were tuned on):
  /// - f32: four rows at once, each prefetched kFourStreamsAhead bytes ahead into L1, without the
  ///   next group's L2 prefetch (gemv_groups' far). On a Zen 5 core (2-core VM, 28-35 GB/s from
  ///   DRAM on one core; 4096 x 4096, cold, 3 rounds alternating the settings, median ratio to
  ///   the paired read sweep) 0.69-0.77 with one row per group and `far`, 0.90-0.93 this way, on
  ///   AVX-512 and AVX2, 1 and 2 threads (docs/kernels.md, "The f32 GEMV on Zen 5"). An output's
  ///   operations are the same in both schemes, so are the results.
  /// - f16 (every tag) and bf16 (AVX-512 tags): eight rows at once with `far`, on 32-byte
  ///   vectors (the ymm view on AVX-512 tags) with two accumulators per row (EightRows). Same
  ///   kind of core, 4 rounds of alternated binaries: f16 0.74-0.87 -> 0.84-0.95, bf16 on
  ///   AVX-512 0.71-0.92 -> 0.85-0.92 (docs/kernels.md, "f16 / bf16 GEMV on Zen 5"); the zmm
  ///   body read 0.72-0.80 in every grouping and prefetch setting tried. Under row streams
  ///   (gemv_row_streams, the default on x86) a group is four far-apart rows of this body instead
  ///   of eight adjacent ones: on a later Zen 5 host (2-core VM, 37 GB/s on one core), 3 rounds,
  ///   4096 x 4096, 11008 x 4096 and 4096 x 11008, 1 / 2 threads, f16 0.72-0.90 -> 0.92-1.02 on
  ///   AVX2, AVX-VNNI and AVX-512, bf16 on AVX-512 0.72-0.85 -> 0.99-1.06 (the Intel scheme, four
  ///   far-apart zmm rows with kU accumulators, read 0.83-0.89; eight far-apart rows 0.72-0.73;
  ///   docs/kernels.md, "f16 / bf16 on Zen 5: row streams of the eight-row body"). These sums
  ///   are in another order than the Intel scheme's (8 lanes x 2 accumulators against Tag lanes
  ///   x kU), so the last bits of an output depend on the vendor, within the GEMV tolerance.
  /// - f16 on AMD's family-25 cores (Zen 3 / Zen 4; amd_family25_tuning): the eight adjacent
  ///   rows with `far`, not row streams. Zen 4 (2-core VM, 32 GB/s on one core), 4096 x 4096,
  ///   11008 x 4096, 4096 x 11008, AVX2 / AVX-512, 3 alternated rounds, medians of per-round
  ///   ratios: 1 thread 1.07 / 0.96, 1.09 / 1.00, 1.22 / 1.15, 2 threads 1.06 / 0.84, 1.03 /
  ///   0.98, 1.04 / 1.24; the ratio to the paired bandwidth rose in all twelve rows (0.65-0.84
  ///   -> 0.71-0.92); an in-process A/B beside ggml: 1.09-1.23 / 1.00-1.19 (1 / 2 threads).
  ///   bf16 measured level and keeps the row streams.
  /// - bf16 on AVX2 / AVX-VNNI: four rows at once with `far`, the body above (kU accumulators,
  ///   so the same results as the Intel scheme). Eight rows of EightRows read worse there at
  ///   4096 x 11008 (0.67 -> 0.58); four rows 0.70-0.88 -> 0.85-0.96 (4 rounds of alternated
  ///   binaries, 1 and 2 threads).
  static bool four_streams() {
    static const bool on = cpu_features().amd;
    return on || amd_family25_tuning();  // the latter: the tests' override 2 on any CPU
  }
  /// The largest activation row (bytes) that AMD's family-25 cores (amd_family25_tuning) read
  /// one weight row at a time on 32-byte vectors (the ymm view on AVX-512 tags) with kU
  /// accumulators and no software prefetch (OneRow): 12 KiB (3072 columns), for bf16 16 KiB.
  /// Zen 4 (2-core VM), an in-process A/B beside ggml (cold, rotated copies, 5 rounds, medians of
  /// per-round ratios against the schemes above, 1 thread, AVX-512 / AVX2 tables): f16 3072 x
  /// 1024 2.51 / 2.45, 6144 x 2048 1.37 / 1.36, 8192 x 3072 1.47 / 1.56; bf16 1.26-1.39 /
  /// 1.29-1.39; f32 1.04-1.26 / 0.99-1.13; 2 threads f16 1.07-2.27, bf16 1.08-1.30, f32
  /// 1.01-1.26; at 4096 columns f16 0.97-1.00, bf16 1.15-1.20, f32 0.82-0.86; f16 at 6144 columns
  /// 0.60; cache-resident bf16 at 4096 x 4096 reads 0.90-0.95 (docs/kernels.md, "Zen 4: short
  /// float rows one at a time"). These sums are in the order of the 32-byte tags' own
  /// row-stream scheme (8 lanes x kU accumulators).
  static std::int64_t one_row_x_family25() { return E == FloatElem::bf16 ? 16384 : 12288; }
  static constexpr std::size_t kFourStreamsAhead = 1024;
  /// Rows per group of the four_streams schemes under row streams (gemv_row_streams).
  static constexpr int kFourStreamRows = 4;
  /// The software prefetch of a Streams scheme: gemv_groups' `far` (the next group into L2, or
  /// the row streams' lines), each row's own lines kFourStreamsAhead on into L1, or none.
  enum class Prefetch { far, ahead, none };
  /// run() for gemv_groups with U accumulators per row and prefetch P (the group size is
  /// gemv_groups').
  template <int U, Prefetch P>
  struct Streams {
    template <int R, int C>
    static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                    std::int64_t cols, float* Y, std::int64_t ldy, std::size_t far = 0) {
      FloatGemv::run<R, C, U>(W, wrb, A, arb, cols, Y, ldy, P == Prefetch::far ? far : 0,
                              P == Prefetch::ahead ? kFourStreamsAhead : 0);
    }
  };
  /// One row at a time (gemv_groups<OneRow, 1, 1>) with kU accumulators and no software
  /// prefetch: the hardware prefetchers follow the single stream (one_row_x_family25).
  using OneRow = Streams<kU, Prefetch::none>;
  /// The four_streams scheme of f32: kU accumulators, the L1 prefetch instead of `far`.
  using FourStreams = Streams<kU, Prefetch::ahead>;
  /// The f16 / bf16 four_streams scheme: two accumulators per row, so that eight rows keep their
  /// sums in 16 registers (AVX2 has no more), and `far`.
  using EightRows = Streams<2, Prefetch::far>;

  /// The GEMV of R rows: U accumulators per row, each step U vectors of weights per row.
  template <int R, int C, int U = kU>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0,
                  std::size_t ahead = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kStep = kL * U;
    const float* x = reinterpret_cast<const float*>(A);
    VF<Tag> acc[R][U];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < U; ++u) acc[r][u] = VF<Tag>(0.0f);
    const std::int64_t kv = cols / kStep * kStep;
    for (std::int64_t k = 0; k < kv; k += kStep) {
      const std::size_t off = static_cast<std::size_t>(k) * kE;
      // Once per cache line: with `ahead` (four_streams) each row's lines that far on into L1,
      // with `far` the next group's lines into L2.
      if (off % 64 < static_cast<std::size_t>(kStep * kE)) {
        for (int r = 0; r < R; ++r) {
          for (int o = 0; o < (kStep * kE + 63) / 64; ++o) {
            const std::uint8_t* line = W + r * wrb + off + 64 * o;
            if (ahead) prefetch_l1(line + ahead);
            prefetch_far(line, far);
          }
        }
      }
      for (int u = 0; u < U; ++u) {
        const VF<Tag> xv = VF<Tag>::load_unaligned(x + k + u * kL);
        for (int r = 0; r < R; ++r) {
          const std::uint8_t* p = W + r * wrb + off + static_cast<std::size_t>(u * kL * kE);
          VF<Tag> w;
          if constexpr (E == FloatElem::f16) {
            w = load_f16<Tag>(p);
          } else if constexpr (E == FloatElem::bf16) {
            w = load_bf16<Tag>(p);
          } else {
            w = VF<Tag>::load_unaligned(reinterpret_cast<const float*>(p));
          }
          acc[r][u] = fmadd<Tag>(w, xv, acc[r][u]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      VF<Tag> t = acc[r][0];
      for (int u = 1; u < U; ++u) t = t + acc[r][u];
      float s = xsimd::hadd(t);
      for (std::int64_t k = kv; k < cols; ++k) s += value(W + r * wrb, k) * x[k];
      Y[r] = s;
    }
  }
};

#endif

template <class Tag>
void register_f32(KernelTable& t) {
  FormatKernels& k = entry(t, Format::f32);
  k.dequant = &f32_dequant;
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.gemm = &float_gemm_scalar<F32Value>;
  } else {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.gemm = &FloatGemv<Tag, FloatElem::f32>::template gemm<&float_gemm<Tag, F32Src<Tag>>>;
#endif
  }
}

}  // namespace
}  // namespace nibble::kernels
