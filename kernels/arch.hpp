// nibble: ISA tags the kernel bodies are templated on. Each tag names its xsimd arch (where one
// exists) plus the features xsimd 8.1 has no tag for (VNNI, dotprod). Kernel bodies live in
// *-inl.hpp inside an anonymous namespace, so every per-ISA TU gets its own internal copies and
// no code compiled with -mavx512* can be picked by the linker for another caller (ODR safety).
#pragma once

#include "nibble/core/types.hpp"

#if defined(__x86_64__) || defined(__aarch64__)
#include <xsimd/xsimd.hpp>
#endif

namespace nibble::kernels {

/// Portable C++ (the reference path of every kernel).
struct ScalarTag {
  static constexpr Isa isa = Isa::scalar;
  static constexpr const char* name = "scalar";
};

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2Tag {
  using xarch = xsimd::fma3<xsimd::avx2>;
  static constexpr Isa isa = Isa::avx2;
  static constexpr const char* name = "avx2";
};
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
struct Avx512Tag {
  using xarch = xsimd::avx512bw;
  static constexpr Isa isa = Isa::avx512;
  static constexpr bool vnni = false;
  static constexpr const char* name = "avx512";
};
#if defined(__AVX512VNNI__)
struct Avx512VnniTag {
  using xarch = xsimd::avx512bw;
  static constexpr Isa isa = Isa::avx512;
  static constexpr bool vnni = true;
  static constexpr const char* name = "avx512vnni";
};
#endif
#endif
#if defined(__aarch64__)
struct NeonTag {
  using xarch = xsimd::neon64;
  static constexpr Isa isa = Isa::neon;
  static constexpr bool dotprod = false;
  static constexpr const char* name = "neon";
};
#if defined(__ARM_FEATURE_DOTPROD)
struct NeonDotTag {
  using xarch = xsimd::neon64;
  static constexpr Isa isa = Isa::neon;
  static constexpr bool dotprod = true;
  static constexpr const char* name = "neondot";
};
#endif
#endif

}  // namespace nibble::kernels
