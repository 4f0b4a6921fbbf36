// nibble: the integer kernels of the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and
// MXFP4: the scalar reference dot, the GEMV body and the GEMM (RowsGemm) policy, written once for
// every SIMD tag over xsimd batches and the helpers of intrin-*.hpp.
//
// Integer scheme (ggml's vec_dot_*_q8_0 / _q8_1): activations are Q8_0 blocks (Q4_1 / Q5_1: Q8_1,
// whose s = fp16(d * sum of the quants) carries the min term). Per 32-value block b of a row,
//   y += d_w(b) * d_a(b) * sum_j v_j * a_j        (+ m(b) * s_a(b) for Q4_1 / Q5_1)
// with integer weights v: Q4_0 q - 8, Q5_0 q - 16, Q4_1 / Q5_1 q, IQ4_NL the code book value
// K[q] (-127..113), MXFP4 the doubled E2M1 value K[q] (-12..12) with d_w = 2^(e - 128).
// The integer sums are exact on every ISA; the float steps differ by ISA within the documented
// tolerance.
//
// GEMV (Q32Simd): one block per 16-byte lane, G = Tag::bytes / 16 blocks per step (AVX-512 4,
// AVX2 2, NEON 1). A step loads the G blocks' 16 quant bytes into the lanes of one register
// (lane_blocks), splits the nibbles (low: values 0..15, high: 16..31 of the lane's block), adds
// Q5's fifth bit (from qh, expanded per byte by a table lookup) or maps codes through a 16-entry
// int8 table (lookup16), and takes two int8 dot products with activations re-laid out once per
// call in the same order. Levels are unsigned with an offset (v = u - off, the -off * sum(a)
// term is the prepared starting value of each int32 lane), except IQ4_NL, whose signed code book
// values go through S8Dot (VNNI: the table biased by 128). Each int32 lane belongs to one block;
// its scale d_w * d_a is a per-lane float vector (lane_f16 gathers the G fp16 scales).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/mxfp4.hpp"
#include "nibble/formats/q4_0.hpp"
#include "nibble/formats/q4_1.hpp"
#include "nibble/formats/q5_0.hpp"
#include "nibble/formats/q5_1.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_1.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/detail/packed-driver-inl.hpp"
#include "nibble/kernels/detail/rows-inl.hpp"
#include "nibble/kernels/detail/simd.hpp"

