// nibble: the integer kernels of the low-bit K-quants Q2_K and Q3_K against Q8_K activations: the
// scalar reference dots, the GEMV bodies (Q2Simd, Q3Simd) and the GEMM (RowsGemm) policies,
// written once for every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// Integer scheme (ggml's vec_dot_q2_K_q8_K / q3_K_q8_K), per 256-value block and 16-value
// sub-block sb of a weight row, with Q8_K activations a (scale d_a, sums bsum[sb]):
//   Q2_K: y += d_w d_a sum_sb sc[sb] sum q a  -  dmin_w d_a sum_sb m[sb] bsum[sb]   (q 0..3)
//   Q3_K: y += d_w d_a sum_sb (s[sb] - 32) sum (u - 4) a                            (u 0..7)
// where Q3_K's level u = q2 + 4 * (its hmask bit). The weights are read as stored: register v
// holds qs bytes [v W, v W + W) (W = Tag::bytes); shifted right by 2s it gives the levels of
// values 128 h + 32 s + l (h, l: the byte's half and position in it), every 16-byte lane one
// sub-block. The activations are re-laid out once per call into that order. Each int32 lane
// belongs to one sub-block; its scale is applied per lane from a pattern looked up (lookup16) in
// the block's scales (PairScaledDot / pmaddwd; with VNNI the int32 dots of two shifts are
// narrowed to int16 and share one vpdpwssd: ScaledDot2). Q2_K's GEMV extracts the levels of odd
// shifts times 4 (q & 12: one operation less per shift pair) and scales the even shifts by 4 s
// instead; its mins come from one register of the 16 scale bytes of Tag::bytes / 16 rows, as two
// int8 dots with the activation sums split in int8 halves (bsum = 128 hi + lo), accumulated in
// float per row lane. Q3_K with a 4-way dot (VNNI, sdot): the -4 offset is the prepared starting
// value of each lane (-4 times the sum of its activations) and the -32 scale offset the sum of
// the offset-corrected products times -32. Q3_K with pmaddubsw (AVX2, AVX-512 without VNNI,
// NEON without dotprod): the pmaddwd scale patterns are s - 32 as int16 (the scales sign-extended
// once per block and row), and the -4 offset is one pmaddwd of those scales with -4 times the
// activations' sub-block sums (Q8_K's bsums) per block: no per-register offset or usum additions.
// Integer sums are exact; float steps per block and row: one or two fma.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q8_k.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

/// The 2-bit level of value v (0..255) of a Q2_K / Q3_K block's qs.
inline int kq_level2(const std::uint8_t* qs, int v) {
  return (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
}

/// The 6-bit scale of sub-block j of Q3_K's 12 packed scale bytes.
inline int q3_scale6(const std::uint8_t* sc, int j) {
  const int lo = j < 8 ? (sc[j] & 0xF) : (sc[j - 8] >> 4);
  return lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/// Scalar reference dot of a Q2_K row with a Q8_K row (nb blocks), ggml's generic order.
inline float q2k_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  float sum = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b, w += sizeof(BlockQ2_K), a += sizeof(BlockQ8_K)) {
    const std::uint8_t* sc = w;
    const std::uint8_t* qs = w + 16;
    const auto* q8 = reinterpret_cast<const std::int8_t*>(a + 4);
    std::int16_t bs[16];
    std::memcpy(bs, a + 260, sizeof bs);
    int summs = 0, isum = 0;
    for (int j = 0; j < 16; ++j) {
      summs += (sc[j] >> 4) * bs[j];
      int s = 0;
      for (int t = 0; t < 16; ++t) s += kq_level2(qs, 16 * j + t) * q8[16 * j + t];
      isum += (sc[j] & 0xF) * s;
    }
    const float da = ld_f32(a);
    const float dall = da * half_to_float(ld_u16(w + 80));
    const float dmin = da * half_to_float(ld_u16(w + 82));
    sum += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sum;
}

/// Scalar reference dot of a Q3_K row with a Q8_K row: the exact integer sum per block, times
/// d_w * d_a.
inline float q3k_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  float sum = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b, w += sizeof(BlockQ3_K), a += sizeof(BlockQ8_K)) {
    const std::uint8_t* hm = w;
    const std::uint8_t* qs = w + 32;
    const auto* q8 = reinterpret_cast<const std::int8_t*>(a + 4);
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int t = 0; t < 16; ++t) {
        const int v = 16 * j + t;
        const int l = kq_level2(qs, v) - (((hm[v % 32] >> (v / 32)) & 1) ? 0 : 4);
        s += l * q8[v];
      }
      isum += (q3_scale6(w + 96, j) - 32) * s;
    }
    sum += (half_to_float(ld_u16(w + 108)) * ld_f32(a)) * static_cast<float>(isum);
  }
  return sum;
}

