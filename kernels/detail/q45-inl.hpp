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
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

/// The eight 6-bit scales and mins of a Q4_K/Q5_K block as two little-endian 8-byte words
/// (byte j of *sc = sc[j], byte j of *m = m[j]); ggml's get_scale_min_k4 for j = 0..7.
inline void kq_scales_mins(const std::uint8_t* s12, std::uint64_t* sc, std::uint64_t* m) {
  std::uint32_t u[3];
  std::memcpy(u, s12, 12);
  const std::uint32_t sc_lo = u[0] & 0x3F3F3F3Fu;
  const std::uint32_t m_lo = u[1] & 0x3F3F3F3Fu;
  const std::uint32_t sc_hi = (u[2] & 0x0F0F0F0Fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const std::uint32_t m_hi = ((u[2] >> 4) & 0x0F0F0F0Fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  *sc = static_cast<std::uint64_t>(sc_lo) | (static_cast<std::uint64_t>(sc_hi) << 32);
  *m = static_cast<std::uint64_t>(m_lo) | (static_cast<std::uint64_t>(m_hi) << 32);
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag, bool HighBit>
struct Q45Simd {
  using Block = std::conditional_t<HighBit, BlockQ5_K, BlockQ4_K>;
  static constexpr int kW = Tag::bytes;
  static constexpr int kNV = 128 / kW;  ///< qs registers per block

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

  /// Relayout of one row: the plain Q8_K blocks (read by the GEMM engines) followed by the Prep
  /// blocks (read by the GEMV) at a 64-byte aligned offset.
  static std::size_t prep_offset(std::int64_t cols) {
    return (static_cast<std::size_t>(cols / 256) * sizeof(BlockQ8_K) + 63) / 64 * 64;
  }
  static std::size_t act_bytes(std::int64_t cols) {
    return prep_offset(cols) + static_cast<std::size_t>(cols / 256) * sizeof(Prep);
  }
  /// FormatKernels::gemm: GEMV on the prepared rows; n > 1 runs `Gemm` on the plain Q8_K part.
  template <void (*Gemm)(const void*, std::size_t, std::int64_t, std::int64_t, std::int64_t,
                         const void*, std::size_t, std::int64_t, float*, std::int64_t)>
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) return Gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
    constexpr int kR = kW / 16;
    gemv_groups<Q45Simd, kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                             static_cast<const std::uint8_t*>(A), arb, cols / 256, cols);
  }

  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    auto* out = static_cast<std::uint8_t*>(dst);
    const std::int64_t nb = cols / 256;
    std::memcpy(out, in, static_cast<std::size_t>(nb) * sizeof(BlockQ8_K));
    Prep* p = reinterpret_cast<Prep*>(out + prep_offset(cols));
    for (std::int64_t b = 0; b < nb; ++b) {
      std::memset(&p[b], 0, sizeof(Prep));
      for (int v = 0; v < kNV; ++v) {
        for (int j = 0; j < kW; ++j) {
          const int pos = v * kW + j, g = pos / 32, l = pos % 32;
          p[b].a[2 * v * kW + j] = in[b].qs[64 * g + l];
          p[b].a[2 * v * kW + kW + j] = in[b].qs[64 * g + 32 + l];
        }
      }
      for (int s = 0; s < 8; ++s)
        for (int l = 0; l < kW / 16; ++l)
          p[b].bsp[8 * l + s] =
              static_cast<std::int16_t>(in[b].bsums[2 * s] + in[b].bsums[2 * s + 1]);
      p[b].d = in[b].d;
    }
  }

  /// Constant byte patterns: idx (for lookup16 into the 16 bytes sc[0..7], m[0..7] of a
  /// block, repeated per 16-byte lane) gives the per-lane scale pattern of register v, half h
  /// (0: low nibbles, 1: high); mins puts m[k] as int16 in lane k of each 16-byte lane; hbmask:
  /// Q5_K's qh bit of each byte; hdr_x / hdr_y / shift / and_x / and_y unpack the 12 packed
  /// scale bytes of a block header (bytes 4..15 of each 16-byte lane) into sc[0..7], m[0..7].
  struct Patterns {
    alignas(64) std::uint8_t idx[kNV][2][kW];
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

  /// R weight rows (R = rows per header register: AVX-512 4, AVX2 2, NEON 1) against one
  /// prepared activation row; `far`: see gemv_groups. Row r's block header is decoded in 16-byte
  /// lane r of one register, together with the other rows'.
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kH = kW / 16;  // header lanes per register
    static_assert(R <= kH, "one header lane per row");
    constexpr int kPrefetch = 640;
    const Patterns& pt = patterns();
    const Prep* p = reinterpret_cast<const Prep*>(A + prep_offset(cols));
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F));
    const VU8<Tag> hx = loadu<std::uint8_t, Tag>(pt.hdr_x), hy = loadu<std::uint8_t, Tag>(pt.hdr_y);
    const VU32<Tag> hs = loadu<std::uint32_t, Tag>(pt.shift);
    const VU32<Tag> ax = loadu<std::uint32_t, Tag>(pt.and_x),
                    ay = loadu<std::uint32_t, Tag>(pt.and_y);
    const VU8<Tag> pm = loadu<std::uint8_t, Tag>(pt.mins);
    VF<Tag> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = VF<Tag>(0.0f);
    VF<Tag> accm(0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const Prep& pb = p[b];
      const Block* x[kH];
      for (int r = 0; r < kH; ++r) {
        x[r] = reinterpret_cast<const Block*>(W + (r < R ? r : R - 1) * wrb) + b;
        if (r >= R) continue;
        const char* c = reinterpret_cast<const char*>(x[r]);
        if (far) {
          for (int o = 0; o < 192; o += 64) prefetch_l2(c + far + o);  // the block's 144/176 B
        } else {
          for (int o = 0; o < 192; o += 64) prefetch_l1(c + kPrefetch + o);
        }
      }
      // Scales and mins of the rows, one row per 16-byte lane.
      const void* hp[kH];
      for (int r = 0; r < kH; ++r) hp[r] = x[r];
      const VU8<Tag> hdr = load_lanes<Tag>(hp);
      const VU32<Tag> X = as<std::uint32_t>(lookup16<Tag>(as<std::int8_t>(hdr), hx));
      const VU32<Tag> Yv = as<std::uint32_t>(lookup16<Tag>(as<std::int8_t>(hdr), hy));
      const VU8<Tag> sm = as<std::uint8_t>(((X >> hs) & ax) | ((Yv >> 2) & ay));
      float negdm[kH] = {};
      float dd[R];
      for (int r = 0; r < R; ++r) {
        float d, dmin;
        h2f_pair<Tag>(x[r], &d, &dmin);
        dd[r] = d * pb.d;
        negdm[r] = -(dmin * pb.d);
      }
      const VI32<Tag> mi = madd_i16<Tag>(as<std::int16_t>(lookup16<Tag>(as<std::int8_t>(sm), pm)),
                                         loadu<std::int16_t, Tag>(pb.bsp));
      accm = fmadd<Tag>(xsimd::to_float(mi), spread_lanes<Tag>(negdm), accm);
      VI8<Tag> scb[R];
      for (int r = 0; r < R; ++r) scb[r] = as<std::int8_t>(bcast_lane<Tag>(sm, r));
      VI32<Tag> isum[R];
      for (int r = 0; r < R; ++r) isum[r] = VI32<Tag>(0);
      for (int v = 0; v < kNV; ++v) {
        const VI8<Tag> alo = loadu<std::int8_t, Tag>(pb.a + 2 * v * kW);
        const VI8<Tag> ahi = loadu<std::int8_t, Tag>(pb.a + 2 * v * kW + kW);
        const VU8<Tag> plo = loadu<std::uint8_t, Tag>(pt.idx[v][0]);
        const VU8<Tag> phi = loadu<std::uint8_t, Tag>(pt.idx[v][1]);
        for (int r = 0; r < R; ++r) {
          const VU8<Tag> q = loadu<std::uint8_t, Tag>(x[r]->qs + v * kW);
          VU8<Tag> lo = q & m4;
          VU8<Tag> hi = as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4;
          if constexpr (HighBit) {
            const VU8<Tag> one(static_cast<std::uint8_t>(1));
            VU8<Tag> qh;
            if constexpr (kW == 64) {
              qh = load_halves<Tag>(x[r]->qh, x[r]->qh);
            } else {
              qh = loadu<std::uint8_t, Tag>(x[r]->qh + (v * kW) % 32);
            }
            const VU8<Tag> blo = xsimd::min(qh & loadu<std::uint8_t, Tag>(pt.hbmask[v][0]), one);
            const VU8<Tag> bhi = xsimd::min(qh & loadu<std::uint8_t, Tag>(pt.hbmask[v][1]), one);
            lo = lo | as<std::uint8_t>(as<std::uint16_t>(blo) << 4);
            hi = hi | as<std::uint8_t>(as<std::uint16_t>(bhi) << 4);
          }
          isum[r] = ScaledDot<Tag>::acc(isum[r], lo, alo, lookup16<Tag>(scb[r], plo));
          isum[r] = ScaledDot<Tag>::acc(isum[r], hi, ahi, lookup16<Tag>(scb[r], phi));
        }
      }
      for (int r = 0; r < R; ++r)
        acc[r] = fmadd<Tag>(xsimd::to_float(isum[r]), VF<Tag>(dd[r]), acc[r]);
    }
    alignas(64) float m[kW / 4];
    accm.store_aligned(m);
    for (int r = 0; r < R; ++r)
      Y[r] = xsimd::hadd(acc[r]) + ((m[4 * r] + m[4 * r + 1]) + (m[4 * r + 2] + m[4 * r + 3]));
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
