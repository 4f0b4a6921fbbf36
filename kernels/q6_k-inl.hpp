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

#if defined(NIBBLE_K_AVX512)

#if defined(NIBBLE_K_AVX512VNNI)
/// Q6_K GEMM (n > 1) policy of gemm_rows16 (see Q45Rows16): zmm 4 * sb + k of a repacked block
/// holds, in lane i, the unsigned levels (0..63) of values 16 * sb + 4k .. 4k + 3 of row i;
/// zmm 64 + sb the float d * scales[sb] per row. The -32 offset starts each sub-block's int32
/// sums at -32 * bsums[sb] (the per-column extras). T: a VNNI tag.
template <class T>
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
                                  VU8<T>* dst) {
    const BlockQ6_K* x[16];
    for (int i = 0; i < 16; ++i)
      x[i] = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(i < nr ? i : nr - 1) *
                                                        wrb) +
             b;
    VI32<T> l0[16], l1[16], qh[16];
    for (int i = 0; i < 16; ++i) {
      l0[i] = loadu<std::int32_t, T>(x[i]->ql);
      l1[i] = loadu<std::int32_t, T>(x[i]->ql + 64);
      qh[i] = loadu<std::int32_t, T>(x[i]->qh);
    }
    transpose_i32<T>(l0);
    transpose_i32<T>(l1);
    transpose_i32<T>(qh);
    const VU8<T> m4(static_cast<std::uint8_t>(0x0F));
    const VU8<T> m30(static_cast<std::uint8_t>(0x30));
    // values 128h + 4u .. +3: low bits in ql dword 16h + u % 16 (high nibble if u >= 16), high
    // bits in qh dword 8h + u % 8 at bit 2 * (u / 8); sub-block 8h + u / 4, step u % 4.
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < 32; ++u) {
        const VU16<T> L = as<std::uint16_t>(h ? l1[u % 16] : l0[u % 16]);
        const VU8<T> lo = as<std::uint8_t>(u < 16 ? L : L >> 4) & m4;
        const VU16<T> H = as<std::uint16_t>(qh[8 * h + u % 8]);
        VU16<T> hi;
        switch (u / 8) {
          case 0:
            hi = H << 4;
            break;
          case 1:
            hi = H << 2;
            break;
          case 2:
            hi = H;
            break;
          default:
            hi = H >> 2;
            break;
        }
        (lo | (as<std::uint8_t>(hi) & m30))
            .store_aligned(reinterpret_cast<std::uint8_t*>(dst + 32 * h + u));
      }
    // scales of the 16 rows transposed (h[q] lane i = scales[4q .. 4q + 3] of row i), d as
    // 16 fp16
    VI32<T> hs[16];
    alignas(32) std::uint16_t dh[16];
    for (int i = 0; i < 16; ++i) {
      hs[i] = as<std::int32_t>(load_first<T>(x[i]->scales, 16));
      std::memcpy(&dh[i], &x[i]->d, 2);
    }
    transpose_i32<T>(hs);
    const VF<T> d = load_f16<T>(dh);
    for (int sb = 0; sb < 16; ++sb) {
      const VI32<T> v = (hs[sb / 4] << (24 - 8 * (sb % 4))) >> 24;
      (d * xsimd::to_float(v)).store_aligned(reinterpret_cast<float*>(dst + 64 + sb));
    }
  }

  template <int C>
  static inline void cols(const VU8<T>* tile, std::int64_t nb, const BlockQ8_K* const* a,
                          const float* const* ex, float* y, std::int64_t ldy, int nr) {
    VF<T> acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[c] = VF<T>(0.f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const VU8<T>* t = tile + b * kZ;
      VF<T> blk[C];
#pragma GCC unroll 16
      for (int sb = 0; sb < 16; ++sb) {
        VI32<T> s[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          std::int32_t e;
          std::memcpy(&e, ex[c] + b * 16 + sb, 4);
          s[c] = VI32<T>(e);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const VU8<T> wv = t[4 * sb + k];
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c)
            s[c] = dot_u8s8<T>(s[c], wv, bcast4<T>(a[c][b].qs + 16 * sb + 4 * k));
        }
        const VF<T> fs = VF<T>::load_aligned(reinterpret_cast<const float*>(t + 64 + sb));
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const VF<T> f = xsimd::to_float(s[c]);
          blk[c] = sb == 0 ? f * fs : fmadd<T>(f, fs, blk[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[c] = fmadd<T>(blk[c], VF<T>(a[c][b].d), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store_first<T>(y + c * ldy, acc[c], nr);
  }
};
#endif  // VNNI

/// Q6_K policy of the tile engine. X_c (c = 0..3) = levels of values 64c .. 64c+63 in order;
/// the 4 level vectors are the in-lane 4x4 dword transpose of X_0..X_3, so int32 lane
/// L = 4i + c (i = L / 4) holds sub-block 4c + i. The unsigned levels (0..63) are used and the
/// -32 offset enters as extra = -32 * bsums[sub-block] (the initial int32 lane sums).
template <class T>
struct Q6Fmt512 {
  static constexpr bool kHasMin = false;
#if defined(NIBBLE_K_AVX512VNNI)
  static constexpr bool kHasRows16 = T::vnni;
  using Rows16 = Q6Rows16<T>;
#else
  static constexpr bool kHasRows16 = false;
#endif
  static constexpr std::size_t kBlockBytes = sizeof(BlockQ6_K);

  static inline int lane_sub_block(int L) {
    return 4 * (L % 4) + L / 4;
  }

  static NIBBLE_K_INLINE void unpack(const std::uint8_t* blk, Unpacked512<T>& out) {
    const BlockQ6_K* x = reinterpret_cast<const BlockQ6_K*>(blk);
    const VU16<T> z0 = loadu<std::uint16_t, T>(x->ql);
    const VU16<T> z1 = loadu<std::uint16_t, T>(x->ql + 64);
    const VU16<T> h0 = as<std::uint16_t>(load_twice<T>(x->qh));
    const VU16<T> h1 = as<std::uint16_t>(load_twice<T>(x->qh + 32));
    const VU8<T> m4(static_cast<std::uint8_t>(0x0F));
    const VU8<T> m30(static_cast<std::uint8_t>(0x30));
    // Lower 256 bits: values with qh bits 0-1 (resp. 4-5); upper: bits 2-3 (resp. 6-7).
    VI32<T> v[4] = {as<std::int32_t>((as<std::uint8_t>(z0) & m4) |
                                     (as<std::uint8_t>(shl_halves<T>(h0, 4, 2)) & m30)),
                    as<std::int32_t>((as<std::uint8_t>(z0 >> 4) & m4) |
                                     (as<std::uint8_t>(shr_halves<T>(h0, 0, 2)) & m30)),
                    as<std::int32_t>((as<std::uint8_t>(z1) & m4) |
                                     (as<std::uint8_t>(shl_halves<T>(h1, 4, 2)) & m30)),
                    as<std::int32_t>((as<std::uint8_t>(z1 >> 4) & m4) |
                                     (as<std::uint8_t>(shr_halves<T>(h1, 0, 2)) & m30))};
    transpose4_lanes_i32<T>(v);
    for (int t = 0; t < 4; ++t) out.v[t] = as<std::uint8_t>(v[t]);
    alignas(64) static constexpr std::int32_t kIdx[16] = {0, 4, 8,  12, 1, 5, 9,  13,
                                                          2, 6, 10, 14, 3, 7, 11, 15};
    const VI32<T> sc = permute_i32<T>(widen_i8_i32<T>(x->scales), VI32<T>::load_aligned(kIdx));
    out.fs = xsimd::to_float(sc) * VF<T>(::nibble::kernels::h2f<T>(x->d));
    out.fm = VF<T>(0.f);
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
    if constexpr (!K::kPerm) {  // the kPerm GEMV reads the plain Q8_K rows (and their bsums)
      k.act_bytes = &K::act_bytes;
      k.act_relayout = &K::relayout;
    }
#if defined(NIBBLE_K_AVX512)
    // AVX-512 prefill stays on the 16-row VNNI engine of this file and the unpacked-tile engine
    // of kquant-inl.hpp: side by side with the rows engine, measured 1.0-1.3x faster at n = 8..64.
    if constexpr (Tag::bytes == 64) {
      k.gemm = &K::template gemm<&kq::gemm512<kq::Q6Fmt512<Tag>, Tag>>;
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
