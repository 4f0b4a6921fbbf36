// nibble: Q6_K and Q8_0 on packed (row-interleaved) weights (nibble/packed.hpp), written once
// for every SIMD tag. The layout and the structure are those of q45-packed-inl.hpp: a register
// loaded at unit u of a group block holds that 4-byte unit of L = Tag::bytes / 4 rows (one per
// int32 lane), so the int8 dots run against broadcast activation dwords with no shuffles, and
// the weights stream in one sequential pass.
//
// Q6_K group block (16 x 210 bytes): for half hh and k = 0..7, units 24 hh + 3 k (ql bytes
// 4 (16 hh + k) ..), + 1 (ql bytes 4 (16 hh + 8 + k) ..) and + 2 (qh bytes 4 (8 hh + k) ..); units
// 48..51 the 16 int8 scales; then the 16 fp16 d (2 bytes per row). Value 128 hh + 32 j + l (quarter
// j, l = 4k..4k+3) has its low 4 bits in the first ql unit (j = 0, 2: low / high nibble) or the
// second (j = 1, 3), its top 2 bits at bits 2j of the qh unit; its sub-block is 8 hh + 2 j + k / 4.
// The sums of the unsigned levels are scaled by the signed int8 scales in int32 (pmulld after
// int32 dots; without them pmaddwd of the int16 pair sums against the scale), the level offset
// (-32 * sum_sb scale * activation sum) is one term per block (PackedQ6::offset), and the total
// goes to float once per block.
//
// Q8_0 group block (16 x 34 bytes): the 16 fp16 d, then units 0..7 of the quants. Signed weights
// through S8Dot (VNNI: w + 128 against an accumulator starting at -128 * sum(a)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/float-packed-inl.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/iq4-packed-inl.hpp"
#include "nibble/kernels/detail/kq23-packed-inl.hpp"
#include "nibble/kernels/detail/nf4-packed-inl.hpp"
#include "nibble/kernels/detail/q32-packed-inl.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/q45-packed-inl.hpp"
#include "nibble/kernels/detail/q6-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"
#include "nibble/kernels/q8_0-inl.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag>
struct PackedQ6 : PackedBody<Tag> {
  using B = PackedBody<Tag>;
  using State = typename B::State;
  using B::kH;
  using B::kL;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockQ6_K);
  static constexpr bool kInlineStep = true;  ///< see InlineStep

  /// Per activation block, the sub-block sums as int16 pairs (bsums[4c + e], bsums[4c + e + 2])
  /// (|bsum| <= 16 * 127), the partners of the scale pairs of offset().
  struct Prep {
    std::int32_t bs[4][2];
  };
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) bsum_pairs(in[b], 1, p[b].bs);
  }
  using Act = Q8KPrepAct<Prep>;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return Act::of(A, cols); }
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// Integer sums in int32 per unit (VNNI, sdot), or in int16 over two units (pmaddubsw /
  /// smull: 2 * 2 * 63 * 127 < 2^15), scaled by pmaddwd against the scale in both halves.
  static constexpr bool kInt32 = kInt8Dots<Tag>;

  /// The unsigned 6-bit levels of quarters J and J + 2 (J = 0, 1) at unit k of half hh,
  /// sub-tile h: both take their low 4 bits from the same ql unit (low / high nibbles) and their
  /// top bits from the same qh unit (bits 2J and 2J + 4 of each byte, moved to bits 4 and 5).
  template <int J>
  [[gnu::always_inline]] static inline void levels(const std::uint8_t* gb, int hh, int k, int h,
                                                   VU8<Tag>& l0, VU8<Tag>& l2) {
    const VU32<Tag> m4(0x0F0F0F0Fu), m30(0x30303030u);
    const VU32<Tag> q = packed_unit<Tag, true>(gb, 24 * hh + 3 * k + J, h);
    const VU32<Tag> qh = packed_unit<Tag, true>(gb, 24 * hh + 3 * k + 2, h);
    l0 = as<std::uint8_t>((q & m4) | ((qh << (4 - 2 * J)) & m30));
    l2 = as<std::uint8_t>(((q >> 4) & m4) | ((qh >> (2 * J)) & m30));
  }

  /// Byte-shuffle indices that put byte J of every int32 lane into the high byte of both its
  /// int16 halves (the low bytes 0x80: zero on every ISA), within each 16-byte lane.
  struct DupIndex {
    alignas(64) std::uint32_t w[16];
    constexpr explicit DupIndex(int j) : w{} {
      for (int i = 0; i < 16; ++i) {
        const auto b = static_cast<std::uint32_t>(4 * (i % 4) + j);
        w[i] = 0x80u | b << 8 | 0x80u << 16 | b << 24;
      }
    }
  };
  template <int J>
  static VU8<Tag> dup_index() {
    static constexpr DupIndex kIdx(J);
    return loadu<std::uint8_t, Tag>(kIdx.w);
  }

  /// The signed scale of byte J of each lane of the scale unit `u`, in both int16 halves.
  template <int J>
  static VI16<Tag> scale_dup(const VU32<Tag>& u) {
    return as<std::int16_t>(lookup16<Tag>(as<std::int8_t>(u), dup_index<J>())) >> 8;
  }

  /// The level offset, sum_sb sc[sb] bsums[sb] (the sums are taken at -32 times it): per scale
  /// unit c, bytes (0, 2) and (1, 3) sign-extended into int16 pairs against the Prep pairs.
  static VI32<Tag> offset(const std::uint8_t* gb, int h, const Prep& pb) {
    VI32<Tag> off(0);
    for (int c = 0; c < 4; ++c) {
      const VI16<Tag> u = as<std::int16_t>(packed_unit<Tag, true>(gb, 48 + c, h));
      off = madd_acc_i16<Tag>(off, (u << 8) >> 8, as<std::int16_t>(VI32<Tag>(pb.bs[c][0])));
      off = madd_acc_i16<Tag>(off, u >> 8, as<std::int16_t>(VI32<Tag>(pb.bs[c][1])));
    }
    return off;
  }

  /// Whether block() reads each half unit by unit (block_half_by_unit): with int32 dots on
  /// 64-byte registers (32 of them: the four sums live do not spill). The sub-block order reads
  /// the ql units of quarter J = 0, then those of J = 1 (a stride of three units, twice), which
  /// the hardware prefetchers of a Zen 4 core follow worse: q6_K.x16 on AVX-512, 1 thread, cold
  /// 1.15-1.25x (0.77 -> 0.94 of the paired bandwidth at 4096 x 4096), L3-resident level
  /// (docs/kernels.md, "Packed Q6_K in address order").
  ///
  /// Without int8 dots, on the 32-byte x86 tags (AVX2), too: there the four quarters' int16
  /// sums of two units are live (as p0 / p2 of two sub-blocks in the other order), then their
  /// scales. q6_K.x16 on the AVX2 table, Zen 4, 1 thread, cold: 1.24-1.46x (0.54-0.62 -> 0.72-0.80
  /// of the paired bandwidth), L2-resident 1.0-1.1x (docs/kernels.md, "Packed Q6_K on AVX2 in
  /// address order"). NEON without dotprod and AVX-512 without VNNI keep the sub-block order
  /// (not measured).
  static constexpr bool kUnitOrder =
      kInt32 ? Tag::bytes == 64 : Tag::bytes == 32 && TagInfo<Tag>::family == Family::x86;

  /// Half hh of a group block, sub-tile h, unit by unit: for t = 0, 1 the four quarters' sums of
  /// units 4 t .. 4 t + 3 (sub-blocks 8 hh + 2 J + t, J = 0..3), then their scaled sums into
  /// `tot`. `x` points at the half's 128 activations; su0 / su4 are its scale units.
  [[gnu::always_inline]] static inline void block_half_by_unit(const std::uint8_t* gb, int h,
                                                               const std::uint8_t* x, int hh,
                                                               const VU32<Tag>& su0,
                                                               const VU32<Tag>& su4,
                                                               VI32<Tag>& tot) {
    if constexpr (!kInt32) {
      static_for<2>(
          [&](auto tc) { half_units16<decltype(tc)::value>(gb, h, x, hh, su0, su4, tot); });
    } else {
      for (int t = 0; t < 2; ++t) {
        VI32<Tag> s[4] = {VI32<Tag>(0), VI32<Tag>(0), VI32<Tag>(0), VI32<Tag>(0)};  // quarter J
        for (int k = 0; k < 4; ++k) {
          VU8<Tag> l[4];
          levels<0>(gb, hh, 4 * t + k, h, l[0], l[2]);
          levels<1>(gb, hh, 4 * t + k, h, l[1], l[3]);
          for (int j = 0; j < 4; ++j)
            s[j] = dot_u8s8<Tag>(s[j], l[j], bcast4<Tag>(x + 32 * j + 16 * t + 4 * k));
        }
        for (int j = 0; j < 2; ++j) {  // sub-blocks 8 hh + 2 j + t (su0), + 4 (su4): byte 2 j + t
          const int sh = 24 - 8 * (2 * j + t);
          tot = tot + s[j] * ((as<std::int32_t>(su0) << sh) >> 24) +
                s[j + 2] * ((as<std::int32_t>(su4) << sh) >> 24);
        }
      }
    }
  }

  /// block_half_by_unit without int8 dots, units 4 t .. 4 t + 3: the four quarters' int16 sums
  /// over two units (2 * 2 * 63 * 127 < 2^15), then each times its scale into `tot` by pmaddwd.
  template <int t>
  [[gnu::always_inline]] static inline void half_units16(const std::uint8_t* gb, int h,
                                                         const std::uint8_t* x, int hh,
                                                         const VU32<Tag>& su0, const VU32<Tag>& su4,
                                                         VI32<Tag>& tot) {
    VI16<Tag> p[4] = {VI16<Tag>(0), VI16<Tag>(0), VI16<Tag>(0), VI16<Tag>(0)};  // quarter J
    for (int k = 0; k < 4; ++k) {
      VU8<Tag> l[4];
      levels<0>(gb, hh, 4 * t + k, h, l[0], l[2]);
      levels<1>(gb, hh, 4 * t + k, h, l[1], l[3]);
      for (int j = 0; j < 4; ++j)
        p[j] = p[j] + madd_u8s8<Tag>(l[j], bcast4<Tag>(x + 32 * j + 16 * t + 4 * k));
      if (k % 2 == 1) {
        static_for<4>([&](auto jc) {  // sub-block 8 hh + 2 j + t: byte 2 (j % 2) + t of su0 / su4
          constexpr int j = decltype(jc)::value;
          tot = madd_acc_i16<Tag>(tot, p[j], scale_dup<2 * (j % 2) + t>(j < 2 ? su0 : su4));
          p[j] = VI16<Tag>(0);
        });
        keep_order(tot);
      }
    }
  }

  /// Sub-tiles per pass of block(): with int32 dots in the sub-block order on a 256-bit x86 tag
  /// (AVX-VNNI) both, the sub-tiles innermost, so that each activation broadcast serves both and
  /// every unit register's 64 bytes (both sub-tiles' halves) are read together; one elsewhere.
  /// q6_K.x16 on AVX-VNNI, Zen 5, nibble-bench, 5 rounds of alternated binaries, median ratio of
  /// the paired bandwidth (1 / 2 threads): cold 4096 x 4096 1.08 / 1.11, 11008 x 4096 1.42 /
  /// 1.11, 4096 x 11008 1.29 / 1.09, 14336 x 4096 1.19 / 1.10; L2-resident 1.06 / 1.02; the
  /// packed Q4_K_M decode step (4 layers, 7 rounds) 1.09 / 1.08. In-process A/B of the two bodies
  /// (a /tmp harness, each core, two code alignments): cold 0.99-1.09, L2-resident 0.94-1.05
  /// (docs/kernels.md, "Packed Q6_K and IQ4_XS on AVX-VNNI: both sub-tiles per pass"). The results
  /// do not change: per row the same integer sums in the same order.
  static constexpr int kPass = kInt32 && !kUnitOrder ? B::pass_size(true) : 1;

  /// One group block: per half, unit by unit where kUnitOrder, otherwise quarters J and J + 2
  /// together, sub-block by sub-block, each sub-block's scaled sum added to the total before the
  /// next starts (keep_order), so that two sums per sub-tile are live besides the totals. The
  /// per-unit order (all four quarters of a unit at once, eight sums live) spilled on the 16
  /// registers of the 256-bit tags (docs/kernels.md, "Register pressure on 256-bit"). The level
  /// offset (-32 per level) is one term per block, offset(): |total| <= 16 * 16 * 63 * 127 * 128 <
  /// 2^31, exact in int32.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& a,
                                                  std::int64_t b, State& st) {
    for (int h0 = 0; h0 < kH; h0 += kPass) pass(gb, a, b, h0, st);
  }

  /// block() for the sub-tiles h0 .. h0 + kPass - 1.
  [[gnu::always_inline]] static inline void pass(const std::uint8_t* gb, const Act& a,
                                                 std::int64_t b, int h0, State& st) {
    const BlockQ8_K& ab = a.a[b];
    const auto* aq = reinterpret_cast<const std::uint8_t*>(ab.qs);
    const VF<Tag> da(ab.d);
    VI32<Tag> tot[kPass];  // sub-tile h0 + h
    for (int h = 0; h < kPass; ++h) tot[h] = VI32<Tag>(0);
    for (int hh = 0; hh < 2; ++hh) {
      // the scale units of sub-tile h0 + h: sub-blocks 8 hh .. (su0), 8 hh + 4 .. (su4)
      const typename B::template PassUnit<kPass, false> su0(gb, 48 + 2 * hh, h0),
          su4(gb, 49 + 2 * hh, h0);
      if constexpr (kUnitOrder) {
        block_half_by_unit(gb, h0, aq + 128 * hh, hh, su0(0), su4(0), tot[0]);
      } else {
        static_for<4>([&](auto ic) {
          constexpr int J = decltype(ic)::value / 2, t = decltype(ic)::value % 2;
          // sub-blocks 8 hh + 2 J + t (quarter J) and + 4 (quarter J + 2): units 4 t ..
          const std::uint8_t* x0 = aq + 128 * hh + 32 * J + 16 * t;  // quarter J
          const std::uint8_t* x2 = x0 + 64;                          // quarter J + 2
          if constexpr (kInt32) {
            VI32<Tag> s0[kPass], s2[kPass];
            for (int h = 0; h < kPass; ++h) s0[h] = s2[h] = VI32<Tag>(0);
            for (int k = 0; k < 4; ++k) {
              const VI8<Tag> a0 = bcast4<Tag>(x0 + 4 * k), a2 = bcast4<Tag>(x2 + 4 * k);
              for (int h = 0; h < kPass; ++h) {
                VU8<Tag> l0, l2;
                levels<J>(gb, hh, 4 * t + k, h0 + h, l0, l2);
                s0[h] = dot_u8s8<Tag>(s0[h], l0, a0);
                s2[h] = dot_u8s8<Tag>(s2[h], l2, a2);
                // two sub-tiles: the sums stay chains (GCC otherwise hoisted the next units'
                // levels: 186 instead of 146 stack accesses in the AVX-VNNI driver)
                if constexpr (kPass > 1) {
                  keep_order(s0[h]);
                  keep_order(s2[h]);
                }
              }
            }
            constexpr int sh = 24 - 8 * (2 * J + t);  // byte 2 J + t to the top
            for (int h = 0; h < kPass; ++h)
              tot[h] = tot[h] + s0[h] * ((as<std::int32_t>(su0(h)) << sh) >> 24) +
                       s2[h] * ((as<std::int32_t>(su4(h)) << sh) >> 24);
          } else {
            const VI16<Tag> c0 = scale_dup<2 * J + t>(su0(0)), c2 = scale_dup<2 * J + t>(su4(0));
            // One unit's levels at a time (two int16 sums over two units, then the scales):
            // the same sums as building both units' levels first, with four registers fewer
            // live. On the 16 registers of AVX2 (Zen 4, a standalone copy of this body, 1
            // thread): cold 12 -> 15 GB/s, L3-resident 1.1-1.3x, L2-resident level.
            VI16<Tag> p0(0), p2(0);
            for (int k = 0; k < 4; ++k) {
              VU8<Tag> l0, l2;
              levels<J>(gb, hh, 4 * t + k, h0, l0, l2);
              p0 = p0 + madd_u8s8<Tag>(l0, bcast4<Tag>(x0 + 4 * k));
              p2 = p2 + madd_u8s8<Tag>(l2, bcast4<Tag>(x2 + 4 * k));
              if (k % 2 == 1) {
                tot[0] = madd_acc_i16<Tag>(tot[0], p0, c0);
                tot[0] = madd_acc_i16<Tag>(tot[0], p2, c2);
                p0 = VI16<Tag>(0);
                p2 = VI16<Tag>(0);
              }
            }
          }
          for (int h = 0; h < kPass; ++h) keep_order(tot[h]);
        });
      }
    }
    for (int h = 0; h < kPass; ++h) {
      const VI32<Tag> t = tot[h] - (offset(gb, h0 + h, a.p[b]) << 5);
      const VF<Tag> d = load_f16<Tag>(gb + 16 * 208 + 2 * kL * (h0 + h));
      st.acc[h0 + h] = fmadd<Tag>(xsimd::to_float(t), d * da, st.acc[h0 + h]);
    }
  }

  /// FormatKernels::gemm_packed (activations: the plain Q8_K blocks of each row, Row).
  static constexpr auto gemm = packed_gemm<Tag, PackedQ6, Q6Rows, 2>;
};

