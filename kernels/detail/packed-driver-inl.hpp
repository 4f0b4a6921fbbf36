// nibble: what the GEMV / GEMM bodies on packed (row-interleaved) weights (nibble/packed.hpp)
// share: the group constants, the GEMV driver (two sequential streams, software prefetch), the
// accumulator state and unit loads of a body, its Q8_K activations with per-block data, and the
// gemm_packed entry (the GEMV per activation row for small n, the rows engine above).
#pragma once

#include <cstddef>
#include <cstdint>

#include "nibble/core/cpu.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// Packed-layout constants shared by the packed bodies.
struct PackedGroup {
  static constexpr int kRows = 16;     ///< rows per group
  static constexpr int kUnitRow = 64;  ///< bytes of one unit of the 16 rows
};

/// The number of sequential streams packed_gemv reads for a body, from its group block size:
/// four for group blocks under 1 KiB (the 32-value formats, Q8_0, NF4 / FP4: 272-576 bytes), two
/// above (the K-quants, IQ4_XS: 1.1-3.3 KiB). Zen 5, cold, 4 alternated rounds against two
/// streams, median of the per-round ratios, 4096 x 4096 and 11008 x 4096 at 1 and 2 threads:
/// AVX-512 Q8_0 1.12-1.25, Q5_0 1.06-1.19, Q5_1 1.06-1.22, Q4_1 1.01-1.15, NF4 1.07-1.15, FP4
/// 1.00-1.19, IQ4_NL 0.99-1.10, MXFP4 1.02-1.09, Q4_0 1.01-1.11 (the new ratios to the paired sum
/// loop 0.88-1.08); AVX2 / AVX-VNNI Q8_0 1.06-1.16, Q4_0 0.95-1.10, IQ4_NL 0.97-1.10, NF4 and
/// Q5_1 (compute-bound there) 0.93-1.10; L3-resident level or better (6 rounds). Four streams on
/// the K-quants lost: Q4_K 0.85-0.88, Q6_K 0.88-0.94, Q3_K 0.88-0.98. One stream lost up to 34 %
/// (Q4_K, Q8_0, NF4, Q5_1; Q6_K level). (docs/kernels.md, "Four streams for small group blocks".)
/// On non-AMD cores packed_gemv reads the large group blocks as four streams after all, with the
/// L2 prefetches crossing between them (packed_cross_streams).
constexpr int packed_streams(std::size_t group_block) {
  return group_block < 1024 ? 4 : 2;
}

/// The packed GEMV driver: y[16 g ..] for the groups g in [g0, g1), read as
/// packed_streams(K::kGroupBlock) sequential streams, or four with packed_cross_streams (the
/// range cut into that many parts, block by block in lockstep). Measured on a Zen 4 core (a Q4_K
/// body, 4096 x 4096, cold, rounds interleaved with the membw sum): one stream read at 0.77-0.93 of
/// the sum loop's bandwidth, two at 0.97-1.04, four at 0.89-0.95, eight at 0.4. The body K provides
/// Act (act(A, cols)), State (zeroed by construction), blocks(cols), kGroupBlock, block(group
/// block, act, b, state) and store(state, y).
///
/// Before each group block of a stream, every cache line kPackedPrefetch bytes further on in that
/// stream (on AMD cores half as far with four streams: packed_prefetch_l1) is prefetched (one
/// prefetch per line, the streams' bursts apart). The hardware prefetcher alone did not keep the
/// streams ahead of a fast body on a Zen 5 core (1 thread, 4096 x 4096, cold, alternated runs):
/// q4_K.x16 on AVX-512 read 21-24 GB/s without and 30-34 with, q5_K.x16 17 -> 32, q6_K.x16 18 ->
/// 28-35, q4_K.x16 on AVX2 14 -> 26-29, against a sum loop at 31-38 GB/s. 2, 3 and 4 KiB ahead
/// measured alike; 3 KiB was best on most rows.
inline constexpr std::size_t kPackedPrefetch = 3072;

