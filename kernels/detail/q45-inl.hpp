// nibble: the Q4_K / Q5_K GEMV body, written once for every SIMD tag (AVX2, AVX-VNNI, AVX-512,
// AVX-512 VNNI, NEON, NEON dotprod) over xsimd batches and the helpers of intrin-*.hpp.
//
// Integer scheme (ggml's): activations are Q8_K rows; per 256-value block and weight row
//   y += d(w) * d(a) * sum_j sc[j] * (sum over sub-block j of q * a)
//      - dmin(w) * d(a) * sum_j m[j] * (sum over sub-block j of a)
// with unsigned levels q (0..15, Q5_K 0..31). The weights are read as stored: register v of a
// block holds qs bytes [v * W, (v + 1) * W) (W = Tag::bytes); its low nibbles are values of the
// even sub-blocks, its high nibbles of the odd ones. The activations are re-laid out once per
// call (act_relayout) into the same order, so each register pair (levels, activations) is one
// int8 dot product. Each int32 lane of a dot belongs to a single sub-block; its scale is applied
// per lane by ScaledDot (a pmaddwd or an int32 multiply) with a per-lane scale pattern looked
// up (lookup16) from the block's unpacked scales. The mins use the activation sub-block sums
// (a pmaddwd of the 8 mins with the 8 sums). Integer sums are exact; only the float steps (one
// fma per block for the scales, one for the mins) depend on the ISA, within the documented
// tolerance.
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
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag, bool HighBit>
struct Q45Simd {
  using Block = std::conditional_t<HighBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kW = Tag::bytes;
  static constexpr int kNV = 128 / kW;  ///< qs registers per block
  /// Row streams without software prefetch on AMD family 25 (Family25NoStreamPrefetch): not
  /// Q4_K on 32-byte tags, which lost there.
  static constexpr bool kFamily25NoStreamPrefetch = kW == 64 || HighBit;
  /// Rows per GEMV group (one header lane each): AVX2 / AVX-VNNI 2; AVX-512 1, a single weight
  /// stream per thread. Zen 5, AVX-512, cold, alternated runs, GB/s, 1 row against 4 (q4_K /
  /// q5_K): 4096 x 4096 1 thread 34.7-35.8 / 34.7-35.9 against 29.3-31.6 / 35.2-35.9, 2 threads
  /// 42-45 / 43-45.5 against 36.6-37.6 / 38.6-39.8; two rows were slower than either. The cost:
  /// cache-resident (L3) rows run at 42 / 40.5 GB/s instead of 46 / 47 (the header lanes and
  /// activation loads are no longer shared). q8_0 (35 against 50 warm) keeps its four rows.
  static constexpr int kGemvRows = kW == 64 ? 1 : kW / 16;
  /// Rows per GEMV group when they are far-apart streams (gemv_row_streams): four.
  static constexpr int kStreamRows = 4;

  /// One activation block re-laid out for this width: a[2 * v * W ..] holds, for register v of
  /// the weights, the activations of its low nibbles (W bytes) then of its high nibbles; bsp
  /// the 8 sub-block sums (int16, zero padded to one register); d the Q8_K scale.
  struct Prep {  // not over-aligned: relayout buffers are byte arrays (loads are unaligned)
    std::int8_t a[256];
    std::int16_t bsp[32];
    float d;
    float pad[15];
  };
  static_assert(sizeof(Prep) == 384, "Prep layout");