/// Scalar GEMM over a row dot (the scalar table's gemm of Q2_K / Q3_K).
template <float (*Dot)(const std::uint8_t*, const std::uint8_t*, std::int64_t)>
void kq_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                    std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                    std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t j = 0; j < n; ++j)
      Y[j * ldy + r] = Dot(w + static_cast<std::size_t>(r) * wrb,
                           a + static_cast<std::size_t>(j) * arb, cols / 256);
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// What Q2Simd and Q3Simd share: the activation order, the pattern tables, the GEMV driver.
template <class Tag>
struct Kq23Layout {
  static constexpr int kW = Tag::bytes;
  static constexpr int kNV = 64 / kW;  ///< qs registers per block
  /// Value of byte b of qs register v at shift s (see the file comment).
  static constexpr int value(int v, int s, int b) {
    const int p = v * kW + b;
    return 128 * (p / 32) + 32 * s + p % 32;
  }
  /// lookup16 index pattern of register (v, s): the sub-block of each int32 lane at the scale
  /// byte positions (kPairs: bytes 0 and 2 of the lane, else byte 0), 0x80 (zero) elsewhere.
  template <bool kPairs>
  struct Patterns {
    alignas(64) std::uint8_t idx[kNV][4][kW];
    /// ScaledDot2::kPacked: the pattern of shifts (p, p + 2) of register v packed to int16
    /// (int16 0-3 of a lane: shift p, 4-7: shift p + 2), bytes (sub-block, 0x80) per int16.
    alignas(64) std::uint8_t idx2[kNV][2][kW];
    Patterns() {
      for (int v = 0; v < kNV; ++v)
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < kW; ++b) {
            const int e = b % 4;
            const bool take = e == 0 || (kPairs && e == 2);
            idx[v][s][b] = take ? static_cast<std::uint8_t>(value(v, s, b) / 16) : 0x80;
          }
      for (int v = 0; v < kNV; ++v)
        for (int p = 0; p < 2; ++p)
          for (int b = 0; b < kW; ++b) {
            const int s = p + 2 * (b % 16 >= 8);
            idx2[v][p][b] =
                b % 2 == 0 ? static_cast<std::uint8_t>(value(v, s, b - b % 16) / 16) : 0x80;
          }
    }
  };
  /// The activations of a Q8_K block in register order: a[(4 v + s) W + b] = qs[value(v, s, b)].
  /// (16 consecutive register bytes from a 16-byte boundary hold 16 consecutive values.)
  static void permute(const BlockQ8_K& in, std::int8_t* a) {
    for (int v = 0; v < kNV; ++v)
      for (int s = 0; s < 4; ++s)
        for (int b = 0; b < kW; b += 16)
          std::memcpy(a + (4 * v + s) * kW + b, in.qs + value(v, s, b), 16);
  }
};

template <class Tag>
struct Q2Simd {
  using L = Kq23Layout<Tag>;
  using SD = PairScaledDot<Tag>;
  static constexpr int kW = Tag::bytes, kNV = L::kNV;
  static constexpr bool kLinearL2 = kLinearGroupPrefetch<Tag>;  // see simd.hpp
  static constexpr int kR = 4;                                  ///< rows per GEMV group
  static constexpr int kRowsMinN = 4;  ///< n from which RowsGemm runs (see kq_gemm)

  /// Per activation block: the values in register order; the 16 sub-block sums bsum split as
  /// 128 hi + lo (hi in [-16, 15], lo in [0, 127], both int8), repeated in every 16-byte lane of
  /// a register; the scale.
  struct Prep {
    std::int8_t a[256];
    std::int8_t bsh[kW], bsl[kW];
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
      L::permute(in[b], p[b].a);
      for (int j = 0; j < kW; ++j) {
        const int bs = in[b].bsums[j % 16];               // |bs| <= 16 * 128
        p[b].bsh[j] = static_cast<std::int8_t>(bs >> 7);  // floor division
        p[b].bsl[j] = static_cast<std::int8_t>(bs & 127);
      }
      p[b].d = in[b].d;
    }
  }
  static void dequant(const void* src, std::int64_t n, float* y);
  static const typename L::template Patterns<SD::kPairs>& patterns() {
    static const typename L::template Patterns<SD::kPairs> p;
    return p;
  }

  /// GEMV of R rows. The 16 scale bytes of Tag::bytes / 16 rows come in one register (a row per
  /// 16-byte lane): their low nibbles are the scales, their high nibbles the mins, whose products
  /// with the activation sums (int8 halves, see Prep) two dots give for all those rows at once,
  /// 4 partial sums per row, accumulated in float per lane (macc) and added at the end.
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kPrefetch = 512;
    constexpr int kH = kW / 16;             // rows per scale register
    constexpr int kSR = (R + kH - 1) / kH;  // scale registers
    const auto& pt = patterns();
    const Prep* pa = Row::prep(A, cols);
    const VU8<Tag> m3(static_cast<std::uint8_t>(3)), m12(static_cast<std::uint8_t>(12)),
        m4(static_cast<std::uint8_t>(0x0F));
    VF<Tag> acc[R], macc[kSR];
    static_for<R>([&](auto rc) { acc[decltype(rc)::value] = VF<Tag>(0.0f); });
    for (int g = 0; g < kSR; ++g) macc[g] = VF<Tag>(0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const Prep& a = pa[b];
      const std::size_t off = static_cast<std::size_t>(b) * sizeof(BlockQ2_K);
      if (kLinearL2 && far_group(far)) prefetch_linear(W + far, R, off, sizeof(BlockQ2_K));
      VU8<Tag> sm[kSR], sm4[kSR];
      float d[kSR * kH], dm[kSR * kH];
      for (int g = 0; g < kSR; ++g) {
        const void* lp[kH];
        for (int l = 0; l < kH; ++l) {
          const int r = g * kH + l;
          lp[l] = W + (r < R ? r : R - 1) * wrb + off;
          if (r < R) {
            h2f_pair<Tag>(W + r * wrb + off + 80, &d[r], &dm[r]);
            d[r] *= a.d;
            dm[r] *= -a.d;
            d[r] *= 0.25f;  // isum is 4 times the sum (exact: a power of two)
          } else {
            dm[r] = 0.0f;
          }
        }
        sm[g] = load_lanes<Tag>(lp);
        // sum_sb m[sb] bsum[sb] = 128 (m . hi) + m . lo, 4 partial sums per row
        const VU8<Tag> mn = as<std::uint8_t>(as<std::uint16_t>(sm[g]) >> 4) & m4;
        VI32<Tag> t = dot_u8s8<Tag>(VI32<Tag>(0), mn, loadu<std::int8_t, Tag>(a.bsh));
        t = dot_u8s8<Tag>(t << 7, mn, loadu<std::int8_t, Tag>(a.bsl));
        macc[g] = fmadd<Tag>(xsimd::to_float(t), spread_lanes<Tag>(dm + g * kH), macc[g]);
        sm[g] = sm[g] & m4;
        sm4[g] = as<std::uint8_t>(as<std::uint16_t>(sm[g]) << 2);
      }
      static_for<R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        const std::uint8_t* x = W + r * wrb + off;
        prefetch_l1(x + kPrefetch);
        prefetch_l1(x + kPrefetch + 64);
        if (!kLinearL2 || far == kRowStreams) {
          prefetch_far(x, far);
          prefetch_far(x + 64, far);
        }
        // scales of the even shifts times 4 (see level)
        const VI8<Tag> sc_odd = as<std::int8_t>(bcast_lane<Tag>(sm[r / kH], r % kH));
        const VI8<Tag> sc_even = as<std::int8_t>(bcast_lane<Tag>(sm4[r / kH], r % kH));
        VI32<Tag> isum(0);
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          const VU8<Tag> q = loadu<std::uint8_t, Tag>(x + 16 + v * kW);
          const VU8<Tag> q4 = as<std::uint8_t>(as<std::uint16_t>(q) >> 4);
          // The levels of shift s, times 4 for odd s (q & 12 needs no shift): 5 operations for
          // 4 shifts; the even shifts' scales are times 4 instead, so isum is 4 times the sum.
          auto level = [&](auto sc_) {
            constexpr int s = decltype(sc_)::value;
            return (s < 2 ? q : q4) & (s % 2 ? m12 : m3);
          };
          auto act = [&](int s) { return loadu<std::int8_t, Tag>(a.a + (4 * v + s) * kW); };
          auto scales = [&](int s) { return s % 2 ? sc_odd : sc_even; };
          if constexpr (ScaledDot2<Tag>::kPacked) {
            // shifts (p, p + 2) per scale step, |dot of 4| <= 4 * 12 * 128 fits int16
            static_for<2>([&](auto pc) {
              constexpr int p = decltype(pc)::value;
              using S2 = ScaledDot2<Tag>;
              const VI8<Tag> pat =
                  lookup16<Tag>(scales(p), loadu<std::uint8_t, Tag>(pt.idx2[v][p]));
              const VI32<Tag> z(0);
              const VI32<Tag> dl =
                  dot_u8s8<Tag>(z, level(std::integral_constant<int, p>{}), act(p));
              const VI32<Tag> dh =
                  dot_u8s8<Tag>(z, level(std::integral_constant<int, p + 2>{}), act(p + 2));
              isum =
                  v == 0 && p == 0 ? S2::first_dots(dl, dh, pat) : S2::acc_dots(isum, dl, dh, pat);
            });
          } else {
            static_for<4>([&](auto sc_) {
              constexpr int s = decltype(sc_)::value;
              const VI8<Tag> pat = lookup16<Tag>(scales(s), loadu<std::uint8_t, Tag>(pt.idx[v][s]));
              isum = SD::acc(isum, level(sc_), act(s), pat);
            });
          }
        });
        acc[r] = fmadd<Tag>(xsimd::to_float(isum), VF<Tag>(d[r]), acc[r]);
      });
    }
    constexpr int kF = kW / 4;  // float lanes; row r's min sums are lanes [4 (r % kH), +4)
    static_for<R>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      alignas(64) float m[kF];
      macc[r / kH].store_aligned(m);
      const float* mr = m + 4 * (r % kH);
      Y[r] = xsimd::hadd(acc[r]) + ((mr[0] + mr[1]) + (mr[2] + mr[3]));
    });
  }
};