/// The L1 prefetch distance (0: none) of a packed_gemv reading `streams` streams of `group_block`
/// byte blocks, each prefetching its own block: kPackedPrefetch, except four streams on AMD cores
/// (the group blocks under 1 KiB), which prefetch half as far, so that all streams together run as
/// far ahead as two do (6 KiB). On a Zen 5 core (35-38 GB/s from DRAM on one core; 4096 x 4096 and
/// 11008 x 4096, cold, 5 rounds rotating 3072, 1536 and 1024 bytes in one binary, median per-round
/// ratio of the paired `x_membw`, 1 / 2 threads), 1536 against 3072: AVX-512 q4_0.x16 1.10-1.24,
/// q4_1.x16 1.06-1.20, q5_0.x16 1.01-1.12, q5_1.x16 0.99-1.09, iq4_nl.x16 1.12-1.16,
/// mxfp4.x16 1.03-1.08, nf4.x16 1.02-1.25, fp4.x16 1.06-1.15, q8_0.x16 0.94-1.08; AVX2 0.97-1.26
/// (docs/kernels.md, "The L1 prefetch distance of four streams"). Intel cores (which add the L2
/// prefetch) keep 3072: not measured there.
///
/// On AMD's family-25 cores (amd_family25_tuning) the packed bodies on 64-byte vectors and those on
/// 32-byte vectors with group blocks of 2 KiB or more (Q4_K, Q5_K, Q6_K, IQ4_XS: 2.1-3.3 KiB) get
/// none (0): the hardware prefetchers stream them faster alone. Zen 4, nibble-bench cold, 3
/// alternated rounds, medians of per-round ratios: the packed Q4_K_M decode step (4 layers,
/// AVX-512) 1.28 / 1.13 on 1 / 2 threads, every round >= 1.10; q4_K.x16 1.48 / 1.11 (AVX-512,
/// 4096 x 4096, 1 / 2 threads), q5_K.x16 1.55 / 1.23 (docs/kernels.md, "Zen 4: Q6_K one row at a
/// time on the 256-bit body", its last paragraph). The smaller blocks on AVX-512, in a later
/// session on the same VM type (in-binary switch, 3 alternated rounds, 1 thread, 4096 x 4096 /
/// 11008 x 4096): q2_K.x16 1.45 / 1.57, q3_K.x16 1.22 / 1.23, q8_0.x16 1.35 / 1.36, nf4.x16 1.16
/// / 1.20, fp4.x16 1.14 / 1.17, q4_0.x16 1.18 / 1.15, q4_1.x16 1.10 / 1.19, iq4_nl.x16 1.09 /
/// 1.11, q5_0.x16 1.06 / 0.99, mxfp4.x16 1.00 / 1.06 (docs/kernels.md, "Zen 4: no L1 prefetch for
/// the small packed blocks on AVX-512"). On the AVX2 table the bodies that declare
/// kFamily25NoL1Prefetch (Q8_0, Q2_K, f16 / bf16) get none either: q8_0.x16 1.16-1.21 / 1.03-1.17
/// (1 / 2 threads, 4096 x 4096, 11008 x 4096, 4096 x 11008, 14336 x 4096; 0.80-0.87 -> 0.96-0.98 of
/// the paired bandwidth on one thread), q2_K.x16 1.14-1.20 / 1.08-1.23 (docs/kernels.md, "Zen 4: no
/// L1 prefetch for packed Q8_0 and Q2_K on AVX2"). The other small blocks keep theirs: Q3_K lost
/// without it (0.91 / 0.93), Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 / NF4 / FP4 read level
/// (0.94-1.08 on one thread).
///
/// A body may set its own distance (kDist: its kPrefetchL1, kPackedPrefetch unless it says
/// otherwise), which replaces kPackedPrefetch above; only the inlined Q3_K steps on AVX-512 VNNI
/// do (PackedKq23::kPrefetchL1).
///
/// The parameters are the body's values, not the body (kNoL1: its kFamily25NoL1Prefetch): with
/// the body as template parameter, GCC 12 scheduled the 256-bit Q6_K loop of packed_gemv_streams
/// differently (same instructions, other order) and q6_K.x16 on AVX2 read 0.55 of `membw` instead
/// of 0.77 on a Zen 4 core (docs/kernels.md, "A schedule that cost packed Q6_K on AVX2 30 %").
template <int kVecBytes, bool kNoL1, std::size_t kDist = kPackedPrefetch>
inline std::size_t packed_prefetch_l1(int streams, std::size_t group_block) {
  if ((kVecBytes >= 64 || group_block >= 2048 || kNoL1) && amd_family25_tuning()) return 0;
  return streams == 4 && !detail::intel_streaming_tuning() ? kDist / 2 : kDist;
}

