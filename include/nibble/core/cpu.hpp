// nibble: run-time CPU feature detection (what this CPU *and* its operating system support).
#pragma once

namespace nibble {

/// Instruction-set features of the running CPU. On x86 a vector extension only counts when the
/// OS saves its register state (XCR0 checked with xgetbv); on aarch64 the bits come from HWCAP.
struct CpuFeatures {
  // x86
  bool sse42 = false;       ///< SSE4.2
  bool avx = false;         ///< AVX with YMM state enabled by the OS
  bool avx2 = false;        ///< AVX2 (and OS YMM support)
  bool fma = false;         ///< FMA3 (and OS YMM support)
  bool f16c = false;        ///< F16C (and OS YMM support)
  bool bmi2 = false;        ///< BMI2
  bool avx512f = false;     ///< AVX-512 Foundation with opmask/ZMM state enabled by the OS
  bool avx512cd = false;    ///< AVX-512 CD (and OS ZMM support)
  bool avx512bw = false;    ///< AVX-512 BW (and OS ZMM support)
  bool avx512dq = false;    ///< AVX-512 DQ (and OS ZMM support)
  bool avx512vl = false;    ///< AVX-512 VL (and OS ZMM support)
  bool avx512vnni = false;  ///< AVX-512 VNNI (and OS ZMM support)
  bool avxvnni = false;     ///< AVX-VNNI: VEX-encoded 256-bit vpdpbusd (and OS YMM support)
  /// The vendor string is "AuthenticAMD". Used only for tuning choices that were measured to
  /// differ between AMD and Intel cores (the packed GEMV's L2 prefetch), never for correctness.
  bool amd = false;
  // aarch64
  bool neon = false;     ///< Advanced SIMD (always present on aarch64)
  bool dotprod = false;  ///< Armv8.2 SDOT/UDOT (HWCAP_ASIMDDP)
};

/// Features of the CPU this process runs on, detected once (thread-safe) and then cached.
const CpuFeatures& cpu_features();

}  // namespace nibble
