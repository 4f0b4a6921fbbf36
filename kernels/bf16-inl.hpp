// nibble: bf16 kernels (bfloat16 weights, fp32 activations): dequant, a GEMV body written once over
// the ISA tag (as f32-inl.hpp's FloatGemv: kR rows share each activation load, kU accumulators per
// row, the next row group prefetched into L2) and the float-activation GEMM tile of f32-inl.hpp
// for n > 1. bf16 -> fp32 is exact (the 16 bits shifted into the upper half, load_bf16), so the
// dequantizer is bit-identical to the reference on every ISA.
#pragma once

#include <cstdint>
#include <cstring>

#include "nibble/kernels/f32-inl.hpp"

namespace nibble::kernels {
namespace {

/// One bf16 weight as float (a private copy of nibble::bf16_to_fp32 for kernel code).
inline float bf16_value(const std::uint8_t* p) {
  const std::uint32_t bits = static_cast<std::uint32_t>(ld_u16(p)) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Bf16Value {
  static float value(const std::uint8_t* row, std::int64_t k) { return bf16_value(row + 2 * k); }
};

inline void bf16_dequant_scalar(const void* src, std::int64_t n, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src);
  for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_value(p + 2 * i);
}

#if defined(NIBBLE_K_X86) || defined(NIBBLE_K_NEON)

/// FloatTile source (GEMM, n > 1): one register of weights per step.
template <class Tag, class FV>
struct Bf16Src : Bf16Value {
  static constexpr int kStep = FV::L;
  static constexpr int kVec = 1;
  static std::size_t bytes(std::int64_t k) { return static_cast<std::size_t>(k) * 2; }
  static void decode(const std::uint8_t* row, std::int64_t k, typename FV::V out[1]) {
    out[0] = load_bf16<Tag>(row + 2 * k);
  }
};

template <class Tag>
struct Bf16Gemv {
  static constexpr int kL = Tag::bytes / 4;  ///< floats per register
  static constexpr int kU = 2;               ///< registers per row and step
  static constexpr int kR = 4;               ///< rows per group

  template <int R, int C>
  static void run(const std::uint8_t* W, std::size_t wrb, const std::uint8_t* A, std::size_t,
                  std::int64_t cols, float* Y, std::int64_t, std::size_t far = 0) {
    static_assert(C == 1, "GEMV body");
    constexpr int kStep = kL * kU;
    constexpr std::size_t kPrefetch = 768;
    const float* x = reinterpret_cast<const float*>(A);
    VF<Tag> acc[R][kU];
    static_for<R>([&](auto rc) {
      for (int u = 0; u < kU; ++u) acc[decltype(rc)::value][u] = VF<Tag>(0.0f);
    });
    const std::int64_t kv = cols / kStep * kStep;
    for (std::int64_t k = 0; k < kv; k += kStep) {
      const std::size_t off = static_cast<std::size_t>(k) * 2;
      if (off % 64 < static_cast<std::size_t>(kStep * 2)) {  // once per cache line
        // A plain loop (a static_for lambda holding only prefetches is deleted by GCC 12).
        for (int r = 0; r < R; ++r) {
          for (int o = 0; o < (kStep * 2 + 63) / 64; ++o) {
            prefetch_l1(W + r * wrb + off + kPrefetch + 64 * o);
            if (far) prefetch_l2(W + r * wrb + off + far + 64 * o);
          }
        }
      }
      static_for<kU>([&](auto uc) {
        constexpr int u = decltype(uc)::value;
        const VF<Tag> xv = VF<Tag>::load_unaligned(x + k + u * kL);
        static_for<R>([&](auto rc) {
          constexpr int r = decltype(rc)::value;
          const VF<Tag> w = load_bf16<Tag>(W + r * wrb + off + 2 * u * kL);
          acc[r][u] = fmadd<Tag>(w, xv, acc[r][u]);
        });
      });
    }
    static_for<R>([&](auto rc) {
      constexpr int r = decltype(rc)::value;
      VF<Tag> t = acc[r][0];
      for (int u = 1; u < kU; ++u) t = t + acc[r][u];
      float s = xsimd::hadd(t);
      for (std::int64_t k = kv; k < cols; ++k) s += bf16_value(W + r * wrb + 2 * k) * x[k];
      Y[r] = s;
    });
  }

  static void dequant(const void* src, std::int64_t n, float* dst) {
    const auto* p = static_cast<const std::uint8_t*>(src);
    std::int64_t i = 0;
    for (; i + kL <= n; i += kL) load_bf16<Tag>(p + 2 * i).store_unaligned(dst + i);
    for (; i < n; ++i) dst[i] = bf16_value(p + 2 * i);
  }
};

template <class Tag>
void bf16_gemm(const void* W, std::size_t wrb, std::int64_t r0, std::int64_t r1, std::int64_t cols,
               const void* A, std::size_t arb, std::int64_t n, float* Y, std::int64_t ldy) {
  using FV = typename FloatVec<Tag>::type;
  if (n != 1) return float_gemm<Tag, Bf16Src<Tag, FV>>(W, wrb, r0, r1, cols, A, arb, n, Y, ldy);
  gemv_groups<Bf16Gemv<Tag>, Bf16Gemv<Tag>::kR>(static_cast<const std::uint8_t*>(W), wrb, r0, r1, Y,
                                                static_cast<const std::uint8_t*>(A), arb, cols);
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
    k.dequant = &Bf16Gemv<Tag>::dequant;
    k.gemm = &bf16_gemm<Tag>;
  }
#endif
}

}  // namespace
}  // namespace nibble::kernels
