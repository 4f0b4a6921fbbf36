// nibble: NF4 / FP4 kernels (BlockNF4: fp32 absmax + 32 bytes, 64 values, element 2i in the
// high nibble of byte i). Weight value = codebook[code] * absmax, exactly the reference
// dequantization. The GEMM (n > 1) is the float-activation GEMM of f32-inl.hpp with a decoder
// that looks the 16-entry code book up in registers (vpermps on AVX-512, two vpermps + blend on
// AVX2, tbl on NEON) and multiplies by the block's absmax. The GEMV (n = 1) on x86 is an int16
// dot product (Nf4IntGemv: code book and activations rounded to int16, one float scale per
// block); on NEON, and as the exact reference path, the float GEMV body Nf4FloatGemv.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "nibble/formats/nf4.hpp"
#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kNf4Bytes = 36;

template <bool Fp4>
inline const float* nf4_book() {
  return Fp4 ? ref::fp4_codebook : ref::nf4_codebook;
}

template <bool Fp4>
struct Nf4Value {
  static float value(const std::uint8_t* row, std::int64_t k) {
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 64) * kNf4Bytes;
    const int i = static_cast<int>(k % 64);
    const std::uint8_t byte = blk[4 + i / 2];
    const int code = (i & 1) ? (byte & 0x0F) : (byte >> 4);
    return nf4_book<Fp4>()[code] * ld_f32(blk);
  }
};

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
template <class Tag, bool Fp4>
struct Nf4Src : Nf4Value<Fp4> {
  static constexpr int kStep = 32;  // half a block: 16 bytes of codes
  static constexpr int kVec = 32 / (Tag::bytes / 4);
  static std::size_t bytes(std::int64_t k) {
    return static_cast<std::size_t>(k / 64) * kNf4Bytes + static_cast<std::size_t>(k % 64) / 2;
  }
  static void decode(const std::uint8_t* row, std::int64_t k, VF<Tag> out[]) {
    // The code book stays in registers when the compiler hoists it out of the k loop (it is
    // a constant); otherwise it is one to four L1 loads.
    const Book16<Tag> book(nf4_book<Fp4>());
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 64) * kNf4Bytes;
    const VF<Tag> amax(ld_f32(blk));
    lookup_codes32<Tag>(book, blk + 4 + (k % 64) / 2, out);
    for (int v = 0; v < kVec; ++v) out[v] = out[v] * amax;
  }
};
#endif

/// Register tiles for the 4-bit formats (each decoded step holds kVec vectors per row). On 32-byte
/// x86 tags one row by 8 activation columns: the code-book decode (two vpermps and a blend per 8
/// values) is then shared by 8 FMAs. Measured (nibble-bench gemm/nf4/avx2/4096x4096/n:64, one
/// thread, Zen 5, GFLOP/s): 2 x 2 40, 1 x 4 55, 2 x 4 55, 1 x 6 61, 1 x 8 63. AVX-512 keeps 4 x 4
/// (164; 2 x 8 101).
template <class Tag>
struct Nf4TileShape {
  static constexpr bool wide = TagInfo<Tag>::wide;
  static constexpr bool neon = TagInfo<Tag>::family == Family::neon;
  static constexpr int R = wide ? 4 : (neon ? 2 : 1);
  static constexpr int C = wide ? 4 : (neon ? 4 : 8);
  static constexpr int R1 = wide ? 4 : 2;
};