template <class Tag>
struct Q3Simd;

/// Dequantizer of Q2_K / Q3_K on a SIMD tag: the 256 signed integer values of a block are made
/// in registers and stored in value order, then converted per 16-value sub-block with the
/// reference's float steps (Q2_K: (d * sc) * q - dmin * m; Q3_K: (d * (s - 32)) * v).
template <class Tag, bool Q3>
void kq23_dequant(const void* src, std::int64_t n, float* y) {
  using L = Kq23Layout<Tag>;
  constexpr int kW = Tag::bytes, kF = kW / 4;
  const auto* x0 = static_cast<const std::uint8_t*>(src);
  const VU8<Tag> m3(static_cast<std::uint8_t>(3));
  constexpr std::size_t kBlock = Q3 ? sizeof(BlockQ3_K) : sizeof(BlockQ2_K);
  // Q3_K's level patterns (make_level), fetched once per call; Q2_K has none.
  [[maybe_unused]] const auto* pt = [] {
    if constexpr (Q3) {
      return &Q3Simd<Tag>::patterns();
    } else {
      return static_cast<const void*>(nullptr);
    }
  }();
  for (std::int64_t b = 0; b < n / 256; ++b, y += 256) {
    const std::uint8_t* x = x0 + static_cast<std::size_t>(b) * kBlock;
    alignas(64) std::int8_t v[256];
    static_for<L::kNV>([&](auto vc) {
      constexpr int vi = decltype(vc)::value;
      const VU8<Tag> q = loadu<std::uint8_t, Tag>(x + (Q3 ? 32 : 16) + vi * kW);
      [[maybe_unused]] VU8<Tag> hm;  // Q3_K: the hmask bytes of register vi
      if constexpr (Q3) hm = Q3Simd<Tag>::hmask(x, vi);
      static_for<4>([&](auto sc_) {
        constexpr int s = decltype(sc_)::value;
        VU8<Tag> u = s == 0 ? q & m3 : as<std::uint8_t>(as<std::uint16_t>(q) >> (2 * s)) & m3;
        if constexpr (Q3) {
          // value = level - 4, the level's bit 2 from hmask (see Q3Simd::run)
          u = as<std::uint8_t>(
              as<std::int8_t>(Q3Simd<Tag>::template make_level<vi, s>(u, hm, *pt)) -
              VI8<Tag>(static_cast<std::int8_t>(4)));
        }
        alignas(64) std::int8_t t[kW];
        as<std::int8_t>(u).store_aligned(t);
        for (int k = 0; k < kW / 16; ++k) std::memcpy(v + L::value(vi, s, 16 * k), t + 16 * k, 16);
      });
    });
    if constexpr (Q3) {
      const float d = h2f<Tag>(ld_u16(x + 108));
      for (int j = 0; j < 16; ++j) {
        const VF<Tag> dl(d * static_cast<float>(q3_scale6(x + 96, j) - 32));
        for (int f = 0; f < 16; f += kF)
          (dl * xsimd::to_float(widen_i8_i32<Tag>(v + 16 * j + f))).store_unaligned(y + 16 * j + f);
      }
    } else {
      float d, dmin;
      h2f_pair<Tag>(x + 80, &d, &dmin);
      for (int j = 0; j < 16; ++j) {
        const VF<Tag> dl(d * static_cast<float>(x[j] & 0xF)),
            ml(dmin * static_cast<float>(x[j] >> 4));
        for (int f = 0; f < 16; f += kF)
          (dl * xsimd::to_float(widen_i8_i32<Tag>(v + 16 * j + f)) - ml)
              .store_unaligned(y + 16 * j + f);
      }
    }
  }
}

