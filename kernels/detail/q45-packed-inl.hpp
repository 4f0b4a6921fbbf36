// nibble: Q4_K / Q5_K on packed (row-interleaved) weights (nibble/packed.hpp), written once for
// every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// A packed group block holds block b of 16 rows with every 4-byte unit u of the block stored as
// 64 bytes: unit u of rows 0..15. So a register of Tag::bytes loaded at unit u holds that unit
// of L = Tag::bytes / 4 rows, one row per int32 lane ("sub-tile" h of the group: rows h * L ..),
// and nothing has to be transposed:
//   units 0..3      d | dmin, then the 12 packed scale bytes (3 units)
//   units 4..11     Q5_K only: qh (32 bytes)
//   the next 32     qs: unit k holds qs bytes 4k..4k+3: the low nibbles are values 4 (k % 8) ..
//                   of sub-block 2 (k / 8), the high nibbles the same values of sub-block
//                   2 (k / 8) + 1
// GEMV (one activation row, Q8_K): per sub-block pair and lane, two int8 dots against the
// broadcast activation dwords (the activations need no re-ordering), each sub-block sum times its
// 6-bit scale in int32 (one multiply per sub-block and L rows), one float step per block for d
// and one for dmin. The mins term sum_j m[j] * (activation sum of sub-block j) is two more int8
// dots per block: the activation sums are split into bytes l + 128 h (act_relayout), the mins
// are bytes already. Integer sums are exact; only the two float steps per block and row depend
// on the ISA (the documented tolerance).
// GEMM (n > 1): the rows engine (rows-inl.hpp) with tiles read straight from the packed bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/q45-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag, bool HighBit>
struct PackedQ45 : PackedBody<Tag> {
  using Block = std::conditional_t<HighBit, BlockQ5_K, BlockQ4_K>;
  using B = PackedBody<Tag>;
  using State = typename B::State;
  using B::kH;
  using B::unit;
  static constexpr int kQs = HighBit ? 12 : 4;  ///< first qs unit
  static constexpr std::size_t kGroupBlock = PackedGroup::kRows * sizeof(Block);
  /// The high nibbles used as 16 * q (one AND instead of a shift and an AND), undone by a shift
  /// of the exact int32 sums: only with VNNI (without it the int16 pair sums would saturate)
  /// and without a fifth bit.
  static constexpr bool kHiTrick = Tag::vnni && !HighBit;
  static constexpr bool kInlineStep = true;  ///< see InlineStep