template <bool Fp4>
void nf4_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  const float* cb = nf4_book<Fp4>();
  for (std::int64_t b = 0; b < n / 64; ++b, p += kNf4Bytes, dst += 64) {
    const float amax = ld_f32(p);
    for (int i = 0; i < 32; ++i) {
      dst[2 * i] = cb[p[4 + i] >> 4] * amax;
      dst[2 * i + 1] = cb[p[4 + i] & 0x0F] * amax;
    }
  }
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
template <class Tag, bool Fp4>
void nf4_dequant_simd(const void* src, std::int64_t n, float* dst) {
  using S = Nf4Src<Tag, Fp4>;
  constexpr int kL = Tag::bytes / 4;
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 64; ++b, p += kNf4Bytes) {
    for (int k = 0; k < 64; k += S::kStep) {
      VF<Tag> v[S::kVec];
      S::decode(p, k, v);
      for (int i = 0; i < S::kVec; ++i) v[i].store_unaligned(dst + b * 64 + k + i * kL);
    }
  }
}
#endif

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// NF4 / FP4 fp32 GEMV body (the GEMV on NEON; on x86 the exact path, gemm_exact, next to the
/// int16 Nf4IntGemv), written once over the ISA tag. The code bytes are loaded as they are
/// stored, a register of 32-bit lanes at a time (AVX-512: one block of each of two rows, AVX2:
/// one block, NEON: half a block); the 8 nibbles of every lane are consumed by 8 right shifts,
/// each indexing the code book held in registers (Book16 uses the low 4 bits of each lane), so
/// that there is no unpacking. Products with the activations are accumulated in fp32 per block
/// and scaled once by the block's absmax. The activations are re-laid out once per call into the
/// order of the shifts (act_relayout: the plain row, then the prepared row; the GEMM for n > 1
/// reads the plain part).
template <class Tag, bool Fp4>
struct Nf4FloatGemv {
  static constexpr int kW = Tag::bytes;
  static constexpr int kChunk = kW < 32 ? kW : 32;  ///< code bytes of one row per register
  static constexpr int kRB = kW / kChunk;           ///< rows per register
  static constexpr int kCB = 32 / kChunk;           ///< registers per block and row
  static constexpr int kLanes = kW / 4;
  static constexpr int kR = 2 * kRB;                    ///< rows per GEMV group
  static constexpr int kPrepFloats = kCB * 8 * kLanes;  ///< prepared activations per block

  static std::size_t act_bytes(std::int64_t cols) {
    return static_cast<std::size_t>(cols) * 4 +
           static_cast<std::size_t>(cols / 64) * kPrepFloats * 4;
  }
  /// Prepared block: for chunk c, shift step k, lane i: the activation of the value in nibble k
  /// of code dword c * kChunk / 4 + i % (kChunk / 4) (nibble 2m + 1 is the even value of byte m).
  static void relayout(const void* src, std::int64_t cols, void* dst) {
    const auto* x = static_cast<const float*>(src);
    auto* o = static_cast<float*>(dst);
    std::memcpy(o, x, static_cast<std::size_t>(cols) * 4);
    float* p = o + cols;
    for (std::int64_t b = 0; b < cols / 64; ++b, p += kPrepFloats)
      for (int c = 0; c < kCB; ++c)
        for (int k = 0; k < 8; ++k)
          for (int i = 0; i < kLanes; ++i) {
            const int d = c * (kChunk / 4) + i % (kChunk / 4);
            p[(c * 8 + k) * kLanes + i] = x[64 * b + 8 * d + 2 * (k / 2) + 1 - k % 2];
          }
  }
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) {
      return float_gemm<Tag, Nf4Src<Tag, Fp4>, Nf4TileShape<Tag>>(W, wrb, r0, r1, cols, A, arb, n,
                                                                  Y, ldy);
    }
    gemv_groups<Nf4FloatGemv, kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                                  static_cast<const std::uint8_t*>(A), arb, cols / 64, cols);
  }

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kP = (R + kRB - 1) / kRB;  // register rows (the last may repeat a row)
    constexpr std::size_t kPrefetch = 576;
    constexpr int kS = 4;
    const Book16<Tag> book(nf4_book<Fp4>());
    const float* xp = reinterpret_cast<const float*>(A) + cols;
    VF<Tag> acc[kP];
    for (int q = 0; q < kP; ++q) acc[q] = VF<Tag>(0.0f);
    for (std::int64_t b = 0; b < nb; ++b, xp += kPrepFloats) {
      const std::uint8_t* blk[kP * kRB];
      for (int r = 0; r < kP * kRB; ++r) {
        blk[r] = W + (r < R ? r : R - 1) * wrb + static_cast<std::size_t>(b) * kNf4Bytes;
        if (r < R && (b & 1) == 0) {  // the two blocks' 72 bytes: every line of them
          for (int o = 0; o < static_cast<int>(2 * kNf4Bytes); o += 64) {
            prefetch_l1(blk[r] + kPrefetch + o);
            prefetch_far(blk[r] + o, far);
          }
        }
      }
      VF<Tag> s[kP][kS];  // kS independent sums per register row (fma latency)
      for (int q = 0; q < kP; ++q)
        for (int j = 0; j < kS; ++j) s[q][j] = VF<Tag>(0.0f);
      for (int c = 0; c < kCB; ++c) {
        VU32<Tag> v[kP];
        for (int q = 0; q < kP; ++q) {
          if constexpr (kRB == 2) {
            v[q] = as<std::uint32_t>(load_halves<Tag>(blk[2 * q] + 4, blk[2 * q + 1] + 4));
          } else {
            v[q] = loadu<std::uint32_t, Tag>(blk[q] + 4 + c * kChunk);
          }
        }
        static_for<8>([&](auto kc) {
          constexpr int k = decltype(kc)::value;
          const VF<Tag> xk = VF<Tag>::load_unaligned(xp + (c * 8 + k) * kLanes);
          for (int q = 0; q < kP; ++q)
            s[q][k % kS] =
                fmadd<Tag>(book.lookup(as<std::int32_t>(v[q] >> (4 * k))), xk, s[q][k % kS]);
        });
      }
      for (int q = 0; q < kP; ++q) {
        for (int j = 1; j < kS; ++j) s[q][0] = s[q][0] + s[q][j];
        if constexpr (kRB == 2) {
          acc[q] = fmadd<Tag>(s[q][0], set_halves<Tag>(ld_f32(blk[2 * q]), ld_f32(blk[2 * q + 1])),
                              acc[q]);
        } else {
          acc[q] = fmadd<Tag>(s[q][0], VF<Tag>(ld_f32(blk[q])), acc[q]);
        }
      }
    }
    for (int q = 0; q < kP; ++q) {
      alignas(64) float o[kLanes];
      acc[q].store_aligned(o);
      for (int h = 0; h < kRB; ++h) {
        if (q * kRB + h >= R) break;
        float t = 0.0f;
        for (int i = h * kLanes / kRB; i < (h + 1) * kLanes / kRB; ++i) t += o[i];
        Y[q * kRB + h] = t;
      }
    }
  }
};

