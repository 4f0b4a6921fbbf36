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
  /// differ between AMD and Intel cores (the packed GEMV's L2 prefetch and stream count), never
  /// for correctness.
  bool amd = false;
  /// x86: the display family of CPUID leaf 1 (the base family, plus the extended family when
  /// the base is 15; 0 elsewhere). AMD's Zen 3 and Zen 4 are 25, Zen 5 is 26. A tuning input
  /// only, like `amd` (the Q8_0 and f16 GEMVs' row grouping on AMD family 25), never for
  /// correctness.
  int family = 0;
  // aarch64
  bool neon = false;     ///< Advanced SIMD (always present on aarch64)
  bool dotprod = false;  ///< Armv8.2 SDOT/UDOT (HWCAP_ASIMDDP)
};

/// Features of the CPU this process runs on, detected once (thread-safe) and then cached.
const CpuFeatures& cpu_features();

namespace detail {
/// Test hook for the vendor-dependent streaming choices of the GEMVs: the packed GEMV's L2
/// prefetch and four cross-prefetched streams of large group blocks
/// (kernels/detail/packed-driver-inl.hpp), and the plain layouts' far-apart row streams
/// (gemv_row_streams in kernels/detail/intrin-common.hpp). -1 (the default) decides from the CPU:
/// the packed choices from cpu_features().amd, row streams on every x86 core (except Q6_K on
/// AMD's 32-byte tags, and Q8_0 / f16 / Q6_K on AMD's family-25 cores); 0 takes the AMD packed
/// choices and no row streams anywhere; 1 the Intel packed choices and row streams everywhere (on
/// Arm the four streams and the row streams are taken only with 1); 2 the choices of AMD's
/// family-25 cores (Zen 3 / Zen 4: the AMD packed choices, the AMD float GEMV schemes, Q8_0 and
/// f16 in adjacent groups, Q6_K one row at a time on the 256-bit body) on any CPU. So tests run
/// every code path on any CPU. 0 and 1 never change a result; with 2 (and on family-25 cores) the
/// Q6_K GEMV of the AVX-512 tables gives the AVX2 table's results, and the float formats' GEMV
/// those of AMD's scheme (both within the GEMV tolerance). Thread-safe; not meant for use while
/// products run on other threads.
void set_vendor_tuning_override(int v);
/// The value set_vendor_tuning_override last stored (-1 by default).
int vendor_tuning_override();
/// Whether the packed GEMV uses the tuning measured on Intel cores: the override when it is 0 or
/// 1, else !cpu_features().amd.
bool intel_streaming_tuning();
}  // namespace detail

}  // namespace nibble