  /// Per activation block: its sub-block sums (bsums[2j] + bsums[2j+1], j = 0..7) split as
  /// l + 128 h with l in [-64, 63] (bytes of ml) and h in [-32, 32] (bytes of mh).
  struct Prep {
    std::int8_t ml[8], mh[8];
  };
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      for (int j = 0; j < 8; ++j) {
        const int s = in[b].bsums[2 * j] + in[b].bsums[2 * j + 1];
        const int l = ((s + 64) & 127) - 64;
        p[b].ml[j] = static_cast<std::int8_t>(l);
        p[b].mh[j] = static_cast<std::int8_t>((s - l) / 128);
      }
    }
  }

  /// Integer sums in int32 per unit (VNNI, sdot), or in int16 over kDepth units (pmaddubsw /
  /// smull: 2 * 15 * 127 * 8 and 2 * 31 * 127 * 4 stay below 2^15).
  static constexpr bool kInt32 = kInt8Dots<Tag>;
  static constexpr int kDepth = HighBit ? 4 : 8;

  /// Q5_K with VNNI: the fifth bits are not merged into the levels but dotted on their own, as
  /// the qh bytes masked to the sub-block's bit (value 2^j, at most 128: vpdpbusd takes unsigned
  /// bytes) against the same activations; that sum times 16 / 2^j (a shift of an exact multiple
  /// of 2^j) is the fifth bits' part. Per register an `and` and a dot instead of a shift, an
  /// `and` and an `or` (measured in docs/kernels.md).
  static constexpr bool kFifthDot = HighBit && Tag::vnni;

  /// The unsigned levels of qs unit k of sub-block pair sp, sub-tile h: lo (sub-block 2 sp) and
  /// hi (2 sp + 1, times 16 with kHiTrick), with Q5_K's fifth bits unless kFifthDot.
  static void levels(const std::uint8_t* gb, int h, int sp, int k, VU32<Tag>& lo, VU32<Tag>& hi) {
    const VU32<Tag> m4(0x0F0F0F0Fu);
    const VU32<Tag> q = unit(gb, kQs + 8 * sp + k, h);
    lo = q & m4;
    if constexpr (kHiTrick) {
      hi = q & VU32<Tag>(0xF0F0F0F0u);
    } else {
      hi = (q >> 4) & m4;
    }
    if constexpr (HighBit && !kFifthDot) {
      // qh bytes 4k..: the same positions; bits 2 sp and 2 sp + 1 of each byte moved down to
      // bits 0 and 1 by one shift of the whole dword, then to bit 4 by shifts by constants (bits
      // crossing into a neighbour byte are masked off). One shift by the loop's count, and no
      // branch on its sign.
      const VU32<Tag> qh = unit(gb, 4 + k, h) >> (2 * sp), b4(0x10101010u);
      lo = lo | ((qh << 4) & b4);
      hi = hi | ((qh << 3) & b4);
    }
  }

  /// The GEMV pieces of packed_gemv.
  using Act = Q8KPrepAct<Prep>;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return Act::of(A, cols); }
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// Sub-tiles per pass over the block: Q4_K takes all kH at once, so that each activation
  /// broadcast serves every sub-tile (AVX-VNNI, L2-resident, 4 rounds of alternated binaries:
  /// 35.9 -> 42.0 GB/s; AVX2 33.7 -> 34.8, level); Q5_K one at a time (its fifth-bit sums
  /// spill with two: AVX-VNNI 28.5 -> 26.2).
  static constexpr int kPass = B::pass_size(!HighBit);

  /// One group block (block b of the 16 rows) into the state, kPass sub-tiles per pass: within
  /// a pass the sub-tiles are the innermost loop and share the activation broadcasts.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    for (int h0 = 0; h0 < kH; h0 += kPass) pass(gb, act, b, h0, st);
  }
  [[gnu::always_inline]] static inline void pass(const std::uint8_t* gb, const Act& act,
                                                 std::int64_t b, int h0, State& st) {
    const VU32<Tag> m4(0x0F0F0F0Fu), k3f(0x3F3F3F3Fu), k30(0x30303030u), kff(0xFFu);
    const std::uint8_t* aq = reinterpret_cast<const std::uint8_t*>(act.a[b].qs);
    const Prep& pb = act.p[b];
    const VF<Tag> da(act.a[b].d);
    VI32<Tag> tot[kPass], tot_hi[kPass];  // sub-tile h0 + h; tot_hi: the 16x high-nibble sums
                                          // (kHiTrick only)
    VU32<Tag> sc[kPass][2];               // the 6-bit scales of sub-tile h0 + h, 4 per lane in each
    for (int h = 0; h < kPass; ++h) {
      tot[h] = VI32<Tag>(0);
      tot_hi[h] = VI32<Tag>(0);
      const VU32<Tag> u0 = unit(gb, 1, h0 + h), u2 = unit(gb, 3, h0 + h);
      sc[h][0] = u0 & k3f;
      sc[h][1] = (u2 & m4) | ((u0 >> 2) & k30);
    }
    for (int sp = 0; sp < 4; ++sp) {  // sub-blocks 2 sp (low nibbles) and 2 sp + 1
      if constexpr (kInt32) {
        VI32<Tag> lo_sum[kPass], hi_sum[kPass], lo5[kPass], hi5[kPass];
        for (int h = 0; h < kPass; ++h) lo_sum[h] = hi_sum[h] = lo5[h] = hi5[h] = VI32<Tag>(0);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const VI8<Tag> a_lo = bcast4<Tag>(aq + 64 * sp + 4 * k);
          const VI8<Tag> a_hi = bcast4<Tag>(aq + 64 * sp + 32 + 4 * k);
          for (int h = 0; h < kPass; ++h) {
            VU32<Tag> lo, hi;
            levels(gb, h0 + h, sp, k, lo, hi);
            lo_sum[h] = dot_u8s8<Tag>(lo_sum[h], as<std::uint8_t>(lo), a_lo);
            hi_sum[h] = dot_u8s8<Tag>(hi_sum[h], as<std::uint8_t>(hi), a_hi);
            if constexpr (kFifthDot) {
              const VU32<Tag> qh = unit(gb, 4 + k, h0 + h);
              lo5[h] = dot_u8s8<Tag>(
                  lo5[h], as<std::uint8_t>(qh & VU32<Tag>(0x01010101u << (2 * sp))), a_lo);
              hi5[h] = dot_u8s8<Tag>(
                  hi5[h], as<std::uint8_t>(qh & VU32<Tag>(0x01010101u << (2 * sp + 1))), a_hi);
            }
          }
        }
        for (int h = 0; h < kPass; ++h) {
          if constexpr (kFifthDot) {  // times 16 / 2^j, j = 2 sp and 2 sp + 1
            lo_sum[h] = lo_sum[h] + (sp < 2 ? lo5[h] << (4 - 2 * sp) : lo5[h] >> (2 * sp - 4));
            hi_sum[h] = hi_sum[h] + (sp < 2 ? hi5[h] << (3 - 2 * sp) : hi5[h] >> (2 * sp - 3));
          }
          const VU32<Tag> s = sc[h][sp / 2] >> (16 * (sp % 2));  // the pair's scale bytes
          const VI32<Tag> s_lo = as<std::int32_t>(s & kff), s_hi = as<std::int32_t>((s >> 8) & kff);
          tot[h] = tot[h] + lo_sum[h] * s_lo;
          if constexpr (kHiTrick) {
            tot_hi[h] = tot_hi[h] + hi_sum[h] * s_hi;
          } else {
            tot[h] = tot[h] + hi_sum[h] * s_hi;
          }
        }
      } else {
        // int16 pair sums of kDepth units, then one pmaddwd per sub-block applies the
        // scale (as the int16 pair (s, s)) and widens
        for (int k0 = 0; k0 < 8; k0 += kDepth) {
          VI16<Tag> lo16[kPass], hi16[kPass];
          for (int h = 0; h < kPass; ++h) lo16[h] = hi16[h] = VI16<Tag>(0);
#pragma GCC unroll 8
          for (int k = k0; k < k0 + kDepth; ++k) {
            const VI8<Tag> a_lo = bcast4<Tag>(aq + 64 * sp + 4 * k);
            const VI8<Tag> a_hi = bcast4<Tag>(aq + 64 * sp + 32 + 4 * k);
            for (int h = 0; h < kPass; ++h) {
              VU32<Tag> lo, hi;
              levels(gb, h0 + h, sp, k, lo, hi);
              lo16[h] = lo16[h] + madd_u8s8<Tag>(as<std::uint8_t>(lo), a_lo);
              hi16[h] = hi16[h] + madd_u8s8<Tag>(as<std::uint8_t>(hi), a_hi);
              // Q4_K: the sums stay chains (keep_order); otherwise GCC adds the eight units'
              // products up as a tree and makes every unit's levels first (AVX2, with the mins
              // read late: 141 -> 58 stack accesses, warm +16 %, docs/kernels.md "Register
              // pressure on 256-bit"). Q5_K measured alike with and without.
              if constexpr (!HighBit) {
                keep_order(lo16[h]);
                keep_order(hi16[h]);
              }
            }
          }
          for (int h = 0; h < kPass; ++h) {
            const VU32<Tag> s = sc[h][sp / 2] >> (16 * (sp % 2));  // the pair's scale bytes
            const VI32<Tag> s_lo = as<std::int32_t>(s & kff);
            const VI32<Tag> s_hi = as<std::int32_t>((s >> 8) & kff);
            tot[h] = tot[h] + madd_i16<Tag>(lo16[h], as<std::int16_t>(s_lo | (s_lo << 16)));
            tot[h] = tot[h] + madd_i16<Tag>(hi16[h], as<std::int16_t>(s_hi | (s_hi << 16)));
          }
        }
      }
    }
    for (int h = 0; h < kPass; ++h) {
      if constexpr (kHiTrick) tot[h] = tot[h] + (tot_hi[h] >> 4);  // exact: multiples of 16
      // the mins and d only now: fewer registers live across the sums above
      const VU32<Tag> hd = unit(gb, 0, h0 + h), u1 = unit(gb, 2, h0 + h);
      const VU32<Tag> mn[2] = {u1 & k3f, ((unit(gb, 3, h0 + h) >> 4) & m4) | ((u1 >> 2) & k30)};
      VI32<Tag> ms = dot_u8s8<Tag>(VI32<Tag>(0), as<std::uint8_t>(mn[0]), bcast4<Tag>(pb.mh));
      ms = dot_u8s8<Tag>(ms, as<std::uint8_t>(mn[1]), bcast4<Tag>(pb.mh + 4));
      VI32<Tag> ml = dot_u8s8<Tag>(VI32<Tag>(0), as<std::uint8_t>(mn[0]), bcast4<Tag>(pb.ml));
      ml = dot_u8s8<Tag>(ml, as<std::uint8_t>(mn[1]), bcast4<Tag>(pb.ml + 4));
      ms = (ms << 7) + ml;
      st.acc[h0 + h] = fmadd<Tag>(xsimd::to_float(tot[h]), h2f_lo16<Tag>(hd) * da, st.acc[h0 + h]);
      st.acc[h0 + h] =
          fmadd<Tag>(xsimd::to_float(ms), -(h2f_lo16<Tag>(hd >> 16) * da), st.acc[h0 + h]);
    }
  }

  /// FormatKernels::gemm_packed.
  static constexpr auto gemm = packed_gemm<Tag, PackedQ45, Q45Rows<HighBit>, 2>;
};

#endif

}  // namespace
}  // namespace nibble::kernels
