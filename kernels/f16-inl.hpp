// nibble: f16 kernels (binary16 weights, fp32 activations): dequant and the float-activation
// GEMM of f32-inl.hpp with an exact fp16 -> fp32 conversion of each weight vector (F16C on x86,
// fcvtl on NEON).
#pragma once

#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

struct F16Value {
  static float value(const std::uint8_t* row, std::int64_t k) {
    return half_to_float(ld_u16(row + 2 * k));
  }
};

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
template <class Tag>
struct F16Src : F16Value {
  static constexpr int kStep = Tag::bytes / 4;
  static constexpr int kVec = 1;
  static std::size_t bytes(std::int64_t k) { return static_cast<std::size_t>(k) * 2; }
  static void decode(const std::uint8_t* row, std::int64_t k, VF<Tag> out[1]) {
    out[0] = load_f16<Tag>(row + 2 * k);
  }
};
#endif

inline void f16_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = half_to_float(ld_u16(p + 2 * i));
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
template <class Tag>
void f16_dequant_simd(const void* src, std::int64_t n, float* dst) {
  constexpr int kL = Tag::bytes / 4;
  const auto* p = static_cast<const std::uint8_t*>(src);
  std::int64_t i = 0;
  for (; i + kL <= n; i += kL) load_f16<Tag>(p + 2 * i).store_unaligned(dst + i);
  for (; i < n; ++i) dst[i] = half_to_float(ld_u16(p + 2 * i));
}
#endif

template <class Tag>
void register_f16(KernelTable& t) {
  FormatKernels& k = entry(t, Format::f16);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &f16_dequant_scalar;
    k.gemm = &float_gemm_scalar<F16Value>;
  } else {
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.dequant = &f16_dequant_simd<Tag>;
    k.gemm = &FloatGemv<Tag, FloatElem::f16>::template gemm<&float_gemm<Tag, F16Src<Tag>>>;
#endif
  }
}

}  // namespace
}  // namespace nibble::kernels
