// fp16 conversion: exhaustive round trip of every binary16 pattern, and float -> fp16 against the
// hardware F16C conversion (round to nearest even) where this CPU has it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "nibble/core/fp16.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static std::uint16_t hw_fp16(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
#endif

using nibble::fp16_to_fp32;
using nibble::fp32_to_fp16;

TEST(Fp16, EveryHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<std::uint16_t>(h));
    const bool nan = ((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF);
    if (nan) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(fp32_to_fp16(f), (h & 0x8000u) | 0x7E00u) << h;
    } else {
      EXPECT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
    }
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // ties to even -> inf
  EXPECT_EQ(fp32_to_fp16(1e-8f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(5.9604644775390625e-08f), 0x0001);   // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(2.98023223876953125e-08f), 0x0000);  // half of it: tie to even 0
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048), 0x3C00);  // tie, even mantissa stays
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f / 2048), 0x3C02);  // tie, odd mantissa rounds up
}

#if defined(__x86_64__)
TEST(Fp16, MatchesF16cOnRandomAndEdgeFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "CPU without F16C";
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 4000000; ++i) {
    std::uint32_t u = bits(rng);
    if (i & 1) u = (u & 0x80000000u) | (0x33000000u + (u % (0x47800000u - 0x33000000u)));
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), hw_fp16(f)) << "bits 0x" << std::hex << u;
  }
}
#endif
