// nibble: the integer kernels of IQ4_XS against Q8_K activations: the scalar reference dot, the
// GEMV body (IQ4XSSimd) and the GEMM (RowsGemm) policy, written once for every SIMD tag over
// xsimd batches and the helpers of intrin-*.hpp.
//
// Integer scheme (ggml's vec_dot_iq4_xs_q8_K): per 256-value block and 32-value sub-block ib of
// a weight row, y += d_w d_a sum_ib (ls[ib] - 32) sum_j K[code_j] a_j, with the IQ4_NL code book
// K (-127..113) and the 6-bit sub-block scales ls. Register v of the weights holds qs bytes
// [v W, v W + W): every 16-byte lane is one sub-block, its low nibbles the codes of values
// 32 ib + 0..15, its high nibbles of 32 ib + 16..31; the activations are re-laid out once per call
// into that order. The codes map to int8 values through a lookup16 table (VNNI: biased by 128,
// the bias cancelled by the prepared starting value -128 * sum(a) of each lane, see S8Dot). With
// a 4-way dot instruction the int32 lane sums are multiplied by the lane's sub-block scale
// (int32); without, the s8 x s8 int16 pair sums are scaled by pmaddwd, as ggml's AVX2 code.
// Integer sums are exact; one float fma per block and row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