/// Besides, except on AMD cores, every line kPackedPrefetchL2 bytes ahead is prefetched into L2, so
/// that the L1 prefetch above finds it there (packed_prefetch_l2). On an Emerald Rapids core
/// (2.6 GHz, 12.4 GB/s from DRAM on one core; 4096 x 4096, cold, alternated runs, ratio to the
/// paired sum loop, 1 thread) the L1 prefetch alone left bodies that are not far faster than DRAM
/// below the bandwidth: q4_K.x16 on AVX-512 0.96 -> 1.08, on AVX-VNNI 0.85 -> 1.00, q6_K.x16 on
/// AVX2 0.71 -> 0.82, iq4_xs.x16 on AVX-512 0.85 -> 1.00; the packed Q4_K_M decode step 0.97 ->
/// 1.06 (1 thread), 0.94 -> 1.11 (2); 8 KiB ahead measured about the same (docs/kernels.md,
/// "Streaming on an Emerald Rapids core"). On a 16-core VM of that CPU the packed decode step
/// read 11.1 -> 14.2 tokens/s on one thread and 119 -> 123 (noise-sized) on 16.
inline constexpr std::size_t kPackedPrefetchL2 = 16384;

/// Whether the packed GEMVs issue the kPackedPrefetchL2 prefetches: not on AMD cores. On a Zen 5
/// core (28-35 GB/s from DRAM on one core; 4096 x 4096, cold, 4 rounds alternating the two
/// settings, median ratio to the paired sum loop) every packed row read better without them:
/// AVX-512 q4_K.x16 0.98 -> 1.12 (1 thread) and 0.82 -> 0.99 (2), q6_K.x16 0.81 -> 0.95 and
/// 0.77 -> 0.86, nf4.x16 0.78 -> 0.88, q3_K.x16 0.81 -> 0.89, iq4_xs.x16 0.80 -> 0.99; AVX2
/// q4_K.x16 0.83 -> 0.91 and 0.74 -> 0.88, q5_K.x16 0.67 -> 0.76; the packed Q4_K_M decode
/// step 0.93 -> 1.01 and 0.85 -> 0.94 (docs/kernels.md, "The L2 prefetch on Zen 5"). 8 KiB
/// ahead was no better. Decided from the CPU vendor (detail::intel_streaming_tuning, which tests
/// can override).
inline bool packed_prefetch_l2() {
  return detail::intel_streaming_tuning();
}

/// Whether packed_gemv reads the bodies with large group blocks (the K-quants, IQ4_XS: 1.1-3.3
/// KiB) as four streams whose L2 prefetches cross (packed_step_cross) instead of two streams each
/// prefetching its own block: not on AMD cores, where four streams lost (packed_streams). On a
/// 2-core Sapphire Rapids-class VM (one core reads 12-16 GB/s as four prefetched streams, 8-10 as
/// one; 4096 x 4096, cold, 3 alternated runs, median ratio new / old of the paired `x_membw`, 1 /
/// 2 threads): AVX-512 q4_K.x16 1.37 / 1.42, q5_K.x16 1.31 / 1.13, q6_K.x16 1.52 / 1.41,
/// q2_K.x16 1.23 / 1.04, q3_K.x16 1.22 / 1.08, iq4_xs.x16 1.25 / 1.18; AVX-VNNI and AVX2
/// 1.10-1.35 except q3_K.x16 on AVX2 at 2 threads (0.91, compute-bound at 0.4 of the bandwidth);
/// the packed Q4_K_M decode step 1.35 / 1.26. Four streams with each prefetching its own block
/// had measured 0.85-1.00 (docs/kernels.md, "Streaming on a Sapphire Rapids-class core").
/// Not measured on Arm cores: there only the tests' override (detail::set_vendor_tuning_override)
/// turns it on.
inline bool packed_cross_streams() {
#if defined(__x86_64__) || defined(__i386__)
  return detail::intel_streaming_tuning();
#else
  return detail::vendor_tuning_override() == 1;
#endif
}