template <class Tag>
void Q2Simd<Tag>::dequant(const void* src, std::int64_t n, float* y) {
  kq23_dequant<Tag, false>(src, n, y);
}

template <class Tag>
struct Q3Simd {
  using L = Kq23Layout<Tag>;
  static void dequant(const void* src, std::int64_t n, float* y) {
    kq23_dequant<Tag, true>(src, n, y);
  }
  static constexpr int kW = Tag::bytes, kNV = L::kNV;
  static constexpr bool kLinearL2 = kLinearGroupPrefetch<Tag>;  // see simd.hpp
  static constexpr int kR = 4;
  static constexpr int kRowsMinN = 3;  ///< n from which RowsGemm runs (see kq_gemm)
  /// A 4-way int8 dot instruction: the -4 offset starts int32 lanes (else int16 pairs).
  static constexpr bool kDot4 = kInt8Dots<Tag>;
  static constexpr bool kPairs = !kDot4;  ///< scale pattern layout (see Kq23Layout)

  /// Per activation block: the values in register order; kDot4: the starting values -4 * (sum of
  /// the activations of each int32 lane) at the lane's byte offset; otherwise boff (see
  /// owner_lane): -4 * bsum[j] at int16 lane e of 16-byte lane k of register v, j = 8 h + e (h:
  /// the qs half of that lane) when the lane owns its half, else 0; the scale.
  struct PrepDot4 {
    std::int8_t a[256];
    std::int8_t init[256];
    float d;
    float pad[15];
  };
  struct PrepPairs {
    std::int8_t a[256];
    std::int16_t boff[kNV * kW / 2];
    float d;
    float pad[15];
  };
  using Prep = std::conditional_t<kDot4, PrepDot4, PrepPairs>;
  /// The qs half (0: values 0..127, 1: 128..255) of 16-byte lane k of qs register v, and whether
  /// that lane is the first of its half (the one lane per half that carries the -4 offset term).
  static constexpr int half_of(int v, int k) { return (v * kW + 16 * k) / 32; }
  static constexpr bool owner_lane(int v, int k) { return (v * kW + 16 * k) % 32 == 0; }
  /// Whether register v has an owner lane (its boff is not all zero).
  static constexpr bool has_owner(int v) {
    for (int k = 0; k < kW / 16; ++k)
      if (owner_lane(v, k)) return true;
    return false;
  }
  using Row = SplitRow<BlockQ8_K, Prep, 256>;
  static std::size_t act_bytes(std::int64_t cols) { return Row::act_bytes(cols); }
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* in = static_cast<const BlockQ8_K*>(src);
    Prep* p = Row::copy_plain(src, cols, dst);
    for (std::int64_t b = 0; b < cols / 256; ++b) {
      std::memset(&p[b], 0, sizeof(Prep));
      L::permute(in[b], p[b].a);
      if constexpr (kDot4) {
        for (int o = 0; o < 256; o += 4) {
          int s = 0;
          for (int e = 0; e < 4; ++e) s += p[b].a[o + e];
          const std::int32_t v = -4 * s;
          std::memcpy(p[b].init + o, &v, 4);
        }
      } else {
        // |-4 * bsum| <= 4 * 16 * 128 = 8192: an int16.
        for (int v = 0; v < kNV; ++v)
          for (int k = 0; k < kW / 16; ++k)
            if (owner_lane(v, k))
              for (int e = 0; e < 8; ++e)
                p[b].boff[v * kW / 2 + 8 * k + e] =
                    static_cast<std::int16_t>(-4 * in[b].bsums[8 * half_of(v, k) + e]);
      }
      p[b].d = in[b].d;
    }
  }

  /// Constant patterns: the scale lookups, and the two lookup16 indexes and shift counts that
  /// unpack the 12 scale bytes (bytes 0..11 of each 16-byte lane) into the 16 6-bit scales.
  struct Patterns {
    typename L::template Patterns<kPairs> sc;
    alignas(64) std::uint8_t lo_idx[kW], lo_m1[kW], lo_m2[kW], hi_idx[kW];
    alignas(64) std::uint32_t hi_shift[kW / 4];
    /// Without kDot4: lookup16 index of register (v, s) into its int16 scale table (tab[v] in
    /// run): in 16-byte lane k the two bytes of the int16 scale of the lane's sub-block, repeated.
    alignas(64) std::uint8_t idx16[kNV][4][kW];
    /// Without kDot4 on 64-byte tags: all-ones in the int16 lanes of the 16-byte lanes of qs
    /// half 1.
    alignas(64) std::int16_t half1[kW / 2];
    /// The hmask bit of register v's byte b at shift s (see high_bit): 1 << (4 h + s).
    alignas(64) std::uint8_t hsel[kNV][4][kW];
    Patterns() {
      for (int v = 0; v < kNV; ++v)
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < kW; ++b)
            hsel[v][s][b] = static_cast<std::uint8_t>(1 << (4 * ((v * kW + b) / 32) + s));
      for (int b = 0; b < kW; ++b) {
        const int j = b % 16;
        lo_idx[b] = static_cast<std::uint8_t>(2 + j % 8);
        lo_m1[b] = j < 8 ? 0x0F : 0;
        lo_m2[b] = j < 8 ? 0 : 0x0F;
        hi_idx[b] = static_cast<std::uint8_t>(2 + 8 + j % 4);
      }
      for (int i = 0; i < kW / 4; ++i) hi_shift[i] = static_cast<std::uint32_t>(2 * (i % 4));
      for (int v = 0; v < kNV; ++v)
        for (int s = 0; s < 4; ++s)
          for (int b = 0; b < kW; ++b) {
            const int e = L::value(v, s, b - b % 16) / 16 % 8;  // sub-block within its half
            idx16[v][s][b] = static_cast<std::uint8_t>(2 * e + b % 2);
          }
      for (int i = 0; i < kW / 2; ++i)
        half1[i] = static_cast<std::int16_t>(half_of(0, i / 8) % 2 == 1 ? -1 : 0);
    }
  };
  static const Patterns& patterns() {
    static const Patterns p;
    return p;
  }

  /// The hmask bytes of qs register v: byte t holds the high bits of the values of qs byte
  /// v W + t (hmask[(v W + t) % 32]).
  static VU8<Tag> hmask(const std::uint8_t* x, int v) {
    if constexpr (kW == 64) {
      return load_twice<Tag>(x);
    } else {
      return loadu<std::uint8_t, Tag>(x + (v * kW) % 32);
    }
  }
  /// Bit 2 of each byte = the high bit of the level of register v at shift s: bit k = 4 h + s of
  /// hm (h: the half of the qs byte), moved by 16-bit shifts, (hm << 2) >> k for s < 2 and
  /// hm >> (k - 2) otherwise (no bit of a byte leaves its 16-bit lane; & 4 drops the others).
  template <int v, int s>
  static VU8<Tag> high_bit(const VU8<Tag>& hm) {
    constexpr int h0 = v * kW / 32, h1 = (v * kW + kW - 1) / 32;  // halves of register v
    const VU16<Tag> h16 = as<std::uint16_t>(hm);
    VU16<Tag> t;
    if constexpr (s < 2) {
      t = shr_halves<Tag>(h16 << 2, 4 * h0 + s, 4 * h1 + s);
    } else {
      t = shr_halves<Tag>(h16, 4 * h0 + s - 2, 4 * h1 + s - 2);
    }
    return as<std::uint8_t>(t) & VU8<Tag>(static_cast<std::uint8_t>(4));
  }

  /// The 3-bit level (0..7) of register v at shift s: its low two bits q2 (0..3) plus the high bit
  /// from hm (hmask(x, v)). The GEMV and the dequantizer both build levels here.
  template <int v, int s>
  static VU8<Tag> make_level(const VU8<Tag>& q2, const VU8<Tag>& hm, const Patterns& pt) {
#if defined(NIBBLE_K_X86)
    if constexpr (kW == 64) {
      // vptestmb + masked add (2 operations, one of them on port 5) instead of the 16-bit
      // shift, & 4 and | (the shift on port 0, which the level shifts load): 1.03-1.08x on the
      // AVX-512 VNNI GEMV body on a Sapphire Rapids-class core, 0.95-1.03x (no change) on Zen 5
      // (docs/kernels.md, "Q3_K's high bit on AVX-512")
      return add_where<Tag>(q2, hm, loadu<std::uint8_t, Tag>(pt.hsel[v][s]), 4);
    }
#endif
    (void)pt;
    return q2 | high_bit<v, s>(hm);
  }

  /// The 16 6-bit scales (unsigned, 0..63) of a block whose bytes 94..109 are in a 16-byte lane
  /// of s (the 12 scale bytes at lane bytes 2..13), in that lane; one block per lane.
  static VI8<Tag> scales6(const VI8<Tag>& s, const Patterns& pt) {
    const VU8<Tag> a = as<std::uint8_t>(lookup16<Tag>(s, loadu<std::uint8_t, Tag>(pt.lo_idx)));
    const VU8<Tag> l =
        (a & loadu<std::uint8_t, Tag>(pt.lo_m1)) |
        (as<std::uint8_t>(as<std::uint16_t>(a) >> 4) & loadu<std::uint8_t, Tag>(pt.lo_m2));
    const VU32<Tag> h = as<std::uint32_t>(lookup16<Tag>(s, loadu<std::uint8_t, Tag>(pt.hi_idx)));
    const VU8<Tag> hh =
        as<std::uint8_t>(shr_var_u32<Tag>(h, loadu<std::uint32_t, Tag>(pt.hi_shift)) << 4);
    return as<std::int8_t>(l | (hh & VU8<Tag>(static_cast<std::uint8_t>(0x30))));
  }

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kPrefetch = 512;
    const Patterns& pt = patterns();
    const Prep* pa = Row::prep(A, cols);
    const VU8<Tag> m3(static_cast<std::uint8_t>(3));
    VF<Tag> acc[R];
    static_for<R>([&](auto rc) { acc[decltype(rc)::value] = VF<Tag>(0.0f); });
    constexpr int kH = kW / 16;             // rows whose scales one register unpacks
    constexpr int kSR = (R + kH - 1) / kH;  // scale registers
    for (std::int64_t b = 0; b < nb; ++b) {
      const Prep& a = pa[b];
      if (kLinearL2 && far_group(far)) {
        prefetch_linear(W + far, R, static_cast<std::size_t>(b) * sizeof(BlockQ3_K),
                        sizeof(BlockQ3_K));
      }
      VI8<Tag> s6[kSR];
      for (int g = 0; g < kSR; ++g) {
        const void* lp[kH];  // bytes 94..109 of each row's block (the scales at lane bytes 2..13)
        for (int l = 0; l < kH; ++l)
          lp[l] = W + (g * kH + l < R ? g * kH + l : R - 1) * wrb +
                  static_cast<std::size_t>(b) * sizeof(BlockQ3_K) + 94;
        s6[g] = scales6(as<std::int8_t>(load_lanes<Tag>(lp)), pt);
      }
      static_for<R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        const std::uint8_t* x = W + r * wrb + static_cast<std::size_t>(b) * sizeof(BlockQ3_K);
        prefetch_l1(x + kPrefetch);
        prefetch_l1(x + kPrefetch + 64);
        if (!kLinearL2 || far == kRowStreams) {
          prefetch_far(x, far);
          prefetch_far(x + 64, far);
        }
        const VI8<Tag> sc = as<std::int8_t>(bcast_lane<Tag>(as<std::uint8_t>(s6[r / kH]), r % kH));
        VI32<Tag> isum(0), usum(0);
        VI16<Tag> usum16(0);
        // Without kDot4: the scales minus 32 as int16, so the -32 needs no separate sum. tab[v]:
        // the table of register v, in each 16-byte lane the scales 8h..8h+7 of the lane's qs
        // half h (ts[h] from the sign extension; 64-byte tags mix the two halves by lane).
        [[maybe_unused]] VI16<Tag> tab[kNV];
        if constexpr (!kDot4) {
          const VI8<Tag> sm = sc - VI8<Tag>(static_cast<std::int8_t>(32));
          VI16<Tag> ts[2];
          zip8_lanes<Tag>(sm, xsimd::select(sm < VI8<Tag>(0), VI8<Tag>(-1), VI8<Tag>(0)), ts[0],
                          ts[1]);
          static_for<kNV>([&](auto vc) {
            constexpr int v = decltype(vc)::value;
            if constexpr (half_of(v, 0) == half_of(v, kW / 16 - 1)) {
              tab[v] = ts[half_of(v, 0)];
            } else {
              tab[v] = ts[0] ^ ((ts[0] ^ ts[1]) & VI16<Tag>::load_aligned(pt.half1));
            }
          });
        }
        static_for<kNV>([&](auto vc) {
          constexpr int v = decltype(vc)::value;
          const VU8<Tag> q = loadu<std::uint8_t, Tag>(x + 32 + v * kW);
          const VU8<Tag> hm = hmask(x, v);
          auto level = [&](auto sc_) {
            constexpr int s = decltype(sc_)::value;
            const VU8<Tag> q2 =
                s == 0 ? q & m3 : as<std::uint8_t>(as<std::uint16_t>(q) >> (2 * s)) & m3;
            return make_level<v, s>(q2, hm, pt);
          };
          auto act = [&](int s) { return loadu<std::int8_t, Tag>(a.a + (4 * v + s) * kW); };
          if constexpr (ScaledDot2<Tag>::kPacked) {
            auto init = [&](int s) { return loadu<std::int32_t, Tag>(a.init + (4 * v + s) * kW); };
            // shifts (p, p + 2) per scale step: int32 lanes of sum (u - 4) a, |.| <= 2048,
            // narrowed to int16; their sum for the -32 offset in int16 (|.| <= 2 kNV 2048)
            static_for<2>([&](auto pc) {
              constexpr int p = decltype(pc)::value;
              using S2 = ScaledDot2<Tag>;
              const VI8<Tag> pat = lookup16<Tag>(sc, loadu<std::uint8_t, Tag>(pt.sc.idx2[v][p]));
              const VI32<Tag> dl =
                  dot_u8s8<Tag>(init(p), level(std::integral_constant<int, p>{}), act(p));
              const VI32<Tag> dh = dot_u8s8<Tag>(
                  init(p + 2), level(std::integral_constant<int, p + 2>{}), act(p + 2));
              const VI16<Tag> pk = S2::pack(dl, dh);
              if constexpr (v == 0 && p == 0) {
                isum = madd_i16<Tag>(pk, as<std::int16_t>(pat));
                usum16 = pk;
              } else {
                isum = S2::acc_packed(isum, pk, pat);
                usum16 = usum16 + pk;
              }
            });
          } else {
            static_for<4>([&](auto sc_) {
              constexpr int s = decltype(sc_)::value;
              const VU8<Tag> u = level(sc_);
              const VI8<Tag> av = act(s);
              if constexpr (kDot4) {
                // int32 lanes: sum of 4 (u - 4) a, |.| <= 2048 (an int16 for the scale's pmaddwd)
                const VI8<Tag> pat = lookup16<Tag>(sc, loadu<std::uint8_t, Tag>(pt.sc.idx[v][s]));
                const VI32<Tag> t =
                    dot_u8s8<Tag>(loadu<std::int32_t, Tag>(a.init + (4 * v + s) * kW), u, av);
                isum = madd_acc_i16<Tag>(isum, as<std::int16_t>(t), as<std::int16_t>(pat));
                usum = usum + t;
              } else {
                // sum (s - 32) u a: |u a pair| <= 2 * 7 * 128, times |s - 32| <= 32; the -4
                // offset is added per sub-block after the loop (boff)
                const VI16<Tag> p16 = as<std::int16_t>(lookup16<Tag>(
                    as<std::int8_t>(tab[v]), loadu<std::uint8_t, Tag>(pt.idx16[v][s])));
                isum = madd_acc_i16<Tag>(isum, madd_u8s8<Tag>(u, av), p16);
              }
            });
          }
        });
        // sum_sb (s - 32) X_sb = sum_sb s X_sb - 32 sum X
        if constexpr (kDot4 && !ScaledDot2<Tag>::kPacked) {
          isum = isum - (usum << 5);
        } else if constexpr (kDot4) {
          isum = madd_acc_i16<Tag>(isum, usum16, VI16<Tag>(static_cast<std::int16_t>(-32)));
        } else {
          // the -4 offset: sum_sb (s - 32) (-4 bsum_sb), from the registers with a lane that owns
          // its half (boff is 0 in the other lanes)
          static_for<kNV>([&](auto vc) {
            constexpr int v = decltype(vc)::value;
            if constexpr (has_owner(v)) {
              isum =
                  madd_acc_i16<Tag>(isum, tab[v], VI16<Tag>::load_unaligned(a.boff + v * kW / 2));
            }
          });
        }
        acc[r] =
            fmadd<Tag>(xsimd::to_float(isum), VF<Tag>(h2f<Tag>(ld_u16(x + 108)) * a.d), acc[r]);
      });
    }
    static_for<R>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      Y[r] = xsimd::hadd(acc[r]);
    });
  }
};

