// nibble: IQ4_XS GEMV on packed (row-interleaved) weights (nibble/packed.hpp), written once for
// every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// A group block holds block b of 16 rows, the whole 136-byte block in 4-byte units: unit 0 is
// d | scales_h << 16, unit 1 scales_l, unit 2 + 4 ib + k the qs bytes 16 ib + 4k .. + 3, whose low
// nibbles are the codes of values 32 ib + 4k .. + 3 and high nibbles of 32 ib + 16 + 4k ... A
// register loaded at a unit holds it for L = Tag::bytes / 4 rows, one row per int32 lane. Per qs
// unit, two code book lookups (lookup16) and two int8 dots against broadcast activation dwords of
// the plain Q8_K block (S8Dot: with VNNI the book is biased by 128 and each sub-block sum starts
// at -128 times its activation sum, prepared once per call); per sub-block the int32 sum times the
// rows' scales ls - 32; one float step per block. Without VNNI the code book values take the
// signs of the activations against their prepared magnitudes (S8Dot::madd_abs) and the int16 pair
// sums go straight through pmaddwd with ls - 32. Integer sums are exact (the scheme of
// iq4-inl.hpp).
// GEMM (n >= 4): the rows engine with tiles read straight from the packed bytes
// (IQ4XSRows::repack_packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/iq4-inl.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag>
struct PackedIQ4XS : PackedBody<Tag> {
  using D = S8Dot<Tag>;
  using State = typename PackedBody<Tag>::State;
  using PackedBody<Tag>::kH;
  using PackedBody<Tag>::unit;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(BlockIQ4_XS);
  /// On 64-byte vectors the driver inlines the steps (InlineStep), with every loop of pass()
  /// forced inline (static_for_inline, NIBBLE_LAMBDA_INLINE): inlined without that, GCC 12 left
  /// the sub-block loop's body out of line, one call per sub-block with the sums in memory, and
  /// the step read 1.29-1.42x slower L2-resident. Zen 5, in-process pairs against the
  /// out-of-line step (one pinned core, each core; time ratios): AVX-512 VNNI cold 4096 x 4096
  /// 0.86-0.95 (one run of ten 1.03), 11008 x 4096 0.84-0.93, L2-resident 1.02-1.05; AVX-512
  /// without VNNI (the kAbs path) cold 0.87-0.91, L2-resident 0.92-0.96. AVX-VNNI (L2-resident
  /// 1.04-1.05, cold 1.00-1.05) and AVX2 (1.04, 0.93-0.98 while compute-bound at 0.7 of the
  /// bandwidth) keep the out-of-line step (docs/kernels.md, "Packed IQ4_XS and Q2_K: the inlined
  /// steps").
  static constexpr bool kInlineStep = Tag::bytes == 64;

  /// Without VNNI (S8Dot::kAbsAct) the products come from S8Dot::madd_abs against the
  /// activations' magnitudes, and each int16 pair sum goes through one pmaddwd against the
  /// sub-block's scale (ls - 32 in both halves): no |w| per register and no int32 multiply per
  /// sub-block. |pair| <= 2 * 128 * 127, times 32, twice per pmaddwd, 64 per block: < 2^31.
  static constexpr bool kAbs = D::kAbsAct;

