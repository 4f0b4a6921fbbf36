// Golden tests for the Q8_0 / Q8_K / Q4_K / Q5_K reference codecs against ggml's outputs in
// tests/data (see tests/data/MANIFEST.md). Blocks and dequantized floats must be
// byte-identical; dot products must have the same float bits as ggml's x86 vec_dot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q8_0.hpp"
#include "nibble/formats/q8_k.hpp"

namespace {

using namespace nibble;

constexpr std::int64_t kN = 4096;

std::vector<char> read_file(const std::string& name) {
  const std::string path = std::string(NIBBLE_TEST_DATA_DIR) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

template <class T>
std::vector<T> read_as(const std::string& name, std::size_t count) {
  const std::vector<char> raw = read_file(name);
  std::vector<T> out(count);
  EXPECT_EQ(raw.size(), count * sizeof(T)) << name;
  if (raw.size() == count * sizeof(T)) std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

// memcmp block by block; reports the first differing block and byte.
template <class B>
void expect_blocks_equal(const std::vector<B>& got, const std::vector<B>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int ndiff = 0;
  for (std::size_t b = 0; b < got.size(); ++b) {
    if (std::memcmp(&got[b], &want[b], sizeof(B)) == 0) continue;
    if (ndiff++ == 0) {
      const auto* g = reinterpret_cast<const unsigned char*>(&got[b]);
      const auto* w = reinterpret_cast<const unsigned char*>(&want[b]);
      std::size_t k = 0;
      while (g[k] == w[k]) ++k;
      ADD_FAILURE() << what << ": first differing block " << b << " (byte " << k << ": got "
                    << int(g[k]) << ", want " << int(w[k]) << ")";
    }
  }
  EXPECT_EQ(ndiff, 0) << what << ": " << ndiff << " of " << got.size() << " blocks differ";
}

void expect_floats_identical(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      ADD_FAILURE() << what << ": first differing float at " << i << ": got " << got[i] << ", want "
                    << want[i];
      return;
    }
  }
}

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  std::string name() const { return GetParam(); }
  std::string file(const std::string& suffix) const { return name() + "." + suffix; }
  std::vector<float> input() const { return read_as<float>(file("input.f32"), kN); }
};

