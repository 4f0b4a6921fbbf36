// nibble: Q6_K kernels (dequant, gemm against Q8_K activations), templated on an ISA tag from
// arch.hpp. Shared pieces (scalar reference dot, tile engine) are in detail/kquant-inl.hpp.
// Included only by the per-ISA TUs in src/isa/, inside an anonymous namespace (see arch.hpp).
#pragma once

#include "nibble/kernels/arch.hpp"
#include "nibble/kernels/detail/kquant-inl.hpp"
#include "nibble/kernels/detail/q6-inl.hpp"
#include "nibble/kernels/table.hpp"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*().
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nibble::kernels {
namespace {
namespace kq {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)

#if defined(__AVX512VNNI__)
/// Q6_K GEMM (n > 1) policy of gemm_rows16 (see Q45Rows16): zmm 4 * sb + k of a repacked block
/// holds, in lane i, the unsigned levels (0..63) of values 16 * sb + 4k .. 4k + 3 of row i;
/// zmm 64 + sb the float d * scales[sb] per row. The -32 offset starts each sub-block's int32
/// sums at -32 * bsums[sb] (the per-column extras).
struct Q6Rows16 {
  static constexpr int kZ = 80;
  static constexpr int kC = 8;
  static constexpr int kMinN = 12;  ///< fewest columns this engine is used for (break-even)
  static constexpr int kExtra = 16;

  static inline void extra(const BlockQ8_K& a, float* e) {
    for (int sb = 0; sb < 16; ++sb) {
      const std::int32_t v = -32 * a.bsums[sb];
      std::memcpy(e + sb, &v, 4);
    }
  }

  static inline void repack_block(const std::uint8_t* w, std::size_t wrb, int nr, std::int64_t b,
                                  __m512i* dst) {
    const BlockQ6_K* x[16];
    for (int i = 0; i < 16; ++i)
      x[i] = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(i < nr ? i : nr - 1) *
                                                        wrb) +
             b;
    __m512i l0[16], l1[16], qh[16];
    for (int i = 0; i < 16; ++i) {
      l0[i] = _mm512_loadu_si512(x[i]->ql);
      l1[i] = _mm512_loadu_si512(x[i]->ql + 64);
      qh[i] = _mm512_loadu_si512(x[i]->qh);
    }
    transpose16(l0);
    transpose16(l1);
    transpose16(qh);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    // values 128h + 4u .. +3: low bits in ql dword 16h + u % 16 (high nibble if u >= 16), high
    // bits in qh dword 8h + u % 8 at bit 2 * (u / 8); sub-block 8h + u / 4, step u % 4.
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < 32; ++u) {
        const __m512i L = h ? l1[u % 16] : l0[u % 16];
        const __m512i lo =
            u < 16 ? _mm512_and_si512(L, m4) : _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
        const __m512i H = qh[8 * h + u % 8];
        __m512i hi;
        switch (u / 8) {
          case 0:
            hi = _mm512_slli_epi16(H, 4);
            break;
          case 1:
            hi = _mm512_slli_epi16(H, 2);
            break;
          case 2:
            hi = H;
            break;
          default:
            hi = _mm512_srli_epi16(H, 2);
            break;
        }
        _mm512_store_si512(dst + 32 * h + u, _mm512_or_si512(lo, _mm512_and_si512(hi, m30)));
      }
    // scales of the 16 rows transposed (h[q] lane i = scales[4q .. 4q + 3] of row i), d as
    // 16 fp16
    __m512i h[16];
    alignas(32) std::uint16_t dh[16];
    for (int i = 0; i < 16; ++i) {
      h[i] =
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i]->scales)));
      std::memcpy(&dh[i], &x[i]->d, 2);
    }
    transpose16(h);
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    for (int sb = 0; sb < 16; ++sb) {
      const __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(h[sb / 4], 24 - 8 * (sb % 4)), 24);
      _mm512_store_ps(reinterpret_cast<float*>(dst + 64 + sb),
                      _mm512_mul_ps(d, _mm512_cvtepi32_ps(v)));
    }
  }

  template <int C>
  static inline void cols(const __m512i* tile, std::int64_t nb, const BlockQ8_K* const* a,
                          const float* const* ex, float* y, std::int64_t ldy, __mmask16 mask) {
    __m512 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      const __m512i* t = tile + b * kZ;
      __m512 blk[C];
#pragma GCC unroll 16
      for (int sb = 0; sb < 16; ++sb) {
        __m512i s[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          std::int32_t e;
          std::memcpy(&e, ex[c] + b * 16 + sb, 4);
          s[c] = _mm512_set1_epi32(e);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m512i wv = _mm512_load_si512(t + 4 * sb + k);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            std::int32_t av;
            std::memcpy(&av, a[c][b].qs + 16 * sb + 4 * k, 4);
            s[c] = _mm512_dpbusd_epi32(s[c], wv, _mm512_set1_epi32(av));
          }
        }
        const __m512 fs = _mm512_load_ps(reinterpret_cast<const float*>(t + 64 + sb));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m512 f = _mm512_cvtepi32_ps(s[c]);
          blk[c] = sb == 0 ? _mm512_mul_ps(f, fs) : _mm512_fmadd_ps(f, fs, blk[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        acc[c] = _mm512_fmadd_ps(blk[c], _mm512_set1_ps(a[c][b].d), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + c * ldy, mask, acc[c]);
  }
};
#endif  // VNNI

/// Q6_K policy of the tile engine. X_c (c = 0..3) = levels of values 64c .. 64c+63 in order;
/// the 4 level vectors are the in-lane 4x4 dword transpose of X_0..X_3, so int32 lane
/// L = 4i + c (i = L / 4) holds sub-block 4c + i. The unsigned levels (0..63) are used and the
/// -32 offset enters as extra = -32 * bsums[sub-block] (the initial int32 lane sums).
struct Q6Fmt512 {
  static constexpr bool kHasMin = false;
#if defined(__AVX512VNNI__)
  static constexpr bool kHasRows16 = true;
  using Rows16 = Q6Rows16;
#else
  static constexpr bool kHasRows16 = false;
#endif
  static constexpr std::size_t kBlockBytes = sizeof(BlockQ6_K);

  static inline int lane_sub_block(int L) {
    return 4 * (L % 4) + L / 4;
  }

  static inline void unpack(const std::uint8_t* blk, __m512i& v0, __m512i& v1, __m512i& v2,
                            __m512i& v3, __m512& fs, __m512& fm) {
    const BlockQ6_K* x = reinterpret_cast<const BlockQ6_K*>(blk);
    const __m512i z0 = _mm512_loadu_si512(x->ql);
    const __m512i z1 = _mm512_loadu_si512(x->ql + 64);
    const __m512i h0 =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qh)));
    const __m512i h1 =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qh + 32)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    // Lower 256 bits: values with qh bits 0-1 (resp. 4-5); upper: bits 2-3 (resp. 6-7).
    const __m512i cl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i cr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i x0 =
        _mm512_or_si512(_mm512_and_si512(z0, m4), _mm512_and_si512(_mm512_sllv_epi16(h0, cl), m30));
    const __m512i x1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z0, 4), m4),
                                       _mm512_and_si512(_mm512_srlv_epi16(h0, cr), m30));
    const __m512i x2 =
        _mm512_or_si512(_mm512_and_si512(z1, m4), _mm512_and_si512(_mm512_sllv_epi16(h1, cl), m30));
    const __m512i x3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z1, 4), m4),
                                       _mm512_and_si512(_mm512_srlv_epi16(h1, cr), m30));
    const __m512i t0 = _mm512_unpacklo_epi32(x0, x1);
    const __m512i t1 = _mm512_unpackhi_epi32(x0, x1);
    const __m512i t2 = _mm512_unpacklo_epi32(x2, x3);
    const __m512i t3 = _mm512_unpackhi_epi32(x2, x3);
    v0 = _mm512_unpacklo_epi64(t0, t2);
    v1 = _mm512_unpackhi_epi64(t0, t2);
    v2 = _mm512_unpacklo_epi64(t1, t3);
    v3 = _mm512_unpackhi_epi64(t1, t3);
    const __m128i idx = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m128i sc =
        _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales)), idx);
    fs = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)),
                       _mm512_set1_ps(_cvtsh_ss(x->d)));
    fm = _mm512_setzero_ps();
  }

  static inline void prep(const BlockQ8_K& a, PrepBlock& p) {
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < 4; ++c)
          std::memcpy(p.qs + 64 * t + 16 * i + 4 * c, a.qs + 64 * c + 16 * i + 4 * t, 4);
    for (int L = 0; L < 16; ++L) p.extra[L] = -32 * a.bsums[lane_sub_block(L)];
    p.da = a.d;
  }
};