namespace nibble::kernels {
namespace {

/// How the 4-bit codes of a format become integer weights.
enum class Q32Code {
  level,   ///< v = level - kOffset (level = nibble, plus 16 * the qh bit for Q5)
  sbook,   ///< v = kTable[code] (signed int8 code book)
  biased,  ///< v = kTable[code]; the kernels use kTable[code] + kOffset >= 0 and subtract kOffset
};

/// MXFP4's code book plus 12 (the biased levels 0..24 of the MXFP4 kernels).
constexpr std::int8_t kMxfp4Biased[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                          12, 11, 10, 9,  8,  6,  4,  0};

/// Static facts of a 32-value block format for the integer kernels.
template <Format F>
struct Q32Fmt;
template <>
struct Q32Fmt<Format::q4_0> {
  using Block = BlockQ4_0;
  static constexpr int kBytes = 18, kQs = 2, kQh = -1, kOffset = 8;
  static constexpr bool kMin = false, kE8M0 = false;
  static constexpr Q32Code kCode = Q32Code::level;
  static constexpr const std::int8_t* kTable = nullptr;
};
template <>
struct Q32Fmt<Format::q4_1> {
  using Block = BlockQ4_1;
  static constexpr int kBytes = 20, kQs = 4, kQh = -1, kOffset = 0;
  static constexpr bool kMin = true, kE8M0 = false;
  static constexpr Q32Code kCode = Q32Code::level;
  static constexpr const std::int8_t* kTable = nullptr;
};
template <>
struct Q32Fmt<Format::q5_0> {
  using Block = BlockQ5_0;
  static constexpr int kBytes = 22, kQs = 6, kQh = 2, kOffset = 16;
  static constexpr bool kMin = false, kE8M0 = false;
  static constexpr Q32Code kCode = Q32Code::level;
  static constexpr const std::int8_t* kTable = nullptr;
};
template <>
struct Q32Fmt<Format::q5_1> {
  using Block = BlockQ5_1;
  static constexpr int kBytes = 24, kQs = 8, kQh = 4, kOffset = 0;
  static constexpr bool kMin = true, kE8M0 = false;
  static constexpr Q32Code kCode = Q32Code::level;
  static constexpr const std::int8_t* kTable = nullptr;
};
template <>
struct Q32Fmt<Format::iq4_nl> {
  using Block = BlockIQ4_NL;
  static constexpr int kBytes = 18, kQs = 2, kQh = -1, kOffset = 0;
  static constexpr bool kMin = false, kE8M0 = false;
  static constexpr Q32Code kCode = Q32Code::sbook;
  static constexpr const std::int8_t* kTable = ref::iq4::kValues;
};
template <>
struct Q32Fmt<Format::mxfp4> {
  using Block = BlockMXFP4;
  static constexpr int kBytes = 17, kQs = 1, kQh = -1, kOffset = 12;
  static constexpr bool kMin = false, kE8M0 = true;
  static constexpr Q32Code kCode = Q32Code::biased;
  static constexpr const std::int8_t* kTable = kMxfp4Biased;
};

/// 2^(e - 128), ggml's ggml_e8m0_to_fp32_half (a private copy for kernel code).
inline float e8m0_half_k(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<std::uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The scalar side of a format: weight scale, min, and the integer weights of one block.
template <Format F>
struct Q32Ref {
  using Fmt = Q32Fmt<F>;
  static float scale(const std::uint8_t* b) {
    if constexpr (Fmt::kE8M0) return e8m0_half_k(b[0]);
    return half_to_float(ld_u16(b));
  }
  static float min(const std::uint8_t* b) { return half_to_float(ld_u16(b + 2)); }
  /// The 32 integer weights v of block b (value j = d * v[j] (+ m)).
  static void weights(const std::uint8_t* b, int v[32]) {
    const std::uint8_t* qs = b + Fmt::kQs;
    std::uint32_t qh = 0;
    if constexpr (Fmt::kQh >= 0) std::memcpy(&qh, b + Fmt::kQh, 4);
    for (int j = 0; j < 16; ++j) {
      int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
      if constexpr (Fmt::kCode == Q32Code::level) {
        if constexpr (Fmt::kQh >= 0) {
          lo |= static_cast<int>((qh >> j) & 1u) << 4;
          hi |= static_cast<int>((qh >> (j + 16)) & 1u) << 4;
        }
        v[j] = lo - Fmt::kOffset;
        v[j + 16] = hi - Fmt::kOffset;
      } else {
        v[j] = Fmt::kTable[lo] - (Fmt::kCode == Q32Code::biased ? Fmt::kOffset : 0);
        v[j + 16] = Fmt::kTable[hi] - (Fmt::kCode == Q32Code::biased ? Fmt::kOffset : 0);
      }
    }
  }
};

/// The activation block type of a 32-value format (Q8_1 for the formats with a min).
template <Format F>
using Q32Act = std::conditional_t<Q32Fmt<F>::kMin, BlockQ8_1, BlockQ8_0>;

/// Scalar reference dot of one weight row with one activation row (nb blocks), in ggml's
/// generic order: per block the exact integer sum, then sum += isum * d_w * d_a (Q4_1 / Q5_1:
/// sum += (d_w * d_a) * isum + m * s; MXFP4: sum += (d_w * d_a) * isum).
template <Format F>
float q32_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  using Fmt = Q32Fmt<F>;
  using Act = Q32Act<F>;
  constexpr int kAq = Fmt::kMin ? 4 : 2;  // quants offset in the activation block
  float sum = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b, w += Fmt::kBytes, a += sizeof(Act)) {
    int v[32];
    Q32Ref<F>::weights(w, v);
    const auto* aq = reinterpret_cast<const std::int8_t*>(a + kAq);
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += v[j] * aq[j];
    const float dw = Q32Ref<F>::scale(w), da = half_to_float(ld_u16(a));
    if constexpr (Fmt::kMin) {
      sum +=
          (dw * da) * static_cast<float>(isum) + Q32Ref<F>::min(w) * half_to_float(ld_u16(a + 2));
    } else if constexpr (Fmt::kE8M0) {
      sum += (dw * da) * static_cast<float>(isum);
    } else {
      sum += static_cast<float>(isum) * dw * da;
    }
  }
  return sum;
}

template <Format F>
void q32_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                     std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                     std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t j = 0; j < n; ++j)
      Y[j * ldy + r] = q32_dot_scalar<F>(w + static_cast<std::size_t>(r) * wrb,
                                         a + static_cast<std::size_t>(j) * arb, cols / 32);
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// All-ones in the int32 lanes 4k + r with r < R (the lanes of present rows), zero elsewhere.
template <class Tag, int R>
struct RowLaneMask {
  alignas(64) std::uint32_t m[Tag::bytes / 4] = {};
  constexpr RowLaneMask() {
    for (int i = 0; i < Tag::bytes / 4; ++i) m[i] = i % 4 < R ? ~0u : 0u;
  }
};

