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

template <class FV>
struct F16Src : F16Value {
  static constexpr int kStep = FV::L;
  static constexpr int kVec = 1;
  static std::size_t bytes(std::int64_t k) { return static_cast<std::size_t>(k) * 2; }
  static void decode(const std::uint8_t* row, std::int64_t k, typename FV::V out[1]) {
    out[0] = FV::load_half(row + 2 * k);
  }
};

inline void f16_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = half_to_float(ld_u16(p + 2 * i));
}

template <class Tag>
void f16_dequant_simd(const void* src, std::int64_t n, float* dst) {
  using FV = typename FloatVec<Tag>::type;
  const auto* p = static_cast<const std::uint8_t*>(src);
  std::int64_t i = 0;
  for (; i + FV::L <= n; i += FV::L) {
    const typename FV::V v = FV::load_half(p + 2 * i);
    std::memcpy(dst + i, &v, sizeof v);
  }
  for (; i < n; ++i) dst[i] = half_to_float(ld_u16(p + 2 * i));
}

template <class Tag>
void register_f16(KernelTable& t) {
  FormatKernels& k = entry(t, Format::f16);
  if constexpr (TagInfo<Tag>::family == Family::scalar) {
    k.dequant = &f16_dequant_scalar;
    k.gemm = &float_gemm_scalar<F16Value>;
  } else {
    k.dequant = &f16_dequant_simd<Tag>;
#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)
    k.gemm = &FloatGemv<Tag, FloatElem::f16>::template gemm<
        &float_gemm<Tag, F16Src<typename FloatVec<Tag>::type>>>;
#endif
  }
}

}  // namespace
}  // namespace nibble::kernels