  /// Relayout of one row: the plain Q8_K blocks (read by the GEMM engines), then the Prep blocks
  /// (read by the GEMV).
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  /// FormatKernels::gemm: GEMV on the prepared rows; n > 1 runs `Gemm` on the plain Q8_K part.
  template <void (*Gemm)(const void*, std::size_t, std::int64_t, std::int64_t, std::int64_t,
                         const void*, std::size_t, std::int64_t, float*, std::int64_t)>
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) return Gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
    gemv_groups<Q45Simd, kGemvRows, kStreamRows>(static_cast<const std::uint8_t*>(W), wrb, r0, r1,
                                                 Y, static_cast<const std::uint8_t*>(A), arb,
                                                 cols / 256, cols);
  }

  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    const std::int64_t nb = cols / 256;
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < nb; ++b) {
      std::memset(&p[b], 0, sizeof(Prep));
      // Weight position pos = v W + j (group g = pos / 32, l = pos % 32) takes activation
      // 64 g + l (low nibble) and 64 g + 32 + l (high): runs of min(W, 32) bytes, copied whole
      // (a byte loop cost 1.7 us per 4096 columns, about half of a 16-row AVX-512 GEMV).
      constexpr int kC = kW < 32 ? kW : 32;
      for (int pos = 0; pos < 128; pos += kC) {
        const int v = pos / kW, j = pos % kW, g = pos / 32, l = pos % 32;
        std::memcpy(p[b].a + 2 * v * kW + j, in[b].qs + 64 * g + l, kC);
        std::memcpy(p[b].a + 2 * v * kW + kW + j, in[b].qs + 64 * g + 32 + l, kC);
      }
      for (int s = 0; s < 8; ++s)
        for (int l = 0; l < kW / 16; ++l)
          p[b].bsp[8 * l + s] =
              static_cast<std::int16_t>(in[b].bsums[2 * s] + in[b].bsums[2 * s + 1]);
      p[b].d = in[b].d;
    }
  }

  /// The unsigned levels in register v of a block: lo from the low nibbles of qs bytes
  /// [v * W, (v + 1) * W) (values of the even sub-blocks), hi from the high nibbles, each with its
  /// fifth bit for Q5_K (bit 2g / 2g + 1 of qh[l] for group g, moved to bit 4 by one right shift:
  /// of qh << 4 for groups 0 and 1, of qh for groups 2 and 3).
  template <int v>
  static void levels(const Block* x, VU8<Tag>& lo, VU8<Tag>& hi) {
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F));
    const VU8<Tag> q = loadu<std::uint8_t, Tag>(x->qs + v * kW);
    lo = q & m4;
    hi = as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4;
    if constexpr (HighBit) {
      constexpr int kG0 = v * kW / 32, kG1 = (v * kW + kW - 1) / 32;  // groups of register v
      VU8<Tag> qh =
          kW == 64 ? load_twice<Tag>(x->qh) : loadu<std::uint8_t, Tag>(x->qh + (v * kW) % 32);
      if constexpr (kG0 < 2) qh = as<std::uint8_t>(as<std::uint16_t>(qh) << 4);
      const VU8<Tag> b4(static_cast<std::uint8_t>(0x10));
      constexpr int s0 = 2 * (kG0 % 2), s1 = 2 * (kG1 % 2);
      lo = lo | (as<std::uint8_t>(shr_halves<Tag>(as<std::uint16_t>(qh), s0, s1)) & b4);
      hi = hi | (as<std::uint8_t>(shr_halves<Tag>(as<std::uint16_t>(qh), s0 + 1, s1 + 1)) & b4);
    }
  }

  /// Constant byte patterns: idx (for lookup16 into the 16 bytes sc[0..7], m[0..7] of a
  /// block, repeated per 16-byte lane) gives the per-lane scale pattern of register v, half h
  /// (0: low nibbles, 1: high); mins puts m[k] as int16 in lane k of each 16-byte lane; hbmask:
  /// Q5_K's qh bit of each byte; hdr_x / hdr_y / shift / and_x / and_y unpack the 12 packed
  /// scale bytes of a block header (bytes 4..15 of each 16-byte lane) into sc[0..7], m[0..7].
  struct Patterns {
    alignas(64) std::uint8_t idx[kNV][2][kW];
    alignas(64) std::uint8_t idx2[kNV][kW];  ///< ScaledDot2::kPacked: (scale, 0) per int16
    alignas(64) std::uint8_t mins[kW];
    alignas(64) std::uint8_t hbmask[kNV][2][kW];
    alignas(64) std::uint8_t hdr_x[kW], hdr_y[kW];
    alignas(64) std::uint32_t shift[kW / 4], and_x[kW / 4], and_y[kW / 4];
    Patterns() {
      for (int v = 0; v < kNV; ++v) {
        for (int h = 0; h < 2; ++h) {
          for (int b = 0; b < kW; ++b) {
            const int pos = v * kW + (b & ~3), e = b & 3;
            const int sub = 2 * (pos / 32) + h;
            const bool take = e == 0 || (ScaledDot<Tag>::kPairs && e == 2);
            idx[v][h][b] = take ? static_cast<std::uint8_t>(sub) : 0x80;
            hbmask[v][h][b] = static_cast<std::uint8_t>(1u << (2 * ((v * kW + b) / 32) + h));
          }
        }
        for (int b = 0; b < kW; ++b) {  // int16 k of a 16-byte lane: lo dot (k < 4), hi dot
          const int g = (v * kW + b / 16 * 16) / 32, k = (b % 16) / 2;
          idx2[v][b] = b % 2 ? 0x80 : static_cast<std::uint8_t>(2 * g + (k >= 4));
        }
      }
      // dwords of x: u0, u2, u1, u2; of y: -, u0, -, u1 (u0 = header bytes 4..7, u1 = 8..11,
      // u2 = 12..15); sc[0..3] = u0 & 3F, sc[4..7] = (u2 & 0F) | ((u0 >> 2) & 30),
      // m[0..3] = u1 & 3F, m[4..7] = ((u2 >> 4) & 0F) | ((u1 >> 2) & 30), per byte.
      static const int kx[4] = {4, 12, 8, 12}, ky[4] = {-1, 4, -1, 8};
      static const std::uint32_t kshift[4] = {0, 0, 0, 4};
      static const std::uint32_t kand_x[4] = {0x3F3F3F3Fu, 0x0F0F0F0Fu, 0x3F3F3F3Fu, 0x0F0F0F0Fu};
      static const std::uint32_t kand_y[4] = {0, 0x30303030u, 0, 0x30303030u};
      for (int b = 0; b < kW; ++b) {
        const int d = (b % 16) / 4, e = b % 4;
        mins[b] = (b & 1) ? 0x80 : static_cast<std::uint8_t>(8 + (b % 16) / 2);
        hdr_x[b] = static_cast<std::uint8_t>(kx[d] + e);
        hdr_y[b] = ky[d] < 0 ? 0x80 : static_cast<std::uint8_t>(ky[d] + e);
      }
      for (int l = 0; l < kW / 4; ++l) {
        shift[l] = kshift[l % 4];
        and_x[l] = kand_x[l % 4];
        and_y[l] = kand_y[l % 4];
      }
    }
  };
  static const Patterns& patterns() {
    static const Patterns p;
    return p;
  }

  /// R weight rows (at most the rows per header register: AVX-512 4, AVX2 2, NEON 1) against one
  /// prepared activation row; `far`: see gemv_groups. Row r's block header is decoded in 16-byte
  /// lane r of one register, together with the other rows'.
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kH = kW / 16;            // header lanes per register
    constexpr int kG = (R + kH - 1) / kH;  // header registers
    // A single row on a wide register: its header in every lane (one broadcast load; no lane
    // inserts, no broadcast of the decoded scales). The mins then use lane 0 only, as before.
    constexpr bool kOne = R == 1 && kH > 1;
    constexpr int kPrefetch = kKQuantL1Prefetch<Tag> ? 640 : 0;  // see simd.hpp
    const Patterns& pt = patterns();
    const Prep* p = Row::prep(A, cols);
    const VU8<Tag> hx = loadu<std::uint8_t, Tag>(pt.hdr_x), hy = loadu<std::uint8_t, Tag>(pt.hdr_y);
    const VU32<Tag> hs = loadu<std::uint32_t, Tag>(pt.shift);
    const VU32<Tag> ax = loadu<std::uint32_t, Tag>(pt.and_x),
                    ay = loadu<std::uint32_t, Tag>(pt.and_y);
    const VU8<Tag> pm = loadu<std::uint8_t, Tag>(pt.mins);
    VF<Tag> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = VF<Tag>(0.0f);
    VF<Tag> accm[kG];
    for (int g = 0; g < kG; ++g) accm[g] = VF<Tag>(0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const Prep& pb = p[b];
      const Block* x[kG * kH];
      for (int r = 0; r < kG * kH; ++r) {
        x[r] = reinterpret_cast<const Block*>(W + (r < R ? r : R - 1) * wrb) + b;
        if (r >= R) continue;
        const char* c = reinterpret_cast<const char*>(x[r]);
        // 32-byte tags: the block's 144 / 176 bytes a little ahead into L1 (measured best on
        // this structure together with the L2 prefetch of the next row group below, in address
        // order); none on AVX-512 (kKQuantL1Prefetch).
        if constexpr (kPrefetch > 0)
          for (int o = 0; o < 192; o += 64) prefetch_l1(c + kPrefetch + o);
        if (far == kRowStreams)
          for (int o = 0; o < static_cast<int>(sizeof(Block)); o += 64)
            prefetch_far(reinterpret_cast<const std::uint8_t*>(c) + o, far);
      }
      if (far_group(far))
        prefetch_linear(W + far, R, static_cast<std::size_t>(b) * sizeof(Block), sizeof(Block));
      // Scales and mins of the rows, one row per 16-byte lane of kG registers.
      VU8<Tag> sm[kG];
      float dd[R];
      for (int g = 0; g < kG; ++g) {
        const void* hp[kH];
        for (int l = 0; l < kH; ++l) hp[l] = x[g * kH + l];
        const VU8<Tag> hdr = kOne ? load_lane_all<Tag>(hp[0]) : load_lanes<Tag>(hp);
        const VU32<Tag> X = as<std::uint32_t>(lookup16<Tag>(as<std::int8_t>(hdr), hx));
        const VU32<Tag> Yv = as<std::uint32_t>(lookup16<Tag>(as<std::int8_t>(hdr), hy));
        sm[g] = as<std::uint8_t>(((X >> hs) & ax) | ((Yv >> 2) & ay));
        float negdm[kH] = {};
        for (int l = 0; l < kH && g * kH + l < R; ++l) {
          float d, dmin;
          h2f_pair<Tag>(x[g * kH + l], &d, &dmin);
          dd[g * kH + l] = d * pb.d;
          negdm[l] = -(dmin * pb.d);
        }
        const VI32<Tag> mi =
            madd_i16<Tag>(as<std::int16_t>(lookup16<Tag>(as<std::int8_t>(sm[g]), pm)),
                          loadu<std::int16_t, Tag>(pb.bsp));
        accm[g] = fmadd<Tag>(xsimd::to_float(mi),
                             kOne ? VF<Tag>(negdm[0]) : spread_lanes<Tag>(negdm), accm[g]);
      }
      VI8<Tag> scb[R];
      for (int r = 0; r < R; ++r)
        scb[r] = as<std::int8_t>(kOne ? sm[0] : bcast_lane<Tag>(sm[r / kH], r % kH));
      VI32<Tag> isum[R];
      for (int r = 0; r < R; ++r) isum[r] = VI32<Tag>(0);
      for (int r = 0; r < R; ++r) {
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          const VI8<Tag> alo = loadu<std::int8_t, Tag>(pb.a + 2 * v * kW);
          const VI8<Tag> ahi = loadu<std::int8_t, Tag>(pb.a + 2 * v * kW + kW);
          VU8<Tag> lo, hi;
          levels<v>(x[r], lo, hi);
          if constexpr (ScaledDot2<Tag>::kPacked) {
            isum[r] =
                ScaledDot2<Tag>::acc(isum[r], lo, alo, hi, ahi,
                                     lookup16<Tag>(scb[r], loadu<std::uint8_t, Tag>(pt.idx2[v])));
          } else {
            isum[r] = ScaledDot<Tag>::acc(
                isum[r], lo, alo, lookup16<Tag>(scb[r], loadu<std::uint8_t, Tag>(pt.idx[v][0])));
            isum[r] = ScaledDot<Tag>::acc(
                isum[r], hi, ahi, lookup16<Tag>(scb[r], loadu<std::uint8_t, Tag>(pt.idx[v][1])));
          }
        });
      }
      for (int r = 0; r < R; ++r)
        acc[r] = fmadd<Tag>(xsimd::to_float(isum[r]), VF<Tag>(dd[r]), acc[r]);
    }
    alignas(64) float m[kG][kW / 4];
    for (int g = 0; g < kG; ++g) accm[g].store_aligned(m[g]);
    for (int r = 0; r < R; ++r) {
      const float* mr = m[r / kH] + 4 * (r % kH);
      Y[r] = xsimd::hadd(acc[r]) + ((mr[0] + mr[1]) + (mr[2] + mr[3]));
    }
  }
};