#endif  // AVX-512

}  // namespace kq

/// Fills t.fmt[q6_K]: dequant (bit-identical on every ISA), GEMV and the integer GEMM engine.
template <class Tag>
void register_q6_k(KernelTable& t) {
  FormatKernels& k = t.fmt[static_cast<int>(Format::q6_K)];
  k.dequant = &kq::dequant_q6_K;
  k.gemm = &kq::gemm_by_dot<BlockQ6_K, &kq::dot_q6_scalar>;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (Tag::isa != Isa::scalar) {
    using K = Q6Simd<Tag>;
    k.dequant = &K::dequant;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
#if defined(NIBBLE_K_AVX512)
    // AVX-512 prefill stays on the 16-row VNNI engine of this file and the unpacked-tile engine
    // of kquant-inl.hpp: side by side with the rows engine, measured 1.0-1.3x faster at n = 8..64.
    if constexpr (Tag::bytes == 64) {
      k.gemm = &K::template gemm<&kq::gemm512<kq::Q6Fmt512, Tag::vnni>>;
    } else {
      k.gemm = &K::template gemm<&RowsGemm<Tag, Q6Rows>::gemm>;
    }
#else
    k.gemm = &K::template gemm<&RowsGemm<Tag, Q6Rows>::gemm>;
#endif
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
