// nibble: the Q6_K dequantizer, GEMV body and GEMM policy, written once for every SIMD tag (AVX2,
// AVX-VNNI, AVX-512, AVX-512 VNNI, NEON, NEON dotprod) over xsimd batches and the helpers of
// intrin-*.hpp.
//
// Block layout (ggml): per half h of 128 values, ql byte p (0..63) holds value 128h + p in its
// low nibble and value 128h + 64 + p in its high nibble; qh byte 32h + p % 32 holds their two
// high bits at bit 2 * (p / 32) (low nibble's value) and 4 + 2 * (p / 32) (high nibble's). The
// level is q (0..63), the weight d * scales[value / 16] * (q - 32).
//
// GEMV integer scheme: register v of half h holds ql bytes [64h + vW, 64h + vW + W) (W =
// Tag::bytes); its low-nibble levels are the W consecutive values from 128h + vW, its high-nibble
// levels the W values from 128h + 64 + vW, so the activations are read as stored (Q8_K). Every
// 16-byte lane of a register belongs to one 16-value sub-block. The -32 offset enters as the
// starting value of each lane's sum (-32 times the sum of its activations, prepared once per
// call), the signed sub-block scale as a pmaddwd / int32 multiplier pattern (ScaledDot); integer
// sums are exact, one float fma per block and row. AVX2 and AVX-VNNI differ in the scale patterns
// and the offset (Q6Simd::kPerm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag>
struct Q6Simd {
  static constexpr int kW = Tag::bytes;
  static constexpr int kNV = 64 / kW;  ///< registers per half and nibble
  /// The 256-bit x86 tags (AVX2, AVX-VNNI) take another GEMV scheme in run: pmaddubsw dots,
  /// the scale patterns as dword permutes of scale_pairs16's two tables, and the -32 offset
  /// subtracted once per block as 32 * the sum over the sub-blocks of scale * bsum (Q8_K's
  /// bsums) instead of per register: 8 + 6 operations per block and row where the byte-lookup
  /// patterns and starting values take 27 + 8. The integer sum of a block is the same; only its
  /// split over the int32 lanes differs. Measured on a Zen 5 core, 1 thread, GB/s (alternated
  /// runs): AVX2 warm (L2) 22.4 -> 29.9 with two rows per group -> 33.8 with one, cold
  /// 4096 x 4096 22.6 -> 25-27; AVX-VNNI, whose vpdpbusd body it replaces, cold 23.3 -> 33.5,
  /// warm (L3) 23.5 -> 38.
  static constexpr bool kPerm =
      TagInfo<Tag>::family == Family::x86 && Tag::bytes == 32 && !HasEvex<Tag>::value;
  /// The 64-byte x86 tags (AVX-512): the scale patterns of ScaledDot picked per int32 lane from
  /// the block's 16 scales widened once per block and row (scale_dwords16), one vpermd per
  /// pattern, instead of two byte lookups (scale and sign bytes) and an or. Zen 5, 1 thread
  /// pinned to one core: the table's gemm on 64 L2-resident rows (a /tmp harness) 44.8 -> 56.0
  /// GB/s (AVX-512 VNNI), 42.3 -> 51.1 (AVX-512); nibble-bench AVX-512, 3 alternated rounds,
  /// medians of per-round ratios, 1 / 2 threads: cold 4096 x 4096 1.12 / 1.26, 11008 x 4096
  /// 1.18 / 1.10, 4096 x 11008 1.10 / 1.12, 14336 x 4096 1.10 / 1.21; warm L2 1.29 / 1.05, L3
  /// 1.27 / 1.38.
  static constexpr bool kVperm = TagInfo<Tag>::family == Family::x86 && Tag::bytes == 64;
  /// Rows per GEMV group: one (a single weight stream per thread) except on NEON. AVX-512, one
  /// row against two: cold 4096 x 4096 29 -> 33.6 GB/s on 1 thread, 35 -> 39.4 on 2, warm (L3)
  /// 46.8 -> 44.5.
  static constexpr int kGemvRows = TagInfo<Tag>::family == Family::x86 ? 1 : 2;
  /// Rows per GEMV group when they are far-apart streams (gemv_row_streams): four.
  static constexpr int kStreamRows = 4;
  using SD = ScaledDot<Tag>;
  using Init = typename SD::Init;

