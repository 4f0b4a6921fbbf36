// nibble: Q8_0 kernels (34-byte blocks: fp16 d + 32 int8). Activations are Q8_0 blocks
// (quantize_act_q8_0). Every ISA computes an output in the same operation order, that of
// ggml's AVX2 vec_dot_q8_0_q8_0 (and nibble::ref::dot_q8_0_q8_0):
//   for each block b in order, d = float(w.d) * float(a.d); 8 int32 lanes, lane i = the sum of
//   the products of bytes 4i..4i+3 (exact); acc[i] = fma(d, float(lane i), acc[i]);
//   result = ((acc0+acc4)+(acc2+acc6)) + ((acc1+acc5)+(acc3+acc7)).
// So scalar, AVX2, AVX-512, AVX-512 VNNI, NEON and NEON dotprod give bit-identical GEMV
// results (the integer lanes are exact, the float steps are the same IEEE operations); so do
// their GEMMs (n > 1), except AVX-512, whose GEMM tile holds two blocks per register (see
// Q8_0TileZmm) and may differ in the last bits.
// Integer products: AVX2 / AVX-512 maddubs + madd with the sign trick; VNNI vpdpbusd on
// (w + 128) accumulated onto -128 * sum(a); NEON sdot, or smull + sadalp without dotprod.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kQ8_0Blk = 34;

// ---- scalar ----
inline void q8_0_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 32; ++b, p += kQ8_0Blk, dst += 32) {
    const float d = half_to_float(ld_u16(p));
    for (int j = 0; j < 32; ++j)
      dst[j] = static_cast<float>(static_cast<std::int8_t>(p[2 + j])) * d;
  }
}

inline float q8_0_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t b = 0; b < nb; ++b, w += kQ8_0Blk, a += kQ8_0Blk) {
    const float d = half_to_float(ld_u16(w)) * half_to_float(ld_u16(a));
    const auto* wq = reinterpret_cast<const std::int8_t*>(w + 2);
    const auto* aq = reinterpret_cast<const std::int8_t*>(a + 2);
    for (int i = 0; i < 8; ++i) {
      int s = 0;
      for (int t = 4 * i; t < 4 * i + 4; ++t) s += int(wq[t]) * int(aq[t]);
      acc[i] = std::fma(d, static_cast<float>(s), acc[i]);
    }
  }
  return hsum8_ordered(acc);
}

inline void q8_0_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                             std::int64_t cols, const void* A, std::size_t arb, std::int64_t n,
                             float* Y, std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t r = r0; r < r1; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      Y[j * ldy + r] = q8_0_dot_scalar(w + static_cast<std::size_t>(r) * wrb,
                                       a + static_cast<std::size_t>(j) * arb, cols / 32);
    }
  }
}

// ---- SIMD (one body for AVX2, AVX-VNNI, AVX-512 (VNNI), NEON (dotprod)) ----
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// Q8_0 on one SIMD tag. A register holds kS blocks' quants (AVX-512: 2) or 1 / kV of one
/// (NEON: half). Activations are re-laid out once per call (relayout): per row, nbp = nb rounded
/// up to kS blocks (zero padded),
///   int8  qs[nbp * 32]    the quants in order,
///   int32 bias[nbp * 8]   -S8Dot::kBias * (sum of each 4 consecutive quants): the initial value
///                         of the dot of each 4-byte group (cancels VNNI's +128 weight bias),
///   float d[nbp]          the block scales as fp32 (exact).
/// GEMV keeps ggml's float order (block by block, 8 lane sums, fma with float(w.d) * float(a.d),
/// hsum8_ordered), so every ISA returns the scalar table's bits; on AVX-512 the two blocks of a
/// register are added to the same 8 lanes one after the other (a half swap in between).
template <class Tag>
struct Q8_0Rows;

template <class Tag>
struct Q8_0Simd {
  static constexpr int kRowsMinN = 4;  ///< n from which the repacked engine (rows-inl.hpp) runs
  using D = S8Dot<Tag>;
  static constexpr int kW = Tag::bytes;
  static constexpr bool kLinearL2 = kLinearGroupPrefetch<Tag>;  // see simd.hpp
  static constexpr int kS = kW >= 32 ? kW / 32 : 1;             ///< blocks per register
  static constexpr int kV = kW >= 32 ? 1 : 32 / kW;             ///< registers per block

