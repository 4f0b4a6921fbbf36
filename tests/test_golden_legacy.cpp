// Golden tests for the ggml legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_1), IQ4_NL, IQ4_XS,
// MXFP4, Q2_K, Q3_K and bf16 against
// ggml's outputs in tests/data/legacy (tests/data/MANIFEST.md, "Legacy formats"): reference and
// importance-weighted quantization byte-identical, dequantization bit-identical, through the
// scalar reference codecs and the public API on every runnable ISA.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nibble/nibble.hpp"

namespace {

using nibble::Format;

constexpr std::int64_t kN = 256;
const char* const kCases[] = {"zeros",   "single",  "huge",  "tiny", "ties",
                              "negonly", "outlier", "gauss", "mixed"};

std::vector<std::uint8_t> read_file(const std::string& name) {
  const std::string path = std::string(NIBBLE_TEST_DATA_DIR) + "/legacy/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
}

std::vector<float> read_f32(const std::string& name) {
  const auto raw = read_file(name);
  EXPECT_EQ(raw.size(), kN * 4u) << name;
  std::vector<float> v(kN);
  if (raw.size() == kN * 4u) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

void expect_bytes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                  std::size_t block, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << ": first difference in block " << i / block << " byte " << i % block
                    << ": got " << int(got[i]) << ", want " << int(want[i]);
      return;
    }
  }
}

void expect_float_bits(const std::vector<float>& got, const std::vector<float>& want,
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

struct Case {
  const char* name;
  Format f;
};

class GoldenLegacy : public ::testing::TestWithParam<std::tuple<const char*, Format>> {};

TEST_P(GoldenLegacy, QuantizeDequantizeMatchGgml) {
  const std::string name = std::get<0>(GetParam());
  const Format f = std::get<1>(GetParam());
  const std::string t = nibble::traits(f).name;
  const std::size_t bb = nibble::traits(f).block_bytes;
  const auto x = read_f32(name + ".input.f32");
  const auto qw = read_f32(name + ".imatrix.f32");
  const auto want = read_file(name + "." + t + ".blocks");
  const std::size_t rb = nibble::row_bytes(f, kN);
  ASSERT_EQ(want.size(), rb);
  const bool has_dequant_golden = f != Format::q8_1;  // ggml has no Q8_1 dequantizer
  const bool has_iq = nibble::has_importance_quantizer(f);

  std::vector<nibble::Context> ctxs;
  for (nibble::Isa isa : nibble::available_isas()) {
    nibble::Context c;
    c.isa = isa;
    c.threads = 1;
    ctxs.push_back(c);
  }
  // Public API without Context (scalar reference path) and on every runnable ISA.
  std::vector<std::uint8_t> got(rb);
  nibble::quantize(f, x.data(), 1, kN, got.data());
  expect_bytes(got, want, bb, name + " " + t + " reference quantize");
  for (const auto& c : ctxs) {
    std::vector<std::uint8_t> g(rb);
    nibble::quantize(c, f, x.data(), 1, kN, g.data());
    expect_bytes(g, want, bb, name + " " + t + " quantize on " + nibble::isa_name(*c.isa));
  }
  if (has_dequant_golden) {
    const auto want_y = read_f32(name + "." + t + ".dequant.f32");
    std::vector<float> y(kN);
    nibble::dequantize(f, want.data(), 1, kN, y.data());
    expect_float_bits(y, want_y, name + " " + t + " dequantize");
    for (const auto& c : ctxs) {
      std::vector<float> yc(kN);
      nibble::dequantize(c, f, want.data(), 1, kN, yc.data());
      expect_float_bits(yc, want_y, name + " " + t + " dequantize on " + nibble::isa_name(*c.isa));
    }
  }
  if (has_iq) {
    const auto want_iq = read_file(name + "." + t + ".iq.blocks");
    const auto want_iqy = read_f32(name + "." + t + ".iq.dequant.f32");
    std::vector<std::uint8_t> g(rb);
    nibble::quantize(f, x.data(), 1, kN, g.data(), qw.data());
    expect_bytes(g, want_iq, bb, name + " " + t + " importance quantize");
    for (const auto& c : ctxs) {
      std::vector<std::uint8_t> gc(rb);
      nibble::quantize(c, f, x.data(), 1, kN, gc.data(), qw.data());
      expect_bytes(gc, want_iq, bb,
                   name + " " + t + " importance quantize on " + nibble::isa_name(*c.isa));
    }
    std::vector<float> y(kN);
    nibble::dequantize(f, want_iq.data(), 1, kN, y.data());
    expect_float_bits(y, want_iqy, name + " " + t + " importance dequantize");
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, GoldenLegacy,
    ::testing::Combine(::testing::ValuesIn(kCases),
                       ::testing::Values(Format::q4_0, Format::q4_1, Format::q5_0, Format::q5_1,
                                         Format::q8_1, Format::bf16, Format::iq4_nl, Format::iq4_xs,
                                         Format::mxfp4, Format::q2_K, Format::q3_K)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" +
             nibble::traits(std::get<1>(info.param)).name;
    });

// ggml's quantize_row_iq4_nl_ref (single candidate scale): nibble::ref::quantize_iq4_nl_ref.
// Blocks whose 32 inputs are all zero are skipped: ggml leaves their indices uninitialised
// (d = 0, so they decode to +-0) before the first non-zero block of a row.
TEST(GoldenLegacyRef, Iq4NlReferenceQuantizer) {
  for (const char* c : kCases) {
    const std::string name = c;
    const auto x = read_f32(name + ".input.f32");
    const auto want = read_file(name + ".iq4_nl.ref.blocks");
    const auto want_y = read_f32(name + ".iq4_nl.ref.dequant.f32");
    ASSERT_EQ(want.size(), kN / 32 * sizeof(nibble::BlockIQ4_NL));
    std::vector<nibble::BlockIQ4_NL> got(kN / 32);
    nibble::ref::quantize_iq4_nl_ref(x.data(), got.data(), kN);
    std::vector<float> y(kN);
    nibble::ref::dequantize_iq4_nl(reinterpret_cast<const nibble::BlockIQ4_NL*>(want.data()),
                                   y.data(), kN);
    for (std::int64_t b = 0; b < kN / 32; ++b) {
      bool zero = true;
      for (int j = 0; j < 32; ++j) zero = zero && x[32 * b + j] == 0.0f;
      if (zero) continue;
      EXPECT_EQ(std::memcmp(&got[b], want.data() + 18 * b, 18), 0) << name << " block " << b;
      EXPECT_EQ(std::memcmp(y.data() + 32 * b, want_y.data() + 32 * b, 128), 0)
          << name << " dequant block " << b;
    }
  }
}

// Bad input to the reference codecs: missing importance weights, partial blocks.
TEST(GoldenLegacyRef, ImportanceNeedsWeights) {
  std::vector<float> x(64, 1.0f);
  nibble::BlockQ4_0 b[2];
  EXPECT_THROW(nibble::ref::quantize_q4_0_imatrix(x.data(), b, 64, nullptr), nibble::Error);
  EXPECT_THROW(nibble::ref::quantize_q4_0(x.data(), b, 33), nibble::Error);
}

}  // namespace