template <class Tag>
struct PackedQ8_0 : PackedBody<Tag> {
  using B = PackedBody<Tag>;
  using State = typename B::State;
  using B::kH;
  using B::kL;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockQ8_0);
  static constexpr bool kFamily25NoL1Prefetch = true;  ///< see packed_prefetch_l1
  using D = S8Dot<Tag>;
  using S = Q8_0Simd<Tag>;  // its activation relayout: quants, per-dword bias sums, fp32 scales

  /// The GEMV pieces of packed_gemv (activations: Q8_0Simd's relayout).
  using Act = typename S::Act;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return S::act(A, cols); }
  static constexpr auto act_bytes = S::act_bytes;
  static constexpr auto relayout = S::relayout;
  static std::int64_t blocks(std::int64_t cols) { return cols / 32; }

  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& a,
                                                  std::int64_t b, State& st) {
    const std::int8_t* aq = a.qs + 32 * b;
    std::int32_t bias = 0;
    for (int u = 0; u < 8; ++u) bias += a.bias[8 * b + u];
    const VF<Tag> da(a.d[b]);
    for (int h = 0; h < kH; ++h) {
      VI32<Tag> s(bias);
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        // held where the dot uses the unit twice, without int8 dots (AVX2 1.27x; the single use
        // of VNNI measured 0.93x on AVX-512, 1.00x on AVX-VNNI: packed_unit)
        s = D::dot(s, as<std::int8_t>(packed_unit<Tag, !kInt8Dots<Tag>>(gb + 32, u, h)),
                   bcast4<Tag>(aq + 4 * u));
      }
      st.acc[h] = fmadd<Tag>(xsimd::to_float(s), load_f16<Tag>(gb + 2 * kL * h) * da, st.acc[h]);
    }
  }

  /// FormatKernels::gemm_packed. On AMD's family-25 cores (amd_family25_tuning) the GEMV of the
  /// AVX-512 tables runs this body on ymm registers (Ymm<Tag>: EVEX vpdpbusd; the same activation
  /// layout, Q8_0Simd::kPad, and bit-identical results: each row's int32 sums and float steps are
  /// the same). Zen 4, nibble-bench cold, builds alternated over 3 rounds, medians of the
  /// per-round ratios of the paired bandwidth, 1 / 2 threads: 4096 x 4096 1.11 / 1.19, 11008 x
  /// 4096 1.09 / 1.05, 4096 x 11008 1.10 / 1.01, 14336 x 4096 1.10 / 1.30 (0.87-0.89 ->
  /// 0.95-0.99 on one thread); L3-resident 1.05 / 1.04, L2-resident 1.00 / 0.95 (docs/kernels.md,
  /// "Zen 4: packed Q8_0 on ymm registers"). Other cores keep the 64-byte body (Zen 5: 0.88-1.08
  /// of the bandwidth, packed_streams).
  static constexpr std::int64_t kRowsMinN = 2;  ///< n from which the rows engine runs
  static void gemm(const void* P, std::int64_t g0, std::int64_t g1, std::int64_t cols,
                   const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
    if constexpr (!std::is_same_v<Ymm<Tag>, Tag>) {
      if (n < kRowsMinN && amd_family25_tuning())
        return packed_gemv_rows<PackedQ8_0<Ymm<Tag>>>(P, g0, g1, cols, A, arb, n, Y, ldy);
    }
    packed_gemm<Tag, PackedQ8_0, Q8_0Rows<Tag>, kRowsMinN>(P, g0, g1, cols, A, arb, n, Y, ldy);
  }
};