/// The Q4_K / Q5_K policy of the integer GEMM engine (rows-inl.hpp): activations are the plain
/// Q8_K blocks at the start of a relayout row.
template <bool HighBit>
struct Q45Rows {
  using Block = std::conditional_t<HighBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kValues = 256, kSub = 8;
  static constexpr bool kActScalePerSub = false;
  /// int16 accumulation depth without VNNI/sdot: 2 * 15 * 127 * 8 and 2 * 31 * 127 * 4 < 2^15.
  template <class Tag>
  static constexpr int kDepth = kInt8Dots<Tag> ? 1 : (HighBit ? 4 : 8);
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// Block b of L = Tag::bytes / 4 rows: the packed quants are transposed (L dwords per row at a
  /// time) so that lane i of a register holds 4 bytes of row i, then split into the low and high
  /// nibble slots; the scales and mins are decoded for the L rows at once the same way.
  template <class Tag>
  static void repack(const std::uint8_t* const* rows, std::int64_t b, std::int64_t, VU8<Tag>* lv,
                     VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    const VU32<Tag> m4(0x0F0F0F0Fu), m1(0x01010101u);
    [[maybe_unused]] VI32<Tag> qh[kL < 8 ? 8 : kL];  // Q5_K: dword l of qh of every row, l < 8
    if constexpr (HighBit) {
      for (int h = 0; h < 8; h += kL) {
        VI32<Tag> r[kL];
        for (int i = 0; i < kL; ++i)
          r[i] =
              loadu<std::int32_t, Tag>((reinterpret_cast<const Block*>(rows[i]) + b)->qh + 4 * h);
        transpose_i32<Tag>(r);
        for (int k = 0; k < kL && h + k < 8; ++k) qh[h + k] = r[k];
      }
    }
    for (int jb = 0; jb < 128 / (4 * kL); ++jb) {
      VI32<Tag> r[kL];
      for (int i = 0; i < kL; ++i)
        r[i] = loadu<std::int32_t, Tag>((reinterpret_cast<const Block*>(rows[i]) + b)->qs +
                                        4 * kL * jb);
      transpose_i32<Tag>(r);
      for (int k = 0; k < kL; ++k) {
        const int p = 4 * kL * jb + 4 * k, g = p / 32, l = p % 32;  // qs byte of lane 0
        VU32<Tag> lo = as<std::uint32_t>(r[k]) & m4, hi = (as<std::uint32_t>(r[k]) >> 4) & m4;
        if constexpr (HighBit) {
          const VU32<Tag> h = as<std::uint32_t>(qh[l / 4]);
          lo = lo | (((h >> (2 * g)) & m1) << 4);
          hi = hi | (((h >> (2 * g + 1)) & m1) << 4);
        }
        lv[16 * g + l / 4] = as<std::uint8_t>(lo);
        lv[16 * g + 8 + l / 4] = as<std::uint8_t>(hi);
      }
    }
    scales<Tag>(rows, b, fs, fm);
  }

