// nibble: kernel registration of the ggml formats of issue 10: the legacy 32-value block formats
// Q4_0, Q4_1, Q5_0, Q5_1, the non-linear IQ4_NL / IQ4_XS, MXFP4, the low-bit K-quants Q2_K /
// Q3_K (integer kernels against Q8_0 / Q8_1 / Q8_K activations, as ggml: detail/legacy-q-inl.hpp,
// detail/kq23-inl.hpp, detail/iq4-inl.hpp), bf16 (a float path, bf16-inl.hpp) and Q8_1 as a
// weight format (ggml has no Q8_1 weights: its blocks are decoded with the reference dequantizer,
// 32 values at a time, into the fp32 FMA tile of f32-inl.hpp). Every SIMD dequantizer is
// bit-identical to the scalar reference codec (the scalar tables use the codec itself).
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/formats/bf16.hpp"
#include "nibble/formats/iq4_nl.hpp"
#include "nibble/formats/mxfp4.hpp"
#include "nibble/formats/q2_k.hpp"
#include "nibble/formats/q3_k.hpp"
#include "nibble/formats/q4_0.hpp"
#include "nibble/formats/q4_1.hpp"
#include "nibble/formats/q5_0.hpp"
#include "nibble/formats/q5_1.hpp"
#include "nibble/formats/q8_1.hpp"
#include "nibble/kernels/bf16-inl.hpp"
#include "nibble/kernels/detail/iq4-inl.hpp"
#include "nibble/kernels/detail/kq23-inl.hpp"
#include "nibble/kernels/detail/legacy-q-inl.hpp"
#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

/// Decoder of one format: decode32(row, k, out) writes weights k .. k+31 (k a multiple of 32)
/// of a row as fp32, bit-identical to the format's reference dequantizer.
template <Format F>
struct LegacyCodec;

#define NIBBLE_LEGACY_CODEC(FMT, BLOCK, DEQ)                                        \
  template <>                                                                       \
  struct LegacyCodec<Format::FMT> {                                                 \
    static void decode32(const std::uint8_t* row, std::int64_t k, float* out) {     \
      BLOCK b;                                                                      \
      std::memcpy(&b, row + static_cast<std::size_t>(k / 32) * sizeof b, sizeof b); \
      ref::DEQ(&b, out, 32);                                                        \
    }                                                                               \
  };
NIBBLE_LEGACY_CODEC(q4_0, BlockQ4_0, dequantize_q4_0)
NIBBLE_LEGACY_CODEC(q4_1, BlockQ4_1, dequantize_q4_1)
NIBBLE_LEGACY_CODEC(q5_0, BlockQ5_0, dequantize_q5_0)
NIBBLE_LEGACY_CODEC(q5_1, BlockQ5_1, dequantize_q5_1)
NIBBLE_LEGACY_CODEC(q8_1, BlockQ8_1, dequantize_q8_1)
NIBBLE_LEGACY_CODEC(iq4_nl, BlockIQ4_NL, dequantize_iq4_nl)
NIBBLE_LEGACY_CODEC(mxfp4, BlockMXFP4, dequantize_mxfp4)
#undef NIBBLE_LEGACY_CODEC

template <>
struct LegacyCodec<Format::iq4_xs> {
  // One 32-value sub-block of a 256-value block, in dequantize_iq4_xs's float order.
  static void decode32(const std::uint8_t* row, std::int64_t k, float* out) {
    const std::uint8_t* blk = row + static_cast<std::size_t>(k / 256) * sizeof(BlockIQ4_XS);
    const int ib = static_cast<int>((k % 256) / 32);
    fp16_t d;
    std::uint16_t sh;
    std::memcpy(&d, blk, 2);
    std::memcpy(&sh, blk + 2, 2);
    const std::uint8_t sl = blk[4 + ib / 2];
    const std::uint8_t* qs = blk + 8 + 16 * ib;
    const int ls = ((sl >> (4 * (ib % 2))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4);
    const float dl = fp16_to_fp32(d) * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      out[j] = dl * static_cast<float>(ref::iq4::kValues[qs[j] & 0xf]);
      out[j + 16] = dl * static_cast<float>(ref::iq4::kValues[qs[j] >> 4]);
    }
  }
};