  /// Activation rows are padded to an even number of blocks on every x86 tag (the AVX-512 GEMM
  /// reads two blocks per register), so that the 32-byte GEMV of the AVX-512 tables reads the
  /// same layout.
  static constexpr int kPad = TagInfo<Tag>::family == Family::x86 ? 2 : kS;
  static std::int64_t padded(std::int64_t cols) { return (cols / 32 + kPad - 1) / kPad * kPad; }
  static std::size_t act_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(padded(cols)) * (32 + 32 + 4);
  }
  struct Act {
    const std::int8_t* qs;
    const std::int32_t* bias;
    const float* d;
  };
  static Act act(const std::uint8_t* row, std::int64_t cols) {
    const std::int64_t nbp = padded(cols);
    return {reinterpret_cast<const std::int8_t*>(row),
            reinterpret_cast<const std::int32_t*>(row + nbp * 32),
            reinterpret_cast<const float*>(row + nbp * 64)};
  }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const std::uint8_t*>(src);
    auto* out = static_cast<std::uint8_t*>(dst);
    std::memset(out, 0, act_bytes(cols));
    const Act a = act(out, cols);
    auto* qs = const_cast<std::int8_t*>(a.qs);
    auto* bias = const_cast<std::int32_t*>(a.bias);
    auto* d = const_cast<float*>(a.d);
    for (std::int64_t b = 0; b < cols / 32; ++b, in += kQ8_0Blk) {
      std::memcpy(qs + 32 * b, in + 2, 32);
      for (int g = 0; g < 8; ++g) {  // from the source block, not the copy just stored
        int sum = 0;
        for (int t = 0; t < 4; ++t) sum += static_cast<std::int8_t>(in[2 + 4 * g + t]);
        bias[8 * b + g] = -D::kBias * sum;
      }
      d[b] = half_to_float(ld_u16(in));
    }
  }

  /// R weight rows x C activation rows, all blocks. GEMV (C == 1), when `far` is non-zero,
  /// prefetches the next row group into L2 (see kLinearL2), and on NEON its row streams into L1
  /// a little ahead. x86 reads faster without the L1 prefetch (Zen 5, cold, 1 thread, 3
  /// alternated rounds, 4096 / 11008 columns, GB/s: avx2 38.3 / 38.3 -> 39.7 / 40.2, avxvnni
  /// 33.4 / 32.3 -> 36.6 / 34.8; the AVX-512 tables' ymm view, 4 rounds, ratio to the rows'
  /// paired bandwidth, 1 / 2 threads: 4096 x 4096 0.89 / 0.92 -> 0.89 / 0.95, 11008 x 4096
  /// 0.88 / 0.93 -> 0.90 / 0.98, 4096 x 11008 0.92 / 0.89 -> 0.93 / 0.92; rerun from the
  /// committed build, 3 rounds: 0.90 / 0.92 -> 0.91 / 0.92, 11008 x 4096 0.90 / 0.96 -> 0.92 /
  /// 0.96, the unchanged AVX2 rows beside them +0.01-0.02: a small gain at most, no loss). An
  /// earlier two-thread loss on AVX-512 was the host's bandwidth noise.
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t ldy,
                  std::size_t far = 0) {
    // Every loop over rows, columns and registers is unrolled in the source (static_for): with
    // plain loops over acc[R][C][kV], GCC 12 kept three of the four accumulators of the AVX-512
    // tables' ymm GEMV on the stack (a store and a reload per block in the fma's dependency
    // chain; Zen 5, 1 thread, L2- / L3-resident 30.6 / 32.1 GB/s against 42.0 / 44.8 with them in
    // registers).
    constexpr int kPrefetch = TagInfo<Tag>::family == Family::x86 ? 0 : 512;
    VF<Tag> acc[R][C][kV];
    Act a[C];
    static_for<C>([&](auto cc) {
      constexpr int c = decltype(cc)::value;
      a[c] = act(A + c * arb, cols);
      static_for<R * kV>([&](auto k) {
        acc[decltype(k)::value / kV][c][decltype(k)::value % kV] = VF<Tag>(0.0f);
      });
    });
    for (std::int64_t b = 0; b < nb; b += kS) {
      const bool pair = kS == 2 && b + 1 < nb;
      VI8<Tag> w[R][kV];
      float dw[R][kS];
      if constexpr (C == 1) {
        if (kLinearL2 && far_group(far)) {
          prefetch_linear(W + far, R, static_cast<std::size_t>(b) * kQ8_0Blk, kS * kQ8_0Blk);
        }
      }
      static_for<R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        const std::uint8_t* p = W + r * wrb + static_cast<std::size_t>(b) * kQ8_0Blk;
        if constexpr (C == 1) {
          // Every line of the step's kS * 34 bytes: with 68 (AVX-512) one prefetch per step would
          // skip one line in 17 of each stream, and each skipped line is a demand miss.
          for (int o = 0; o < kS * static_cast<int>(kQ8_0Blk); o += 64) {
            if constexpr (kPrefetch > 0) prefetch_l1(p + kPrefetch + o);
            if (!kLinearL2 || far == kRowStreams) prefetch_far(p + o, far);
          }
        }
        if constexpr (kS == 2) {
          w[r][0] = as<std::int8_t>(load_halves<Tag>(p + 2, pair ? p + 2 + kQ8_0Blk : p + 2));
          dw[r][1] = pair ? h2f<Tag>(ld_u16(p + kQ8_0Blk)) : 0.0f;
        } else {
          static_for<kV>([&](auto vc) {
            constexpr int v = decltype(vc)::value;
            w[r][v] = loadu<std::int8_t, Tag>(p + 2 + v * kW);
          });
        }
        dw[r][0] = h2f<Tag>(ld_u16(p));
      });
      static_for<C * kV>([&](auto k) {
        constexpr int c = decltype(k)::value / kV, v = decltype(k)::value % kV;
        const VI8<Tag> x = loadu<std::int8_t, Tag>(a[c].qs + 32 * b + v * kW);
        const VI32<Tag> bias = loadu<std::int32_t, Tag>(a[c].bias + 8 * b + v * (kW / 4));
        static_for<R>([&](auto rc) {
          constexpr int r = decltype(rc)::value;
          const VF<Tag> s = xsimd::to_float(D::dot(bias, w[r][v], x));
          acc[r][c][v] = fmadd<Tag>(VF<Tag>(dw[r][0] * a[c].d[b]), s, acc[r][c][v]);
          if constexpr (kS == 2) {
            if (pair) {
              acc[r][c][v] =
                  fmadd<Tag>(VF<Tag>(dw[r][1] * a[c].d[b + 1]), swap_halves<Tag>(s), acc[r][c][v]);
            }
          }
        });
      });
    }
    static_for<R * C>([&](auto k) {
      constexpr int r = decltype(k)::value / C, c = decltype(k)::value % C;
      alignas(64) float t[kV * (kW / 4)];
      static_for<kV>([&](auto vc) {
        constexpr int v = decltype(vc)::value;
        acc[r][c][v].store_aligned(t + v * (kW / 4));
      });
      Y[c * ldy + r] = hsum8_ordered(t);  // lanes 0..7 (AVX-512: the lower half)
    });
  }

  static void gemm(const void* Wv, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* Av, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    constexpr int kR = 4, kC = kW == 64 ? 4 : 3, kR1 = 4;
    const auto* w = static_cast<const std::uint8_t*>(Wv);
    const auto* a = static_cast<const std::uint8_t*>(Av);
    const std::int64_t nb = cols / 32;
    if (n == 1) {
      // On AVX-512 tables the GEMV runs the 32-byte body on ymm registers (Ymm; EVEX vpdpbusd):
      // it streams faster cold than the 64-byte one (Zen 5, 4096 x 4096, alternated rounds, GB/s:
      // 1 thread 29.6-32.1 -> 34.1-35.5, 2 threads 54.7-56.4 -> 60.4-66.0; L3-resident rows
      // 50 -> 39-40). Both read the same activation layout (kPad).
      if constexpr (!std::is_same_v<Ymm<Tag>, Tag>) {
        return Q8_0Simd<Ymm<Tag>>::gemm(Wv, wrb, r0, r1, cols, Av, arb, n, Y, ldy);
      } else {
        // AMD's family-25 cores (Zen 3 / Zen 4): adjacent row groups with the next group's L2
        // prefetch, not row streams. Zen 4 (2-core VM, 32 GB/s from DRAM on one core), cold, the
        // builds alternated over 3 rounds, median ratios, 1 thread: 4096 x 4096 1.09 (AVX-512) /
        // 1.36 (AVX2), 11008 x 4096 1.18 / 1.24, 4096 x 11008 1.33 / 1.37 (0.65-0.74 -> 0.81-0.90
        // of `membw`); 2 threads level (0.94-1.05); Zen 3 not measured (docs/kernels.md, "Zen 4:
        // the row streams, adjacent groups for Q8_0 and f16"). Same results either way.
        if (amd_family25_tuning()) {
          return gemv_groups<Q8_0Simd, kR1, 1>(w, wrb, r0, r1, Y, a, arb, nb, cols);
        }
        return gemv_groups<Q8_0Simd, kR1>(w, wrb, r0, r1, Y, a, arb, nb, cols);
      }
    }
    if (n >= kRowsMinN)
      return RowsGemm<Tag, Q8_0Rows<Tag>>::gemm(Wv, wrb, r0, r1, cols, Av, arb, n, Y, ldy);
    walk_tiles<kR, kC, kR1>(r0, r1, n, [&](std::int64_t r, std::int64_t c, int rr, int cc) {
      tile_dispatch<Q8_0Simd, kR, kC>(rr, cc, w + static_cast<std::size_t>(r) * wrb, wrb,
                                      a + static_cast<std::size_t>(c) * arb, arb, nb, cols,
                                      Y + c * ldy + r, ldy);
    });
  }

  /// y = x * d per block (the reference dequantizer's single float multiply).
  static void dequant(const void* src, std::int64_t n, float* dst) {
    constexpr int kL = kW / 4;
    const auto* p = static_cast<const std::uint8_t*>(src);
    for (std::int64_t b = 0; b < n / 32; ++b, p += kQ8_0Blk, dst += 32) {
      const VF<Tag> d(h2f<Tag>(ld_u16(p)));
      for (int k = 0; k < 32; k += kL) {
        (xsimd::to_float(widen_i8_i32<Tag>(p + 2 + k)) * d).store_unaligned(dst + k);
      }
    }
  }
};
/// The Q8_0 policy of the integer GEMM engine (rows-inl.hpp): an engine block is 64 values
/// (two Q8_0 blocks) on AVX-512 and 32 elsewhere, each Q8_0 block a sub-block with its own
/// weight and activation scales; signed weights through S8Dot (VNNI: w + 128, the activation
/// extra e = -128 * sum(a) from the relayout's bias sums).
template <class Tag>
struct Q8_0Rows {
  using S = Q8_0Simd<Tag>;
  static constexpr int kValues = Tag::bytes == 64 ? 64 : 32, kSub = kValues / 32;
  static constexpr bool kActScalePerSub = true;
  template <class T>
  static constexpr int kDepth = 1;
  static std::int64_t blocks(std::int64_t cols) { return (cols / 32 + kSub - 1) / kSub; }