  /// Scales and mins of block b of L = Tag::bytes / 4 rows at once: the first L dwords of each
  /// row's block (d | dmin, then the 12 scale bytes) transposed into lanes.
  template <class Tag>
  static void scales(const std::uint8_t* const* rows, std::int64_t b, VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    VI32<Tag> r[kL];
    for (int i = 0; i < kL; ++i)
      r[i] = loadu<std::int32_t, Tag>(reinterpret_cast<const Block*>(rows[i]) + b);
    transpose_i32<Tag>(r);
    scales_from<Tag>(as<std::uint32_t>(r[0]), as<std::uint32_t>(r[1]), as<std::uint32_t>(r[2]),
                     as<std::uint32_t>(r[3]), fs, fm);
  }

  /// The float scales and mins from the first 4 dwords of a block (one row per lane): d | dmin,
  /// then the 12 packed scale bytes.
  template <class Tag>
  static void scales_from(const VU32<Tag>& h, const VU32<Tag>& u0, const VU32<Tag>& u1,
                          const VU32<Tag>& u2, VF<Tag>* fs, VF<Tag>* fm) {
    const VU32<Tag> k3f(0x3F3F3F3Fu), k0f(0x0F0F0F0Fu), k30(0x30303030u), kff(0xFFu);
    const VU32<Tag> sc[2] = {u0 & k3f, (u2 & k0f) | ((u0 >> 2) & k30)};
    const VU32<Tag> mn[2] = {u1 & k3f, ((u2 >> 4) & k0f) | ((u1 >> 2) & k30)};
    const VF<Tag> d = h2f_lo16<Tag>(h), ndmin = -h2f_lo16<Tag>(h >> 16);
    for (int s = 0; s < 8; ++s) {
      fs[s] = d * xsimd::to_float(as<std::int32_t>((sc[s / 4] >> (8 * (s % 4))) & kff));
      fm[s] = ndmin * xsimd::to_float(as<std::int32_t>((mn[s / 4] >> (8 * (s % 4))) & kff));
    }
  }

