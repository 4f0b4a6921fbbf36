// nibble: ISA tags the kernel bodies are templated on. Each SIMD tag names its xsimd arch (the
// `batch` types of the kernel bodies) plus what xsimd 8.1 has no arch for: the int8 dot-product
// instruction (VNNI vpdpbusd, 256-bit AVX-VNNI or 512-bit AVX-512 VNNI; NEON sdot) and the vector
// width. Kernel bodies live in *-inl.hpp inside an anonymous namespace, so every per-ISA TU gets
// its own internal copies and no code compiled with -mavx512* can be picked by the linker for
// another caller (ODR safety).
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
  static constexpr int bytes = 0;  ///< vector register width in bytes (0: no vectors)
  static constexpr bool vnni = false, dotprod = false;
};

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
/// AVX2 + FMA + F16C (Haswell and later, AMD Zen): 32-byte vectors, int8 dots by maddubs + madd.
struct Avx2Tag {
  using xarch = xsimd::fma3<xsimd::avx2>;
  static constexpr Isa isa = Isa::avx2;
  static constexpr const char* name = "avx2";
  static constexpr int bytes = 32;
  static constexpr bool vnni = false, dotprod = false;
};
#if defined(__AVXVNNI__)
/// AVX2 + AVX-VNNI (VEX vpdpbusd): Intel client CPUs since Alder Lake, AMD Zen 4/5.
struct AvxVnniTag {
  using xarch = xsimd::fma3<xsimd::avx2>;
  static constexpr Isa isa = Isa::avxvnni;
  static constexpr const char* name = "avxvnni";
  static constexpr int bytes = 32;
  static constexpr bool vnni = true, dotprod = false;
};
#endif
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
/// AVX-512 F/BW/DQ/VL (Skylake-SP and later, AMD Zen 4/5): 64-byte vectors.
struct Avx512Tag {
  using xarch = xsimd::avx512bw;
  static constexpr Isa isa = Isa::avx512;
  static constexpr const char* name = "avx512";
  static constexpr int bytes = 64;
  static constexpr bool vnni = false, dotprod = false;
};
#if defined(__AVX512VNNI__)
/// AVX-512 with VNNI (EVEX vpdpbusd, 512- and 256-bit).
struct Avx512VnniTag {
  using xarch = xsimd::avx512bw;
  static constexpr Isa isa = Isa::avx512;
  static constexpr const char* name = "avx512vnni";
  static constexpr int bytes = 64;
  static constexpr bool vnni = true, dotprod = false;
};
#endif
/// The 256-bit view of an AVX-512 tag: 32-byte vectors with the AVX-512 BW/VL (and VNNI)
/// instructions, for bodies whose inner loop runs faster on ymm registers (Zen 4 executes a zmm
/// instruction as two 256-bit halves, and some zmm forms, e.g. broadcasts from memory, take a
/// shuffle slot that the ymm forms do not; measured for the NF4 GEMV). `Base` is the AVX-512 tag.
template <class Base>
struct Avx512YmmTag {
  using xarch = xsimd::fma3<xsimd::avx2>;
  static constexpr Isa isa = Base::isa;
  static constexpr const char* name = Base::name;
  static constexpr int bytes = 32;
  static constexpr bool vnni = Base::vnni, dotprod = false;
  static constexpr bool evex = true;  ///< AVX-512 BW/VL instructions on 32-byte vectors
};
#endif
#if defined(__aarch64__)
/// AArch64 Advanced SIMD: 16-byte vectors, int8 dots by smull + sadalp.
struct NeonTag {
  using xarch = xsimd::neon64;
  static constexpr Isa isa = Isa::neon;
  static constexpr const char* name = "neon";
  static constexpr int bytes = 16;
  static constexpr bool vnni = false, dotprod = false;
};
#if defined(__ARM_FEATURE_DOTPROD)
/// Armv8.2 with the dot-product extension (sdot).
struct NeonDotTag {
  using xarch = xsimd::neon64;
  static constexpr Isa isa = Isa::neon;
  static constexpr const char* name = "neondot";
  static constexpr int bytes = 16;
  static constexpr bool vnni = false, dotprod = true;
};
#endif
#endif

}  // namespace nibble::kernels