/// The 6-bit scale of sub-block ib of an IQ4_XS block at x.
inline int iq4xs_scale(const std::uint8_t* x, int ib) {
  const int sh = ld_u16(x + 2);
  return ((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
}

/// Scalar reference dot of an IQ4_XS row with a Q8_K row, ggml's generic order.
inline float iq4xs_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  const std::int8_t* k = ref::iq4::kValues;
  float sum = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b, w += sizeof(BlockIQ4_XS), a += sizeof(BlockQ8_K)) {
    const float d4d8 = half_to_float(ld_u16(w)) * ld_f32(a);
    const auto* q8 = reinterpret_cast<const std::int8_t*>(a + 4);
    for (int ib = 0; ib < 8; ++ib) {
      const std::uint8_t* qs = w + 8 + 16 * ib;
      int s1 = 0, s2 = 0;
      for (int j = 0; j < 16; ++j) {
        s1 += q8[32 * ib + j] * k[qs[j] & 0xF];
        s2 += q8[32 * ib + 16 + j] * k[qs[j] >> 4];
      }
      sum += d4d8 * static_cast<float>(iq4xs_scale(w, ib) - 32) * static_cast<float>(s1 + s2);
    }
  }
  return sum;
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

template <class Tag>
struct IQ4XSSimd {
  static constexpr int kW = Tag::bytes;
  /// The next-group L2 prefetch (gemv_groups' far): in address order (prefetch_linear) on x86,
  /// and on AVX-512 of the group two ahead, not the next one. Unlike the legacy body, where the
  /// same change lost on most formats (q4_1 -15 %), IQ4_XS gained on every shape (Zen 5, cold,
  /// 4 alternated rounds, ratio to the row's paired bandwidth, 1 / 2 threads: 4096 x 4096
  /// 0.82 / 0.78 -> 0.87 / 0.88, 11008 x 4096 0.82 / 0.78 -> 0.89 / 0.94, 4096 x 11008
  /// 0.84 / 0.80 -> 0.86 / 0.84); per row and one group ahead, as before, on NEON.
  static constexpr bool kLinearL2 = kLinearGroupPrefetch<Tag> || Tag::bytes == 64;
  static constexpr std::size_t kFarGroups = Tag::bytes == 64 ? 2 : 1;
  static constexpr int kNV = 128 / kW;  ///< qs registers per block
  static constexpr int kL = kW / 16;    ///< sub-blocks per register
  static constexpr int kR = 4;          ///< rows per GEMV group
  static constexpr int kRowsMinN = 3;   ///< n from which RowsGemm runs (see kq_gemm)
  using D = S8Dot<Tag>;
  static constexpr bool kDot4 = kInt8Dots<Tag>;

  /// Per activation block: per register v the activations of its low then high nibbles
  /// (a[2 v W ..]), the starting value -D::kBias * (sum of the 8 activations) of each int32
  /// lane, the scale.
  struct Prep {
    std::int8_t a[256];
    std::int32_t init[64];
    float d;
    float pad[15];
  };
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      std::memset(&p[b], 0, sizeof(Prep));
      for (int v = 0; v < kNV; ++v)
        for (int t = 0; t < kW; t += 16) {
          const int ib = v * kL + t / 16;
          std::memcpy(p[b].a + 2 * v * kW + t, in[b].qs + 32 * ib, 16);
          std::memcpy(p[b].a + 2 * v * kW + kW + t, in[b].qs + 32 * ib + 16, 16);
        }
      // The sums read the source block (rereading the bytes just copied stalled on the stores):
      // bytes 4 i .. 4 i + 3 of register v's two halves are qs bytes 32 ib + 4 i % 16 .. and
      // 16 after them, ib = v kL + 4 i / 16 (the copy above).
      for (int v = 0; v < kNV; ++v)
        for (int i = 0; i < kW / 4; ++i) {
          const std::int8_t* q = in[b].qs + 32 * (v * kL + 4 * i / 16) + 4 * i % 16;
          int s = 0;
          for (int e = 0; e < 4; ++e) s += q[e] + q[16 + e];
          p[b].init[v * (kW / 4) + i] = -D::kBias * s;
        }
      p[b].d = in[b].d;
    }
  }

  /// Shift counts that decode the scales of the 8 sub-blocks (int32 lane j: sub-block j % 8)
  /// and the permutations that spread them over the lanes of register v.
  struct Patterns {
    alignas(64) std::uint32_t shl[kW / 4 < 8 ? 8 : kW / 4], shh[kW / 4 < 8 ? 8 : kW / 4];
    alignas(64) std::uint32_t spread[kNV][kW / 4];
    Patterns() {
      for (int j = 0; j < (kW / 4 < 8 ? 8 : kW / 4); ++j) {
        shl[j] = static_cast<std::uint32_t>(4 * (j % 8));
        shh[j] = static_cast<std::uint32_t>(2 * (j % 8));
      }
      for (int v = 0; v < kNV; ++v)
        for (int i = 0; i < kW / 4; ++i)
          spread[v][i] = static_cast<std::uint32_t>((v * kL + i / 4) % (kW / 4 < 8 ? kW / 4 : 8));
    }
  };
  static const Patterns& patterns() {
    static const Patterns p;
    return p;
  }

  /// The sub-block scales ls - 32 of register v's lanes (int32 lane i: sub-block v kL + i / 4;
  /// without a 4-way dot the scale in both int16 halves of the lane, for pmaddwd).
  /// sc holds the decoded scales of `kHalf` sub-blocks per vector (all 8 on AVX2 / AVX-512: lane
  /// j = sub-block j % 8; NEON: two vectors of 4).
  static constexpr int kScVecs = kW / 4 < 8 ? 2 : 1;
  static void decode_scales(const std::uint8_t* x, const Patterns& pt, VI32<Tag>* sc) {
    const VU32<Tag> sl(static_cast<std::uint32_t>(ld_u16(x + 4)) |
                       (static_cast<std::uint32_t>(ld_u16(x + 6)) << 16));
    const VU32<Tag> sh(static_cast<std::uint32_t>(ld_u16(x + 2)));
    for (int h = 0; h < kScVecs; ++h) {
      const VU32<Tag> l =
          shr_var_u32<Tag>(sl, loadu<std::uint32_t, Tag>(pt.shl + 4 * h)) & VU32<Tag>(0x0Fu);
      const VU32<Tag> hh =
          shr_var_u32<Tag>(sh, loadu<std::uint32_t, Tag>(pt.shh + 4 * h)) & VU32<Tag>(3u);
      sc[h] = as<std::int32_t>(l | (hh << 4)) - VI32<Tag>(32);
      if constexpr (!kDot4) sc[h] = (sc[h] & VI32<Tag>(0xFFFF)) | (sc[h] << 16);  // int16 pairs
    }
  }
  static VI32<Tag> reg_scales(const VI32<Tag>* sc, const Patterns& pt, int v) {
    if constexpr (kScVecs == 1) {
      return permute_i32<Tag>(sc[0], loadu<std::int32_t, Tag>(pt.spread[v]));
    } else {
      return permute_i32<Tag>(sc[v / 4], loadu<std::int32_t, Tag>(pt.spread[v]));
    }
  }

  /// Dequantize n values (bit-identical to the reference: (d * (ls - 32)) * K).
  static void dequant(const void* src, std::int64_t n, float* y) {
    constexpr int kF = kW / 4;
    const auto* x0 = static_cast<const std::uint8_t*>(src);
    const VI8<Tag> tbl = table16<Tag>(ref::iq4::kValues);
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F));
    for (std::int64_t b = 0; b < n / 256; ++b, y += 256) {
      const std::uint8_t* x = x0 + static_cast<std::size_t>(b) * sizeof(BlockIQ4_XS);
      alignas(64) std::int8_t v[256];
      for (int r = 0; r < kNV; ++r) {
        const VU8<Tag> q = loadu<std::uint8_t, Tag>(x + 8 + r * kW);
        alignas(64) std::int8_t lo[kW], hi[kW];
        lookup16<Tag>(tbl, q & m4).store_aligned(lo);
        lookup16<Tag>(tbl, as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4).store_aligned(hi);
        for (int k = 0; k < kL; ++k) {
          std::memcpy(v + 32 * (r * kL + k), lo + 16 * k, 16);
          std::memcpy(v + 32 * (r * kL + k) + 16, hi + 16 * k, 16);
        }
      }
      const float d = h2f<Tag>(ld_u16(x));
      for (int ib = 0; ib < 8; ++ib) {
        const VF<Tag> dl(d * static_cast<float>(iq4xs_scale(x, ib) - 32));
        for (int f = 0; f < 32; f += kF)
          (dl * xsimd::to_float(widen_i8_i32<Tag>(v + 32 * ib + f)))
              .store_unaligned(y + 32 * ib + f);
      }
    }
  }

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kPrefetch = kKQuantL1Prefetch<Tag> ? 512 : 0;  // see simd.hpp
    const Patterns& pt = patterns();
    const Prep* pa = Row::prep(A, cols);
    const VI8<Tag> tbl = D::prep(table16<Tag>(ref::iq4::kValues));
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F));
    VF<Tag> acc[R];
    static_for<R>([&](auto rc) { acc[decltype(rc)::value] = VF<Tag>(0.0f); });
    for (std::int64_t b = 0; b < nb; ++b) {
      const Prep& a = pa[b];
      if (kLinearL2 && far_group(far)) {
        prefetch_linear(W + kFarGroups * far, R, static_cast<std::size_t>(b) * sizeof(BlockIQ4_XS),
                        sizeof(BlockIQ4_XS));
      }
      static_for<R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        const std::uint8_t* x = W + r * wrb + static_cast<std::size_t>(b) * sizeof(BlockIQ4_XS);
        for (int o = 0; o < 192; o += 64) {
          if constexpr (kPrefetch > 0) prefetch_l1(x + kPrefetch + o);
          if (!kLinearL2 || far == kRowStreams) prefetch_far(x + o, far);
        }
        VI32<Tag> sc[kScVecs];
        decode_scales(x, pt, sc);
        VI32<Tag> isum(0);
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          const VU8<Tag> q = loadu<std::uint8_t, Tag>(x + 8 + v * kW);
          const VI8<Tag> lo = lookup16<Tag>(tbl, q & m4);
          const VI8<Tag> hi = lookup16<Tag>(tbl, as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4);
          const VI8<Tag> alo = loadu<std::int8_t, Tag>(a.a + 2 * v * kW);
          const VI8<Tag> ahi = loadu<std::int8_t, Tag>(a.a + 2 * v * kW + kW);
          const VI32<Tag> s = reg_scales(sc, pt, v);  // kDot4: int32; else int16 pairs
          if constexpr (kDot4) {
            const VI32<Tag> init = loadu<std::int32_t, Tag>(a.init + v * (kW / 4));
            const VI32<Tag> t = D::dot_prepped(D::dot_prepped(init, lo, alo), hi, ahi);
            isum = isum + t * s;
          } else {
            // s8 x s8 pair sums (|.| <= 2 * 127 * 127), scaled per int16 pair.
            isum = madd_acc_i16<Tag>(isum, madd_s8s8<Tag>(lo, alo), as<std::int16_t>(s));
            isum = madd_acc_i16<Tag>(isum, madd_s8s8<Tag>(hi, ahi), as<std::int16_t>(s));
          }
        });
        acc[r] = fmadd<Tag>(xsimd::to_float(isum), VF<Tag>(h2f<Tag>(ld_u16(x)) * a.d), acc[r]);
      });
    }
    static_for<R>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      Y[r] = xsimd::hadd(acc[r]);
    });
  }
};