/// GEMM driver: the GEMV (rows in groups of K::kR) once per activation row for n < K::kRowsMinN
/// (below that RowsGemm's per-call repack costs more than passes over cache-resident weights,
/// measured), `Gemm` otherwise.
template <class K, void (*Gemm)(const void*, std::size_t, std::int64_t, std::int64_t, std::int64_t,
                                const void*, std::size_t, std::int64_t, float*, std::int64_t)>
void kq_gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1, std::int64_t cols,
             const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  if (n >= K::kRowsMinN) return Gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
  for (std::int64_t j = 0; j < n; ++j)
    gemv_groups<K, K::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y + j * ldy,
                          static_cast<const std::uint8_t*>(A) + j * arb, arb, cols / 256, cols);
}

/// The kL dwords of each of kL rows at byte offset `off` of block b, transposed: r[k] lane i =
/// dword k of row i.
template <class Tag, class Block>
inline void kq_transpose_at(const std::uint8_t* const* rows, std::int64_t b, int off,
                            VI32<Tag>* r) {
  constexpr int kL = Tag::bytes / 4;
  for (int i = 0; i < kL; ++i)
    r[i] = loadu<std::int32_t, Tag>(
        reinterpret_cast<const std::uint8_t*>(reinterpret_cast<const Block*>(rows[i]) + b) + off);
  transpose_i32<Tag>(r);
}

