// nibble: bf16 kernels (bfloat16 weights, fp32 activations): dequant, the GEMV body of the float
// formats (f32-inl.hpp's FloatGemv, with a bf16 load) and the float-activation GEMM tile of
// f32-inl.hpp for n > 1. bf16 -> fp32 is exact (the 16 bits shifted into the upper half,
// load_bf16), so the dequantizer is bit-identical to the reference on every ISA.
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

struct Bf16Value {
  static float value(const std::uint8_t* row, std::int64_t k) { return bf16_value(row + 2 * k); }
};

inline void bf16_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_value(p + 2 * i);
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// FloatTile source (GEMM, n > 1): one register of weights per step.
template <class Tag>
struct Bf16Src : Bf16Value {
  static constexpr int kStep = Tag::bytes / 4;
  static constexpr int kVec = 1;
  static std::size_t bytes(std::int64_t k) { return static_cast<std::size_t>(k) * 2; }
  static void decode(const std::uint8_t* row, std::int64_t k, VF<Tag> out[1]) {
    out[0] = load_bf16<Tag>(row + 2 * k);
  }
};

/// Dequantizer of the SIMD tags.
template <class Tag>
void bf16_dequant_simd(const void* src, std::int64_t n, float* dst) {
  constexpr int kL = Tag::bytes / 4;
  const auto* p = static_cast<const std::uint8_t*>(src);
  std::int64_t i = 0;
  for (; i + kL <= n; i += kL) load_bf16<Tag>(p + 2 * i).store_unaligned(dst + i);
  for (; i < n; ++i) dst[i] = bf16_value(p + 2 * i);
}

template <class Tag>
void bf16_gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1, std::int64_t cols,
               const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  FloatGemv<Tag, FloatElem::bf16>::template gemm<&float_gemm<Tag, Bf16Src<Tag>>>(
      W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
}

#endif

template <class Tag>
void register_bf16(KernelTable& t) {
  FormatKernels& k = entry(t, Format::bf16);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &bf16_dequant_scalar;
    k.gemm = &float_gemm_scalar<Bf16Value>;
  }
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
  if constexpr (TagInfo<Tag>::family != Family::scalar) {
    k.dequant = &bf16_dequant_simd<Tag>;
    k.gemm = &bf16_gemm<Tag>;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
