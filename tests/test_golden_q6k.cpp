// Golden tests of the scalar Q6_K reference codec against ggml's output (tests/data, generated
// by ggml-org/ggml d99724f; see tests/data/MANIFEST.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_k.hpp"

namespace {

using nibble::BlockQ6_K;
using nibble::BlockQ8_K;

constexpr std::int64_t kN = 4096;
constexpr std::int64_t kBlocks = kN / 256;

std::vector<char> read_file(const std::string& name) {
  const std::string path = std::string(NIBBLE_TEST_DATA_DIR) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

template <class T>
std::vector<T> read_array(const std::string& name, std::size_t count) {
  const std::vector<char> bytes = read_file(name);
  EXPECT_EQ(bytes.size(), count * sizeof(T)) << name;
  std::vector<T> out(count);
  if (bytes.size() == count * sizeof(T)) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Index of the first differing block (or -1) and a hex dump context for the message.
std::int64_t first_block_diff(const std::vector<BlockQ6_K>& a, const std::vector<BlockQ6_K>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(BlockQ6_K)) != 0) return static_cast<std::int64_t>(i);
  return -1;
}

std::int64_t first_bit_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) return static_cast<std::int64_t>(i);
  return -1;
}

class GoldenQ6K : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenQ6K, QuantizeRefIsByteIdentical) {
  const std::string name = GetParam();
  const auto input = read_array<float>(name + ".input.f32", kN);
  const auto golden = read_array<BlockQ6_K>(name + ".q6_K.blocks", kBlocks);
  std::vector<BlockQ6_K> out(kBlocks);
  std::memset(out.data(), 0xAB, out.size() * sizeof(BlockQ6_K));
  nibble::ref::quantize_q6_K(input.data(), out.data(), kN);
  EXPECT_EQ(first_block_diff(out, golden), -1) << name;
}

TEST_P(GoldenQ6K, QuantizeImatrixIsByteIdentical) {
  const std::string name = GetParam();
  const auto input = read_array<float>(name + ".input.f32", kN);
  const auto imatrix = read_array<float>(name + ".q6_K.imatrix.f32", kN);
  const auto golden = read_array<BlockQ6_K>(name + ".q6_K.iq.blocks", kBlocks);
  std::vector<BlockQ6_K> out(kBlocks);
  std::memset(out.data(), 0xCD, out.size() * sizeof(BlockQ6_K));
  nibble::ref::quantize_q6_K_imatrix(input.data(), out.data(), kN, imatrix.data());
  EXPECT_EQ(first_block_diff(out, golden), -1) << name;
}

TEST_P(GoldenQ6K, DequantizeIsBitIdentical) {
  const std::string name = GetParam();
  for (const std::string kind : {"", ".iq"}) {
    const auto blocks = read_array<BlockQ6_K>(name + ".q6_K" + kind + ".blocks", kBlocks);
    const auto golden = read_array<float>(name + ".q6_K" + kind + ".dequant.f32", kN);
    std::vector<float> out(kN, std::numeric_limits<float>::quiet_NaN());
    nibble::ref::dequantize_q6_K(blocks.data(), out.data(), kN);
    EXPECT_EQ(first_bit_diff(out, golden), -1) << name << kind;  // sign of zero included
  }
}

TEST_P(GoldenQ6K, DotMatchesGgmlAvx2BitExactly) {
  const std::string name = GetParam();
  const auto w = read_array<BlockQ6_K>(name + ".q6_K.blocks", kBlocks);
  const auto a = read_array<BlockQ8_K>(name + ".q6_K_q8_K.act.blocks", kBlocks);
  const auto golden = read_array<float>(name + ".q6_K_q8_K.dot.f32", 1);
  const auto exact = read_array<double>(name + ".q6_K_q8_K.dotexact.f64", 1);
  const float s = nibble::ref::dot_q6_K_q8_K(kN, w.data(), a.data());
  // Bit-exact against ggml's vec_dot (AVX2 path, fused multiply-add per lane).
  EXPECT_EQ(bits(s), bits(golden[0])) << name << ": " << s << " vs " << golden[0];
  // And close to the exact dot of the dequantized operands (MANIFEST: ggml's own relative
  // error is <= 6.9e-6 on these cases; 1e-5 relative + 1e-6 absolute covers it).
  EXPECT_NEAR(s, exact[0], 1e-5 * std::fabs(exact[0]) + 1e-6) << name;
}