template <class Tag, Format F>
struct Q32Simd {
  using Fmt = Q32Fmt<F>;
  using Act = Q32Act<F>;
  static constexpr int kW = Tag::bytes;
  static constexpr bool kLinearL2 = kLinearGroupPrefetch<Tag>;  // see simd.hpp
  static constexpr int kG = kW / 16;  ///< blocks per step (one per 16-byte lane)
  static constexpr int kR = 4;        ///< rows per GEMV group
  /// Row streams without software prefetch on AMD family 25 (Family25NoStreamPrefetch).
  static constexpr bool kFamily25NoStreamPrefetch =
      F == Format::q4_0 || F == Format::q4_1 || (F == Format::iq4_nl && kW == 64);
  static constexpr bool kSigned = Fmt::kCode == Q32Code::sbook;
  /// The offset subtracted from the kernels' levels (IQ4_NL: S8Dot's bias).
  static constexpr int kOff = kSigned ? S8Dot<Tag>::kBias : Fmt::kOffset;
  static constexpr int kAq = Fmt::kMin ? 4 : 2;        ///< quants offset in the activation block
  static constexpr int kStepBytes = kG * Fmt::kBytes;  ///< weight bytes of a step (readable)

  /// Activations of one step (G blocks), in the order of the weight registers: lo / hi hold the
  /// activations of the low / high nibbles (lane k: values 0..15 / 16..31 of block k); init
  /// -kOff * (sum of the block's 32 activations) in each lane of the block (added once to the
  /// row-interleaved block sums); d the activation scale of each lane's block (MXFP4: half of
  /// it, see row_scales); s (Q8_1) the block's s.
  struct Prep {
    std::int8_t lo[kW], hi[kW];
    std::int32_t init[kW / 4];
    float d[kW / 4];
    float s[kW / 4];
  };