/// The IQ4_XS policy of the integer GEMM engine: S8Dot-prepared code book values (signed);
/// per 32-value sub-block fs = d * (ls - 32), fm = -kBias * fs, extras the sub-block sums.
struct IQ4XSRows {
  static constexpr int kValues = 256, kSub = 8;
  static constexpr bool kActScalePerSub = false;
  template <class Tag>
  static constexpr int kDepth = 1;
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  template <class Tag>
  static void repack(const std::uint8_t* const* rows, std::int64_t b, std::int64_t, VU8<Tag>* lv,
                     VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    const VI8<Tag> tbl = S8Dot<Tag>::prep(table16<Tag>(ref::iq4::kValues));
    auto blk = [&](int i) {
      return reinterpret_cast<const std::uint8_t*>(reinterpret_cast<const BlockIQ4_XS*>(rows[i]) +
                                                   b);
    };
    for (int ch = 0; ch < 128 / (4 * kL); ++ch) {
      VI32<Tag> r[kL];
      for (int i = 0; i < kL; ++i) r[i] = loadu<std::int32_t, Tag>(blk(i) + 8 + 4 * kL * ch);
      transpose_i32<Tag>(r);
      for (int k = 0; k < kL; ++k) levels<Tag>(tbl, kL * ch + k, as<std::uint32_t>(r[k]), lv);
    }
    alignas(64) std::uint32_t h0[kL], h1[kL];
    for (int i = 0; i < kL; ++i) {
      std::memcpy(&h0[i], blk(i), 4);
      std::memcpy(&h1[i], blk(i) + 4, 4);
    }
    scales<Tag>(VU32<Tag>::load_aligned(h0), VU32<Tag>::load_aligned(h1), fs, fm);
  }
  /// Tile of block b read from the packed layout (the whole block in 4-byte units: d and
  /// scales_h, scales_l, then the 32 qs dwords), sub-tile h.
  template <class Tag>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t, std::int64_t, VU8<Tag>* lv,
                            VF<Tag>* fs, VF<Tag>* fm) {
    const VI8<Tag> tbl = S8Dot<Tag>::prep(table16<Tag>(ref::iq4::kValues));
    for (int m = 0; m < 32; ++m) levels<Tag>(tbl, m, packed_unit<Tag>(gb, 2 + m, h), lv);
    scales<Tag>(packed_unit<Tag>(gb, 0, h), packed_unit<Tag>(gb, 1, h), fs, fm);
  }
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 256) * sizeof(BlockIQ4_XS);
  }
  static constexpr std::size_t kBlockBytes = sizeof(BlockIQ4_XS);

  /// The code book values (S8Dot-prepared) of qs dword m (lane i: row i): values 4 (m % 4) ..
  /// (low nibbles) and 16 + 4 (m % 4) .. (high) of sub-block m / 4.
  template <class Tag>
  static void levels(const VI8<Tag>& tbl, int m, const VU32<Tag>& q, VU8<Tag>* lv) {
    const VU32<Tag> m4(0x0F0F0F0Fu);
    lv[8 * (m / 4) + m % 4] = as<std::uint8_t>(lookup16<Tag>(tbl, as<std::uint8_t>(q & m4)));
    lv[8 * (m / 4) + 4 + m % 4] =
        as<std::uint8_t>(lookup16<Tag>(tbl, as<std::uint8_t>((q >> 4) & m4)));
  }
  /// fs = d (ls - 32), fm = -kBias fs per sub-block from the rows' first two dwords (d |
  /// scales_h << 16, scales_l).
  template <class Tag>
  static void scales(const VU32<Tag>& w0, const VU32<Tag>& w1, VF<Tag>* fs, VF<Tag>* fm) {
    const VF<Tag> d = h2f_lo16<Tag>(w0);
    for (int ib = 0; ib < 8; ++ib) {
      const VU32<Tag> ls =
          ((w1 >> (4 * ib)) & VU32<Tag>(0x0Fu)) | (((w0 >> (16 + 2 * ib)) & VU32<Tag>(3u)) << 4);
      fs[ib] = d * xsimd::to_float(as<std::int32_t>(ls) - VI32<Tag>(32));
      fm[ib] = fs[ib] * VF<Tag>(static_cast<float>(-S8Dot<Tag>::kBias));
    }
  }

  static void act(const std::uint8_t* arow, std::int64_t, std::int64_t b, std::int8_t* qs,
                  float* da, float* e) {
    const BlockQ8_K& a = reinterpret_cast<const BlockQ8_K*>(arow)[b];
    std::memcpy(qs, a.qs, 256);
    da[0] = a.d;
    for (int s = 0; s < 8; ++s) e[s] = static_cast<float>(a.bsums[2 * s] + a.bsums[2 * s + 1]);
  }

  template <class Tag>
  static VI32<Tag> dot(const VI32<Tag>& acc, const VU8<Tag>& lv, const VI8<Tag>& a) {
    return S8Dot<Tag>::dot_prepped(acc, as<std::int8_t>(lv), a);
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