/// Group block b of one packed stream p: its cache lines l1 bytes on (packed_prefetch_l1) are
/// prefetched into L1 and, with l2 (packed_prefetch_l2), those kPackedPrefetchL2 bytes on into
/// L2, then the body consumes the block.
template <class K>
[[gnu::always_inline]] inline void packed_step_inline(const std::uint8_t* p,
                                                      const typename K::Act& act, std::int64_t b,
                                                      typename K::State& st, std::size_t l1,
                                                      bool l2) {
  const std::uint8_t* gb = p + static_cast<std::size_t>(b) * K::kGroupBlock;
  if (l1 != 0) {
    for (std::size_t l = 0; l < K::kGroupBlock; l += 64) prefetch_l1(gb + l1 + l);
  }
  if (l2) {
    for (std::size_t l = 0; l < K::kGroupBlock; l += 64) prefetch_l2(gb + kPackedPrefetchL2 + l);
  }
  K::block(gb, act, b, st);
}
/// K::kInlineStep, false when the body does not declare it: whether the driver loop inlines the
/// steps (the compiler leaves them out of line otherwise); inlined, the two streams' steps share
/// their activation loads. Measured L3-resident on a Zen 5 core (1024 x 4096, one thread, GB/s,
/// out of line -> inlined), AVX-512 / AVX-VNNI / AVX2: NF4 53 -> 61 (AVX-512); Q5_K 61.6 -> 64,
/// 32.1 -> 33.6, 30.5 -> 32; Q6_K 63.3 -> 64.5, 43.7 -> 45.2, 33.5 -> 35; Q4_K 75.7 -> 75.7,
/// 48.4 -> 50.3, 38.6 -> 39.6: those inline. Q2_K (65 -> 38 on AVX-512), Q3_K (51 -> 33) and
/// IQ4_XS (66 -> 64, 40 -> 28 on AVX-VNNI) lose (register pressure), the 32-value formats move
/// by -5% to +5% depending on the format: those stay out of line. Measured again later (the
/// bodies as they are now), Q3_K on AVX-512 VNNI inlines after all: up to 5 % slower
/// L2-resident, faster cold (PackedKq23::kInlineStep), and so do IQ4_XS on 64-byte vectors and
/// Q2_K on AVX-512 VNNI with their loops forced inline (PackedIQ4XS::kInlineStep,
/// PackedKq23::kInlineStep; with those loops left to GCC they read 1.07-1.42x slower
/// L2-resident; in-process pairs, Zen 5).
template <class K, class = void>
struct InlineStep : std::false_type {};
template <class K>
struct InlineStep<K, std::void_t<decltype(K::kInlineStep)>> : std::bool_constant<K::kInlineStep> {};

/// K::block out of line (for the bodies that lose when inlined, see InlineStep).
template <class K>
inline void packed_block_call(const std::uint8_t* gb, const typename K::Act& act, std::int64_t b,
                              typename K::State& st) {
  K::block(gb, act, b, st);
}