  static std::int64_t steps(std::int64_t cols) { return (cols / 32 + kG - 1) / kG; }
  static std::size_t prep_offset(std::int64_t cols) {
    return (static_cast<std::size_t>(cols / 32) * sizeof(Act) + 63) / 64 * 64;
  }
  static std::size_t act_bytes(std::int64_t cols) {
    return prep_offset(cols) + static_cast<std::size_t>(steps(cols)) * sizeof(Prep);
  }
  static const Prep* prep(const std::uint8_t* row, std::int64_t cols) {
    return reinterpret_cast<const Prep*>(row + prep_offset(cols));
  }
  /// act_relayout: the plain activation blocks (read by the GEMM policy), then the Prep steps.
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const std::int64_t nb = cols / 32;
    std::memcpy(dst, src, static_cast<std::size_t>(nb) * sizeof(Act));
    auto* p = reinterpret_cast<Prep*>(static_cast<std::uint8_t*>(dst) + prep_offset(cols));
    const auto* in = static_cast<const std::uint8_t*>(src);
    for (std::int64_t g = 0; g < steps(cols); ++g) {
      std::memset(&p[g], 0, sizeof(Prep));
      for (int k = 0; k < kG && g * kG + k < nb; ++k) {
        const std::uint8_t* blk = in + static_cast<std::size_t>(g * kG + k) * sizeof(Act);
        const auto* q = reinterpret_cast<const std::int8_t*>(blk + kAq);
        std::memcpy(p[g].lo + 16 * k, q, 16);
        std::memcpy(p[g].hi + 16 * k, q + 16, 16);
        int sum = 0;
        for (int t = 0; t < 32; ++t) sum += q[t];
        // One fp16 conversion per block, not one per lane.
        const float d = half_to_float(ld_u16(blk)) * (Fmt::kE8M0 ? 0.5f : 1.0f);
        const float s = Fmt::kMin ? half_to_float(ld_u16(blk + 2)) : 0.0f;
        for (int l = 0; l < 4; ++l) {
          p[g].init[4 * k + l] = -kOff * sum;
          p[g].d[4 * k + l] = d;
          p[g].s[4 * k + l] = s;
        }
      }
    }
  }

  /// The code-book register (lookup16 table) of the table formats.
  static VI8<Tag> table() {
    if constexpr (Fmt::kCode == Q32Code::level) {
      return VI8<Tag>(0);
    } else {
      const VI8<Tag> t = table16<Tag>(Fmt::kTable);
      return kSigned ? S8Dot<Tag>::prep(t) : t;
    }
  }

  /// The kernel levels of the G blocks at p (lane k: block k): lo of values 0..15, hi of 16..31.
  /// Unsigned (u = v + kOff), or for IQ4_NL S8Dot-prepared code book values.
  static void levels(const std::uint8_t* p, const VI8<Tag>& tbl, VU8<Tag>& lo, VU8<Tag>& hi) {
    const VU8<Tag> m4(static_cast<std::uint8_t>(0x0F));
    const VU8<Tag> q = lane_blocks<Tag, Fmt::kBytes, Fmt::kQs, kStepBytes>(p);
    lo = q & m4;
    hi = as<std::uint8_t>(as<std::uint16_t>(q) >> 4) & m4;
    if constexpr (Fmt::kQh >= 0) {
      or_bits16<Tag, Fmt::kBytes, Fmt::kQh>(lo, hi, p, VU8<Tag>(static_cast<std::uint8_t>(0x10)));
    }
    if constexpr (Fmt::kCode != Q32Code::level) {
      lo = as<std::uint8_t>(lookup16<Tag>(tbl, lo));
      hi = as<std::uint8_t>(lookup16<Tag>(tbl, hi));
    }
  }

  /// init + the int8 dot products of (lo, alo) and (hi, ahi), per int32 lane.
  static VI32<Tag> dot2(const VI32<Tag>& init, const VU8<Tag>& lo, const VI8<Tag>& alo,
                        const VU8<Tag>& hi, const VI8<Tag>& ahi) {
    if constexpr (kSigned) {
      using D = S8Dot<Tag>;
      return D::dot_prepped(D::dot_prepped(init, as<std::int8_t>(lo), alo), as<std::int8_t>(hi),
                            ahi);
    } else if constexpr (kInt8Dots<Tag>) {
      return dot_u8s8<Tag>(dot_u8s8<Tag>(init, lo, alo), hi, ahi);
    } else {
      // int16 pair sums of both halves: 2 * 2 * 31 * 128 < 2^15.
      return init + madd_i16<Tag>(madd_u8s8<Tag>(lo, alo) + madd_u8s8<Tag>(hi, ahi),
                                  VI16<Tag>(static_cast<std::int16_t>(1)));
    }
  }

  /// The weight scale of each lane's block (and, Q4_1 / Q5_1, its min).
  static VF<Tag> wscale(const std::uint8_t* p) {
    if constexpr (Fmt::kE8M0) {
      const VU32<Tag> e = lane_fields<Tag, Fmt::kBytes, 0, 1, kStepBytes>(p);
      const VU32<Tag> bits = xsimd::select(e < VU32<Tag>(2u), VU32<Tag>(0x00200000u) + (e << 21),
                                           (e - VU32<Tag>(1u)) << 23);
      return as<float>(bits);
    } else {
      return lane_f16<Tag, Fmt::kBytes, 0, kStepBytes>(p);
    }
  }

  /// The weight scales of R rows, row-interleaved: float lane 4k + r = the scale of block k of
  /// row r (lanes of rows >= R: 0). MXFP4: twice the scale, 2^(e - 127) (e = 0: 2^-127), which
  /// the halved activation scale of Prep compensates (exactly: powers of two).
  template <int R>
  static VF<Tag> row_scales(const std::uint8_t* p, std::size_t wrb) {
    if constexpr (Fmt::kE8M0) {
      const VU32<Tag> e = rows_fields<Tag, Fmt::kBytes, 0, 1, kStepBytes, R>(p, wrb);
      VU32<Tag> bits = xsimd::select(e == VU32<Tag>(0u), VU32<Tag>(0x00400000u), e << 23);
      if constexpr (R < 4) {
        // The lanes of absent rows read e = 0, whose scale 2^-127 is subnormal: make them 0.
        // (With them, a body of one-row groups ran at 8-13 GB/s instead of 23 on Zen 5,
        // L3-resident rows included: the subnormal products, not the memory.)
        static constexpr RowLaneMask<Tag, R> kMask{};
        bits = bits & loadu<std::uint32_t, Tag>(kMask.m);
      }
      return as<float>(bits);
    } else {
      return rows_f16<Tag, Fmt::kBytes, 0, kStepBytes, R>(p, wrb);
    }
  }

  /// The integer sums of 4 rows' blocks, row-interleaved: int32 lane 4k + r = the sum of the 4
  /// lanes of block k in is[r] (exact; the same additions for a row in any position).
  static VI32<Tag> interleave_rows(const VI32<Tag> (&is)[4]) {
    auto even = [](const VI32<Tag>& v) { return v + as<std::int32_t>(as<std::uint64_t>(v) >> 32); };
    auto odd = [](const VI32<Tag>& v) { return v + as<std::int32_t>(as<std::uint64_t>(v) << 32); };
    const VI32<Tag> q01 = blend4_i32<Tag, 0xA>(even(is[0]), odd(is[1]));
    const VI32<Tag> q23 = blend4_i32<Tag, 0xA>(even(is[2]), odd(is[3]));
    return blend4_i32<Tag, 0xC>(q01 + swap_halves64<Tag>(q01), q23 + swap_halves64<Tag>(q23));
  }

  /// One step of R <= 4 rows (row r at p + r * wrb) against the prepared activations `a`: the
  /// rows' block sums are interleaved into one register (lane 4k + r: row r, block k) so that
  /// the float work (conversion, scale, fma) is done once for the R rows.
  template <int R>
  static void step(const std::uint8_t* p, std::size_t wrb, const Prep& a, const VI8<Tag>& tbl,
                   VF<Tag>& acc) {
    const VI8<Tag> alo = loadu<std::int8_t, Tag>(a.lo), ahi = loadu<std::int8_t, Tag>(a.hi);
    VI32<Tag> is[4];
    static_for<4>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      if constexpr (r < R) {
        VU8<Tag> lo, hi;
        levels(p + r * wrb, tbl, lo, hi);
        is[r] = dot2(VI32<Tag>(0), lo, alo, hi, ahi);
      } else {
        is[r] = VI32<Tag>(0);
      }
    });
    const VI32<Tag> d = interleave_rows(is) + loadu<std::int32_t, Tag>(a.init);
    if constexpr (Fmt::kMin) {
      // Q4_1 / Q5_1: the adjacent fp16 d and m of every block as one dword field (one gather
      // of the R rows' headers instead of two).
      const VU32<Tag> dm = rows_fields<Tag, Fmt::kBytes, 0, 4, kStepBytes, R>(p, wrb);
      acc = fmadd<Tag>(xsimd::to_float(d), h2f_lo16<Tag>(dm) * VF<Tag>::load_unaligned(a.d), acc);
      acc = fmadd<Tag>(h2f_lo16<Tag>(dm >> 16), VF<Tag>::load_unaligned(a.s), acc);
    } else {
      const VF<Tag> sc = row_scales<R>(p, wrb) * VF<Tag>::load_unaligned(a.d);
      acc = fmadd<Tag>(xsimd::to_float(d), sc, acc);
    }
  }

  /// GEMV: R <= 4 rows (gemv_groups) against one prepared activation row; `far`: see
  /// gemv_groups.
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1 && R <= 4, "GEMV body");
    constexpr int kPrefetch = 512;
    const Prep* pa = prep(A, cols);
    const VI8<Tag> tbl = table();
    VF<Tag> acc(0.0f);
    const std::int64_t full = nb / kG;
    for (std::int64_t g = 0; g < full; ++g) {
      const std::uint8_t* p = W + static_cast<std::size_t>(g) * kStepBytes;
      // A plain loop: a static_for lambda holding only prefetches is judged side-effect free by
      // GCC 12 (local-pure-const) and its calls are deleted.
      for (int r = 0; r < R; ++r) {
        for (int o = 0; o < kStepBytes; o += 64) {
          prefetch_l1(p + r * wrb + kPrefetch + o);
          if (!kLinearL2 || far == kRowStreams) prefetch_far(p + r * wrb + o, far);
        }
      }
      if (kLinearL2 && far_group(far)) {
        prefetch_linear(W + far, R, static_cast<std::size_t>(g) * kStepBytes, kStepBytes);
      }
      step<R>(p, wrb, pa[g], tbl, acc);
    }
    if (full * kG < nb) {  // the last blocks, copied into a zero-padded step
      alignas(64) std::uint8_t tmp[R][kStepBytes + 64] = {};
      const std::size_t used = static_cast<std::size_t>(nb - full * kG) * Fmt::kBytes;
      for (int r = 0; r < R; ++r)
        std::memcpy(tmp[r], W + r * wrb + static_cast<std::size_t>(full) * kStepBytes, used);
      step<R>(tmp[0], sizeof tmp[0], pa[full], tbl, acc);
    }
    alignas(64) float t[kW / 4];
    acc.store_aligned(t);
    for (int r = 0; r < R; ++r) {
      float y = 0.0f;
      for (int k = 0; k < kG; ++k) y += t[4 * k + r];
      Y[r] = y;
    }
  }

  /// Dequantize n values (bit-identical to the reference: v * d, or v * d + m).
  static void dequant(const void* src, std::int64_t n, float* y) {
    constexpr int kF = kW / 4;
    const auto* p = static_cast<const std::uint8_t*>(src);
    const VI8<Tag> tbl = table();
    const std::int64_t nb = n / 32;
    for (std::int64_t g = 0; g * kG < nb; ++g) {
      const std::int64_t cnt = nb - g * kG < kG ? nb - g * kG : kG;
      alignas(64) std::uint8_t tmp[kG * Fmt::kBytes + 64] = {};
      const std::uint8_t* q = p + static_cast<std::size_t>(g) * kG * Fmt::kBytes;
      if (cnt < kG) {
        std::memcpy(tmp, q, static_cast<std::size_t>(cnt) * Fmt::kBytes);
        q = tmp;
      }
      VU8<Tag> lo, hi;
      levels(q, tbl, lo, hi);
      alignas(64) std::int8_t v[2][kW];
      // v = level - kOff (mod 256: IQ4_NL's VNNI levels are K ^ 0x80, kOff = 128).
      (as<std::int8_t>(lo) - VI8<Tag>(static_cast<std::int8_t>(kOff))).store_aligned(v[0]);
      (as<std::int8_t>(hi) - VI8<Tag>(static_cast<std::int8_t>(kOff))).store_aligned(v[1]);
      for (int k = 0; k < cnt; ++k) {
        const std::uint8_t* blk = q + k * Fmt::kBytes;
        float* out = y + (g * kG + k) * 32;
        const VF<Tag> d(Q32Ref<F>::scale(blk));
        for (int h = 0; h < 2; ++h)
          for (int f = 0; f < 16; f += kF) {
            VF<Tag> x = xsimd::to_float(widen_i8_i32<Tag>(v[h] + 16 * k + f)) * d;
            if constexpr (Fmt::kMin) x = x + VF<Tag>(Q32Ref<F>::min(blk));
            x.store_unaligned(out + 16 * h + f);
          }
      }
    }
  }
};