/// The kL rows' fp16 at byte offset `off` of block b as floats (lane i: row i).
template <class Tag, class Block>
inline VF<Tag> kq_rows_f16(const std::uint8_t* const* rows, std::int64_t b, int off) {
  constexpr int kL = Tag::bytes / 4;
  alignas(64) std::uint32_t h[kL];
  for (int i = 0; i < kL; ++i)
    h[i] = ld_u16(
        reinterpret_cast<const std::uint8_t*>(reinterpret_cast<const Block*>(rows[i]) + b) + off);
  return h2f_lo16<Tag>(VU32<Tag>::load_aligned(h));
}

/// Where the GEMM policies of Q2_K / Q3_K read block b of a tile of kL rows (lane i: row i):
/// the plain rows (dwords transposed) ...
template <class Tag, class Block>
struct KqPlainSrc {
  const std::uint8_t* const* rows;
  std::int64_t b;
  /// r[k] = dword off / 4 + k of the rows' blocks, k < kL (within the block).
  void dwords(int off, VI32<Tag>* r) const { kq_transpose_at<Tag, Block>(rows, b, off, r); }
  /// The dword at byte offset `off` (4-aligned) of the rows' blocks.
  VU32<Tag> dword(int off) const {
    constexpr int kL = Tag::bytes / 4;
    alignas(64) std::uint32_t w[kL];
    for (int i = 0; i < kL; ++i)
      std::memcpy(
          &w[i],
          reinterpret_cast<const std::uint8_t*>(reinterpret_cast<const Block*>(rows[i]) + b) + off,
          4);
    return VU32<Tag>::load_aligned(w);
  }
  VF<Tag> f16(int off) const { return kq_rows_f16<Tag, Block>(rows, b, off); }
};

