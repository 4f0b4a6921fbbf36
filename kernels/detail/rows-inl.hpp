// nibble: the integer GEMM engine (prefill, n > 1) shared by the integer-activation formats,
// written once over the ISA tag.
//
// A tile holds L = Tag::bytes / 4 weight rows in the int32 lanes of every register: for each
// group of 4 consecutive values (a "slot") of a block, one register whose lane i holds the 4
// levels (unsigned bytes) of row i. The tile is repacked once per call from the GGUF blocks (the
// format policy unpacks each row's levels into a scratch row; a generic in-register transpose
// turns L scratch rows into slot registers) and then reused by every activation column: the 4
// activation bytes of a slot are broadcast to all lanes and multiplied with one instruction
// (vpdpbusd / maddubs + pmaddwd / sdot) into L row sums. Per sub-block (a group of slots sharing
// one weight scale) the int32 sums are converted once and scaled by per-row float vectors.
//
// Format policy Pol (static members):
//   kValues, kSub         values per engine block, sub-blocks per engine block
//   kDepth<Tag>           slots whose products may be summed in int16 before widening (non-VNNI)
//   kActScalePerSub       the activation scale varies per sub-block (Q8_0) or per block (Q8_K)
//   repack<Tag>(rows, b, cols, lv, fs, fm) block b of the L rows (row i at rows[i]): lv[slot] lane
//   i =
//                                   the 4 levels (unsigned; Q8_0: S8Dot-prepared) of values
//                                   4 * slot .. + 3 of row i; per sub-block, per row lane: fs (the
//                                   weight scale) and fm (the multiplier of the activation extra)
//   act(arow, b, &qs, da, e)        activation block b: kValues int8 values, the activation
//                                   scale(s) and per sub-block extras e (sums for mins/offsets)
//   dot<Tag>(acc, level_reg, act4)  the int8 product of one slot (dot_u8s8 or S8Dot)
//   kExtraScaled (optional, default true; kActScalePerSub policies only) false: the extra term
//                                   is fm * e, not da * fm * e (Q8_1's sum s holds the scale)
// Result per output: sum over blocks, sub-blocks of da * (fs * S + fm * e).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// 64-byte aligned scratch memory (no std containers in kernel code).
struct AlignedBuf {
  void* p = nullptr;
  explicit AlignedBuf(std::size_t bytes) : p(::operator new(bytes, std::align_val_t(64))) {}
  ~AlignedBuf() { ::operator delete(p, std::align_val_t(64)); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

/// Pol::kExtraScaled, true when the policy does not declare it.
template <class Pol, class = void>
struct ExtraScaled : std::true_type {};
template <class Pol>
struct ExtraScaled<Pol, std::void_t<decltype(Pol::kExtraScaled)>>
    : std::bool_constant<Pol::kExtraScaled> {};

template <class Tag, class Pol>
struct RowsGemm {
  static constexpr int kL = Tag::bytes / 4;        ///< rows per tile
  static constexpr int kSlots = Pol::kValues / 4;  ///< level registers per block
  static constexpr int kPer = kSlots / Pol::kSub;  ///< slots per sub-block
  static constexpr int kC = kL >= 16 ? 8 : 4;      ///< activation columns per pass
  static constexpr int kDepth = Pol::template kDepth<Tag>;
  static_assert(kSlots % kL == 0, "a block is a whole number of L x L transposes");

  /// One repacked block of the tile.
  struct Tile {
    VU8<Tag> lv[kSlots];
    VF<Tag> fs[Pol::kSub], fm[Pol::kSub];
  };
  /// Per activation column and block: scale(s) and extras.
  struct ColBlk {
    float da[Pol::kActScalePerSub ? Pol::kSub : 1];
    float e[Pol::kSub];
  };

  static void repack(const std::uint8_t* w, std::size_t wrb, int nr, std::int64_t b,
                     std::int64_t cols, Tile& t) {
    const std::uint8_t* rows[kL];
    for (int i = 0; i < kL; ++i) rows[i] = w + static_cast<std::size_t>(i < nr ? i : nr - 1) * wrb;
    Pol::template repack<Tag>(rows, b, cols, t.lv, t.fs, t.fm);
  }

  /// C (<= kC) columns against one repacked tile of nb blocks; stores the nr valid row lanes.
  /// Activations of the pass are interleaved: q[(b * kC + c) * kValues + ...], x[b * kC + c].
  template <int C>
  static void cols(const Tile* tile, std::int64_t nb, const std::int8_t* q, const ColBlk* x,
                   float* y, std::int64_t ldy, int nr) {
    VF<Tag> acc[C];
    for (int c = 0; c < C; ++c) acc[c] = VF<Tag>(0.0f);
    for (std::int64_t b = 0; b < nb; ++b, q += kC * Pol::kValues, x += kC) {
      const Tile& t = tile[b];
      VF<Tag> blk[C];
      for (int c = 0; c < C; ++c) blk[c] = VF<Tag>(0.0f);
#pragma GCC unroll 16
      for (int s = 0; s < Pol::kSub; ++s) {
        VI32<Tag> sum[C];
        for (int c = 0; c < C; ++c) sum[c] = VI32<Tag>(0);
        for (int k0 = 0; k0 < kPer; k0 += kDepth) {
          if constexpr (kDepth == 1) {
            for (int c = 0; c < C; ++c) {
              sum[c] =
                  Pol::template dot<Tag>(sum[c], t.lv[s * kPer + k0],
                                         bcast4<Tag>(q + c * Pol::kValues + 4 * (s * kPer + k0)));
              // without an int8 dot instruction dot() is a product plus an add, which GCC
              // would otherwise reorder into a tree as below
              if constexpr (!kInt8Dots<Tag>) keep_order(sum[c]);
            }
          } else {
            // int16 pair sums of kDepth slots, widened once (bounded by the policy's kDepth).
            // Each sum stays a chain (keep_order): otherwise GCC adds the C x kDepth products
            // up as a tree, keeping them live, and spilled them to the stack wherever cols()
            // was not inlined (the packed GEMM on AVX2: 362 stack accesses -> 12, 1.4-1.6x).
            VI16<Tag> s16[C];
            for (int c = 0; c < C; ++c) s16[c] = VI16<Tag>(0);
            for (int k = k0; k < k0 + kDepth; ++k) {
              for (int c = 0; c < C; ++c) {
                s16[c] =
                    s16[c] + madd_u8s8<Tag>(t.lv[s * kPer + k],
                                            bcast4<Tag>(q + c * Pol::kValues + 4 * (s * kPer + k)));
                keep_order(s16[c]);
              }
            }
            for (int c = 0; c < C; ++c)
              sum[c] = sum[c] + madd_i16<Tag>(s16[c], VI16<Tag>(static_cast<std::int16_t>(1)));
          }
        }
        for (int c = 0; c < C; ++c) {
          if constexpr (Pol::kActScalePerSub) {
            const VF<Tag> da(x[c].da[s]);
            blk[c] = fmadd<Tag>(xsimd::to_float(sum[c]), t.fs[s] * da, blk[c]);
            if constexpr (ExtraScaled<Pol>::value) {
              blk[c] = fmadd<Tag>(t.fm[s] * da, VF<Tag>(x[c].e[s]), blk[c]);
            } else {
              blk[c] = fmadd<Tag>(t.fm[s], VF<Tag>(x[c].e[s]), blk[c]);
            }
          } else {
            blk[c] = fmadd<Tag>(xsimd::to_float(sum[c]), t.fs[s], blk[c]);
            blk[c] = fmadd<Tag>(t.fm[s], VF<Tag>(x[c].e[s]), blk[c]);
          }
        }
      }
      for (int c = 0; c < C; ++c) {
        if constexpr (Pol::kActScalePerSub) {
          acc[c] = acc[c] + blk[c];
        } else {
          acc[c] = fmadd<Tag>(blk[c], VF<Tag>(x[c].da[0]), acc[c]);
        }
      }
    }
    for (int c = 0; c < C; ++c) {
      alignas(64) float o[kL];
      acc[c].store_aligned(o);
      for (int i = 0; i < nr; ++i) y[c * ldy + i] = o[i];
    }
  }

  template <int C>
  static void cols_dispatch(int cc, const Tile* tile, std::int64_t nb, const std::int8_t* q,
                            const ColBlk* x, float* y, std::int64_t ldy, int nr) {
    if (cc == C) return cols<C>(tile, nb, q, x, y, ldy, nr);
    if constexpr (C > 1) cols_dispatch<C - 1>(cc, tile, nb, q, x, y, ldy, nr);
  }

  /// The activation rows of one call, interleaved per pass of kC columns (the last pass padded
  /// with its first column) as cols() reads them.
  struct Acts {
    std::int64_t nb, passes;
    AlignedBuf cbuf, qbuf;
    Acts(const std::uint8_t* a, std::size_t arb, std::int64_t n, std::int64_t cols_)
        : nb(Pol::blocks(cols_)),
          passes((n + kC - 1) / kC),
          cbuf(static_cast<std::size_t>(passes * kC * nb) * sizeof(ColBlk)),
          qbuf(static_cast<std::size_t>(passes * kC * nb) * Pol::kValues) {
      for (std::int64_t p = 0; p < passes; ++p) {
        for (int c = 0; c < kC; ++c) {
          const std::int64_t j = p * kC + c < n ? p * kC + c : p * kC;
          const std::uint8_t* arow = a + static_cast<std::size_t>(j) * arb;
          for (std::int64_t b = 0; b < nb; ++b) {
            const std::int64_t k = (p * nb + b) * kC + c;
            Pol::act(arow, cols_, b, q() + k * Pol::kValues, cb()[k].da, cb()[k].e);
          }
        }
      }
    }
    ColBlk* cb() const { return static_cast<ColBlk*>(cbuf.p); }
    std::int8_t* q() const { return static_cast<std::int8_t*>(qbuf.p); }
    /// Every pass against the nb blocks of `tile` (nr valid rows) into Y + r.
    void run(const Tile* tile, std::int64_t n, float* Y, std::int64_t ldy, std::int64_t r,
             int nr) const {
      for (std::int64_t p = 0; p < passes; ++p) {
        const int cc = static_cast<int>(n - p * kC < kC ? n - p * kC : kC);
        cols_dispatch<kC>(cc, tile, nb, q() + p * nb * kC * Pol::kValues, cb() + p * nb * kC,
                          Y + p * kC * ldy + r, ldy, nr);
      }
    }
  };

  /// FormatKernels::gemm for n > 1 (the activation rows are in the format's relayout layout).
  static void gemm(const void* Wv, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols_, const void* Av, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    const auto* w = static_cast<const std::uint8_t*>(Wv);
    const Acts acts(static_cast<const std::uint8_t*>(Av), arb, n, cols_);
    AlignedBuf tbuf(static_cast<std::size_t>(acts.nb) * sizeof(Tile));
    Tile* tile = static_cast<Tile*>(tbuf.p);
    for (std::int64_t r = r0; r < r1; r += kL) {
      const int nr = static_cast<int>(r1 - r < kL ? r1 - r : kL);
      for (std::int64_t b = 0; b < acts.nb; ++b)
        repack(w + static_cast<std::size_t>(r) * wrb, wrb, nr, b, cols_, tile[b]);
      acts.run(tile, n, Y, ldy, r, nr);
    }
  }

  /// FormatKernels::gemm_packed for n > 1: the 16-row groups [g0, g1) of packed weights
  /// (nibble/packed.hpp), tiles read by Pol::repack_packed (no transpose).
  static void gemm_packed(const std::uint8_t* P, std::int64_t g0, std::int64_t g1,
                          std::int64_t cols_, const std::uint8_t* A, std::size_t arb,
                          std::int64_t n, float* Y, std::int64_t ldy) {
    constexpr int kGroup = 16;
    static_assert(kGroup % kL == 0, "a group is a whole number of tiles");
    const Acts acts(A, arb, n, cols_);
    const std::size_t gblock = kGroup * Pol::kBlockBytes;
    AlignedBuf tbuf(static_cast<std::size_t>(acts.nb) * sizeof(Tile));
    Tile* tile = static_cast<Tile*>(tbuf.p);
    for (std::int64_t g = g0; g < g1; ++g) {
      const std::uint8_t* G = P + static_cast<std::size_t>(g) * kGroup * Pol::row_bytes(cols_);
      for (int h = 0; h < kGroup / kL; ++h) {
        for (std::int64_t b = 0; b < acts.nb; ++b)
          Pol::template repack_packed<Tag>(G + static_cast<std::size_t>(b) * gblock, h, b, cols_,
                                           tile[b].lv, tile[b].fs, tile[b].fm);
        acts.run(tile, n, Y, ldy, g * kGroup + h * kL, kL);
      }
    }
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