#endif

/// The int16 code books of the integer GEMV: round(value * kScale), half away from zero. NF4:
/// kScale = 8191, each entry within 0.5 / 8191 of the exact value (6.1e-5 of the block's absmax);
/// FP4: kScale = 8064 = 42 * 192, exact (every FP4 value is a multiple of 1/192). kScale keeps
/// 8 products of |entry| <= kScale with |activation| <= 32767 inside int32 (see Nf4IntGemv).
template <bool Fp4>
struct Nf4I16Book {
  static constexpr float kScale = Fp4 ? 8064.0f : 8191.0f;
  struct Table {
    std::int16_t v[16];
  };
  static constexpr Table make() {
    Table t{};
    for (int i = 0; i < 16; ++i) {
      const float x = (Fp4 ? ref::fp4_codebook[i] : ref::nf4_codebook[i]) * kScale;
      t.v[i] = static_cast<std::int16_t>(x < 0 ? x - 0.5f : x + 0.5f);
    }
    return t;
  }
  static constexpr Table kTable = make();
};

#if defined(NIBBLE_K_X86)

/// NF4 / FP4 GEMV as an int16 dot product, written once over a 32-byte x86 tag (AVX2, AVX-VNNI,
/// and the ymm view of the AVX-512 tags, Avx512YmmTag, whose GEMV bodies Nf4IntGemvZ and
/// Nf4IntGemvPair reuse this one's activations and loop).
///
/// Activations: act_relayout rounds them to int16 with one scale per group of kG blocks (256
/// values): x_q = round(x * 32767 / amax_x), amax_x the group's largest |x|, d = amax_x / 32767.
/// The values of each block are stored in the order in which the weight lookups produce the
/// code-book entries (elem()), then the d of every group. The plain fp32 row stays in front for
/// the GEMM (n > 1).
///
/// Weights: each block's 32 code bytes give 4 vectors of 16 int16 code-book entries (Nf4I16Book):
/// with AVX-512 BW, the 16-bit lanes of the code bytes at offsets 0 and 1, shifted by 0 and 4
/// bits, index vpermw (Table16I16::lookup: 4 lookups and 2 shifts per block); otherwise the low
/// and high nibbles of the bytes index pshufb on the entries' low and high bytes, unpacked to 16
/// bits (lookup_bytes). 4 pmaddwd / vpdpwssd give 8 int32 lanes of 8 products each:
/// |sum| <= 8 * 8191 * 32767 < 2^31, exact. Per block and row: one conversion to float and one
/// fma with the block's absmax; per group and row one fma with d (a per-block d would cost a
/// multiply per block and row: measured 7-11% slower); the row's sum is divided by the book scale
/// at the end.
///
/// Result: the product of the dequantized weights with x up to the two roundings (book entries,
/// activations) and fp32 accumulation: |error| <= sum over blocks of absmax * (0.5 / kScale *
/// sum |x| + 0.5 * d * sum |book value|) + fp32 rounding. Measured on NF4 matrices (4096 columns;
/// Gaussian or Student-t weights; Gaussian activations, with 1% outlier channels x20, with two
/// massive activations): 5e-5 to 2e-4 relative (l2) against the exact product, against 0.09-0.17
/// for the 4-bit quantization itself. Non-finite activations (which the public API rejects) make
/// the results of every row NaN.
template <class Tag, bool Fp4>
struct Nf4IntGemv {
  static constexpr int kG = 4;  ///< blocks per activation scale
  static_assert(Tag::bytes == 32, "the body is laid out for 32-byte vectors");
  using Book = Nf4I16Book<Fp4>;
  static constexpr bool kWords = Table16I16<Tag>::kWords;
  /// Rows per GEMV group. 8 on the AVX-512 (vpermw) form before: 4 read faster cold on Zen 5
  /// (1 thread, 2 alternated rounds, GB/s: nf4 4096 / 11008 / 14336 x 4096 29.1-29.8 / 26.5-30.3
  /// / 29.3-30.4 -> 32.2-32.5 / 30.9-33.3 / 32.6-33.9, fp4 11008 x 4096 30.8-31.7 -> 32.9-33.2;
  /// L3-resident rows unchanged, 33-35); 2 rows were slower, and so was the address-order far
  /// prefetch (prefetch_linear) with 4.
  static constexpr int kR = 4;
  static constexpr float kActMax = 32767.0f;