/// A packed group block of a 32-value format (nibble/packed.hpp): block b of 16 rows, stored as
/// the scale field (Q4_0 / Q5_0 / IQ4_NL: the 16 fp16 d; Q4_1 / Q5_1: 16 dwords d | m << 16;
/// MXFP4: the 16 E8M0 bytes), Q5's 16 qh dwords, then the 16 quant bytes in 4 units of 64 bytes
/// (unit u: bytes 4u..4u+3 of the 16 rows, one row per int32 lane). Sub-tile h: rows h L ..
/// h L + L - 1, L = Tag::bytes / 4. Read by the packed GEMV (q32-packed-inl.hpp) and the GEMM
/// tiles (Q32Rows::repack_packed).
template <class Tag, Format F>
struct Q32Packed {
  using Fmt = Q32Fmt<F>;
  static constexpr int kL = Tag::bytes / 4;
  static constexpr int kQh = Fmt::kE8M0 ? 16 : Fmt::kMin ? 64 : 32;  ///< qh (Q5) after the scales
  static constexpr int kQs = kQh + (Fmt::kQh >= 0 ? 64 : 0);         ///< the quant units
  static constexpr std::size_t kGroupBlock = 16 * Fmt::kBytes;
  static_assert(kQs + 4 * 64 == static_cast<int>(kGroupBlock), "the fields cover the block");