  /// Per activation block: the starting lane values -32 * (sum of the lane's activations), at
  /// the byte offset of the lane's first value (int16 pairs or int32 quads, see ScaledDot).
  struct Prep {
    std::int8_t init[256];
  };

  /// Relayout of one row: the plain Q8_K blocks (read by the GEMM engines), then the Prep blocks
  /// (read by the GEMV). Not registered for kPerm tags, whose GEMV reads the plain rows.
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    const std::int64_t nb = cols / 256;
    Prep* p = Row::copy_plain(src, cols, dst);
    constexpr int kG = SD::kPairs ? 2 : 4;  // values per starting value
    for (std::int64_t b = 0; b < nb; ++b) {
      for (int o = 0; o < 256; o += kG) {
        int s = 0;
        for (int e = 0; e < kG; ++e) s += in[b].qs[o + e];
        if constexpr (kG == 2) {
          const auto v = static_cast<std::int16_t>(-32 * s);
          std::memcpy(p[b].init + o, &v, 2);
        } else {
          const std::int32_t v = -32 * s;
          std::memcpy(p[b].init + o, &v, 4);
        }
      }
    }
  }

  template <void (*Gemm)(const void*, std::size_t, std::int64_t, std::int64_t, std::int64_t,
                         const void*, std::size_t, std::int64_t, float*, std::int64_t)>
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) return Gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
    auto groups = [&](auto streams) {
      gemv_groups<Q6Simd, kGemvRows, decltype(streams)::value>(
          static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y, static_cast<const std::uint8_t*>(A),
          arb, cols / 256, cols);
    };
    if constexpr (TagInfo<Tag>::family == Family::x86) {
      // AMD's family-25 cores (Zen 3 / Zen 4): one row at a time in address order without
      // software prefetch (see run), on the 256-bit pmaddubsw body (kPerm) also for the AVX-512
      // tables, whose re-laid-out activation row starts with the plain Q8_K blocks it reads. The
      // zmm body read 0.47-0.64 of the paired bandwidth on one Zen 4 thread, this one 0.64-0.92
      // (nibble-bench, 3 alternated rounds: 1.35-1.67x at 4096 columns, level at 4096 x 11008;
      // docs/kernels.md, "Zen 4: Q6_K one row at a time on the 256-bit body").
      if (amd_family25_tuning()) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
        gemv_groups<Q6Simd<Avx2Tag>, 1, 1>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                                           static_cast<const std::uint8_t*>(A), arb, cols / 256,
                                           cols);
        return;
