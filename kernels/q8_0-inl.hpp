// nibble: Q8_0 kernels (34-byte blocks: fp16 d + 32 int8). Activations are Q8_0 blocks
// (quantize_act_q8_0). Every ISA computes an output in the same operation order, that of
// ggml's AVX2 vec_dot_q8_0_q8_0 (and nibble::ref::dot_q8_0_q8_0):
//   for each block b in order, d = float(w.d) * float(a.d); 8 int32 lanes, lane i = the sum of
//   the products of bytes 4i..4i+3 (exact); acc[i] = fma(d, float(lane i), acc[i]);
//   result = ((acc0+acc4)+(acc2+acc6)) + ((acc1+acc5)+(acc3+acc7)).
// So scalar, AVX2, AVX-512, AVX-512 VNNI, NEON and NEON dotprod give bit-identical GEMV
// results (the integer lanes are exact, the float steps are the same IEEE operations); so do
// their GEMMs (n > 1), except AVX-512, whose GEMM tile holds two blocks per register (see
// Q8_0TileZmm) and may differ in the last bits.
// Integer products: AVX2 / AVX-512 maddubs + madd with the sign trick; VNNI vpdpbusd on
// (w + 128) accumulated onto -128 * sum(a); NEON sdot, or smull + sadalp without dotprod.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/intrin-common.hpp"
#include "nibble/kernels/detail/intrin-neon.hpp"
#include "nibble/kernels/detail/intrin-x86.hpp"
#include "nibble/kernels/table.hpp"

namespace nibble::kernels {
namespace {

constexpr std::size_t kQ8_0Blk = 34;

// ---- scalar ----
inline void q8_0_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 32; ++b, p += kQ8_0Blk, dst += 32) {
    const float d = half_to_float(ld_u16(p));
    for (int j = 0; j < 32; ++j)
      dst[j] = static_cast<float>(static_cast<std::int8_t>(p[2 + j])) * d;
  }
}

inline float q8_0_dot_scalar(const std::uint8_t* w, const std::uint8_t* a, std::int64_t nb) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t b = 0; b < nb; ++b, w += kQ8_0Blk, a += kQ8_0Blk) {
    const float d = half_to_float(ld_u16(w)) * half_to_float(ld_u16(a));
    const auto* wq = reinterpret_cast<const std::int8_t*>(w + 2);
    const auto* aq = reinterpret_cast<const std::int8_t*>(a + 2);
    for (int i = 0; i < 8; ++i) {
      int s = 0;
      for (int t = 4 * i; t < 4 * i + 4; ++t) s += int(wq[t]) * int(aq[t]);
      acc[i] = std::fma(d, static_cast<float>(s), acc[i]);
    }
  }
  return hsum8_ordered(acc);
}

inline void q8_0_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                             std::int64_t cols, const void* A, std::size_t arb, std::int64_t n,
                             float* Y, std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* a = static_cast<const std::uint8_t*>(A);
  for (std::int64_t r = r0; r < r1; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      Y[j * ldy + r] = q8_0_dot_scalar(w + static_cast<std::size_t>(r) * wrb,
                                       a + static_cast<std::size_t>(j) * arb, cols / 32);
    }
  }
}

// ---- x86 ----
#if defined(NIBBLE_K_X86)
template <bool Vnni>
struct Q8_0TileX86 {
  using I = X86I8<Vnni>;
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, float* Y, std::int64_t ldy) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::size_t off = static_cast<std::size_t>(b) * kQ8_0Blk;
      typename I::W w[R];
      __m256 dw[R];
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* p = W + r * wrb + off;
        if constexpr (C == 1) _mm_prefetch(reinterpret_cast<const char*>(p) + 1024, _MM_HINT_T0);
        // Broadcast the fp16 scale and convert all lanes at once (exact).
        dw[r] = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(ld_u16(p))));
        w[r] = I::prep_w(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
      }
      for (int c = 0; c < C; ++c) {
        const std::uint8_t* p = A + c * arb + off;
        const __m256 da = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(ld_u16(p))));
        const typename I::A a =
            I::prep_a(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
        for (int r = 0; r < R; ++r) {
          const __m256 s = _mm256_cvtepi32_ps(I::dot(w[r], a));
          acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), s, acc[r][c]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        alignas(32) float t[8];
        _mm256_store_ps(t, acc[r][c]);
        Y[c * ldy + r] = hsum8_ordered(t);
      }
    }
  }
};