#endif

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
/// Whether the packed body K has a GEMM of its own (K::gemm).
template <class K, class = void>
struct HasPackedGemm : std::false_type {};
template <class K>
struct HasPackedGemm<K, std::void_t<decltype(K::gemm)>> : std::true_type {};

/// The packed body K's entries of format f: its gemm_packed (K::gemm, or for a body without one
/// its GEMV per activation row, marked packed_gemv_only) and its activation relayout
/// (K::act_bytes / K::relayout; null: the plain activation rows).
template <class K>
void set_packed(KernelTable& t, Format f) {
  FormatKernels& k = entry(t, f);
  if constexpr (HasPackedGemm<K>::value) {
    k.gemm_packed = K::gemm;
  } else {  // GEMV only: n > 1 goes to the plain GEMM on unpacked groups
    k.gemm_packed = packed_gemv_rows<K>;
    k.packed_gemv_only = true;
  }
  k.packed_act_bytes = K::act_bytes;
  k.packed_act_relayout = K::relayout;
}
#endif

/// Registers the packed-layout kernels of every packable format for ISA tag Tag (the scalar
/// table has none: the driver unpacks each group there).
template <class Tag>
void register_packed(KernelTable& t) {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (Tag::bytes >= 16) {
    set_packed<PackedQ45<Tag, false>>(t, Format::q4_K);
    set_packed<PackedQ45<Tag, true>>(t, Format::q5_K);
    set_packed<PackedQ6<Tag>>(t, Format::q6_K);
    set_packed<PackedQ8_0<Tag>>(t, Format::q8_0);
    set_packed<PackedQ32<Tag, Format::q4_0>>(t, Format::q4_0);
    set_packed<PackedQ32<Tag, Format::q4_1>>(t, Format::q4_1);
    set_packed<PackedQ32<Tag, Format::q5_0>>(t, Format::q5_0);
    set_packed<PackedQ32<Tag, Format::q5_1>>(t, Format::q5_1);
    set_packed<PackedQ32<Tag, Format::iq4_nl>>(t, Format::iq4_nl);
    set_packed<PackedQ32<Tag, Format::mxfp4>>(t, Format::mxfp4);
    set_packed<PackedKq23<Tag, false>>(t, Format::q2_K);
    set_packed<PackedKq23<Tag, true>>(t, Format::q3_K);
    set_packed<PackedIQ4XS<Tag>>(t, Format::iq4_xs);
    set_packed<PackedFloat16<Tag, false>>(t, Format::f16);
    set_packed<PackedFloat16<Tag, true>>(t, Format::bf16);
#if defined(NIBBLE_K_X86)
    set_packed<PackedNf4<Tag, false>>(t, Format::nf4);
    set_packed<PackedNf4<Tag, true>>(t, Format::fp4);
#endif
  }
#else
  (void)t;
#endif
}

}  // namespace
}  // namespace nibble::kernels