template <>
struct LegacyCodec<Format::q2_K> {
  // 32 values of a 256-value block, in dequantize_q2_K's float order.
  static void decode32(const std::uint8_t* row, std::int64_t k, float* out) {
    BlockQ2_K b;
    std::memcpy(&b, row + static_cast<std::size_t>(k / 256) * sizeof b, sizeof b);
    const int v0 = static_cast<int>(k % 256);
    const float d = fp16_to_fp32(b.d), mn = fp16_to_fp32(b.dmin);
    for (int t = 0; t < 32; ++t) {
      const int v = v0 + t;
      const std::uint8_t sc = b.scales[v / 16];
      const float dl = d * static_cast<float>(sc & 0xF);
      const float ml = mn * static_cast<float>(sc >> 4);
      out[t] = dl * static_cast<float>(ref::kq_low::level_2bit(b.qs, v)) - ml;
    }
  }
};

template <>
struct LegacyCodec<Format::q3_K> {
  static void decode32(const std::uint8_t* row, std::int64_t k, float* out) {
    BlockQ3_K b;
    std::memcpy(&b, row + static_cast<std::size_t>(k / 256) * sizeof b, sizeof b);
    const int v0 = static_cast<int>(k % 256);
    const float d_all = fp16_to_fp32(b.d);
    for (int t = 0; t < 32; ++t) {
      const int v = v0 + t;
      const float dl = d_all * static_cast<float>(ref::q3k::scale6(b.scales, v / 16) - 32);
      const int hi = (b.hmask[v % 32] >> (v / 32)) & 1;
      out[t] = dl * static_cast<float>(ref::kq_low::level_2bit(b.qs, v) - (hi ? 0 : 4));
    }
  }
};

/// One weight as float (FloatTile's tail interface; rows of these formats are whole blocks).
template <Format F>
float legacy_value(const std::uint8_t* row, std::int64_t k) {
  float buf[32];
  LegacyCodec<F>::decode32(row, k / 32 * 32, buf);
  return buf[k % 32];
}

/// Bytes of the first k values of a row (k a multiple of the block size).
template <Format F>
constexpr std::size_t legacy_bytes(std::int64_t k) {
  return static_cast<std::size_t>(k / traits(F).block_elems) * traits(F).block_bytes;
}

/// FloatTile source: 32 values (one block) per step.
template <class Tag, Format F>
struct LegacySrc {
  static constexpr int kStep = 32;
  static constexpr int kL = Tag::bytes / 4;
  static constexpr int kVec = 32 / kL;
  static std::size_t bytes(std::int64_t k) { return legacy_bytes<F>(k); }
  static void decode(const std::uint8_t* row, std::int64_t k, VF<Tag> out[kVec]) {
    alignas(64) float buf[32];
    LegacyCodec<F>::decode32(row, k, buf);
    for (int v = 0; v < kVec; ++v) out[v] = VF<Tag>::load_aligned(buf + v * kL);
  }
  static float value(const std::uint8_t* row, std::int64_t k) { return legacy_value<F>(row, k); }
};

/// Scalar GEMM: per weight row, decode 32 values at a time and accumulate one fp32 sum per
/// activation row (outputs are written at the end of the row).
template <Format F>
void legacy_gemm_scalar(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1,
                        std::int64_t cols, const void* A, std::size_t arb, std::int64_t n, float* Y,
                        std::int64_t ldy) {
  const auto* w = static_cast<const std::uint8_t*>(W);
  const auto* x = static_cast<const float*>(A);
  const std::int64_t xs = static_cast<std::int64_t>(arb / sizeof(float));
  const std::int64_t kv = cols / 32 * 32;
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::uint8_t* row = w + static_cast<std::size_t>(r) * wrb;
    for (std::int64_t j = 0; j < n; ++j) Y[j * ldy + r] = 0.0f;
    for (std::int64_t k = 0; k < kv; k += 32) {
      float buf[32];
      LegacyCodec<F>::decode32(row, k, buf);
      for (std::int64_t j = 0; j < n; ++j) {
        const float* xj = x + j * xs + k;
        float s = 0.0f;
        for (int t = 0; t < 32; ++t) s += buf[t] * xj[t];
        Y[j * ldy + r] += s;
      }
    }
    for (std::int64_t k = kv; k < cols; ++k) {
      const float v = legacy_value<F>(row, k);
      for (std::int64_t j = 0; j < n; ++j) Y[j * ldy + r] += v * x[j * xs + k];
    }
  }
}