#if defined(NIBBLE_K_AVX512)
/// AVX-512 GEMM tile (n > 1): two blocks per 512-bit register (lanes 0-7: block b, 8-15:
/// block b + 1), so the float scaling costs half as many instructions. The two halves are
/// added before ggml's 8-lane sum, so this order differs from the GEMV path in the last bits
/// (the integer block sums are the same exact values).
template <bool Vnni>
struct Q8_0TileZmm {
  static __m512i load2(const std::uint8_t* p) {  // quants of blocks at p and p + 34
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 + kQ8_0Blk));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  static __m512i load1(const std::uint8_t* p) {  // one block, upper half zero
    return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
  }
  static __m512 scales(std::uint16_t h0, std::uint16_t h1) {  // [h0 x 8, h1 x 8] as fp32
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(static_cast<short>(h1)),
                                            _mm_set1_epi16(static_cast<short>(h0))));
  }
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, float* Y, std::int64_t ldy) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i ones16 = _mm512_set1_epi16(1);
    for (std::int64_t b = 0; b < nb; b += 2) {
      const bool pair = b + 1 < nb;
      const std::size_t off = static_cast<std::size_t>(b) * kQ8_0Blk;
      __m512i wu[R];
      __mmask64 wneg[R];
      __m512 dw[R];
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* p = W + r * wrb + off;
        const __m512i w = pair ? load2(p) : load1(p);
        dw[r] = scales(ld_u16(p), pair ? ld_u16(p + kQ8_0Blk) : std::uint16_t{0});
        if constexpr (Vnni) {
          wu[r] = _mm512_xor_si512(w, k80);
          wneg[r] = 0;
        } else {
          wu[r] = _mm512_abs_epi8(w);
          wneg[r] = _mm512_movepi8_mask(w);
        }
      }
      for (int c = 0; c < C; ++c) {
        const std::uint8_t* p = A + c * arb + off;
        const __m512i a = pair ? load2(p) : load1(p);
        const __m512 da = scales(ld_u16(p), pair ? ld_u16(p + kQ8_0Blk) : std::uint16_t{0});
        __m512i base = _mm512_setzero_si512();
#if defined(NIBBLE_K_AVX512VNNI)
        if constexpr (Vnni) base = _mm512_sub_epi32(base, _mm512_dpbusd_epi32(base, k80, a));
#endif
        for (int r = 0; r < R; ++r) {
          __m512i s;
#if defined(NIBBLE_K_AVX512VNNI)
          if constexpr (Vnni) {
            s = _mm512_dpbusd_epi32(base, wu[r], a);
          } else
#endif
          {
            const __m512i sa = _mm512_mask_sub_epi8(a, wneg[r], _mm512_setzero_si512(), a);
            s = _mm512_madd_epi16(_mm512_maddubs_epi16(wu[r], sa), ones16);
          }
          acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], da), _mm512_cvtepi32_ps(s), acc[r][c]);
        }
        (void)base;
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        const __m256 lo = _mm512_castps512_ps256(acc[r][c]);
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][c]), 1));
        alignas(32) float t[8];
        _mm256_store_ps(t, _mm256_add_ps(lo, hi));
        Y[c * ldy + r] = hsum8_ordered(t);
      }
    }
  }
};
#endif

inline void q8_0_dequant_x86(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 32; ++b, p += kQ8_0Blk, dst += 32) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(ld_u16(p)));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 2 + 8 * k));
      _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}
#endif

// ---- NEON ----
#if defined(NIBBLE_K_NEON)
template <bool Dot>
struct Q8_0TileNeon {
  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t arb,
                  std::int64_t nb, float* Y, std::int64_t ldy) {
    float32x4_t acc[R][C][2];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::size_t off = static_cast<std::size_t>(b) * kQ8_0Blk;
      int8x16_t w[R][2];
      float dw[R];
      for (int r = 0; r < R; ++r) {
        const std::uint8_t* p = W + r * wrb + off;
        dw[r] = half_to_float(ld_u16(p));
        w[r][0] = vld1q_s8(reinterpret_cast<const std::int8_t*>(p + 2));
        w[r][1] = vld1q_s8(reinterpret_cast<const std::int8_t*>(p + 18));
      }
      for (int c = 0; c < C; ++c) {
        const std::uint8_t* p = A + c * arb + off;
        const float da = half_to_float(ld_u16(p));
        const int8x16_t a0 = vld1q_s8(reinterpret_cast<const std::int8_t*>(p + 2));
        const int8x16_t a1 = vld1q_s8(reinterpret_cast<const std::int8_t*>(p + 18));
        for (int r = 0; r < R; ++r) {
          const float32x4_t d = vdupq_n_f32(dw[r] * da);
          const int32x4_t z = vdupq_n_s32(0);
          const float32x4_t s0 = vcvtq_f32_s32(neon_dot16<Dot>(z, w[r][0], a0));
          const float32x4_t s1 = vcvtq_f32_s32(neon_dot16<Dot>(z, w[r][1], a1));
          acc[r][c][0] = vfmaq_f32(acc[r][c][0], d, s0);
          acc[r][c][1] = vfmaq_f32(acc[r][c][1], d, s1);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        float t[8];
        vst1q_f32(t, acc[r][c][0]);
        vst1q_f32(t + 4, acc[r][c][1]);
        Y[c * ldy + r] = hsum8_ordered(t);
      }
    }
  }
};