#endif
      }
    }
    if constexpr (TagInfo<Tag>::family == Family::x86 && Tag::bytes == 32) {
      // AMD's cores: two row streams, not four. On a Zen 5 core (3 alternated rounds, cold,
      // 4096 x 4096, 11008 x 4096, 4096 x 11008, AVX2 and AVX-VNNI, 1 / 2 threads) against
      // adjacent single rows: two streams 1.26-1.47x, three 1.12-1.31x, four 1.08-1.26x (an
      // earlier run on the same kind of host had read four at 0.85x), two adjacent rows 0.49-0.75x
      // (docs/kernels.md, "Q6_K on 256-bit tags: two row streams on Zen 5")
      if (!detail::intel_streaming_tuning()) return groups(std::integral_constant<int, 2>{});
    }
    groups(std::integral_constant<int, kStreamRows>{});
  }

  /// The levels (0..63) of register v of half h: lo of the low nibbles, hi of the high ones.
  template <int h, int v>
  static void levels(const BlockQ6_K* x, VU8<Tag>& lo, VU8<Tag>& hi) {
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F)), m30(static_cast<std::uint8_t>(0x30));
    const VU8<Tag> q = loadu<std::uint8_t, Tag>(x->ql + 64 * h + v * kW);
    const std::uint8_t* qp = x->qh + 32 * h + (v * kW) % 32;
    const VU16<Tag> qh =
        as<std::uint16_t>(kW == 64 ? load_twice<Tag>(qp) : loadu<std::uint8_t, Tag>(qp));
    // High bits at 2 * g (low nibbles) and 4 + 2 * g (high nibbles), g = byte position / 32:
    // moved to bits 4-5 by (qh << 4) >> 2g and qh >> 2g (16-bit shifts: the bits that cross
    // into the neighbouring byte are masked off).
    constexpr int g0 = (v * kW) / 32, g1 = (v * kW + kW - 1) / 32;
    lo = (q & m4) | (as<std::uint8_t>(shr_halves<Tag>(qh << 4, 2 * g0, 2 * g1)) & m30);
    hi = (as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4) |
         (as<std::uint8_t>(shr_halves<Tag>(qh, 2 * g0, 2 * g1)) & m30);
  }

  /// lookup16 index patterns (scale byte, sign byte) for register v of half h, nibble n; kPerm:
  /// the permute_i32 indices into scale_pairs16's table n (sub-block k = 8h + 4n + 2v in the low
  /// 16-byte lane, k + 1 in the high one; table position (k < 8 ? 0 : 4) + k % 4).
  struct Patterns {
    alignas(64) std::uint8_t sc[2][kNV][2][kW], sg[2][kNV][2][kW];
    alignas(64) std::int32_t perm[2][kNV][2][kW / 4];
    /// kVperm: the sub-block of each int32 lane (the scale_dwords16 lane permute_i32 picks).
    alignas(64) std::int32_t sub[2][kNV][2][kW / 4];
    Patterns() {
      for (int h = 0; h < 2; ++h)
        for (int v = 0; v < kNV; ++v)
          for (int n = 0; n < 2; ++n)
            for (int l = 0; l < kW / 4; ++l) {
              const int k = 8 * h + 4 * n + (v * kW + 4 * l) / 16;
              perm[h][v][n][l] = (k < 8 ? 0 : 4) + k % 4;
              sub[h][v][n][l] = k;
            }
      for (int h = 0; h < 2; ++h)
        for (int v = 0; v < kNV; ++v)
          for (int n = 0; n < 2; ++n)
            for (int b = 0; b < kW; ++b) {
              const int sub = 8 * h + 4 * n + (v * kW + b) / 16;
              const int code = SD::kCode[b % 4];
              sc[h][v][n][b] = code == 0 ? static_cast<std::uint8_t>(sub) : 0x80;
              sg[h][v][n][b] = code == 1 ? static_cast<std::uint8_t>(sub) : 0x80;
            }
    }
  };
  static const Patterns& patterns() {
    static const Patterns p;
    return p;
  }

  /// Per row and block: the scale tables of one GEMV block (kPerm: scale_pairs16's pair tables;
  /// otherwise the scale bytes and their sign bytes for lookup16).
  struct ScalesPerm {
    VI32<Tag> t[2];
  };
  struct ScalesLookup {
    VI8<Tag> sc, sg;
  };
  struct ScalesVperm {
    VI32<Tag> s;
  };
  using RowScales =
      std::conditional_t<kPerm, ScalesPerm, std::conditional_t<kVperm, ScalesVperm, ScalesLookup>>;

  /// The ScaledDot pattern of register v of half h, nibble n (not kPerm): one permute of the
  /// widened scales (kVperm), or the scale and sign bytes looked up and or-ed.
  template <int h, int v, int n>
  static VI8<Tag> pattern(const RowScales& rs, const Patterns& pt) {
    if constexpr (kVperm) {
#if defined(NIBBLE_K_X86)
      return as<std::int8_t>(permute_i32<Tag>(rs.s, loadu<std::int32_t, Tag>(pt.sub[h][v][n])));
#endif
    } else {
      return lookup16<Tag>(rs.sc, loadu<std::uint8_t, Tag>(pt.sc[h][v][n])) |
             lookup16<Tag>(rs.sg, loadu<std::uint8_t, Tag>(pt.sg[h][v][n]));
    }
  }

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kPrefetch = kKQuantL1Prefetch<Tag> ? 640 : 0;  // see simd.hpp
    // No software prefetch on AMD's family-25 cores (the 256-bit body; see gemm): there the
    // hardware prefetchers alone stream the rows faster. Zen 4, nibble-bench AVX2 cold, 3
    // alternated rounds, medians of per-round ratios, 1 / 2 threads, two row streams without
    // against with the prefetches: 4096 x 4096 1.38 / 1.13, 11008 x 4096 1.44 / 1.23, 4096 x
    // 11008 1.13 / 1.07. Prefetches only: the results do not change.
    const bool sw_prefetch =
        !(TagInfo<Tag>::family == Family::x86 && kW == 32 && amd_family25_tuning());
    const Patterns& pt = patterns();
    const auto* a = reinterpret_cast<const BlockQ8_K*>(A);
    const Prep* p = nullptr;  // the starting values (kPerm: none, A is the plain Q8_K row)
    if constexpr (!kPerm) p = Row::prep(A, cols);
    VF<Tag> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = VF<Tag>(0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const BlockQ6_K* x[R];
      RowScales rs[R];
      VI32<Tag> isum[R];
      for (int r = 0; r < R; ++r) {
        x[r] = reinterpret_cast<const BlockQ6_K*>(W + r * wrb) + b;
        const char* c = reinterpret_cast<const char*>(x[r]);
        if (sw_prefetch) {
          for (int o = 0; o < 256; o += 64) {
            if constexpr (kPrefetch > 0) prefetch_l1(c + kPrefetch + o);
            prefetch_far(reinterpret_cast<const std::uint8_t*>(c) + o, far);
          }
        }
        if constexpr (kPerm) {
#if defined(NIBBLE_K_X86)
          const VI16<Tag> s16 = scale_pairs16<Tag>(x[r]->scales, rs[r].t);
          isum[r] = VI32<Tag>(0) - (madd_i16<Tag>(loadu<std::int16_t, Tag>(a[b].bsums), s16) << 5);
#endif
        } else if constexpr (kVperm) {
#if defined(NIBBLE_K_X86)
          rs[r].s = scale_dwords16<Tag, SD::kPairs>(x[r]->scales);
#endif
          isum[r] = VI32<Tag>(0);
        } else {
          rs[r].sc = table16<Tag>(x[r]->scales);
          rs[r].sg = xsimd::select(rs[r].sc < VI8<Tag>(0), VI8<Tag>(-1), VI8<Tag>(0));
          isum[r] = VI32<Tag>(0);
        }
      }
      static_for<2>([&](auto hc) {
        constexpr int h = decltype(hc)::value;
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          constexpr int o0 = 128 * h + v * kW, o1 = o0 + 64;
          const VI8<Tag> a0 = loadu<std::int8_t, Tag>(a[b].qs + o0);
          const VI8<Tag> a1 = loadu<std::int8_t, Tag>(a[b].qs + o1);
          if constexpr (kPerm) {
            const VI32<Tag> i0 = loadu<std::int32_t, Tag>(pt.perm[h][v][0]);
            const VI32<Tag> i1 = loadu<std::int32_t, Tag>(pt.perm[h][v][1]);
            // each row's sum a chain (keep_order): GCC otherwise adds the 32 pmaddwd products
            // of a block as a tree and spills them (stack operands 47 -> 27 in run<2, 1>;
            // Zen 5, warm 1.11-1.15x, cold 1.04-1.12x; docs/kernels.md)
            for (int r = 0; r < R; ++r) {
              VU8<Tag> lo, hi;
              levels<h, v>(x[r], lo, hi);
              isum[r] = isum[r] + madd_i16<Tag>(madd_u8s8<Tag>(lo, a0),
                                                as<std::int16_t>(permute_i32<Tag>(rs[r].t[0], i0)));
              keep_order(isum[r]);
              isum[r] = isum[r] + madd_i16<Tag>(madd_u8s8<Tag>(hi, a1),
                                                as<std::int16_t>(permute_i32<Tag>(rs[r].t[1], i1)));
              keep_order(isum[r]);
            }
          } else {
            const Init i0 = loadu<typename Init::value_type, Tag>(p[b].init + o0);
            const Init i1 = loadu<typename Init::value_type, Tag>(p[b].init + o1);
            for (int r = 0; r < R; ++r) {
              VU8<Tag> lo, hi;
              levels<h, v>(x[r], lo, hi);
              isum[r] = SD::acc_init(isum[r], lo, a0, i0, pattern<h, v, 0>(rs[r], pt));
              isum[r] = SD::acc_init(isum[r], hi, a1, i1, pattern<h, v, 1>(rs[r], pt));
            }
          }
        });
      });
      for (int r = 0; r < R; ++r)
        acc[r] = fmadd<Tag>(xsimd::to_float(isum[r]), VF<Tag>(h2f<Tag>(x[r]->d) * a[b].d), acc[r]);
    }
    for (int r = 0; r < R; ++r) Y[r] = xsimd::hadd(acc[r]);
  }

  /// Dequantize n values (bit-identical to the reference: (d * scale) * (q - 32) in fp32).
  static void dequant(const void* src, std::int64_t n, float* y) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    constexpr int kF = kW / 4;  // floats per register
    for (std::int64_t b = 0; b < n / 256; ++b, y += 256) {
      const float d = h2f<Tag>(x[b].d);
      alignas(64) float fs[16];
      for (int s = 0; s < 16; ++s) fs[s] = d * static_cast<float>(x[b].scales[s]);
      static_for<2>([&](auto hc) {
        constexpr int h = decltype(hc)::value;
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          VU8<Tag> lv[2];
          levels<h, v>(&x[b], lv[0], lv[1]);
          for (int nn = 0; nn < 2; ++nn) {
            alignas(64) std::int8_t q[kW];
            (as<std::int8_t>(lv[nn]) - VI8<Tag>(32)).store_aligned(q);
            const int o = 128 * h + 64 * nn + v * kW;
            for (int f = 0; f < kW; f += kF) {
              const VF<Tag> w = xsimd::to_float(widen_i8_i32<Tag>(q + f));
              (VF<Tag>(fs[(o + f) / 16]) * w).store_unaligned(y + o + f);
            }
          }
        });
      });
    }
  }
};