TEST_P(Golden, Q8_0_ReferenceBlocksAndDequant) {
  const auto x = input();
  std::vector<BlockQ8_0> blk(kN / 32);
  ref::quantize_q8_0(x.data(), blk.data(), kN);
  expect_blocks_equal(blk, read_as<BlockQ8_0>(file("q8_0.blocks"), kN / 32), file("q8_0"));
  std::vector<float> y(kN);
  ref::dequantize_q8_0(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q8_0.dequant.f32"), kN), file("q8_0 dequant"));
}

TEST_P(Golden, Q8_K_ReferenceBlocksAndDequant) {
  const auto x = input();
  std::vector<BlockQ8_K> blk(kN / 256);
  ref::quantize_q8_K(x.data(), blk.data(), kN);
  expect_blocks_equal(blk, read_as<BlockQ8_K>(file("q8_K.blocks"), kN / 256), file("q8_K"));
  std::vector<float> y(kN);
  ref::dequantize_q8_K(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q8_K.dequant.f32"), kN), file("q8_K dequant"));
}

TEST_P(Golden, Q4_K_ReferenceBlocksAndDequant) {
  const auto x = input();
  std::vector<BlockQ4_K> blk(kN / 256);
  ref::quantize_q4_K(x.data(), blk.data(), kN);
  expect_blocks_equal(blk, read_as<BlockQ4_K>(file("q4_K.blocks"), kN / 256), file("q4_K"));
  std::vector<float> y(kN);
  ref::dequantize_q4_K(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q4_K.dequant.f32"), kN), file("q4_K dequant"));
}

TEST_P(Golden, Q5_K_ReferenceBlocksAndDequant) {
  const auto x = input();
  std::vector<BlockQ5_K> blk(kN / 256);
  ref::quantize_q5_K(x.data(), blk.data(), kN);
  expect_blocks_equal(blk, read_as<BlockQ5_K>(file("q5_K.blocks"), kN / 256), file("q5_K"));
  std::vector<float> y(kN);
  ref::dequantize_q5_K(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q5_K.dequant.f32"), kN), file("q5_K dequant"));
}

TEST_P(Golden, Q4_K_ImatrixBlocksAndDequant) {
  const auto x = input();
  const auto qw = read_as<float>(file("q4_K.imatrix.f32"), kN);
  std::vector<BlockQ4_K> blk(kN / 256);
  ref::quantize_q4_K_imatrix(x.data(), blk.data(), kN, qw.data());
  expect_blocks_equal(blk, read_as<BlockQ4_K>(file("q4_K.iq.blocks"), kN / 256), file("q4_K.iq"));
  std::vector<float> y(kN);
  ref::dequantize_q4_K(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q4_K.iq.dequant.f32"), kN),
                          file("q4_K.iq dequant"));
}

TEST_P(Golden, Q5_K_ImatrixBlocksAndDequant) {
  const auto x = input();
  const auto qw = read_as<float>(file("q5_K.imatrix.f32"), kN);
  std::vector<BlockQ5_K> blk(kN / 256);
  ref::quantize_q5_K_imatrix(x.data(), blk.data(), kN, qw.data());
  expect_blocks_equal(blk, read_as<BlockQ5_K>(file("q5_K.iq.blocks"), kN / 256), file("q5_K.iq"));
  std::vector<float> y(kN);
  ref::dequantize_q5_K(blk.data(), y.data(), kN);
  expect_floats_identical(y, read_as<float>(file("q5_K.iq.dequant.f32"), kN),
                          file("q5_K.iq dequant"));
}

TEST_P(Golden, ActivationQuantizers) {
  const auto act = read_as<float>(file("act.f32"), kN);
  std::vector<BlockQ8_0> a0(kN / 32);
  ref::quantize_q8_0_act(act.data(), a0.data(), kN);
  expect_blocks_equal(a0, read_as<BlockQ8_0>(file("q8_0_q8_0.act.blocks"), kN / 32),
                      file("q8_0_q8_0.act"));
  std::vector<BlockQ8_K> ak(kN / 256);
  ref::quantize_q8_K(act.data(), ak.data(), kN);
  expect_blocks_equal(ak, read_as<BlockQ8_K>(file("q4_K_q8_K.act.blocks"), kN / 256),
                      file("q4_K_q8_K.act"));
  expect_blocks_equal(ak, read_as<BlockQ8_K>(file("q5_K_q8_K.act.blocks"), kN / 256),
                      file("q5_K_q8_K.act"));
}

// Double-precision dot of the dequantized rows: an independent check of the dequantizers
// against the golden dotexact (same math, different summation order: tolerance 1e-12 relative
// to the sum of |products|).
double dequant_dot(const std::vector<float>& w, const std::vector<float>& a, double* abs_sum) {
  double s = 0, as = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    s += double(w[i]) * double(a[i]);
    as += std::fabs(double(w[i]) * double(a[i]));
  }
  *abs_sum = as;
  return s;
}

// The golden dot must match bit-for-bit; also checks the exact dequant dot (see above).
template <class W, class A>
void check_dot(const std::string& pair, const std::vector<W>& w, const std::vector<A>& a, float got,
               const std::vector<float>& wf, const std::vector<float>& af) {
  const float want = read_as<float>(pair + ".dot.f32", 1)[0];
  const double exact = read_as<double>(pair + ".dotexact.f64", 1)[0];
  std::uint32_t gb, wb;
  std::memcpy(&gb, &got, 4);
  std::memcpy(&wb, &want, 4);
  EXPECT_EQ(gb, wb) << pair << ": dot " << got << " vs golden " << want << " (exact " << exact
                    << ")";
  double abs_sum = 0;
  const double dd = dequant_dot(wf, af, &abs_sum);
  EXPECT_LE(std::fabs(dd - exact), 1e-12 * abs_sum + 1e-300) << pair << ": dequant dot";
  // float kernel vs exact: 8-lane float accumulation of ~16..128 terms, 1e-5 of sum|products|.
  EXPECT_LE(std::fabs(double(got) - exact), 1e-5 * abs_sum + 1e-30) << pair;
  (void)w;
  (void)a;
}

TEST_P(Golden, DotProducts) {
  const auto w0 = read_as<BlockQ8_0>(file("q8_0.blocks"), kN / 32);
  const auto a0 = read_as<BlockQ8_0>(file("q8_0_q8_0.act.blocks"), kN / 32);
  const auto w4 = read_as<BlockQ4_K>(file("q4_K.blocks"), kN / 256);
  const auto w5 = read_as<BlockQ5_K>(file("q5_K.blocks"), kN / 256);
  const auto ak = read_as<BlockQ8_K>(file("q4_K_q8_K.act.blocks"), kN / 256);
  std::vector<float> fw(kN), fa(kN);

  ref::dequantize_q8_0(w0.data(), fw.data(), kN);
  ref::dequantize_q8_0(a0.data(), fa.data(), kN);
  check_dot(file("q8_0_q8_0"), w0, a0, ref::dot_q8_0_q8_0(kN, w0.data(), a0.data()), fw, fa);

  ref::dequantize_q8_K(ak.data(), fa.data(), kN);
  ref::dequantize_q4_K(w4.data(), fw.data(), kN);
  check_dot(file("q4_K_q8_K"), w4, ak, ref::dot_q4_K_q8_K(kN, w4.data(), ak.data()), fw, fa);
  ref::dequantize_q5_K(w5.data(), fw.data(), kN);
  check_dot(file("q5_K_q8_K"), w5, ak, ref::dot_q5_K_q8_K(kN, w5.data(), ak.data()), fw, fa);
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden,
                         ::testing::Values("gauss_s1", "gauss_s0.02", "uniform_pm1", "zeros",
                                           "const_0.75", "student_t3"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

}  // namespace