  template <class T>
  static void repack(const std::uint8_t* const* rows, std::int64_t eb, std::int64_t cols,
                     VU8<T>* lv, VF<T>* fs, VF<T>* fm) {
    constexpr int kL = T::bytes / 4;
    const bool pair = eb * kSub + 1 < cols / 32;  // the second block exists (AVX-512)
    alignas(64) std::uint32_t dh[kSub][kL];
    for (int jb = 0; jb < kValues / (4 * kL); ++jb) {
      VI32<T> r[kL];
      for (int i = 0; i < kL; ++i) {
        const std::uint8_t* p = rows[i] + static_cast<std::size_t>(eb) * kSub * kQ8_0Blk;
        if constexpr (kSub == 2) {
          r[i] = as<std::int32_t>(load_halves<T>(p + 2, pair ? p + kQ8_0Blk + 2 : p + 2));
        } else {
          r[i] = loadu<std::int32_t, T>(p + 2 + 4 * kL * jb);
        }
      }
      transpose_i32<T>(r);
      for (int k = 0; k < kL; ++k)
        lv[kL * jb + k] = as<std::uint8_t>(S8Dot<T>::prep(as<std::int8_t>(r[k])));
    }
    for (int s = 0; s < kSub; ++s)
      for (int i = 0; i < kL; ++i)
        dh[s][i] = (s == 0 || pair)
                       ? ld_u16(rows[i] + static_cast<std::size_t>(eb * kSub + s) * kQ8_0Blk)
                       : 0;
    for (int s = 0; s < kSub; ++s) {
      fs[s] = h2f_lo16<T>(VU32<T>::load_aligned(dh[s]));
      fm[s] = fs[s];
    }
  }