/// ... or a packed group block (nibble/packed.hpp: the bytes before `two` in 4-byte units, from
/// `two` on in 2-byte units), sub-tile h: no transpose.
template <class Tag>
struct KqPackedSrc {
  const std::uint8_t* gb;
  int h, two;
  VU32<Tag> dword(int off) const { return packed_unit<Tag>(gb, off / 4, h); }
  void dwords(int off, VI32<Tag>* r) const {
    for (int k = 0; k < Tag::bytes / 4; ++k) r[k] = as<std::int32_t>(dword(off + 4 * k));
  }
  VF<Tag> f16(int off) const {
    if (off >= two) return load_f16<Tag>(gb + 16 * off + Tag::bytes / 2 * h);
    const VU32<Tag> w = dword(off & ~3);
    return h2f_lo16<Tag>(off % 4 ? w >> 16 : w);
  }
};

/// The Q2_K / Q3_K 2-bit levels of a tile's block (from a KqPlainSrc / KqPackedSrc), into slots
/// (lane i: row i): slot j holds the levels of values 4j .. 4j + 3. QsOff: offset of qs in the
/// block.
template <class Tag, int QsOff, class Src>
inline void kq_levels2(const Src& src, VU32<Tag>* slot) {
  constexpr int kL = Tag::bytes / 4;
  const VU32<Tag> m3(0x03030303u);
  for (int ch = 0; ch < 64 / (4 * kL); ++ch) {
    VI32<Tag> r[kL];
    src.dwords(QsOff + 4 * kL * ch, r);
    for (int k = 0; k < kL; ++k) {
      const int m = kL * ch + k;  // qs dword: half m / 8, values 128 h + 32 g + 4 (m % 8)
      for (int g = 0; g < 4; ++g)
        slot[32 * (m / 8) + 8 * g + m % 8] = (as<std::uint32_t>(r[k]) >> (2 * g)) & m3;
    }
  }
}