  /// Tile of block b read from the packed layout (nibble/packed.hpp): `gb` is the group's block
  /// b, `h` the sub-tile (rows h * L ..). Same output as repack().
  template <class Tag>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t, std::int64_t, VU8<Tag>* lv,
                            VF<Tag>* fs, VF<Tag>* fm) {
    auto unit = [&](int u) { return loadu<std::uint32_t, Tag>(gb + 64 * u + h * Tag::bytes); };
    const VU32<Tag> m4(0x0F0F0F0Fu), m1(0x01010101u);
    constexpr int kQs = HighBit ? 12 : 4;
    for (int k = 0; k < 32; ++k) {
      const int g = k / 8, l = 4 * (k % 8);  // qs bytes 4k..: values l.. of sub-blocks 2g, 2g+1
      const VU32<Tag> q = unit(kQs + k);
      VU32<Tag> lo = q & m4, hi = (q >> 4) & m4;
      if constexpr (HighBit) {
        const VU32<Tag> qh = unit(4 + k % 8);
        lo = lo | (((qh >> (2 * g)) & m1) << 4);
        hi = hi | (((qh >> (2 * g + 1)) & m1) << 4);
      }
      lv[16 * g + l / 4] = as<std::uint8_t>(lo);
      lv[16 * g + 8 + l / 4] = as<std::uint8_t>(hi);
    }
    scales_from<Tag>(unit(0), unit(1), unit(2), unit(3), fs, fm);
  }
  /// Bytes of one plain row (a packed group spans 16 of them).
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 256) * sizeof(Block);
  }
  static constexpr std::size_t kBlockBytes = sizeof(Block);

  static void act(const std::uint8_t* arow, std::int64_t, std::int64_t b, std::int8_t* qs,
                  float* da, float* e) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(arow)[b];
    std::memcpy(qs, a.qs, 256);
    da[0] = a.d;
    for (int s = 0; s < 8; ++s) e[s] = static_cast<float>(a.bsums[2 * s] + a.bsums[2 * s + 1]);
  }

  template <class Tag>
  static VI32<Tag> dot(const VI32<Tag>& acc, const VU8<Tag>& lv, const VI8<Tag>& a) {
    return dot_u8s8<Tag>(acc, lv, a);
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
