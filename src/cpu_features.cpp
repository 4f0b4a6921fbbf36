// nibble: CPU feature detection. x86: CPUID leaves 1 and 7 plus XCR0 (xgetbv) so that a feature
// only counts when the OS saves the matching register state. aarch64: getauxval(AT_HWCAP).
#include "nibble/core/cpu.hpp"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <cstdint>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace nibble {
namespace {

#if defined(__x86_64__) || defined(__i386__)
std::uint64_t read_xcr0() {
  std::uint32_t lo = 0, hi = 0;
  // xgetbv with ecx = 0 (encoded as bytes so no -mxsave flag is needed).
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const unsigned base_family = (a >> 8) & 0xFu;
  f.family = static_cast<int>(base_family == 15u ? base_family + ((a >> 20) & 0xFFu) : base_family);
  const bool osxsave = (c >> 27) & 1u;
  const bool cpu_avx = (c >> 28) & 1u;
  const bool cpu_fma = (c >> 12) & 1u;
  const bool cpu_f16c = (c >> 29) & 1u;
  f.sse42 = (c >> 20) & 1u;
  bool os_ymm = false, os_zmm = false;
  if (osxsave) {
    const std::uint64_t xcr0 = read_xcr0();
    os_ymm = (xcr0 & 0x6u) == 0x6u;    // XMM + YMM state
    os_zmm = (xcr0 & 0xE6u) == 0xE6u;  // + opmask, ZMM_Hi256, Hi16_ZMM
  }
  f.avx = cpu_avx && os_ymm;
  f.fma = cpu_fma && f.avx;
  f.f16c = cpu_f16c && f.avx;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.bmi2 = (b >> 8) & 1u;
    f.avx2 = ((b >> 5) & 1u) && f.avx;
    const bool z = f.avx && os_zmm;
    f.avx512f = ((b >> 16) & 1u) && z;
    f.avx512dq = ((b >> 17) & 1u) && f.avx512f;
    f.avx512cd = ((b >> 28) & 1u) && f.avx512f;
    f.avx512bw = ((b >> 30) & 1u) && f.avx512f;
    f.avx512vl = ((b >> 31) & 1u) && f.avx512f;
    f.avx512vnni = ((c >> 11) & 1u) && f.avx512f;
    const unsigned max_sub = a;  // leaf 7 sub-leaf count
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avxvnni = ((a >> 4) & 1u) && f.avx;
    }
  }
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect() {
  CpuFeatures f;
  f.neon = true;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  f.dotprod = (hw >> 20) & 1ul;  // HWCAP_ASIMDDP
#endif
  return f;
}
#else
CpuFeatures detect() {
  return {};
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

namespace detail {
namespace {
std::atomic<int> g_vendor_tuning{-1};
}  // namespace
void set_vendor_tuning_override(int v) {
  g_vendor_tuning.store(v, std::memory_order_relaxed);
}
int vendor_tuning_override() {
  return g_vendor_tuning.load(std::memory_order_relaxed);
}
bool intel_streaming_tuning() {
  const int o = vendor_tuning_override();
  if (o == 2) return false;  // AMD family 25's choices
  return o == 0 || o == 1 ? o == 1 : !cpu_features().amd;
}
}  // namespace detail

}  // namespace nibble