  /// Per activation block: the starting value -kBias * (sum of the 32 activations) of each
  /// sub-block's sum; with kAbs, |a| of the 256 activations as unsigned bytes.
  struct PrepInit {
    std::int32_t init[8];
  };
  struct PrepAbs {
    std::int32_t init[8];
    std::uint8_t abs[256];
  };
  using Prep = std::conditional_t<kAbs, PrepAbs, PrepInit>;
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      for (int ib = 0; ib < 8; ++ib)
        p[b].init[ib] = -D::kBias * (in[b].bsums[2 * ib] + in[b].bsums[2 * ib + 1]);
      if constexpr (kAbs) abs_bytes(in[b].qs, 256, p[b].abs);
    }
  }

  using Act = Q8KPrepAct<Prep>;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return Act::of(A, cols); }
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// Sub-tiles per pass of block(): with int8 dots on a 256-bit x86 tag (AVX-VNNI) both, the
  /// sub-tiles innermost, so that each activation broadcast serves both and every unit
  /// register's 64 bytes are read together (as PackedQ6::kPass); one elsewhere. iq4_xs.x16 on
  /// AVX-VNNI, Zen 5, in-process A/B against one sub-tile per pass (a /tmp harness, each core,
  /// two code alignments): L2-resident 1.08-1.09, cold 4096 x 4096 1.05-1.10; nibble-bench, 6
  /// alternated rounds, 1 / 2 threads: cold 1.18-1.29 / 1.13, with the unchanged AVX2 body of
  /// the same two binaries at 1.10-1.15 / 0.95-1.08 (docs/kernels.md, "Packed Q6_K and IQ4_XS on
  /// AVX-VNNI: both sub-tiles per pass"). An earlier try of this order (eleventh session) spilled
  /// and lost; here the sums stay chains.
  static constexpr int kPass = kAbs ? 1 : PackedBody<Tag>::pass_size(true);

  /// One group block (block b of the 16 rows) into the state.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    for (int h0 = 0; h0 < kH; h0 += kPass) pass(gb, act, b, h0, st);
  }

  /// block() for the sub-tiles h0 .. h0 + kPass - 1.
  [[gnu::always_inline]] static inline void pass(const std::uint8_t* gb, const Act& act,
                                                 std::int64_t b, int h0, State& st) {
    const BlockQ8_K& ab = act.a[b];
    const auto* aq = reinterpret_cast<const std::uint8_t*>(ab.qs);
    const Prep& pb = act.p[b];
    const VF<Tag> da(ab.d);
    const VI8<Tag> tbl = D::prep(table16<Tag>(ref::iq4::kValues));
    const VU32<Tag> m4(0x0F0F0F0Fu);
    // units 0 (d, scales_h) and 1 (scales_l) of sub-tile h0 + h
    const typename PackedBody<Tag>::template PassUnit<kPass, true> w0(gb, 0, h0), w1(gb, 1, h0);
    VI32<Tag> tot[kPass];
    for (int h = 0; h < kPass; ++h) tot[h] = VI32<Tag>(0);
    static_for_inline<8>([&](auto ic) NIBBLE_LAMBDA_INLINE {
      constexpr int ib = decltype(ic)::value;
      // the sub-block's 6-bit scale ls of sub-tile h0 + h (the weight scale is ls - 32)
      auto ls = [&](int h) NIBBLE_LAMBDA_INLINE {
        return as<std::int32_t>(((w1(h) >> (4 * ib)) & VU32<Tag>(0x0Fu)) |
                                (((w0(h) >> (16 + 2 * ib)) & VU32<Tag>(3u)) << 4));
      };
      // the code book values of qs unit k of sub-tile h0 + h: low nibbles (values 32 ib + 4k
      // ..), high (+ 16)
      auto codes = [&](int k, int h, VI8<Tag>& lo, VI8<Tag>& hi) NIBBLE_LAMBDA_INLINE {
        const VU32<Tag> q = unit(gb, 2 + 4 * ib + k, h0 + h);
        lo = lookup16<Tag>(tbl, as<std::uint8_t>(q & m4));
        hi = lookup16<Tag>(tbl, as<std::uint8_t>((q >> 4) & m4));
      };
      if constexpr (kAbs) {
        const VI32<Tag> s32 = ls(0) - VI32<Tag>(32);
        const VI16<Tag> sc = as<std::int16_t>((s32 & VI32<Tag>(0xFFFF)) | (s32 << 16));
        static_for_inline<4>([&](auto kc) NIBBLE_LAMBDA_INLINE {
          constexpr int k = decltype(kc)::value;
          VI8<Tag> lo, hi;
          codes(k, 0, lo, hi);
          const int j = 32 * ib + 4 * k;
          tot[0] = madd_acc_i16<Tag>(
              tot[0],
              D::madd_abs(as<std::uint8_t>(bcast4<Tag>(pb.abs + j)), lo, bcast4<Tag>(aq + j)), sc);
          tot[0] = madd_acc_i16<Tag>(tot[0],
                                     D::madd_abs(as<std::uint8_t>(bcast4<Tag>(pb.abs + j + 16)), hi,
                                                 bcast4<Tag>(aq + j + 16)),
                                     sc);
          keep_order(tot[0]);
        });
      } else {
        VI32<Tag> s[kPass];
        for (int h = 0; h < kPass; ++h) s[h] = VI32<Tag>(pb.init[ib]);
        static_for_inline<4>([&](auto kc) NIBBLE_LAMBDA_INLINE {
          constexpr int k = decltype(kc)::value;
          const VI8<Tag> a_lo = bcast4<Tag>(aq + 32 * ib + 4 * k);
          const VI8<Tag> a_hi = bcast4<Tag>(aq + 32 * ib + 16 + 4 * k);
          for (int h = 0; h < kPass; ++h) {
            VI8<Tag> lo, hi;
            codes(k, h, lo, hi);
            s[h] = D::dot_prepped(s[h], lo, a_lo);
            s[h] = D::dot_prepped(s[h], hi, a_hi);
            // without int8 dot instructions, or with two sub-tiles, the sums stay chains
            // (keep_order): GCC otherwise reassociated them and spilled (AVX2: 174 -> 14 stack
            // accesses, warm +15 %, docs/kernels.md "Register pressure on 256-bit")
            if constexpr (!kInt8Dots<Tag> || kPass > 1) keep_order(s[h]);
          }
        });
        for (int h = 0; h < kPass; ++h) {
          tot[h] = tot[h] + s[h] * (ls(h) - VI32<Tag>(32));
          if constexpr (!kInt8Dots<Tag> || kPass > 1) keep_order(tot[h]);
        }
      }
    });
    for (int h = 0; h < kPass; ++h)
      st.acc[h0 + h] =
          fmadd<Tag>(xsimd::to_float(tot[h]), h2f_lo16<Tag>(w0(h)) * da, st.acc[h0 + h]);
  }

  /// FormatKernels::gemm_packed: the GEMV per activation row below 4 rows, the rows engine
  /// from there.
  static constexpr auto gemm = packed_gemm<Tag, PackedIQ4XS, IQ4XSRows, 4>;
};

#endif

}  // namespace
}  // namespace nibble::kernels
