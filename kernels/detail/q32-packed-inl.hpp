// nibble: Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 GEMV on packed (row-interleaved) weights
// (nibble/packed.hpp), written once for every SIMD tag over xsimd batches and the helpers of
// intrin-*.hpp.
//
// A group block (Q32Packed in legacy-q-inl.hpp) holds block b of 16 rows; a register loaded at
// quant unit u holds bytes 4u..4u+3 of L = Tag::bytes / 4 rows, one row per int32 lane: their low
// nibbles are values 4u..4u+3, their high nibbles values 16 + 4u... Per unit, two int8 dots
// against broadcast activation dwords of the plain Q8_0 / Q8_1 block (no re-ordering, no
// shuffles); per block and sub-tile, one conversion and one fma with the rows' scales (a second
// one for the mins of Q4_1 / Q5_1). The integer scheme and its exactness are those of the plain
// body (legacy-q-inl.hpp): levels are unsigned with the offset -kOff * sum(a) as the starting
// value of each sum, IQ4_NL's signed code book goes through S8Dot (without VNNI: S8Dot::madd_abs
// against the activations' magnitudes, prepared once per row).
// GEMM (n >= 4): the rows engine with tiles read straight from the packed bytes
// (Q32Rows::repack_packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/legacy-q-inl.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag, Format F>
struct PackedQ32 : PackedBody<Tag> {
  using Fmt = Q32Fmt<F>;
  using S = Q32Simd<Tag, F>;
  using P = Q32Packed<Tag, F>;
  using ActBlk = Q32Act<F>;
  using State = typename PackedBody<Tag>::State;
  using PackedBody<Tag>::kH;
  static constexpr std::size_t kGroupBlock = P::kGroupBlock;
  /// int32 sums per unit (VNNI, sdot, and IQ4_NL's S8Dot), or int16 pair sums over kDepthU
  /// units (pmaddubsw: Q32Rows' bound, two slots per unit) widened once.
  static constexpr bool kInt32 = kInt8Dots<Tag> || S::kSigned;
  static constexpr int kDepthU = kInt32 ? 1 : Q32Rows<Tag, F>::template kDepth<Tag> / 2;

  /// IQ4_NL without VNNI (S8Dot::kAbsAct): the products from S8Dot::madd_abs against the
  /// activations' magnitudes, prepared once per row (no |w| per register).
  static constexpr bool kAbs = S::kSigned && S8Dot<Tag>::kAbsAct;