  /// Block element (0..63) whose activation pairs with int16 lane p of lookup vector v.
  static constexpr int elem(int v, int p) {
    if (kWords) {
      // 16-bit lane p of the codes at offset 0 holds bytes 2p, 2p + 1 (elements 4p + 1 and 4p in
      // the low and high nibble of the first, 4p + 3 and 4p + 2 of the second); the lanes at
      // offset 1 start with byte 2p + 1.
      constexpr int kSub[4] = {1, 0, 3, 2};
      return 4 * p + kSub[v];
    }
    // lookup_bytes: lane p of vector v (v & 1: upper 8 bytes of each 16-byte half) is code byte
    // 16 * (p / 8) + p % 8 + 8 * (v & 1); v < 2: its low nibble (odd element), else its high.
    const int byte = 16 * (p / 8) + p % 8 + 8 * (v & 1);
    return 2 * byte + (v < 2 ? 1 : 0);
  }

  static std::size_t q_offset(std::int64_t cols) {
    return (static_cast<std::size_t>(cols) * 4 + 63) / 64 * 64;
  }
  static std::size_t d_offset(std::int64_t cols) {
    return q_offset(cols) + static_cast<std::size_t>(cols) * 2;
  }
  /// The d of each block is stored kLanesF times (one float vector), so that the kernel loads
  /// it as a vector: from a scalar the compiler folds d * absmax into a scalar product and a
  /// register broadcast, which takes a shuffle slot.
  static constexpr int kLanesF = Tag::bytes / 4;
  static std::size_t act_bytes(std::int64_t cols) {
    return d_offset(cols) + static_cast<std::size_t>((cols / 64 + kG - 1) / kG) * kLanesF * 4;
  }
  struct Order {
    std::uint8_t e[64];  ///< e[16 * v + p] = elem(v, p)
  };
  static constexpr Order make_order() {
    Order o{};
    for (int v = 0; v < 4; ++v)
      for (int p = 0; p < 16; ++p) o.e[16 * v + p] = static_cast<std::uint8_t>(elem(v, p));
    return o;
  }
  static constexpr Order kOrder = make_order();