/// The Q6_K policy of the integer GEMM engine (rows-inl.hpp): unsigned levels; the -32 offset
/// is the per sub-block extra -32 * d * scale times the activation sub-block sum.
struct Q6Rows {
  static constexpr int kValues = 256, kSub = 16;
  static constexpr bool kActScalePerSub = false;
  /// int16 accumulation depth without VNNI/sdot: 2 slots of 2 * 2 * 63 * 127 < 2^15.
  template <class Tag>
  static constexpr int kDepth = kInt8Dots<Tag> ? 1 : 2;
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  template <class Tag>
  static void repack(const std::uint8_t* const* rows, std::int64_t b, std::int64_t, VU8<Tag>* lv,
                     VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    const VU32<Tag> m4(0x0F0F0F0Fu), m3(0x03030303u);
    auto blk = [&](int i) { return reinterpret_cast<const BlockQ6_K*>(rows[i]) + b; };
    VI32<Tag> qh[16];  // qh dword d of every row (lane i: row i)
    for (int c = 0; c < 16; c += kL) {
      VI32<Tag> r[kL];
      for (int i = 0; i < kL; ++i) r[i] = loadu<std::int32_t, Tag>(blk(i)->qh + 4 * c);
      transpose_i32<Tag>(r);
      for (int k = 0; k < kL; ++k) qh[c + k] = r[k];
    }
    for (int h = 0; h < 2; ++h)
      for (int jb = 0; jb < 64 / (4 * kL); ++jb) {
        VI32<Tag> r[kL];
        for (int i = 0; i < kL; ++i)
          r[i] = loadu<std::int32_t, Tag>(blk(i)->ql + 64 * h + 4 * kL * jb);
        transpose_i32<Tag>(r);
        for (int k = 0; k < kL; ++k) {
          const int pp = 4 * kL * jb + 4 * k, g = pp / 32;  // ql byte of the half
          const VU32<Tag> q = as<std::uint32_t>(r[k]);
          const VU32<Tag> hb = as<std::uint32_t>(qh[8 * h + (pp % 32) / 4]);
          lv[(128 * h + pp) / 4] = as<std::uint8_t>((q & m4) | (((hb >> (2 * g)) & m3) << 4));
          lv[(128 * h + 64 + pp) / 4] =
              as<std::uint8_t>(((q >> 4) & m4) | (((hb >> (4 + 2 * g)) & m3) << 4));
        }
      }
    // The scales: the kL dwords ending at byte 208 of each block (scales in the last 4).
    VI32<Tag> r[kL];
    alignas(64) float d[kL];
    for (int i = 0; i < kL; ++i) {
      r[i] = loadu<std::int32_t, Tag>(reinterpret_cast<const std::uint8_t*>(blk(i)) + 208 - 4 * kL);
      std::uint16_t hd;
      std::memcpy(&hd, &blk(i)->d, 2);
      d[i] = h2f<Tag>(hd);
    }
    transpose_i32<Tag>(r);
    const VF<Tag> dv = VF<Tag>::load_aligned(d);
    for (int s = 0; s < 16; ++s) {
      const VI32<Tag> sc = (r[kL - 4 + s / 4] << (24 - 8 * (s % 4))) >> 24;
      fs[s] = dv * xsimd::to_float(sc);
      fm[s] = fs[s] * VF<Tag>(-32.0f);
    }
  }