inline void q8_0_dequant_neon(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 32; ++b, p += kQ8_0Blk, dst += 32) {
    const float32x4_t d = vdupq_n_f32(half_to_float(ld_u16(p)));
    for (int k = 0; k < 2; ++k) {
      const int8x16_t q = vld1q_s8(reinterpret_cast<const std::int8_t*>(p + 2 + 16 * k));
      const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
      vst1q_f32(dst + 16 * k, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
      vst1q_f32(dst + 16 * k + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
      vst1q_f32(dst + 16 * k + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
      vst1q_f32(dst + 16 * k + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
    }
  }
}
#endif

/// Tile kernel and shapes per tag (GEMM R x C, GEMV R1).
template <class Tag, Family F = TagInfo<Tag>::family>
struct Q8_0Tiles;
#if defined(NIBBLE_K_X86)
template <class Tag>
struct Q8_0Tiles<Tag, Family::x86> {
  using K1 = Q8_0TileX86<TagInfo<Tag>::vnni>;  // GEMV: the reference operation order
#if defined(NIBBLE_K_AVX512)
  using K = std::conditional_t<TagInfo<Tag>::wide, Q8_0TileZmm<TagInfo<Tag>::vnni>, K1>;
#else
  using K = K1;
#endif
  static constexpr int R = TagInfo<Tag>::wide ? 4 : 2;
  static constexpr int C = TagInfo<Tag>::wide ? 4 : 3;
  static constexpr int R1 = 4;
};
#endif
#if defined(NIBBLE_K_NEON)
template <class Tag>
struct Q8_0Tiles<Tag, Family::neon> {
  using K = Q8_0TileNeon<TagInfo<Tag>::dot>;
  using K1 = K;
  static constexpr int R = 2, C = 4, R1 = 4;
};
#endif

template <class Tag>
void q8_0_gemm_simd(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                    std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                    std::int64_t ldy) {
  using T = Q8_0Tiles<Tag>;
  using K = typename T::K;
  using K1 = typename T::K1;
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* a = static_cast<const std::uint8_t*>(A);
  const std::int64_t nb = cols / 32;
  walk_tiles<T::R, T::C, T::R1>(r0, r1, n, [&](std::int64_t r, std::int64_t c, int rr, int cc) {
    const std::uint8_t* wr = w + static_cast<std::size_t>(r) * wrb;
    const std::uint8_t* ac = a + static_cast<std::size_t>(c) * arb;
    float* y = Y + c * ldy + r;
    if (n == 1) {
      tile_dispatch<K1, T::R1, 1>(rr, cc, wr, wrb, ac, arb, nb, y, ldy);
    } else {
      tile_dispatch<K, T::R, T::C>(rr, cc, wr, wrb, ac, arb, nb, y, ldy);
    }
  });
}

template <class Tag>
void register_q8_0(KernelTable& t) {
  FormatKernels& k = entry(t, Format::q8_0);
  constexpr Family fam = TagInfo<Tag>::family;
  if constexpr (fam == Family::scalar) {
    k.dequant = &q8_0_dequant_scalar;
    k.gemm = &q8_0_gemm_scalar;
  }
#if defined(NIBBLE_K_X86)
  if constexpr (fam == Family::x86) {
    k.dequant = &q8_0_dequant_x86;
    k.gemm = &q8_0_gemm_simd<Tag>;
  }
#endif
#if defined(NIBBLE_K_NEON)
  if constexpr (fam == Family::neon) {
    k.dequant = &q8_0_dequant_neon;
    k.gemm = &q8_0_gemm_simd<Tag>;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