/// Row dequantizer of format F (`n` values, whole blocks).
template <Format F>
void legacy_dequant(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  const std::int64_t kv = n / 32 * 32;
  for (std::int64_t k = 0; k < kv; k += 32) LegacyCodec<F>::decode32(p, k, dst + k);
  for (std::int64_t k = kv; k < n; ++k) dst[k] = legacy_value<F>(p, k);
}

template <class Tag, Format F>
void register_legacy_one(KernelTable& t) {
  FormatKernels& k = entry(t, F);
  k.dequant = &legacy_dequant<F>;
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.gemm = &legacy_gemm_scalar<F>;
  } else {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.gemm = &float_gemm<Tag, LegacySrc<Tag, F>>;
#endif
  }
}

/// The integer kernels of a 32-value block format (detail/legacy-q-inl.hpp).
template <class Tag, Format F>
void register_q32(KernelTable& t) {
  FormatKernels& k = entry(t, F);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &legacy_dequant<F>;
    k.gemm = &q32_gemm_scalar<F>;
  }
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (TagInfo<Tag>::family != Family::scalar) {
    using K = Q32Simd<Tag, F>;
    k.dequant = &K::dequant;
    k.gemm = &q32_gemm<Tag, F>;
    k.act_bytes = &K::act_bytes;
    k.act_relayout = &K::relayout;
  }
#endif
}

/// The integer kernels of a Q8_K-activation format (Q2_K, Q3_K: detail/kq23-inl.hpp; IQ4_XS:
/// detail/iq4-inl.hpp): the body K's GEMV, the RowsGemm policy Pol for n > 1.
template <class Tag, Format F, float (*Dot)(const std::uint8_t*, const std::uint8_t*, std::int64_t),
          template <class> class K, class Pol>
void register_kq(KernelTable& t) {
  FormatKernels& k = entry(t, F);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &legacy_dequant<F>;
    k.gemm = &kq_gemm_scalar<Dot>;
  }
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (TagInfo<Tag>::family != Family::scalar) {
    k.dequant = &K<Tag>::dequant;
    k.gemm = &kq_gemm<K<Tag>, &RowsGemm<Tag, Pol>::gemm>;
    k.act_bytes = &K<Tag>::act_bytes;
    k.act_relayout = &K<Tag>::relayout;
  }
#endif
}

#if !defined(NIBBLE_K_X86) && !defined(NIBBLE_K_NEON)
// Placeholders so that register_kq names a body on builds without SIMD tags (never used).
template <class Tag>
struct Q2Simd {};
template <class Tag>
struct Q3Simd {};
template <class Tag>
struct IQ4XSSimd {};
struct Q2Rows {};
struct Q3Rows {};
struct IQ4XSRows {};
#endif

template <class Tag>
void register_legacy(KernelTable& t) {
  register_q32<Tag, Format::q4_0>(t);
  register_q32<Tag, Format::q4_1>(t);
  register_q32<Tag, Format::q5_0>(t);
  register_q32<Tag, Format::q5_1>(t);
  register_legacy_one<Tag, Format::q8_1>(t);
  register_bf16<Tag>(t);
  register_q32<Tag, Format::iq4_nl>(t);
  register_kq<Tag, Format::iq4_xs, &iq4xs_dot_scalar, IQ4XSSimd, IQ4XSRows>(t);
  register_q32<Tag, Format::mxfp4>(t);
  register_kq<Tag, Format::q2_K, &q2k_dot_scalar, Q2Simd, Q2Rows>(t);
  register_kq<Tag, Format::q3_K, &q3k_dot_scalar, Q3Simd, Q3Rows>(t);
}

}  // namespace
}  // namespace nibble::kernels
