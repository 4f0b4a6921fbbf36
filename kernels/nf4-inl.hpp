// nibble: NF4 / FP4 kernels (BlockNF4: fp32 absmax + 32 bytes, 64 values, element 2i in the
// high nibble of byte i). Weight value = codebook[code] * absmax, exactly the reference
// dequantization; the GEMM is the float-activation GEMM of f32-inl.hpp with a decoder that
// looks the 16-entry code book up in registers (vpermps on AVX-512, two vpermps + blend on
// AVX2, tbl on NEON) and multiplies by the block's absmax.
#pragma once

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

template <class FV, bool Fp4>
struct Nf4Src : Nf4Value<Fp4> {
  static constexpr int kStep = 32;  // half a block: 16 bytes of codes
  static constexpr int kVec = 2 * FV::kPer16;
  static std::size_t bytes(std::int64_t k) {
    return static_cast<std::size_t>(k / 64) * kNf4Bytes + static_cast<std::size_t>(k % 64) / 2;
  }
  static void decode(const std::uint8_t* row, std::int64_t k, typename FV::V out[]) {
    // The code book stays in registers when the compiler hoists it out of the k loop (it is
    // a constant); otherwise it is one to four L1 loads.
    const typename FV::Book book = FV::book(nf4_book<Fp4>());
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 64) * kNf4Bytes;
    const typename FV::V amax = FV::set1(ld_f32(blk));
    FV::lookup32(book, blk + 4 + (k % 64) / 2, out);
    for (int v = 0; v < kVec; ++v) out[v] = FV::mul(out[v], amax);
  }
};

/// Register tiles for the 4-bit formats (each decoded step holds kVec vectors per row).
template <class Tag>
struct Nf4TileShape {
  static constexpr bool wide = TagInfo<Tag>::wide;
  static constexpr int R = wide ? 4 : 2;
  static constexpr int C = wide ? 4 : (TagInfo<Tag>::family == Family::neon ? 4 : 2);
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

template <class Tag, bool Fp4>
void nf4_dequant_simd(const void* src, std::int64_t n, float* dst) {
  using FV = typename FloatVec<Tag>::type;
  using S = Nf4Src<FV, Fp4>;
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t b = 0; b < n / 64; ++b, p += kNf4Bytes) {
    for (int k = 0; k < 64; k += S::kStep) {
      typename FV::V v[S::kVec];
      S::decode(p, k, v);
      std::memcpy(dst + b * 64 + k, v, sizeof v);
    }
  }
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// NF4 / FP4 GEMV body, written once over the ISA tag. The code bytes are loaded as they are
/// stored, a register of 32-bit lanes at a time (AVX-512: one block of each of two rows, AVX2:
/// one block, NEON: half a block); the 8 nibbles of every lane are consumed by 8 right shifts,
/// each indexing the code book held in registers (Book16 uses the low 4 bits of each lane), so
/// that there is no unpacking. Products with the activations are accumulated in fp32 per block
/// and scaled once by the block's absmax. The activations are re-laid out once per call into the
/// order of the shifts (act_relayout: the plain row, then the prepared row; the GEMM for n > 1
/// reads the plain part).
template <class Tag, bool Fp4>
struct Nf4Gemv {
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
      return float_gemm<Tag, Nf4Src<typename FloatVec<Tag>::type, Fp4>, Nf4TileShape<Tag>>(
          W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
    }
    gemv_groups<Nf4Gemv, kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
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
        if (r < R && (b & 1) == 0) {
          prefetch_l1(blk[r] + kPrefetch);
          if (far) prefetch_l2(blk[r] + far);
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

template <class Tag, bool Fp4>
void register_4bit(KernelTable& t) {
  FormatKernels& k = entry(t, Fp4 ? Format::fp4 : Format::nf4);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &nf4_dequant_scalar<Fp4>;
    k.gemm = &float_gemm_scalar<Nf4Value<Fp4>>;
  } else {
    k.dequant = &nf4_dequant_simd<Tag, Fp4>;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.gemm = &Nf4Gemv<Tag, Fp4>::gemm;
    k.act_bytes = &Nf4Gemv<Tag, Fp4>::act_bytes;
    k.act_relayout = &Nf4Gemv<Tag, Fp4>::relayout;
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