  static void relayout(const void* src, std::int64_t cols, void* dst) {
    constexpr int L = VF<Tag>::size;
    const auto* x = static_cast<const float*>(src);
    auto* o = static_cast<std::uint8_t*>(dst);
    std::memcpy(o, x, static_cast<std::size_t>(cols) * 4);
    auto* q = reinterpret_cast<std::int16_t*>(o + q_offset(cols));
    auto* d = reinterpret_cast<float*>(o + d_offset(cols));
    const std::int64_t nb = cols / 64;
    for (std::int64_t g = 0; g < nb; g += kG, d += kLanesF) {
      const std::int64_t gn = std::min<std::int64_t>(kG, nb - g);
      const float* xg = x + 64 * g;
      VF<Tag> m(0.0f);
      auto finite = m == m;
      for (std::int64_t i = 0; i < 64 * gn; i += L) {
        const VF<Tag> a = xsimd::abs(VF<Tag>::load_unaligned(xg + i));
        m = xsimd::max(m, a);
        finite = finite & (a <= VF<Tag>(std::numeric_limits<float>::max()));  // false for NaN
      }
      alignas(64) float ml[L];
      m.store_aligned(ml);
      float amax = 0.0f;
      for (int i = 0; i < L; ++i) amax = std::max(amax, ml[i]);
      if (!xsimd::all(finite) || amax == 0.0f) {
        std::fill(d, d + kLanesF, amax == 0.0f ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        std::memset(q, 0, static_cast<std::size_t>(64 * gn) * sizeof(std::int16_t));
        q += 64 * gn;
        continue;
      }
      std::fill(d, d + kLanesF, amax / kActMax);
      // |x * id| <= 32767 up to rounding, which nearbyint keeps at 32767. Below 2^-100 the
      // reciprocal could overflow: scale x by 2^100 first (exact).
      const float pre = amax < 0x1p-100f ? 0x1p100f : 1.0f;
      const VF<Tag> id(kActMax / (amax * pre));
      for (std::int64_t b = 0; b < gn; ++b, q += 64) {
        const float* xb = xg + 64 * b;
        alignas(64) std::int32_t t[64];
        for (int i = 0; i < 64; i += L) {
          const VF<Tag> v = VF<Tag>::load_unaligned(xb + i) * VF<Tag>(pre);
          xsimd::nearbyint_as_int(v * id).store_aligned(t + i);
        }
        for (int i = 0; i < 64; ++i) q[i] = static_cast<std::int16_t>(t[kOrder.e[i]]);
      }
    }
  }

  /// The 4 vectors of int16 code-book entries of one block's 32 code bytes at c.
  static NIBBLE_K_INLINE void lookup(const Table16I16<Tag>& t, const std::uint8_t* c,
                                     VI16<Tag> w[4]) {
    if constexpr (kWords) {
      const VU16<Tag> a = loadu<std::uint16_t, Tag>(c);
      const VU16<Tag> b = as<std::uint16_t>(load_first<Tag>(c + 1, 31));
      w[0] = t.lookup(a);
      w[1] = t.lookup(a >> 4);
      w[2] = t.lookup(b);
      w[3] = t.lookup(b >> 4);
    } else {
      VU8<Tag> lo, hi;
      split_nibbles<Tag>(loadu<std::uint8_t, Tag>(c), lo, hi);
      t.lookup_bytes(lo, w[0], w[1]);
      t.lookup_bytes(hi, w[2], w[3]);
    }
  }

  /// The int32 sums of one block's 64 products (8 lanes, each a sum of 8 products; run converts
  /// them to float): the 4 lookup vectors of the block's codes against the block's 4 activation
  /// vectors. Nf4IntGemvZ has a 64-byte form with the same sums.
  struct BlockDot {
    Table16I16<Tag> tab{Book::kTable.v};
    using X = std::array<VI16<Tag>, 4>;
    static NIBBLE_K_INLINE X load_x(const std::int16_t* xq) {
      return {VI16<Tag>::load_unaligned(xq), VI16<Tag>::load_unaligned(xq + 16),
              VI16<Tag>::load_unaligned(xq + 32), VI16<Tag>::load_unaligned(xq + 48)};
    }
    NIBBLE_K_INLINE VI32<Tag> operator()(const std::uint8_t* codes, const X& x) const {
      VI16<Tag> w[4];
      lookup(tab, codes, w);
      VI32<Tag> s = madd_i16<Tag>(w[0], x[0]);
      for (int v = 1; v < 4; ++v) s = madd_acc_i16<Tag>(s, w[v], x[v]);
      return s;
    }
  };

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t ldy,
                  std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    run_rows<BlockDot, R>(W, wrb, A, arb, nb, cols, Y, ldy, far);
  }