/// Step k of NS streams in packed_gemv_streams<K, NS, true>: stream k's own lines
/// kPackedPrefetch bytes on into L1, and quarter k of every stream's block kPackedPrefetchL2
/// bytes on into L2, then the body consumes stream k's block.
template <class K, int NS, int k>
[[gnu::always_inline]] inline void packed_step_cross(const std::uint8_t* const* p,
                                                     const typename K::Act& act, std::int64_t b,
                                                     typename K::State& st) {
  constexpr std::size_t lines = (K::kGroupBlock + 63) / 64;
  constexpr std::size_t lo = lines * k / NS * 64, hi = lines * (k + 1) / NS * 64;
  const std::size_t off = static_cast<std::size_t>(b) * K::kGroupBlock;
  const std::uint8_t* gb = p[k] + off;
  for (std::size_t l = 0; l < K::kGroupBlock; l += 64) prefetch_l1(gb + kPackedPrefetch + l);
  for (int t = 0; t < NS; ++t)
    for (std::size_t l = lo; l < hi; l += 64) prefetch_l2(p[t] + off + kPackedPrefetchL2 + l);
  if constexpr (InlineStep<K>::value) {
    K::block(gb, act, b, st);
  } else {
    packed_block_call<K>(gb, act, b, st);
  }
}

template <class K>
inline void packed_step_call(const std::uint8_t* p, const typename K::Act& act, std::int64_t b,
                             typename K::State& st, std::size_t l1, bool l2) {
  packed_step_inline<K>(p, act, b, st, l1, l2);
}

template <class K>
[[gnu::always_inline]] inline void packed_step(const std::uint8_t* p, const typename K::Act& act,
                                               std::int64_t b, typename K::State& st,
                                               std::size_t l1, bool l2) {
  if constexpr (InlineStep<K>::value) {
    packed_step_inline<K>(p, act, b, st, l1, l2);
  } else {
    packed_step_call<K>(p, act, b, st, l1, l2);
  }
}

/// The driver for NS streams; with `cross` (large group blocks on non-AMD cores, NS = 4), the
/// L2 prefetch of stream k's step covers a quarter of every stream's block kPackedPrefetchL2
/// bytes on (packed_step_cross) instead of its own whole block.
template <class K, int NS, bool cross>
inline void packed_gemv_streams(const std::uint8_t* P, std::int64_t g0, std::int64_t g1,
                                std::int64_t cols, const std::uint8_t* A, float* y) {
  const std::int64_t nb = K::blocks(cols);
  const std::size_t gs = static_cast<std::size_t>(nb) * K::kGroupBlock;
  const typename K::Act act = K::act(A, cols);
  const bool l2 = packed_prefetch_l2();
  const std::size_t l1 = packed_prefetch_l1<K::kVecBytes, K::kFamily25NoL1Prefetch, K::kPrefetchL1>(
      NS, K::kGroupBlock);
  // Stream k reads the groups g0 + k part + i, i = 0, 1, ...: the range cut into NS parts read
  // in lockstep. The last parts may run out first (m streams left).
  const std::int64_t part = (g1 - g0 + NS - 1) / NS;
  for (std::int64_t i = 0; i < part; ++i) {
    const std::uint8_t* p[NS] = {};
    typename K::State st[NS];
    int m = 0;
    while (m < NS && g0 + m * part + i < g1) {
      p[m] = P + static_cast<std::size_t>(g0 + m * part + i) * gs;
      ++m;
    }
    if (m == NS) {
      for (std::int64_t b = 0; b < nb; ++b) {
        static_for<NS>([&](auto kc) {
          constexpr int k = decltype(kc)::value;
          if constexpr (cross) {
            packed_step_cross<K, NS, k>(p, act, b, st[k]);
          } else {
            packed_step<K>(p[k], act, b, st[k], l1, l2);
          }
        });
      }
    } else {
      for (std::int64_t b = 0; b < nb; ++b)
        for (int k = 0; k < m; ++k) packed_step<K>(p[k], act, b, st[k], l1, l2);
    }
    for (int k = 0; k < m; ++k) K::store(st[k], y + 16 * (g0 + k * part + i));
  }
}

