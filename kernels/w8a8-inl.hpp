// nibble: W8A8 (SmoothQuant) kernels: int8 weights (one fp32 scale per output row) times int8
// activations (one fp32 scale per activation row), exact int32 sums, fp32 output.
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp).
//
// Bit-identical results on every ISA: the integer dot product of a weight row and an activation
// row is exact on every path (whatever the lane grouping), and every path then produces the
// output with the same scalar operations, w8a8_out(): Y = (float(sum) * w_scale) * a_scale.
//
// Value ranges the kernels rely on: W any int8, A in [-127, 127] (nibble's quantizers never
// produce -128), cols <= 131072 so that |sum| <= 128 * 127 * cols fits in int32.
// Integer products per ISA:
//  - scalar: plain int32 loop.
//  - AVX2 / AVX-512 without VNNI: sign trick, maddubs(|w|, a * sign(w)) + madd(., 1) (the int16
//    pair sums stay below 2 * 128 * 127 < 32767, no saturation).
//  - AVX-512 VNNI: vpdpbusd on (w + 128) as unsigned bytes times a, minus 128 * sum(a) per
//    activation row (computed once per call; the lanes wrap modulo 2^32, the final value is exact).
//  - NEON: sdot with dotprod; otherwise smull + smlal2 (int16, < 2 * 128 * 127) + sadalp.
// Tails (cols not a multiple of the vector width): AVX-512 masked loads, others a scalar loop.
#pragma once

#include <cstdint>
#include <type_traits>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

/// One output value: the float operation order shared by every ISA.
inline float w8a8_out(std::int32_t sum, float w_scale, float a_scale) {
  return (static_cast<float>(sum) * w_scale) * a_scale;
}

/// sum_{k in [k0, cols)} w[k] * a[k] (exact in int32 within the documented ranges).
inline std::int32_t w8a8_dot_scalar(const std::int8_t* w, const std::int8_t* a, std::int64_t k0,
                                    std::int64_t cols) {
  std::int32_t s = 0;
  for (std::int64_t k = k0; k < cols; ++k)
    s += static_cast<std::int32_t>(w[k]) * static_cast<std::int32_t>(a[k]);
  return s;
}

inline void w8a8_gemm_scalar(const std::int8_t* W, const float* w_scale, std::int64_t r0,
                             std::int64_t r1, std::int64_t cols, const std::int8_t* A,
                             const float* a_scale, std::int64_t n, float* Y, std::int64_t ldy) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int8_t* w = W + r * cols;
    for (std::int64_t j = 0; j < n; ++j) {
      Y[j * ldy + r] = w8a8_out(w8a8_dot_scalar(w, A + j * cols, 0, cols), w_scale[r], a_scale[j]);
    }
  }
}

/// Register tile R weight rows x C activation rows over the whole row length, on the vector
/// operations `Ops` (below). `corr` (C entries or null): subtracted from each sum (the VNNI
/// offset). Writes Y[c * ldy + r] for r < R, c < C. GEMV (C == 1) prefetches each row a little
/// ahead into L1 and, when `far` is non-zero, the same bytes `far` further on (the next row group,
/// see gemv_groups) into L2: once per 64 bytes of a row, so that every line gets a prefetch.
template <class Ops>
struct W8A8Tile {
  template <int R, int C>
  static void run(const std::int8_t* W, const std::int8_t* A, std::int64_t cols,
                  const std::int32_t* corr, const float* ws, const float* as, float* Y,
                  std::int64_t ldy, std::size_t far) {
    constexpr std::int64_t kPrefetch = 512;
    typename Ops::Acc acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = Ops::zero();
    std::int64_t k = 0;
    for (; k + Ops::kStep <= cols; k += Ops::kStep) {
      if constexpr (C == 1) {
        if (k % 64 == 0) {
          for (int r = 0; r < R; ++r) {
            prefetch_l1(W + r * cols + k + kPrefetch);
            if (far) prefetch_l2(W + r * cols + k + far);
          }
        }
      }
      typename Ops::WV w[R];
      for (int r = 0; r < R; ++r) w[r] = Ops::load_w(W + r * cols + k);
      for (int c = 0; c < C; ++c) {
        const typename Ops::AV a = Ops::load_a(A + c * cols + k);
        for (int r = 0; r < R; ++r) acc[r][c] = Ops::madd(acc[r][c], w[r], a);
      }
    }
    if constexpr (Ops::kMaskedTail) {
      if (k < cols) {
        const std::int64_t len = cols - k;
        typename Ops::WV w[R];
        for (int r = 0; r < R; ++r) w[r] = Ops::load_w_part(W + r * cols + k, len);
        for (int c = 0; c < C; ++c) {
          const typename Ops::AV a = Ops::load_a_part(A + c * cols + k, len);
          for (int r = 0; r < R; ++r) acc[r][c] = Ops::madd(acc[r][c], w[r], a);
        }
        k = cols;
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        std::uint32_t s = Ops::hsum(acc[r][c]);  // modulo 2^32
        if (k < cols)
          s += static_cast<std::uint32_t>(w8a8_dot_scalar(W + r * cols, A + c * cols, k, cols));
        if (corr != nullptr) s -= static_cast<std::uint32_t>(corr[c]);
        Y[c * ldy + r] = w8a8_out(static_cast<std::int32_t>(s), ws[r], as[c]);
      }
    }
  }
};