  static VU32<Tag> unit(const std::uint8_t* p, int u, int h) { return packed_unit<Tag>(p, u, h); }

  /// The weight scales of the sub-tile's rows (MXFP4: 2^(e - 128), as Q32Simd::wscale).
  static VF<Tag> scale(const std::uint8_t* gb, int h) {
    if constexpr (Fmt::kE8M0) {
      const VU32<Tag> e = as<std::uint32_t>(widen_i8_i32<Tag>(gb + kL * h)) & VU32<Tag>(0xFFu);
      return as<float>(xsimd::select(e < VU32<Tag>(2u), VU32<Tag>(0x00200000u) + (e << 21),
                                     (e - VU32<Tag>(1u)) << 23));
    } else if constexpr (Fmt::kMin) {
      return h2f_lo16<Tag>(unit(gb, 0, h));
    } else {
      return load_f16<Tag>(gb + 2 * kL * h);
    }
  }
  /// Q4_1 / Q5_1: the mins of the sub-tile's rows.
  static VF<Tag> min(const std::uint8_t* gb, int h) { return h2f_lo16<Tag>(unit(gb, 0, h) >> 16); }

  /// The kernel levels (those of Q32Simd::levels) of quant unit u of the sub-tile's rows: lo of
  /// values 4u..4u+3, hi of values 16 + 4u ... kHold: the units' registers held (packed_unit).
  template <bool kHold = false>
  static void levels(const std::uint8_t* gb, int h, int u, const VI8<Tag>& tbl, VU8<Tag>& lo,
                     VU8<Tag>& hi) {
    const VU32<Tag> m4(0x0F0F0F0Fu);
    const VU32<Tag> q = packed_unit<Tag, kHold>(gb + kQs, u, h);
    const VU32<Tag> l = q & m4, hh = (q >> 4) & m4;
    if constexpr (Fmt::kQh >= 0) {
      // The fifth bits: qh bits 4u + k (lo) and 16 + 4u + k (hi) of each row to bit 4 of byte
      // k of its lane. A byte shuffle puts qh byte u / 2 (lo) or 2 + u / 2 (hi) of the lane's
      // dword in all four of its bytes; byte k then tests bit 4 (u % 2) + k.
      struct Pat {
        alignas(64) std::uint8_t idx[4][64], bit[2][64];
        constexpr Pat() : idx{}, bit{} {
          for (int i = 0; i < 64; ++i) {
            for (int p = 0; p < 4; ++p) idx[p][i] = static_cast<std::uint8_t>((i % 16) / 4 * 4 + p);
            for (int s = 0; s < 2; ++s)
              bit[s][i] = static_cast<std::uint8_t>(1u << (4 * s + i % 4));
          }
        }
      };
      static constexpr Pat kP{};
      const VI8<Tag> qh = as<std::int8_t>(packed_unit<Tag, kHold>(gb + kQh, 0, h));
      const VU8<Tag> bit = loadu<std::uint8_t, Tag>(kP.bit[u % 2]),
                     b4(static_cast<std::uint8_t>(0x10));
      const VU8<Tag> rl =
          as<std::uint8_t>(lookup16<Tag>(qh, loadu<std::uint8_t, Tag>(kP.idx[u / 2])));
      const VU8<Tag> rh =
          as<std::uint8_t>(lookup16<Tag>(qh, loadu<std::uint8_t, Tag>(kP.idx[2 + u / 2])));
      const VU8<Tag> zero(static_cast<std::uint8_t>(0));
      const VU8<Tag> l8 = as<std::uint8_t>(l), h8 = as<std::uint8_t>(hh);
      lo = xsimd::select((rl & bit) != zero, l8 + b4, l8);
      hi = xsimd::select((rh & bit) != zero, h8 + b4, h8);
    } else {
      lo = as<std::uint8_t>(l);
      hi = as<std::uint8_t>(hh);
    }
    if constexpr (Fmt::kCode != Q32Code::level) {
      lo = as<std::uint8_t>(lookup16<Tag>(tbl, lo));
      hi = as<std::uint8_t>(lookup16<Tag>(tbl, hi));
    }
  }
};