template <class K>
inline void packed_gemv(const std::uint8_t* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                        const std::uint8_t* A, float* y) {
  constexpr int NS = packed_streams(K::kGroupBlock);
  if constexpr (NS == 2) {
    if (packed_cross_streams()) return packed_gemv_streams<K, 4, true>(P, g0, g1, cols, A, y);
  }
  packed_gemv_streams<K, NS, false>(P, g0, g1, cols, A, y);
}

/// A register of unit u of sub-tile h of a packed group block `gb`: that 4-byte unit of the
/// rows h L .. h L + L - 1 (L = Tag::bytes / 4), one row per int32 lane. With kHold the register
/// is held (in_register): the GEMV bodies use most units two to four times (shifted, masked), and
/// a load folded into each use made them load-bound on x86. A Zen 5 core, a /tmp harness calling
/// the GEMV of HEAD's kernels and of these alternately in one process (256 x 4096, L2-resident,
/// one thread, median of 200 pair ratios): AVX-512 q4_K.x16 1.28, q6_K 1.25, nf4 / fp4 1.59,
/// q4_0 1.41, q4_1 1.19, iq4_xs 1.14, q3_K 1.14, iq4_nl 1.09, q5_K 1.05, q2_K 1.03; AVX-VNNI
/// 0.96-1.24, AVX2 1.00-1.27; cold (nibble-bench, paired bandwidth) AVX-512 nf4 / fp4 1.03-1.14
/// and the rest level, memory-bound (docs/kernels.md, "Packed units held in registers"). Held,
/// Q5_0 / Q5_1 / MXFP4 / Q8_0 on 64-byte vectors read 0.93-0.99 and Q8_0 on AVX-VNNI 1.00: they
/// keep the folded loads (Q8_0 wherever it has int8 dots, one use per unit), as do the GEMM
/// engine's tile reads (repack_packed).
template <class Tag, bool kHold = false>
inline VU32<Tag> packed_unit(const std::uint8_t* gb, int u, int h) {
  VU32<Tag> v = loadu<std::uint32_t, Tag>(gb + u * PackedGroup::kUnitRow + h * Tag::bytes);
  if constexpr (kHold) in_register(v);
  return v;
}

/// What every packed GEMV body shares: L rows per register, kH sub-tiles per group, one float
/// accumulator register per sub-tile (State, zeroed by construction) and its store.
template <class Tag>
struct PackedBody {
  static constexpr int kVecBytes = Tag::bytes;  ///< bytes per register
  /// Whether packed_gemv drops its L1 prefetch for this body on AMD family-25 cores on 32-byte
  /// vectors too (packed_prefetch_l1); bodies that measured faster without it set it.
  static constexpr bool kFamily25NoL1Prefetch = false;
  /// The distance of packed_gemv's L1 prefetch for this body (packed_prefetch_l1's kDist).
  static constexpr std::size_t kPrefetchL1 = kPackedPrefetch;
  static constexpr int kL = Tag::bytes / 4;           ///< rows per register
  static constexpr int kH = PackedGroup::kRows / kL;  ///< sub-tiles per group
  /// Sub-tiles per pass of a body that can run its block for several sub-tiles at once, the
  /// sub-tiles innermost so that each activation broadcast serves all of them (docs/kernels.md,
  /// "Packed bodies on 256-bit VNNI"): all kH when `share`, one otherwise. x86 only: NEON's four
  /// sub-tiles of 4 rows keep one per pass until that order is measured on an Arm core.
  static constexpr int pass_size(bool share) {
    return share && TagInfo<Tag>::family == Family::x86 ? kH : 1;
  }
  struct State {
    VF<Tag> acc[kH];
    State() {
      for (int h = 0; h < kH; ++h) acc[h] = VF<Tag>(0.0f);
    }
  };
  static void store(const State& st, float* y) {
    for (int h = 0; h < kH; ++h) st.acc[h].store_unaligned(y + h * kL);
  }
  /// A held unit register (packed_unit's kHold): what the GEMV bodies read.
  static VU32<Tag> unit(const std::uint8_t* gb, int u, int h) {
    return packed_unit<Tag, true>(gb, u, h);
  }
  /// Unit u of sub-tile h0 + h for a body running P sub-tiles per pass from h0 (its scale units):
  /// with P == 1 loaded once, here (held with kHold), with more loaded at each use, so that
  /// they are not live across the pass (PackedQ6::kPass, PackedIQ4XS::kPass).
  template <int P, bool kHold>
  struct PassUnit {
    const std::uint8_t* gb;
    int u, h0;
    VU32<Tag> once;  ///< P == 1: the unit; unused (zero) otherwise
    PassUnit(const std::uint8_t* g, int unit_index, int h)
        : gb(g),
          u(unit_index),
          h0(h),
          once(P == 1 ? packed_unit<Tag, kHold>(g, unit_index, h) : VU32<Tag>(0u)) {}
    VU32<Tag> operator()(int h) const {
      if constexpr (P == 1) {
        return once;
      } else {
        return packed_unit<Tag>(gb, u, h0 + h);
      }
    }
  };
};