  /// The GEMV of R rows with D's block sums (BlockDot, or Nf4IntGemvZ's 64-byte form of it).
  template <class D, int R>
  static void run_rows(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                       std::int64_t nb, std::int64_t cols, float* Y, std::int64_t,
                       std::size_t far) {
    const D dot;
    const auto* xq = reinterpret_cast<const std::int16_t*>(A + q_offset(cols));
    const auto* dq = reinterpret_cast<const float*>(A + d_offset(cols));
    // Accumulators indexed by constants only (static_for), so that they stay in registers.
    VF<Tag> acc[R];
    static_for<R>([&](auto rc) { acc[decltype(rc)::value] = VF<Tag>(0.0f); });
    for (std::int64_t g = 0; g < nb; g += kG, dq += kLanesF) {
      const std::int64_t ge = std::min<std::int64_t>(g + kG, nb);
      VF<Tag> ag[R];  // this group's sum of absmax * (int16 dot)
      static_for<R>([&](auto rc) { ag[decltype(rc)::value] = VF<Tag>(0.0f); });
      for (std::int64_t b = g; b < ge; ++b, xq += 64) {
        const typename D::X x = D::load_x(xq);
        const std::uint8_t* blk0 = W + static_cast<std::size_t>(b) * kNf4Bytes;
        static_for<R>([&](auto rc) {
          constexpr int r = decltype(rc)::value;
          const std::uint8_t* blk = blk0 + r * wrb;
          // The next group's rows into L2 while this group computes (gemv_groups); every block:
          // every other block (a row then advances 72 bytes, more than a line) measured 14 GB/s
          // against 20 cold, and an L1 prefetch of this row gained nothing.
          prefetch_far(blk, far);
          ag[r] = fmadd<Tag>(xsimd::to_float(dot(blk + 4, x)), VF<Tag>(ld_f32(blk)), ag[r]);
        });
      }
      const VF<Tag> dg = VF<Tag>::load_unaligned(dq);  // d, repeated (a vector load)
      static_for<R>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        acc[r] = fmadd<Tag>(ag[r], dg, acc[r]);
      });
    }
    static_for<R>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      Y[r] = xsimd::hadd(acc[r]) / Book::kScale;
    });
  }
};

/// Nf4IntGemv on 64-byte registers, for the AVX-512 tags on Intel's cores
/// (detail::intel_streaming_tuning). There vpermw looks up 32 entries of a 512-bit register at the
/// rate it looks up 16 of a 256-bit one (one per cycle, port 5; measured on this Sapphire
/// Rapids-class VM, which also issues pshufb / punpck on 256 bits twice per cycle and on 512 bits
/// once), and the four 256-bit vpermw per block were the body's bottleneck: NF4 read 8-10 GB/s
/// from L2, below the ~12 GB/s of DRAM. A block's 32 code bytes are broadcast to both halves of
/// one register; shifting its 16-bit lanes by 0 | 4 and 8 | 12 bits indexes the two vpermw that
/// give Nf4IntGemv's lookup vectors 0 | 1 and 2 | 3, which meet the same activations (the same
/// relayout, read as two 64-byte vectors). The two halves of the int32 sums are added before the
/// conversion to float: the sums are the integers of the 256-bit body and every float operation
/// after them is the same, so the results are bit-identical to Nf4IntGemv<Ymm<Tag>>'s. (On Zen 4
/// the 256-bit body had measured faster than this one; AMD's cores take Nf4IntGemvPair.)
template <class Tag, bool Fp4>
struct Nf4IntGemvZ {
  static_assert(Tag::bytes == 64, "the dot is laid out for 64-byte vectors");
  using G = Nf4IntGemv<Ymm<Tag>, Fp4>;  ///< the loop, the activations' layout, the results
  static constexpr int kR = G::kR;

  /// G::BlockDot's sums from 64-byte registers: lookup vectors 0 | 1 and 2 | 3 of the codes
  /// broadcast to both halves, against activation vectors 0 | 1 and 2 | 3.
  struct BlockDot {
    Table16I16<Tag> tab{G::Book::kTable.v};
    using X = std::array<VI16<Tag>, 2>;
    static NIBBLE_K_INLINE X load_x(const std::int16_t* xq) {
      return {VI16<Tag>::load_unaligned(xq), VI16<Tag>::load_unaligned(xq + 32)};
    }
    NIBBLE_K_INLINE VI32<Ymm<Tag>> operator()(const std::uint8_t* codes, const X& x) const {
      const VU16<Tag> c = as<std::uint16_t>(load_twice<Tag>(codes));
      const VI16<Tag> w01 = tab.lookup(shr_halves<Tag>(c, 0, 4));
      const VI16<Tag> w23 = tab.lookup(shr_halves<Tag>(c, 8, 12));
      return add_halves_i32<Tag>(madd_acc_i16<Tag>(madd_i16<Tag>(w01, x[0]), w23, x[1]));
    }
  };

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t ldy,
                  std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    G::template run_rows<BlockDot, R>(W, wrb, A, arb, nb, cols, Y, ldy, far);
  }
};