/// The RowsGemm policy of a 32-value format: an engine block is one GEMV step (G blocks), each
/// block a sub-block with its own weight and activation scales. The levels of L rows are made
/// by the GEMV's `levels` per row and transposed; the activation extra is -kOff * sum(a) per
/// block (fm = -kOff * d_w), or, Q4_1 / Q5_1, Q8_1's s (fm = m, not scaled by d_a).
template <class Tag, Format F>
struct Q32Rows {
  using S = Q32Simd<Tag, F>;
  using Fmt = Q32Fmt<F>;
  static constexpr int kG = S::kG;
  static constexpr int kValues = 32 * kG, kSub = kG;
  static constexpr bool kActScalePerSub = true;
  static constexpr bool kExtraScaled = !Fmt::kMin;
  /// int16 accumulation depth without VNNI / sdot (slots of 4 values; |a| <= 128):
  /// 2 * 8 * 15 * 128, 2 * 4 * 31 * 128, 2 * 4 * 24 * 128 < 2^15. IQ4_NL: S8Dot (depth 1).
  template <class T>
  static constexpr int kDepth = (kInt8Dots<T> || S::kSigned)    ? 1
                                : (Fmt::kQh >= 0 || Fmt::kE8M0) ? 4
                                                                : 8;
  static std::int64_t blocks(std::int64_t cols) { return S::steps(cols); }

  template <class T>
  static void repack(const std::uint8_t* const* rows, std::int64_t eb, std::int64_t cols,
                     VU8<T>* lv, VF<T>* fs, VF<T>* fm) {
    static_assert(std::is_same<T, Tag>::value, "one tag per policy");
    constexpr int kL = T::bytes / 4;
    const std::int64_t nb = cols / 32;
    const std::int64_t cnt = nb - eb * kG < kG ? nb - eb * kG : kG;
    const VI8<T> tbl = S::table();
    VI32<T> rl[kL], rh[kL], rs[kL], rm[kL];
    for (int i = 0; i < kL; ++i) {
      const std::uint8_t* p = rows[i] + static_cast<std::size_t>(eb) * kG * Fmt::kBytes;
      alignas(64) std::uint8_t tmp[kG * Fmt::kBytes + 64] = {};
      if (cnt < kG) {
        std::memcpy(tmp, p, static_cast<std::size_t>(cnt) * Fmt::kBytes);
        p = tmp;
      }
      VU8<T> lo, hi;
      S::levels(p, tbl, lo, hi);
      rl[i] = as<std::int32_t>(lo);
      rh[i] = as<std::int32_t>(hi);
      rs[i] = as<std::int32_t>(S::wscale(p));
      if constexpr (Fmt::kMin)
        rm[i] = as<std::int32_t>(lane_f16<T, Fmt::kBytes, 2, S::kStepBytes>(p));
    }
    transpose_i32<T>(rl);
    transpose_i32<T>(rh);
    transpose_i32<T>(rs);
    if constexpr (Fmt::kMin) transpose_i32<T>(rm);
    // rl[m] lane i: dword m of row i's low-nibble register = values 4 (m % 4) .. of block m / 4.
    for (int m = 0; m < kL; ++m) {
      lv[8 * (m / 4) + m % 4] = as<std::uint8_t>(rl[m]);
      lv[8 * (m / 4) + 4 + m % 4] = as<std::uint8_t>(rh[m]);
    }
    for (int k = 0; k < kG; ++k) {
      fs[k] = as<float>(rs[4 * k]);
      if constexpr (Fmt::kMin) {
        fm[k] = as<float>(rm[4 * k]);
      } else {
        fm[k] = fs[k] * VF<T>(static_cast<float>(-S::kOff));
      }
    }
  }