/// The activations of a packed body on Q8_K: the plain blocks (also read by the GEMM engine)
/// and one Prep per block after them (SplitRow).
template <class Prep>
struct Q8KPrepAct {
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  const BlockQ8_K* a;
  const Prep* p;
  static Q8KPrepAct of(const std::uint8_t* A, std::int64_t cols) {
    return {reinterpret_cast<const BlockQ8_K*>(A), Row::prep(A, cols)};
  }
};

/// Prepared-activation pieces shared by the packed bodies: the Q8_K sub-block sums of
/// sub-blocks 4c + t and 4c + t + 2, times `factor`, as an int16 pair per int32 (the partners of
/// scale pairs taken as bytes (0, 2) / (1, 3) of a scale dword; |factor * bsum| < 2^15).
inline void bsum_pairs(const BlockQ8_K& a, int factor, std::int32_t (&out)[4][2]) {
  for (int c = 0; c < 4; ++c)
    for (int t = 0; t < 2; ++t) {
      const auto lo = static_cast<std::uint16_t>(factor * a.bsums[4 * c + t]);
      const auto hi = static_cast<std::uint16_t>(factor * a.bsums[4 * c + t + 2]);
      out[c][t] = static_cast<std::int32_t>(lo | static_cast<std::uint32_t>(hi) << 16);
    }
}

/// |q[j]| as unsigned bytes (128 for -128), for S8Dot::madd_abs.
inline void abs_bytes(const std::int8_t* q, int n, std::uint8_t* out) {
  for (int j = 0; j < n; ++j) out[j] = static_cast<std::uint8_t>(q[j] < 0 ? -q[j] : q[j]);
}

/// The packed GEMV of the body K once per activation row: the small-n part of packed_gemm, and
/// the whole gemm_packed of a body without a GEMM of its own (set_packed).
template <class K>
void packed_gemv_rows(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                      const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  const auto* p = static_cast<const std::uint8_t*>(P);
  const auto* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t j = 0; j < n; ++j)
    packed_gemv<K>(p, g0, g1, cols, a + static_cast<std::size_t>(j) * arb, Y + j * ldy);
}

/// FormatKernels::gemm_packed of the body K whose GEMM policy is Pol: the packed GEMV once per
/// activation row below kRowsMinN rows, the rows engine with tiles read from the packed bytes
/// (Pol::repack_packed) from there.
template <class Tag, class K, class Pol, std::int64_t kRowsMinN>
void packed_gemm(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols, const void* A,
                 std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  if (n < kRowsMinN) return packed_gemv_rows<K>(P, g0, g1, cols, A, arb, n, Y, ldy);
  RowsGemm<Tag, Pol>::gemm_packed(static_cast<const std::uint8_t*>(P), g0, g1, cols,
                                  static_cast<const std::uint8_t*>(A), arb, n, Y, ldy);
}

#endif

}  // namespace
}  // namespace nibble::kernels