// ---- x86 ----
#if defined(NIBBLE_K_X86)
/// AVX2, 32 bytes per step, sign trick.
struct W8A8Ymm {
  static constexpr int kStep = 32;
  static constexpr bool kMaskedTail = false;
  static constexpr bool kOffset = false;
  using Acc = __m256i;
  using AV = __m256i;
  struct WV {
    __m256i w, u;  // raw weights and |w| (as unsigned bytes)
  };
  static Acc zero() { return _mm256_setzero_si256(); }
  static WV load_w(const std::int8_t* p) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {w, _mm256_sign_epi8(w, w)};
  }
  static AV load_a(const std::int8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static Acc madd(Acc acc, const WV& w, AV a) {
    const __m256i p = _mm256_maddubs_epi16(w.u, _mm256_sign_epi8(a, w.w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
  static std::uint32_t hsum(Acc v) {
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    alignas(16) std::uint32_t t[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), s);
    return (t[0] + t[1]) + (t[2] + t[3]);
  }
};

#if defined(NIBBLE_K_AVX512)
/// AVX-512, 64 bytes per step; masked loads for the tail. Vnni: vpdpbusd on w ^ 0x80 (needs the
/// per-activation-row offset 128 * sum(a), see w8a8_offset); else the sign trick.
template <bool Vnni>
struct W8A8Zmm {
  static constexpr int kStep = 64;
  static constexpr bool kMaskedTail = true;
  static constexpr bool kOffset = Vnni;
  using Acc = __m512i;
  using AV = __m512i;
  struct WV {
    __m512i u;      // Vnni: w + 128; else |w|
    __mmask64 neg;  // sign bits of w (non-VNNI)
  };
  static Acc zero() { return _mm512_setzero_si512(); }
  static __mmask64 mask(std::int64_t len) {
    return len >= 64 ? ~__mmask64{0} : ((__mmask64{1} << len) - 1);
  }
  static WV make_w(__m512i w) {
    if constexpr (Vnni) {
      return {_mm512_xor_si512(w, _mm512_set1_epi8(static_cast<char>(0x80))), 0};
    } else {
      return {_mm512_abs_epi8(w), _mm512_movepi8_mask(w)};
    }
  }
  static WV load_w(const std::int8_t* p) { return make_w(_mm512_loadu_si512(p)); }
  static WV load_w_part(const std::int8_t* p, std::int64_t len) {
    return make_w(_mm512_maskz_loadu_epi8(mask(len), p));
  }
  static AV load_a(const std::int8_t* p) { return _mm512_loadu_si512(p); }
  static AV load_a_part(const std::int8_t* p, std::int64_t len) {
    return _mm512_maskz_loadu_epi8(mask(len), p);
  }
  static Acc madd(Acc acc, const WV& w, AV a) {
#if defined(NIBBLE_K_AVX512VNNI)
    if constexpr (Vnni) {
#if defined(__GNUC__)
      // In-place accumulate: with the intrinsic GCC copies every accumulator of a 4 x 4 tile
      // around each vpdpbusd and spills some (about 1.2-1.5x slower GEMM).
      __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w.u), "v"(a));
      return acc;
#else
      return _mm512_dpbusd_epi32(acc, w.u, a);
#endif
    }
#endif
    const __m512i sa = _mm512_mask_sub_epi8(a, w.neg, _mm512_setzero_si512(), a);
    const __m512i p = _mm512_maddubs_epi16(w.u, sa);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
  }
  static std::uint32_t hsum(Acc v) {
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return W8A8Ymm::hsum(h);
  }
  /// 128 * sum(a[0..cols)) (exact: |.| <= 128 * 127 * cols < 2^31).
  static std::int32_t offset(const std::int8_t* a, std::int64_t cols) {
#if defined(NIBBLE_K_AVX512VNNI)
    if constexpr (Vnni) {
      const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
      __m512i acc = _mm512_setzero_si512();
      std::int64_t k = 0;
      for (; k + 64 <= cols; k += 64)
        acc = _mm512_dpbusd_epi32(acc, k80, _mm512_loadu_si512(a + k));
      if (k < cols)
        acc = _mm512_dpbusd_epi32(acc, k80, _mm512_maskz_loadu_epi8(mask(cols - k), a + k));
      return static_cast<std::int32_t>(hsum(acc));
    }
#endif
    (void)a;
    (void)cols;
    return 0;
  }
};
#endif
#endif  // NIBBLE_K_X86