  /// Tile of engine block eb read from the packed layout: `gb` is the group block of the
  /// format's block kG * eb (Q32Packed; the next kG - 1 follow), `h` the sub-tile.
  template <class T>
  static void repack_packed(const std::uint8_t* gb, int h, std::int64_t eb, std::int64_t cols,
                            VU8<T>* lv, VF<T>* fs, VF<T>* fm) {
    static_assert(std::is_same<T, Tag>::value, "one tag per policy");
    using P = Q32Packed<T, F>;
    const VI8<T> tbl = S::table();
    for (int k = 0; k < kG; ++k) {
      const std::uint8_t* b = gb + k * P::kGroupBlock;
      if (eb * kG + k >= cols / 32) {  // past the row: no products
        for (int j = 0; j < 8; ++j) lv[8 * k + j] = VU8<T>(static_cast<std::uint8_t>(0));
        fs[k] = fm[k] = VF<T>(0.0f);
        continue;
      }
      for (int u = 0; u < 4; ++u) P::levels(b, h, u, tbl, lv[8 * k + u], lv[8 * k + 4 + u]);
      fs[k] = P::scale(b, h);
      if constexpr (Fmt::kMin) {
        fm[k] = P::min(b, h);
      } else {
        fm[k] = fs[k] * VF<T>(static_cast<float>(-S::kOff));
      }
    }
  }
  /// Bytes of one plain row (a packed group spans 16 of them).
  static std::size_t row_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols / 32) * Fmt::kBytes;
  }
  static constexpr std::size_t kBlockBytes = kG * Fmt::kBytes;

  /// Activations: the plain blocks at the start of a relayout row; blocks past the row are 0.
  static void act(const std::uint8_t* arow, std::int64_t cols, std::int64_t eb, std::int8_t* qs,
                  float* da, float* e) {
    using Act = typename S::Act;
    for (int k = 0; k < kG; ++k) {
      const std::int64_t b = eb * kG + k;
      if (b < cols / 32) {
        const std::uint8_t* blk = arow + static_cast<std::size_t>(b) * sizeof(Act);
        std::memcpy(qs + 32 * k, blk + S::kAq, 32);
        da[k] = half_to_float(ld_u16(blk));
        if constexpr (Fmt::kMin) {
          e[k] = half_to_float(ld_u16(blk + 2));
        } else {
          int sum = 0;
          for (int j = 0; j < 32; ++j) sum += qs[32 * k + j];
          e[k] = static_cast<float>(sum);
        }
      } else {
        std::memset(qs + 32 * k, 0, 32);
        da[k] = 0.0f;
        e[k] = 0.0f;
      }
    }
  }

  template <class T>
  static VI32<T> dot(const VI32<T>& acc, const VU8<T>& lv, const VI8<T>& a) {
    if constexpr (S::kSigned) return S8Dot<T>::dot_prepped(acc, as<std::int8_t>(lv), a);
    return dot_u8s8<T>(acc, lv, a);
  }
};

/// FormatKernels::gemm of a 32-value format on a SIMD tag: the GEMV once per activation row for
/// n < kRowsMinN (measured: RowsGemm's per-call repack costs more than a second pass over
/// cache-resident weights below about 4-6 columns), RowsGemm otherwise.
template <class Tag, Format F>
void q32_gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1, std::int64_t cols,
              const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  using S = Q32Simd<Tag, F>;
  constexpr std::int64_t kRowsMinN = 4;
  if (n >= kRowsMinN)
    return RowsGemm<Tag, Q32Rows<Tag, F>>::gemm(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
  for (std::int64_t j = 0; j < n; ++j)
    gemv_groups<S, S::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y + j * ldy,
                          static_cast<const std::uint8_t*>(A) + j * arb, arb, cols / 32, cols);
}

#endif

}  // namespace
}  // namespace nibble::kernels