  /// Per activation block: d_a as fp32, the offset term -kOff * sum(a) and (Q8_1) s; with kAbs,
  /// |a| of the 32 activations as unsigned bytes.
  struct PrepPlain {
    float d;
    std::int32_t init;
    float s, pad;
  };
  struct PrepAbs : PrepPlain {
    std::uint8_t abs[32];
  };
  using Prep = std::conditional_t<kAbs, PrepAbs, PrepPlain>;
  using Row = SplitRow<ActBlk, Prep, 32>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const ActBlk*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 32; ++b) {
      const auto* blk = reinterpret_cast<const std::uint8_t*>(&in[b]);
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + S::kAq);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[j];
      p[b].d = half_to_float(ld_u16(blk));
      p[b].init = -S::kOff * sum;
      p[b].s = Fmt::kMin ? half_to_float(ld_u16(blk + 2)) : 0.0f;
      p[b].pad = 0.0f;
      if constexpr (kAbs) abs_bytes(q, 32, p[b].abs);
    }
  }

  /// The GEMV pieces of packed_gemv.
  struct Act {
    const std::uint8_t* a;  ///< the plain activation blocks
    const Prep* p;
  };
  static Act act(const std::uint8_t* A, std::int64_t cols) { return {A, Row::prep(A, cols)}; }
  static std::int64_t blocks(std::int64_t cols) { return cols / 32; }

  static VI32<Tag> dot(const VI32<Tag>& acc, const VU8<Tag>& lv, const VI8<Tag>& a) {
    if constexpr (S::kSigned) return S8Dot<Tag>::dot_prepped(acc, as<std::int8_t>(lv), a);
    return dot_u8s8<Tag>(acc, lv, a);
  }

  /// Sub-tiles per pass over the block. With int32 dots all kH at once, so that each activation
  /// broadcast serves every sub-tile (AVX-VNNI, L2-resident, 3 rounds of alternated binaries:
  /// Q4_0 43.9 -> 52.8 GB/s, Q4_1 38.0 -> 39.1, the other formats level); with the int16 sums
  /// of AVX2 one at a time (Q4_0 43.0 -> 39.8 with two).
  static constexpr int kPass = PackedBody<Tag>::pass_size(kInt32);

  /// Whether the quant units' registers are held (packed_unit): not for Q5_0 / Q5_1 / MXFP4 on
  /// 64-byte vectors, which measured 0.93-0.99x held.
  static constexpr bool kHold =
      Tag::bytes < 64 || F == Format::q4_0 || F == Format::q4_1 || F == Format::iq4_nl;

  /// One group block (block b of the 16 rows) into the state, kPass sub-tiles per pass: within
  /// a pass the sub-tiles are the inner loop and share the activation broadcasts.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    for (int h0 = 0; h0 < kH; h0 += kPass) pass(gb, act, b, h0, st);
  }
  [[gnu::always_inline]] static inline void pass(const std::uint8_t* gb, const Act& act,
                                                 std::int64_t b, int h0, State& st) {
    const std::uint8_t* aq = act.a + static_cast<std::size_t>(b) * sizeof(ActBlk) + S::kAq;
    const Prep& pb = act.p[b];
    const VF<Tag> da(pb.d);
    const VI8<Tag> tbl = S::table();
    VI32<Tag> isum[kPass];  // sub-tile h0 + h
    for (int h = 0; h < kPass; ++h) isum[h] = VI32<Tag>(pb.init);
    if constexpr (kAbs) {
      const VI16<Tag> one(static_cast<std::int16_t>(1));
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const VI8<Tag> a_lo = bcast4<Tag>(aq + 4 * u), a_hi = bcast4<Tag>(aq + 16 + 4 * u);
        const VU8<Tag> m_lo = as<std::uint8_t>(bcast4<Tag>(pb.abs + 4 * u));
        const VU8<Tag> m_hi = as<std::uint8_t>(bcast4<Tag>(pb.abs + 16 + 4 * u));
        for (int h = 0; h < kPass; ++h) {
          VU8<Tag> lo, hi;
          P::template levels<kHold>(gb, h0 + h, u, tbl, lo, hi);
          isum[h] = madd_acc_i16<Tag>(isum[h],
                                      S8Dot<Tag>::madd_abs(m_lo, as<std::int8_t>(lo), a_lo), one);
          isum[h] = madd_acc_i16<Tag>(isum[h],
                                      S8Dot<Tag>::madd_abs(m_hi, as<std::int8_t>(hi), a_hi), one);
        }
      }
    } else if constexpr (kInt32) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const VI8<Tag> a_lo = bcast4<Tag>(aq + 4 * u), a_hi = bcast4<Tag>(aq + 16 + 4 * u);
        for (int h = 0; h < kPass; ++h) {
          VU8<Tag> lo, hi;
          P::template levels<kHold>(gb, h0 + h, u, tbl, lo, hi);
          isum[h] = dot(isum[h], lo, a_lo);
          isum[h] = dot(isum[h], hi, a_hi);
        }
      }
    } else {
      for (int u0 = 0; u0 < 4; u0 += kDepthU) {
        VI16<Tag> s16[kPass];
        for (int h = 0; h < kPass; ++h) s16[h] = VI16<Tag>(0);
#pragma GCC unroll 4
        for (int u = u0; u < u0 + kDepthU; ++u) {
          const VI8<Tag> a_lo = bcast4<Tag>(aq + 4 * u), a_hi = bcast4<Tag>(aq + 16 + 4 * u);
          for (int h = 0; h < kPass; ++h) {
            VU8<Tag> lo, hi;
            P::template levels<kHold>(gb, h0 + h, u, tbl, lo, hi);
            s16[h] = s16[h] + madd_u8s8<Tag>(lo, a_lo) + madd_u8s8<Tag>(hi, a_hi);
          }
        }
        for (int h = 0; h < kPass; ++h)
          isum[h] = isum[h] + madd_i16<Tag>(s16[h], VI16<Tag>(static_cast<std::int16_t>(1)));
      }
    }
    for (int h = 0; h < kPass; ++h) {
      st.acc[h0 + h] =
          fmadd<Tag>(xsimd::to_float(isum[h]), P::scale(gb, h0 + h) * da, st.acc[h0 + h]);
      if constexpr (Fmt::kMin)
        st.acc[h0 + h] = fmadd<Tag>(P::min(gb, h0 + h), VF<Tag>(pb.s), st.acc[h0 + h]);
    }
  }

  /// FormatKernels::gemm_packed: the GEMV per activation row below 4 rows (as the plain
  /// q32_gemm), the rows engine from there.
  static constexpr auto gemm = packed_gemm<Tag, PackedQ32, Q32Rows<Tag, F>, 4>;
};

#endif

}  // namespace
}  // namespace nibble::kernels