  /// Tile of engine block eb read from the packed layout (nibble/packed.hpp): `gb` is the
  /// group's Q8_0 block kSub * eb (its 16 fp16 scales, then 8 units of 64 bytes: unit u holds
  /// quants 4u..4u+3 of the 16 rows; the next Q8_0 block follows), `h` the sub-tile.
  template <class T>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t eb, std::int64_t cols,
                            VU8<T>* lv, VF<T>* fs, VF<T>* fm) {
    constexpr int kL = T::bytes / 4;
    constexpr std::size_t kGroupBlk = 16 * kQ8_0Blk;
    for (int s = 0; s < kSub; ++s) {
      const bool have = eb * kSub + s < cols / 32;
      const std::uint8_t* b = gb + s * kGroupBlk;
      for (int u = 0; u < 8; ++u) {
        const VI8<T> w = have ? loadu<std::int8_t, T>(b + 32 + 64 * u + h * T::bytes)
                              : VI8<T>(static_cast<std::int8_t>(0));
        lv[8 * s + u] = as<std::uint8_t>(S8Dot<T>::prep(w));
      }
      fs[s] = have ? load_f16<T>(b + 2 * kL * h) : VF<T>(0.0f);
      fm[s] = fs[s];
    }
  }
  /// Bytes of one plain row (a packed group spans 16 of them).
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 32) * kQ8_0Blk;
  }
  static constexpr std::size_t kBlockBytes = kSub * kQ8_0Blk;

  /// Activations: the relayout of Q8_0Simd (quants, bias sums, scales); blocks past the row are
  /// zero (the last engine block of an odd block count).
  static void act(const std::uint8_t* arow, std::int64_t cols, std::int64_t eb, std::int8_t* qs,
                  float* da, float* e) {
    const typename S::Act a = S::act(arow, cols);
    for (int s = 0; s < kSub; ++s) {
      const std::int64_t b = eb * kSub + s;
      if (b < cols / 32) {
        std::memcpy(qs + 32 * s, a.qs + 32 * b, 32);
        da[s] = a.d[b];
        int sum = 0;
        for (int g = 0; g < 8; ++g) sum += a.bias[8 * b + g];
        e[s] = static_cast<float>(sum);
      } else {
        std::memset(qs + 32 * s, 0, 32);
        da[s] = 0.0f;
        e[s] = 0.0f;
      }
    }
  }

  template <class T>
  static VI32<T> dot(const VI32<T>& acc, const VU8<T>& lv, const VI8<T>& a) {
    return S8Dot<T>::dot_prepped(acc, as<std::int8_t>(lv), a);
  }
};
#endif

template <class Tag>
void register_q8_0(KernelTable& t) {
  FormatKernels& k = entry(t, Format::q8_0);
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) {
    k.dequant = &q8_0_dequant_scalar;
    k.gemm = &q8_0_gemm_scalar;
  }
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (fam != Family::scalar) {
    using K = Q8_0Simd<Tag>;
    k.dequant = &K::dequant;
    k.gemm = &K::gemm;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