/// Nf4IntGemv with two rows per 64-byte register, for the AVX-512 tags on AMD's cores (Intel's
/// take Nf4IntGemvZ). The lower half of a register holds a block's 32 code bytes of one row, the
/// upper half those of the next row (load_halves), so that every lookup, shift, int16 dot and
/// float step serves two rows: per block and row pair 3 shifts (the 16-bit lanes by 4, 8 and 12
/// bits give the other three nibbles of each lane: vpermw reads the low 5 bits of an index and
/// the 32-entry table holds the book twice), 4 vpermw, 4 int16 dots, one conversion and one fma
/// with the two rows' absmax (set_halves), against the Ymm body's 2 shifts, 4 vpermw, 4 dots,
/// 3 additions, a conversion and an fma per row. The activations are those of Nf4IntGemv<Ymm>
/// (the same relayout), broadcast to both halves. The integer sums of each half are the Ymm
/// body's, and every float operation on a half is the one that body does on its row, so the
/// results are bit-identical to Nf4IntGemv<Ymm<Tag>>'s.
///
/// Measured on Zen 5 against Nf4IntGemv<Ymm<Tag>> (1 thread, pinned to one core): the table's gemm
/// on 64 L2-resident rows of 4096 columns with the activation relayout done once (a /tmp
/// harness) 31.5-32.5 -> 40-41 GB/s of weights; nibble-bench, 3 alternated rounds, medians of the
/// per-round ratios: nf4 cold 4096 x 4096 1.39, 11008 x 4096 1.41, 4096 x 11008 1.47, 14336 x
/// 4096 1.49, warm L2 / L3 1.29 / 1.27; fp4 1.26-1.70. Not measured on Zen 4, whose 512-bit
/// operations take two passes: there the instruction count, halved, meets twice the cost.
template <class Tag, bool Fp4>
struct Nf4IntGemvPair {
  static_assert(Tag::bytes == 64, "two 32-byte rows per register");
  using G = Nf4IntGemv<Ymm<Tag>, Fp4>;  ///< the activations' layout, the book, the results
  static constexpr int kR = G::kR;
  static constexpr int kG = G::kG;

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t nb, std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kP = (R + 1) / 2;  // register rows (an odd R repeats its last row)
    const Table16I16<Tag> tab(G::Book::kTable.v);
    const auto* xq = reinterpret_cast<const std::int16_t*>(A + G::q_offset(cols));
    const auto* dq = reinterpret_cast<const float*>(A + G::d_offset(cols));
    VF<Tag> acc[kP];
    static_for<kP>([&](auto pc) { acc[decltype(pc)::value] = VF<Tag>(0.0f); });
    for (std::int64_t g = 0; g < nb; g += kG, dq += G::kLanesF) {
      const std::int64_t ge = std::min<std::int64_t>(g + kG, nb);
      VF<Tag> ag[kP];  // this group's sums of absmax * (int16 dot), two rows per register
      static_for<kP>([&](auto pc) { ag[decltype(pc)::value] = VF<Tag>(0.0f); });
      for (std::int64_t b = g; b < ge; ++b, xq += 64) {
        VI16<Tag> x[4];
        for (int v = 0; v < 4; ++v) x[v] = as<std::int16_t>(load_twice<Tag>(xq + 16 * v));
        const std::uint8_t* blk0 = W + static_cast<std::size_t>(b) * kNf4Bytes;
        static_for<kP>([&](auto pc) {
          constexpr int p = decltype(pc)::value;
          const std::uint8_t* lo = blk0 + 2 * p * wrb;
          const std::uint8_t* hi = 2 * p + 1 < R ? lo + wrb : lo;
          prefetch_far(lo, far);  // as Nf4IntGemv: every block of every row
          if (2 * p + 1 < R) prefetch_far(hi, far);
          const VU16<Tag> c = as<std::uint16_t>(load_halves<Tag>(lo + 4, hi + 4));
          // G::elem order: the low and high nibbles of bytes 2i (elements 4i + 1, 4i) and
          // 2i + 1 (4i + 3, 4i + 2) of each 16-bit lane i.
          VI32<Tag> s = madd_i16<Tag>(tab.lookup(c), x[0]);
          s = madd_acc_i16<Tag>(s, tab.lookup(c >> 4), x[1]);
          s = madd_acc_i16<Tag>(s, tab.lookup(c >> 8), x[2]);
          s = madd_acc_i16<Tag>(s, tab.lookup(c >> 12), x[3]);
          ag[p] = fmadd<Tag>(xsimd::to_float(s), set_halves<Tag>(ld_f32(lo), ld_f32(hi)), ag[p]);
        });
      }
      const VF<Tag> dg = as<float>(load_twice<Tag>(dq));  // d, repeated
      static_for<kP>([&](auto pc) {
        constexpr int p = decltype(pc)::value;
        acc[p] = fmadd<Tag>(ag[p], dg, acc[p]);
      });
    }
    for (int p = 0; p < kP; ++p) {
      alignas(64) float o[VF<Tag>::size];
      acc[p].store_aligned(o);
      for (int h = 0; h < 2 && 2 * p + h < R; ++h) {
        Y[2 * p + h] =
            xsimd::hadd(VF<Ymm<Tag>>::load_aligned(o + h * VF<Tag>::size / 2)) / G::Book::kScale;
      }
    }
  }
};