TEST_P(GoldenQ6K, RoundTripRmseMatchesManifest) {
  // Independent sanity: the golden dequant of the golden blocks reproduces the input closely.
  const std::string name = GetParam();
  const auto input = read_array<float>(name + ".input.f32", kN);
  std::vector<BlockQ6_K> blocks(kBlocks);
  nibble::ref::quantize_q6_K(input.data(), blocks.data(), kN);
  std::vector<float> out(kN);
  nibble::ref::dequantize_q6_K(blocks.data(), out.data(), kN);
  double se = 0, ss = 0;
  for (std::int64_t i = 0; i < kN; ++i) {
    se += (double(out[i]) - input[i]) * (double(out[i]) - input[i]);
    ss += double(input[i]) * input[i];
  }
  // 6-bit symmetric quantization: relative rmse of a few percent at most on these rows.
  if (ss > 0) {
    EXPECT_LT(std::sqrt(se / ss), 0.03) << name;
  } else {
    EXPECT_EQ(se, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenQ6K,
                         ::testing::Values("gauss_s1", "gauss_s0.02", "uniform_pm1", "zeros",
                                           "const_0.75", "student_t3"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

// The float32 overflow quirk: with |x| above ~3e5, sumlx^2 and best*suml2 overflow to inf, the
// candidate test is false and each sub-block keeps its first guess (iscale = -32/max). The model
// below computes that first-guess least-squares scale in double, independently of the codec.
double first_guess_scale(const float* x) {
  double amax = 0, vmax = 0;
  for (int i = 0; i < 16; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  const double inv = -32.0 / vmax;
  double sumlx = 0, suml2 = 0;
  for (int i = 0; i < 16; ++i) {
    const double l = std::min(31.0, std::max(-32.0, std::nearbyint(inv * x[i])));
    sumlx += double(x[i]) * x[i] * x[i] * l;
    suml2 += double(x[i]) * x[i] * l * l;
  }
  return sumlx / suml2;
}

// Largest deviation, in units of the block's |d|, of the stored sub-block scales from the model.
double max_scale_deviation(const std::vector<float>& x, const BlockQ6_K& b) {
  const double d = nibble::fp16_to_fp32(b.d);
  double worst = 0;
  for (int j = 0; j < 16; ++j) {
    const double model = first_guess_scale(x.data() + 16 * j);
    worst = std::max(worst, std::fabs(d * b.scales[j] - model) / std::fabs(d));
  }
  return worst;
}

TEST(Q6K, Float32OverflowKeepsFirstGuess) {
  std::vector<float> small(256), huge(256);
  std::uint64_t s = 12345;
  for (int i = 0; i < 256; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const double u = (double(s >> 11) / 9007199254740992.0) * 2.0 - 1.0;
    small[i] = static_cast<float>(u * u * u);  // in [-1, 1]
    huge[i] = std::ldexp(small[i], 21);        // exact: up to ~2e6
  }
  BlockQ6_K bs, bh;
  nibble::ref::quantize_q6_K(small.data(), &bs, 256);
  nibble::ref::quantize_q6_K(huge.data(), &bh, 256);
  // Small inputs: the 18 extra candidates change at least one sub-block's scale.
  EXPECT_GT(max_scale_deviation(small, bs), 0.6);
  // Huge inputs: every sub-block keeps the first guess (deviation = int8/fp16 rounding only).
  EXPECT_LE(max_scale_deviation(huge, bh), 0.5 + 128 * 1e-3);
  std::vector<float> y(256);
  nibble::ref::dequantize_q6_K(&bh, y.data(), 256);
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(std::isfinite(y[i]));
}

// A block whose first 16 values are zero: scale 0, stored quants 0 (signed -32), dequant -0.0.
TEST(Q6K, ZeroSubBlockGetsScaleZeroAndNegativeZero) {
  std::vector<float> x(256, 0.5f);
  for (int i = 0; i < 16; ++i) x[i] = 0.0f;
  BlockQ6_K b;
  nibble::ref::quantize_q6_K(x.data(), &b, 256);
  EXPECT_EQ(b.scales[0], 0);
  std::vector<float> y(256);
  nibble::ref::dequantize_q6_K(&b, y.data(), 256);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], 0.0f);
    // d has the sign opposite to the largest scale (positive values -> negative d), so
    // (d * 0) * (-32) = (-0) * (-32) = +0.
    EXPECT_EQ(std::signbit(y[i]), !std::signbit(nibble::fp16_to_fp32(b.d))) << i;
  }
}

}  // namespace