  /// Tile of block b read from the packed layout (nibble/packed.hpp; the unit map is in
  /// packed-inl.hpp): `gb` is the group's block b, `h` the sub-tile. Same output as repack().
  template <class Tag>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t, std::int64_t, VU8<Tag>* lv,
                            VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    auto unit = [&](int u) { return loadu<std::uint32_t, Tag>(gb + 64 * u + h * Tag::bytes); };
    const VU32<Tag> m4(0x0F0F0F0Fu), m3(0x03030303u);
    for (int hh = 0; hh < 2; ++hh)
      for (int pp = 0; pp < 64; pp += 4) {  // ql bytes of the half
        const int g = pp / 32;
        const int r = pp / 4;  // ql dword of the half, its qh dword: storage slots (packed.hpp)
        const VU32<Tag> q = unit(24 * hh + 3 * (r % 8) + r / 8);
        const VU32<Tag> hb = unit(24 * hh + 3 * ((pp % 32) / 4) + 2);
        lv[(128 * hh + pp) / 4] = as<std::uint8_t>((q & m4) | (((hb >> (2 * g)) & m3) << 4));
        lv[(128 * hh + 64 + pp) / 4] =
            as<std::uint8_t>(((q >> 4) & m4) | (((hb >> (4 + 2 * g)) & m3) << 4));
      }
    const VF<Tag> dv = load_f16<Tag>(gb + 16 * 208 + 2 * kL * h);
    for (int s = 0; s < 16; ++s) {
      const VI32<Tag> sc = (as<std::int32_t>(unit(48 + s / 4)) << (24 - 8 * (s % 4))) >> 24;
      fs[s] = dv * xsimd::to_float(sc);
      fm[s] = fs[s] * VF<Tag>(-32.0f);
    }
  }
  /// Bytes of one plain row (a packed group spans 16 of them).
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 256) * sizeof(BlockQ6_K);
  }
  static constexpr std::size_t kBlockBytes = sizeof(BlockQ6_K);

  static void act(const std::uint8_t* arow, std::int64_t, std::int64_t b, std::int8_t* qs,
                  float* da, float* e) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(arow)[b];
    std::memcpy(qs, a.qs, 256);
    da[0] = a.d;
    for (int s = 0; s < 16; ++s) e[s] = static_cast<float>(a.bsums[s]);
  }

  template <class Tag>
  static VI32<Tag> dot(const VI32<Tag>& acc, const VU8<Tag>& lv, const VI8<Tag>& a) {
    return dot_u8s8<Tag>(acc, lv, a);
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
