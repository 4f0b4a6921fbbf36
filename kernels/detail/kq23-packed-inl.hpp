// nibble: Q2_K / Q3_K GEMV on packed (row-interleaved) weights (nibble/packed.hpp), written once
// for every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// A group block holds block b of 16 rows in 4-byte units (Q3_K: its d in 2-byte units after
// them); a register loaded at unit u holds that unit of L = Tag::bytes / 4 rows, one row per
// int32 lane. qs unit k (qs bytes 4k..4k+3, half hh = k / 8, position l0 = 4 (k % 8)) holds, at
// shift 2g, the 2-bit levels of values 128 hh + 32 g + l0 .. + 3, of sub-block 8 hh + 2 g + l0 /
// 16; Q3_K's high bits of those values are bit 4 hh + g of the bytes of hmask unit l0 / 4. Per qs
// unit and shift, one int8 dot against a broadcast activation dword of the plain Q8_K block (no
// re-ordering); per sub-block the int32 sum times the rows' scales (one multiply for L rows); per
// block one float step (Q2_K: two, the mins term being four int8 dots of the mins against the
// activation sub-block sums split into bytes). Integer sums are exact (the scheme of
// kq23-inl.hpp), only the float steps per block depend on the ISA.
// GEMM (n >= 4): the rows engine with tiles read straight from the packed bytes
// (Q2Rows / Q3Rows::repack_packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/kq23-inl.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// What the packed Q2_K and Q3_K bodies share. Q3 selects the format.
template <class Tag, bool Q3>
struct PackedKq23 : PackedBody<Tag> {
  using Block = std::conditional_t<Q3, BlockQ3_K, BlockQ2_K>;
  using State = typename PackedBody<Tag>::State;
  using PackedBody<Tag>::kH;
  using PackedBody<Tag>::unit;
  static constexpr std::size_t kGroupBlock = 16 * sizeof(Block);
  /// On AVX-512 VNNI the driver takes its inlined-step path (InlineStep; GCC 12 then makes each
  /// stream's step its own out-of-line clone instead of one shared packed_step_call, still one
  /// call per group block), with the body's loops forced inline (static_for_inline,
  /// NIBBLE_LAMBDA_INLINE). Zen 5, in-process pairs against the out-of-line step, 4096 x 4096:
  /// Q3_K cost up to 5 % L2-resident but read cold 0.90-0.95 of the time (11008 x 4096
  /// 0.91-0.99); forcing its loops measured level. Q2_K with them forced and kPackedPrefetch:
  /// L2-resident 0.91, cold 0.86-0.92 (11008 x 4096 0.925-1.00); the earlier losses of inlined
  /// Q2_K (L2-resident 1.08-1.27, cold 1.02-1.11) were measured at 6 KiB or with loops left out of
  /// line (docs/kernels.md, "Packed IQ4_XS and Q2_K: the inlined steps", and "Packed Q2_K /
  /// Q3_K: the activation broadcast inside the dot").
  static constexpr bool kInlineStep = Tag::bytes == 64 && Tag::vnni;
  /// The inlined Q3_K steps prefetch 6 KiB ahead instead of kPackedPrefetch's 3 (where
  /// packed_prefetch_l1 prefetches at all on two streams: AMD cores but family 25). Zen 5,
  /// in-process pairs against 3 KiB, cold, 4096 x 4096, each core: 6144 0.89-0.92 of the time
  /// (11008 x 4096 0.90), 4608 0.89, 4096 0.92-0.97, 9216 0.95-0.98; L2-resident 1.00. Q2_K and
  /// IQ4_XS (then out of line) read best at 3 KiB: 4608 1.01 / 1.04, 6144 1.06 / 1.085, 2048 1.00
  /// / 1.01, 1536 1.01 / 1.03 (docs/kernels.md, "Packed Q2_K / Q3_K: the activation broadcast
  /// inside the dot").
  static constexpr std::size_t kPrefetchL1 = Q3 && kInlineStep ? 6144 : kPackedPrefetch;
  static constexpr bool kFamily25NoL1Prefetch = !Q3;  ///< Q2_K: see packed_prefetch_l1
  static constexpr int kQs = Q3 ? 8 : 4;              ///< the first qs unit
  /// The inlined Q3_K step reads its masks from memory (konst).
  static constexpr bool kMemConsts = Q3 && kInlineStep;
  /// int32 dots per unit (VNNI, sdot), or int16 pair sums over a sub-block's 4 units (pmaddubsw:
  /// 4 * 2 * 7 * 128 < 2^15) widened once.
  static constexpr bool kInt32 = kInt8Dots<Tag>;
  /// Q2_K with VNNI: the levels of shift g taken as q & (3 << 2g), i.e. 4^g times the level
  /// (at most 192, a valid unsigned byte), and the exact int32 sums shifted back: one operation
  /// per register instead of two.
  static constexpr bool kHiTrick = !Q3 && Tag::vnni;