/// x86 NF4 / FP4 products: the integer GEMV for n == 1, the float GEMM (which reads the plain
/// fp32 rows in front of the re-laid-out activations) for n > 1. The exact path
/// (FormatKernels::gemm_exact, Context::exact_nf4) is Nf4FloatGemv with its own re-layout.
template <class Tag, bool Fp4>
struct Nf4X86 {
  using G = Nf4IntGemv<Ymm<Tag>, Fp4>;
  static void gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                   std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                   std::int64_t ldy) {
    if (n != 1) {
      return float_gemm<Tag, Nf4Src<Tag, Fp4>, Nf4TileShape<Tag>>(W, wrb, r0, r1, cols, A, arb, n,
                                                                  Y, ldy);
    }
    if constexpr (Tag::bytes == 64) {
      if (detail::intel_streaming_tuning()) {  // Intel's cores
        using GZ = Nf4IntGemvZ<Tag, Fp4>;
        return gemv_groups<GZ, GZ::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                                       static_cast<const std::uint8_t*>(A), arb, cols / 64, cols);
      }
      using GP = Nf4IntGemvPair<Tag, Fp4>;  // AMD's
      return gemv_groups<GP, GP::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                                     static_cast<const std::uint8_t*>(A), arb, cols / 64, cols);
    }
    gemv_groups<G, G::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                          static_cast<const std::uint8_t*>(A), arb, cols / 64, cols);
  }
};

#endif

template <class Tag, bool Fp4>
void register_4bit(KernelTable& t) {
  FormatKernels& k = entry(t, Fp4 ? Format::fp4 : Format::nf4);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &nf4_dequant_scalar<Fp4>;
    k.gemm = &float_gemm_scalar<Nf4Value<Fp4>>;
  } else {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.dequant = &nf4_dequant_simd<Tag, Fp4>;
#endif
#if defined(NIBBLE_K_X86)
    k.gemm = &Nf4X86<Tag, Fp4>::gemm;
    k.act_bytes = &Nf4X86<Tag, Fp4>::G::act_bytes;
    k.act_relayout = &Nf4X86<Tag, Fp4>::G::relayout;
    k.gemm_exact = &Nf4FloatGemv<Tag, Fp4>::gemm;
    k.act_bytes_exact = &Nf4FloatGemv<Tag, Fp4>::act_bytes;
    k.act_relayout_exact = &Nf4FloatGemv<Tag, Fp4>::relayout;
#elif defined(NIBBLE_K_NEON)
    k.gemm = &Nf4FloatGemv<Tag, Fp4>::gemm;
    k.act_bytes = &Nf4FloatGemv<Tag, Fp4>::act_bytes;
    k.act_relayout = &Nf4FloatGemv<Tag, Fp4>::relayout;
#endif
  }
}

template <class Tag>
void register_nf4(KernelTable& t) {
  register_4bit<Tag, false>(t);
  register_4bit<Tag, true>(t);
}

}  // namespace
}  // namespace nibble::kernels