/// The tile readers of the Q2_K / Q3_K GEMM policies (Self::tile from a source): repack from
/// the plain rows, repack_packed from a packed group block (4-byte units up to byte kTwo, 2-byte
/// units from there), and the sizes the packed engine needs.
template <class Self, class Block, int kTwo>
struct KqRowsTiles {
  template <class Tag>
  static void repack(const std::uint8_t* const* rows, std::int64_t b, std::int64_t, VU8<Tag>* lv,
                     VF<Tag>* fs, VF<Tag>* fm) {
    Self::template tile<Tag>(KqPlainSrc<Tag, Block>{rows, b}, lv, fs, fm);
  }
  template <class Tag>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t, std::int64_t, VU8<Tag>* lv,
                            VF<Tag>* fs, VF<Tag>* fm) {
    Self::template tile<Tag>(KqPackedSrc<Tag>{gb, h, kTwo}, lv, fs, fm);
  }
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 256) * sizeof(Block);
  }
  static constexpr std::size_t kBlockBytes = sizeof(Block);
};

/// The Q2_K policy of the integer GEMM engine: unsigned 2-bit levels; per sub-block
/// fs = d * sc, fm = -dmin * m, extras the Q8_K bsums.
struct Q2Rows : KqRowsTiles<Q2Rows, BlockQ2_K, 84> {
  static constexpr int kValues = 256, kSub = 16;
  static constexpr bool kActScalePerSub = false;
  /// int16 depth without VNNI / sdot: a sub-block's 4 slots, 4 * 2 * 3 * 128 < 2^15.
  template <class Tag>
  static constexpr int kDepth = kInt8Dots<Tag> ? 1 : 4;
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// The tile of one block of L rows read from `src` (KqPlainSrc or KqPackedSrc).
  template <class Tag, class Src>
  static void tile(const Src& src, VU8<Tag>* lv, VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    VU32<Tag> slot[64];
    kq_levels2<Tag, 16>(src, slot);
    for (int j = 0; j < 64; ++j) lv[j] = as<std::uint8_t>(slot[j]);
    VI32<Tag> r[kL < 4 ? 4 : kL];
    src.dwords(0, r);  // scales: dwords 0..3
    const VF<Tag> d = src.f16(80);
    const VF<Tag> ndmin = -src.f16(82);
    const VU32<Tag> kff(0xFFu);
    for (int s = 0; s < 16; ++s) {
      const VU32<Tag> c = (as<std::uint32_t>(r[s / 4]) >> (8 * (s % 4))) & kff;
      fs[s] = d * xsimd::to_float(as<std::int32_t>(c & VU32<Tag>(15u)));
      fm[s] = ndmin * xsimd::to_float(as<std::int32_t>(c >> 4));
    }
  }

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

/// The Q3_K policy: unsigned 3-bit levels u (value u - 4); fs = d * (s - 32), fm = -4 * fs,
/// extras the bsums.
struct Q3Rows : KqRowsTiles<Q3Rows, BlockQ3_K, 108> {
  static constexpr int kValues = 256, kSub = 16;
  static constexpr bool kActScalePerSub = false;
  /// int16 depth without VNNI / sdot: 4 * 2 * 7 * 128 < 2^15.
  template <class Tag>
  static constexpr int kDepth = kInt8Dots<Tag> ? 1 : 4;
  static std::int64_t blocks(std::int64_t cols) { return cols / 256; }

  /// The tile of one block of L rows read from `src` (KqPlainSrc or KqPackedSrc).
  template <class Tag, class Src>
  static void tile(const Src& src, VU8<Tag>* lv, VF<Tag>* fs, VF<Tag>* fm) {
    constexpr int kL = Tag::bytes / 4;
    VU32<Tag> slot[64];
    kq_levels2<Tag, 32>(src, slot);
    // High bits: hmask dword l / 4 (l = value % 32), bit 4 h + g for value 128 h + 32 g + l.
    const VU32<Tag> m1(0x01010101u);
    for (int ch = 0; ch < 32 / (4 * kL) || ch == 0; ++ch) {
      VI32<Tag> r[kL];
      src.dwords(4 * kL * ch, r);
      for (int k = 0; k < kL && kL * ch + k < 8; ++k) {
        const int c = kL * ch + k;  // hmask dword: values with l = 4c .. 4c + 3
        const VU32<Tag> hm = as<std::uint32_t>(r[k]);
        for (int h = 0; h < 2; ++h)
          for (int g = 0; g < 4; ++g) {
            const int j = 32 * h + 8 * g + c;
            lv[j] = as<std::uint8_t>(slot[j] | (((hm >> (4 * h + g)) & m1) << 2));
          }
      }
    }
    // Scales: the 12 bytes at 96 as three dwords per row (lane i: row i), d at 108.
    const VU32<Tag> s0 = src.dword(96), s1 = src.dword(100), s2 = src.dword(104);
    const VF<Tag> d = src.f16(108);
    const VU32<Tag> k0f(0x0Fu), k3(3u);
    for (int j = 0; j < 16; ++j) {
      const VU32<Tag> lo = j < 8 ? ((j < 4 ? s0 : s1) >> (8 * (j % 4))) & k0f
                                 : ((j < 12 ? s0 : s1) >> (8 * (j % 4) + 4)) & k0f;
      const VU32<Tag> hi = (s2 >> (8 * (j % 4) + 2 * (j / 4))) & k3;
      const VI32<Tag> sc = as<std::int32_t>(lo | (hi << 4)) - VI32<Tag>(32);
      fs[j] = d * xsimd::to_float(sc);
      fm[j] = fs[j] * VF<Tag>(-4.0f);
    }
  }

  static void act(const std::uint8_t* arow, std::int64_t, std::int64_t b, std::int8_t* qs,
                  float* da, float* e) {
    Q2Rows::act(arow, 0, b, qs, da, e);
  }

  template <class Tag>
  static VI32<Tag> dot(const VI32<Tag>& acc, const VU8<Tag>& lv, const VI8<Tag>& a) {
    return dot_u8s8<Tag>(acc, lv, a);
  }
};

#endif

}  // namespace
}  // namespace nibble::kernels