  /// Per activation block: Q2_K, the 16 sub-block sums split as 128 h + l (l in [0, 127], h in
  /// [-16, 15]) for the mins term; Q3_K, -4 times the sums of sub-blocks 4c + t and 4c + t + 2
  /// as an int16 pair (|4 bsum| <= 4 * 16 * 128 < 2^15) for the level offset.
  struct PrepQ2 {
    std::int8_t l[16], h[16];
  };
  struct PrepQ3 {
    std::int32_t off[4][2];
  };
  using Prep = std::conditional_t<Q3, PrepQ3, PrepQ2>;
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      if constexpr (Q3) {
        bsum_pairs(in[b], -4, p[b].off);
      } else {
        for (int j = 0; j < 16; ++j) {
          const int s = in[b].bsums[j];  // |s| <= 16 * 128
          p[b].l[j] = static_cast<std::int8_t>(s & 127);
          p[b].h[j] = static_cast<std::int8_t>(s >> 7);  // floor division
        }
      }
    }
  }

  using Act = Q8KPrepAct<Prep>;
  static Act act(const std::uint8_t* A, std::int64_t cols) { return Act::of(A, cols); }
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// The masks of the Q3_K body: the levels' two low bits and their high bit at bits kP..kP + 2
  /// of each byte (kP in kP3: 0, 1, 2, 4 or 5), the scales' nibbles and bytes, a pair's low half
  /// (0x30303030, the low bits at kP = 4, also takes the scales' bits 4..5).
  alignas(64) static constexpr std::uint32_t kKonsts[] = {
      0x03030303u, 0x06060606u, 0x0C0C0C0Cu, 0x30303030u, 0x60606060u, 0x04040404u, 0x08080808u,
      0x10101010u, 0x40404040u, 0x80808080u, 0x0F0F0F0Fu, 0x00FF00FFu, 0x0000FFFFu};
  template <std::uint32_t V>
  static constexpr int konst_index() {
    for (int i = 0; i < static_cast<int>(sizeof(kKonsts) / sizeof(kKonsts[0])); ++i)
      if (kKonsts[i] == V) return i;
    return -1;
  }
  /// The constant V (one of kKonsts) in every 32-bit lane. With kMemConsts a broadcast load
  /// from kKonsts (opaque_ptr hides the values; one base register for all), otherwise
  /// whatever the compiler makes of the immediate: GCC 12 rebuilt each of the inlined Q3_K
  /// step's 15 masks per call with a `mov` and a `vpbroadcastd` from a general register, a vector
  /// operation each in a body bound by them, where a load issues beside them (docs/kernels.md,
  /// "Q3_K on AVX-512: fewer operations per group block").
  template <std::uint32_t V>
  [[gnu::always_inline]] static inline VU32<Tag> konst() {
    constexpr int i = konst_index<V>();
    static_assert(i >= 0, "konst: add the value to kKonsts");
    if constexpr (kMemConsts) {
      return VU32<Tag>(opaque_ptr(kKonsts)[i]);
    } else {
      return VU32<Tag>(V);
    }
  }

  /// v shifted left by N bits, right by -N where N < 0 (each 32-bit lane).
  template <int N>
  [[gnu::always_inline]] static inline VU32<Tag> shift(const VU32<Tag>& v) {
    if constexpr (N >= 0) {
      return v << N;
    } else {
      return v >> -N;
    }
  }

  /// The unsigned levels of qs unit K at shift G (Q3_K: with the high bit from hmask).
  template <int K, int G>
  static VU8<Tag> level(const VU32<Tag>& q, const std::uint8_t* gb, int h) {
    if constexpr (kHiTrick) {
      return as<std::uint8_t>(q & VU32<Tag>(0x03030303u << (2 * G)));
    } else {
      VU32<Tag> lv = (q >> (2 * G)) & VU32<Tag>(0x03030303u);
      if constexpr (Q3) {
        const VU32<Tag> hm = unit(gb, K % 8, h);  // hmask bytes 4 (K % 8) ..: bit 4 hh + G
        constexpr int kS = 4 * (K / 8) + G - 2;   // that bit to bit 2
        lv = lv | (shift<-kS>(hm) & VU32<Tag>(0x04040404u));
      }
      return as<std::uint8_t>(lv);
    }
  }

  /// Q3_K with VNNI: the level of qs unit K at shift G times 2^kP3<K, G> (at most 7 * 32, a
  /// valid unsigned byte): its two low bits at bit kP3, where qs unit K, or qs shifted right by
  /// one shift that serves two levels, has them, and the hmask bit beside them by one shift of
  /// the hmask unit that serves two levels as well. First half (K < 8): qs serves shifts 0 and 1
  /// (at bits 0 and 2), qs >> 2 shifts 2 and 3 (at 2 and 4), the hmask bits 0..3 go up by 2 and
  /// 3; second half: qs serves shifts 0 and 2 (at 0 and 4), qs >> 1 shifts 1 and 3 (at 1 and 5),
  /// hmask bits 4..7 go down by 2 and by 0. So 5 shifts per hmask unit and its two qs units
  /// (8 levels), where shifting for each level alone took 8. The exact int32 sums are shifted
  /// back when the pair is formed (block).
  template <int K, int G>
  static constexpr int kP3 = K < 8 ? (G < 2 ? 2 * G : 2 * G - 2) : (G % 2 ? 2 * G - 1 : 2 * G);
  /// The power of 2 that sub_sum's result for qs unit K (the sub-block's first) at shift G
  /// carries: kP3 where level_scaled makes the levels, else none.
  template <int K, int G>
  static constexpr int kSumShift = Q3&& Tag::vnni ? kP3<K, G> : 0;
  template <int K, int G>
  static VU8<Tag> level_scaled(const VU32<Tag>& q, const std::uint8_t* gb, int h) {
    constexpr int kP = kP3<K, G>, kD = kP - 2 * G, kE = kP + 2 - (4 * (K / 8) + G);
    static_assert(kD <= 0 && kP >= 0 && kP <= 5, "the level bits in the byte");
    const VU32<Tag> hm = unit(gb, K % 8, h);
    return as<std::uint8_t>((shift<kD>(q) & konst<(0x03030303u << kP)>()) |
                            (shift<kE>(hm) & konst<(0x04040404u << kP)>()));
  }

  /// The 16 sub-block scales of the sub-tile's rows as int16 pairs (Q2_K: 0..15, Q3_K:
  /// -32..31): lane r of p[c][e] holds the scales of sub-blocks 4c + e and 4c + e + 2 of row r.
  static void scale_pairs(const std::uint8_t* gb, int h, VI16<Tag> (&p)[4][2]) {
    const VU32<Tag> k0f = konst<0x0F0F0F0Fu>(), kw = konst<0x00FF00FFu>();
    for (int c = 0; c < 4; ++c) {
      VU32<Tag> sb;  // byte j: the (unsigned) scale of sub-block 4c + j
      if constexpr (Q3) {
        // low 4 bits: bytes 0..7 (sub-blocks 0..7) low nibbles, then the same bytes' high
        // nibbles (8..15); high 2 bits: bits 2c..2c+1 of bytes 8..11, moved to bits 4..5 by
        // one shift
        const VU32<Tag> lo = unit(gb, 24 + c % 2, h) >> (4 * (c / 2));
        const VU32<Tag> u = unit(gb, 26, h);
        const VU32<Tag> hi = c < 2 ? u << (c < 2 ? 4 - 2 * c : 0) : u >> (c < 2 ? 0 : 2 * c - 4);
        sb = (lo & k0f) | (hi & konst<0x30303030u>());
      } else {
        sb = unit(gb, c, h) & k0f;
      }
      for (int e = 0; e < 2; ++e) {
        // the high byte of each 16-bit half by a 16-bit shift, which clears the rest
        p[c][e] = e ? as<std::int16_t>(as<std::uint16_t>(sb) >> 8) : as<std::int16_t>(sb & kw);
        if constexpr (Q3) p[c][e] = p[c][e] - VI16<Tag>(static_cast<std::int16_t>(32));
      }
    }
  }

  /// The integer sum of sub-block 8 hh + 2 G + t (qs units 8 hh + 4 t .. + 3 at shift G) of the
  /// sub-tile's rows against its 16 activations, aq + kA .. (aq: the block's 256), without Q3_K's
  /// -4 offset: |sum| <= 16 * 7 * 128 < 2^15, times 2^kSumShift<8 hh + 4 t, G>.
  template <int HH, int G, int T, int kA>
  static VI32<Tag> sub_sum(const VU32<Tag> (&q)[4], const std::uint8_t* gb, int h,
                           const std::uint8_t* aq) {
    constexpr int k0 = 8 * HH + 4 * T;
    VI32<Tag> s(0);
    if constexpr (Q3 && Tag::vnni) {
      static_for_inline<4>([&](auto kc) NIBBLE_LAMBDA_INLINE {
        constexpr int k = decltype(kc)::value;
        s = dot_u8s8_b4<Tag, kA + 4 * k>(s, level_scaled<k0 + k, G>(q[k], gb, h), aq);
      });
      return s;
    } else if constexpr (kInt32) {
      static_for_inline<4>([&](auto kc) NIBBLE_LAMBDA_INLINE {
        constexpr int k = decltype(kc)::value;
        s = dot_u8s8_b4<Tag, kA + 4 * k>(s, level<k0 + k, G>(q[k], gb, h), aq);
      });
      return kHiTrick ? s >> (2 * G) : s;  // exact: a multiple of 4^G
    } else {
      VI16<Tag> s16(0);
      static_for_inline<4>([&](auto kc) NIBBLE_LAMBDA_INLINE {
        constexpr int k = decltype(kc)::value;
        s16 = s16 + madd_u8s8<Tag>(level<k0 + k, G>(q[k], gb, h), bcast4<Tag>(aq + kA + 4 * k));
      });
      return madd_i16<Tag>(s16, VI16<Tag>(static_cast<std::int16_t>(1)));
    }
  }

  /// One group block (block b of the 16 rows) into the state. The sums of sub-blocks sb and
  /// sb + 2 (shifts G and G + 1) go as an int16 pair into one pmaddwd / vpdpwssd with their
  /// scales. Q3_K's offset, -4 bsum[sb], is added to the pair first (an int16 add per pair; the
  /// sum with it, of (level - 4) a, is at most 16 * 4 * 128 in size, and the wrapped int16 add
  /// is exact): one operation on any vector pipe instead of a second pmaddwd / vpdpwssd on the
  /// two that take them. Zen 5, in-process pairs against the second multiply (q3_K.x16, each
  /// core, L2-resident 256 x 4096 / cold 4096 x 4096): AVX2 0.99 / 0.99, AVX-VNNI 0.99 / 0.97;
  /// AVX-512 with dot_u8s8_b4, whose measurement includes it.
  [[gnu::always_inline]] static inline void block(const std::uint8_t* gb, const Act& act,
                                                  std::int64_t b, State& st) {
    const BlockQ8_K& ab = act.a[b];
    const auto* aq = reinterpret_cast<const std::uint8_t*>(ab.qs);
    const Prep& pb = act.p[b];
    const VF<Tag> da(ab.d);
    const VU32<Tag> klo = konst<0xFFFFu>();
    for (int h = 0; h < kH; ++h) {
      VI16<Tag> sp[4][2];
      scale_pairs(gb, h, sp);
      VI32<Tag> tot(0);
      // qs units 8 hh + 4 t .. + 3 loaded once and read at all four shifts (sub-blocks 8 hh + t,
      // + 2, + 4, + 6); loaded per shift they were 64 more loads per block and sub-tile, and the
      // AVX-512 Q3_K body was load-bound (1.14x with packed_unit's hold, L2-resident)
      static_for_inline<4>([&](auto jc) NIBBLE_LAMBDA_INLINE {
        constexpr int hh = decltype(jc)::value / 2, t = decltype(jc)::value % 2;
        VU32<Tag> q[4];
        for (int k = 0; k < 4; ++k) q[k] = unit(gb, kQs + 8 * hh + 4 * t + k, h);
        // pair (sb, sb + 2), sb = 8 hh + 4 gp + t = 4 c + t
        static_for_inline<2>([&](auto gc) NIBBLE_LAMBDA_INLINE {
          constexpr int gp = decltype(gc)::value, c = 2 * hh + gp;
          constexpr int kA = 128 * hh + 64 * gp + 16 * t;  // the activations of sub-block sb
          const VI32<Tag> sa = sub_sum<hh, 2 * gp, t, kA>(q, gb, h, aq);
          const VI32<Tag> sb = sub_sum<hh, 2 * gp + 1, t, kA + 32>(q, gb, h, aq);
          // the sums times 2^ea, 2^eb (exact multiples): sa shifted back into the low half,
          // sb straight into the high half, one shift each (the bits below 2^eb are 0; with
          // eb > 0 the bits that sb's shift brings down under bit 16 are masked off)
          constexpr int ea = kSumShift<8 * hh + 4 * t, 2 * gp>;
          constexpr int eb = kSumShift<8 * hh + 4 * t, 2 * gp + 1>;
          const VU32<Tag> hi = shift<16 - eb>(as<std::uint32_t>(sb));
          const VU32<Tag> pair =
              (shift<-ea>(as<std::uint32_t>(sa)) & klo) | (eb > 0 ? hi & ~klo : hi);
          if constexpr (Q3) {
            const VI16<Tag> p16 =
                as<std::int16_t>(pair) + as<std::int16_t>(VI32<Tag>(pb.off[c][t]));
            tot = madd_acc_i16<Tag>(tot, p16, sp[c][t]);
          } else {
            tot = madd_acc_i16<Tag>(tot, as<std::int16_t>(pair), sp[c][t]);
          }
        });
      });
      if constexpr (Q3) {
        const VF<Tag> d = load_f16<Tag>(gb + 16 * 108 + Tag::bytes / 2 * h);
        st.acc[h] = fmadd<Tag>(xsimd::to_float(tot), d * da, st.acc[h]);
      } else {
        // the mins: sum_sb m[sb] bsum[sb] = 128 (m . h) + m . l, the mins being the high
        // nibbles of the 16 scale bytes (units 0..3)
        VI32<Tag> mh(0), ml(0);
        for (int k = 0; k < 4; ++k) {
          const VU8<Tag> mn = as<std::uint8_t>((unit(gb, k, h) >> 4) & VU32<Tag>(0x0F0F0F0Fu));
          mh = dot_u8s8<Tag>(mh, mn, bcast4<Tag>(pb.h + 4 * k));
          ml = dot_u8s8<Tag>(ml, mn, bcast4<Tag>(pb.l + 4 * k));
        }
        const VU32<Tag> hd = unit(gb, 20, h);  // d | dmin
        st.acc[h] = fmadd<Tag>(xsimd::to_float(tot), h2f_lo16<Tag>(hd) * da, st.acc[h]);
        st.acc[h] =
            fmadd<Tag>(xsimd::to_float((mh << 7) + ml), -(h2f_lo16<Tag>(hd >> 16) * da), st.acc[h]);
      }
    }
  }

  /// FormatKernels::gemm_packed: the GEMV per activation row below 4 rows (as the plain
  /// kq_gemm), the rows engine from there.
  static constexpr auto gemm =
      packed_gemm<Tag, PackedKq23, std::conditional_t<Q3, Q3Rows, Q2Rows>, 4>;
};

#endif

}  // namespace
}  // namespace nibble::kernels