// ---- NEON ----
#if defined(NIBBLE_K_NEON)
/// NEON, 16 bytes per step: sdot (Dot) or smull + smlal2 + sadalp.
template <bool Dot>
struct W8A8Neon {
  static constexpr int kStep = 16;
  static constexpr bool kMaskedTail = false;
  static constexpr bool kOffset = false;
  using Acc = int32x4_t;
  using AV = int8x16_t;
  using WV = int8x16_t;
  static Acc zero() { return vdupq_n_s32(0); }
  static WV load_w(const std::int8_t* p) { return vld1q_s8(p); }
  static AV load_a(const std::int8_t* p) { return vld1q_s8(p); }
  static Acc madd(Acc acc, WV w, AV a) {
#if defined(NIBBLE_K_NEONDOT)
    if constexpr (Dot) return vdotq_s32(acc, w, a);
#endif
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(a));
    p = vmlal_high_s8(p, w, a);
    return vpadalq_s16(acc, p);
  }
  static std::uint32_t hsum(Acc v) {
    return vaddvq_u32(vreinterpretq_u32_s32(v));
  }
};
#endif  // NIBBLE_K_NEON

/// Vector operations and tile shapes per tag: GEMM tile R x C, GEMV tile R1 x 1.
template <class Tag, Family F = TagInfo<Tag>::family>
struct W8A8Tiles;
#if defined(NIBBLE_K_X86)
template <class Tag>
struct W8A8Tiles<Tag, Family::x86> {
#if defined(NIBBLE_K_AVX512)
  using Ops = std::conditional_t<TagInfo<Tag>::wide, W8A8Zmm<TagInfo<Tag>::vnni>, W8A8Ymm>;
#else
  using Ops = W8A8Ymm;
#endif
  static constexpr int R = TagInfo<Tag>::wide ? 4 : 2;
  static constexpr int C = 4;
  static constexpr int R1 = 4;
};
#endif
#if defined(NIBBLE_K_NEON)
template <class Tag>
struct W8A8Tiles<Tag, Family::neon> {
  using Ops = W8A8Neon<TagInfo<Tag>::dot>;
  static constexpr int R = 4, C = 4, R1 = 4;
};
#endif

template <class Tag>
void w8a8_gemm_simd(const std::int8_t* W, const float* w_scale, std::int64_t r0, std::int64_t r1,
                    std::int64_t cols, const std::int8_t* A, const float* a_scale, std::int64_t n,
                    float* Y, std::int64_t ldy) {
  using T = W8A8Tiles<Tag>;
  using Ops = typename T::Ops;
  using K = W8A8Tile<Ops>;
  // Activation rows in blocks of kCB (the VNNI offsets of one block live on the stack; no heap
  // containers in ISA TUs).
  constexpr std::int64_t kCB = 64;
  std::int32_t corr[kCB];
  for (std::int64_t cb = 0; cb < n; cb += kCB) {
    const std::int64_t nb = n - cb < kCB ? n - cb : kCB;
    const std::int8_t* Ab = A + cb * cols;
    const std::int32_t* cp = nullptr;
    if constexpr (Ops::kOffset) {
      for (std::int64_t j = 0; j < nb; ++j) corr[j] = Ops::offset(Ab + j * cols, cols);
      cp = corr;
    }
    walk_tiles<T::R, T::C, T::R1>(r0, r1, nb, [&](std::int64_t r, std::int64_t c, int rr, int cc) {
      const std::int8_t* wr = W + r * cols;
      const std::int8_t* ac = Ab + c * cols;
      const std::int32_t* co = cp != nullptr ? cp + c : nullptr;
      float* y = Y + (cb + c) * ldy + r;
      if (nb == 1) {
        // The next group's rows (R1 further on) into L2 while this one computes; 0 for the last.
        const std::size_t far =
            r + 2 * T::R1 <= r1 ? static_cast<std::size_t>(T::R1 * cols) : std::size_t{0};
        tile_dispatch<K, T::R1, 1>(rr, cc, wr, ac, cols, co, w_scale + r, a_scale + cb + c, y, ldy,
                                   far);
      } else {
        tile_dispatch<K, T::R, T::C>(rr, cc, wr, ac, cols, co, w_scale + r, a_scale + cb + c, y,
                                     ldy, std::size_t{0});
      }
    });
  }
}

template <class Tag>
void register_w8a8(KernelTable& t) {
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) t.w8a8_gemm = &w8a8_gemm_scalar;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (fam != Family::scalar) t.w8a8_gemm = &w8a8_gemm_simd<Tag>;
#endif
}

}  // namespace
}  // namespace nibble::kernels
