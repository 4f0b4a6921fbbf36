// Kernels of the ggml formats q4_0, q4_1, q5_0, q5_1, q8_1, iq4_nl, iq4_xs, mxfp4 and bf16 on every
// runnable ISA table variant (KernelTest fixture of kernel_test_util.hpp):
//  - dequantizers bit-identical to the scalar reference codecs (nibble/formats/*.hpp, themselves
//    checked against ggml in test_golden_legacy.cpp);
//  - GEMM/GEMV against Eigen in double on the dequantized weights and the fp32 activations,
//    |y - ref| <= 1e-5 * sum_k |w_k x_k|; row sub-ranges give the same bits as the full range;
//  - the public gemv/gemm with a Context on each runnable Isa, and its argument checks;
//  - bad arguments throw nibble::Error.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"

namespace {

using nibble::Format;
using nibble::test::KernelTest;
namespace nt = nibble::test;

constexpr double kRtol = 1e-5;
const Format kFormats[] = {Format::q4_0,  Format::q4_1, Format::q5_0,   Format::q5_1,
                           Format::q8_1,  Format::bf16, Format::iq4_nl, Format::iq4_xs,
                           Format::mxfp4, Format::q2_K, Format::q3_K};

std::vector<std::uint8_t> ref_quantize(Format f, const std::vector<float>& w, std::int64_t rows,
                                       std::int64_t cols) {
  std::vector<std::uint8_t> q(nibble::row_bytes(f, cols) * static_cast<std::size_t>(rows));
  nibble::quantize(f, w.data(), rows, cols, q.data());  // the scalar reference codecs
  return q;
}

std::vector<float> ref_dequant(Format f, const std::vector<std::uint8_t>& q, std::int64_t rows,
                               std::int64_t cols) {
  std::vector<float> y(static_cast<std::size_t>(rows * cols));
  nibble::dequantize(f, q.data(), rows, cols, y.data());
  return y;
}

struct Shape {
  std::int64_t rows, cols, n;
};

std::vector<Shape> shapes_for(Format f) {
  if (nibble::traits(f).block_elems == 256)
    return {{1, 256, 1}, {3, 256, 2}, {17, 512, 3}, {16, 256, 64}, {64, 4096, 1}, {40, 1024, 9}};
  std::vector<Shape> s = {{1, 32, 1},   {3, 32, 2},    {17, 128, 3},  {33, 256, 7},
                          {16, 64, 64}, {64, 4096, 1}, {40, 1024, 9}, {5, 96, 3}};
  if (f == Format::bf16) {
    s.push_back({5, 67, 3});  // cols not a multiple of the 32-value step
    s.push_back({7, 1, 2});
  }
  return s;
}

class LegacyKernels : public KernelTest {};

TEST_P(LegacyKernels, DequantMatchesReference) {
  for (Format f : kFormats) {
    const auto& k = nt::fmt_kernels(table(), f);
    ASSERT_NE(k.dequant, nullptr) << nibble::traits(f).name;
    for (std::int64_t cols : {std::int64_t{256}, std::int64_t{4096}}) {
      const std::int64_t rows = 3;
      std::vector<float> w = nt::random_normal(static_cast<std::size_t>(rows * cols), 21, 0.05f);
      w[5] = 0.0f;
      w[6] = -0.0f;
      const auto q = ref_quantize(f, w, rows, cols);
      std::vector<float> got(w.size(), std::nanf(""));
      k.dequant(q.data(), rows * cols, got.data());
      nt::expect_bitwise_equal(got, ref_dequant(f, q, rows, cols),
                               variant_name() + " dequant " + nibble::traits(f).name);
    }
  }
}

TEST_P(LegacyKernels, GemmMatchesEigen) {
  for (Format f : kFormats) {
    ASSERT_NE(nt::fmt_kernels(table(), f).gemm, nullptr) << nibble::traits(f).name;
    for (const Shape& s : shapes_for(f)) {
      const std::string what = variant_name() + " " + nibble::traits(f).name + " " +
                               std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                               " n=" + std::to_string(s.n);
      const auto w = nt::random_normal(static_cast<std::size_t>(s.rows * s.cols),
                                       static_cast<std::uint32_t>(s.rows + 7 * s.n), 0.05f);
      const auto x = nt::random_normal(static_cast<std::size_t>(s.n * s.cols),
                                       static_cast<std::uint32_t>(s.cols + s.n));
      const auto q = ref_quantize(f, w, s.rows, s.cols);
      const auto wd = ref_dequant(f, q, s.rows, s.cols);
      const std::size_t arb = static_cast<std::size_t>(s.cols) * 4;  // fp32 activations
      const auto got =
          nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, x.data(), arb, s.n, 0, s.rows);
      const nt::RefProduct ref = nt::eigen_reference(wd.data(), s.rows, s.cols, x.data(), s.n);
      nt::expect_close(got, ref, kRtol, 0.0, what + " vs Eigen");
      if (s.rows >= 3) {
        const std::int64_t r0 = 1, r1 = s.rows - 1;
        const auto part =
            nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, x.data(), arb, s.n, r0, r1);
        for (std::int64_t j = 0; j < s.n; ++j) {
          for (std::int64_t r = 0; r < s.rows; ++r) {
            const float p = part[static_cast<std::size_t>(j * s.rows + r)];
            const float g = got[static_cast<std::size_t>(j * s.rows + r)];
            if (r >= r0 && r < r1) {
              ASSERT_EQ(std::memcmp(&p, &g, 4), 0) << what << " row range, r " << r << " j " << j;
            } else {
              ASSERT_TRUE(std::isnan(p)) << what << " wrote outside its row range, r " << r;
            }
          }
        }
      }
    }
  }
}

// The public entry points with this variant's Isa (threads 1 and 3).
TEST_P(LegacyKernels, PublicGemvGemm) {
  for (Format f : kFormats) {
    const std::int64_t rows = 37, cols = 512, n = 5;  // a multiple of every block size
    const auto w = nt::random_normal(static_cast<std::size_t>(rows * cols), 5, 0.1f);
    const auto x = nt::random_normal(static_cast<std::size_t>(n * cols), 6);
    const auto q = ref_quantize(f, w, rows, cols);
    const auto wd = ref_dequant(f, q, rows, cols);
    const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), n);
    for (int threads : {1, 3}) {
      nibble::Context ctx;
      ctx.isa = isa();
      ctx.threads = threads;
      std::vector<float> y(static_cast<std::size_t>(rows * n));
      nibble::gemm(ctx, f, q.data(), rows, cols, x.data(), n, y.data());
      nt::expect_close(y, ref, kRtol, 0.0, variant_name() + " public gemm");
      std::vector<float> y1(static_cast<std::size_t>(rows));
      nibble::gemv(ctx, f, q.data(), rows, cols, x.data(), y1.data());
      nt::RefProduct r1 = ref;
      r1.y.resize(static_cast<std::size_t>(rows));
      r1.scale.resize(static_cast<std::size_t>(rows));
      nt::expect_close(y1, r1, kRtol, 0.0, variant_name() + " public gemv");
    }
  }
}

TEST_P(LegacyKernels, BadInputThrows) {
  nibble::Context ctx;
  ctx.isa = isa();
  std::vector<float> x(64, 1.0f), y(64);
  std::vector<std::uint8_t> q(4096);
  for (Format f : kFormats) {
    if (nibble::traits(f).block_elems == 1) continue;
    // cols not a multiple of the block size
    EXPECT_THROW(nibble::quantize(ctx, f, x.data(), 1, 33, q.data()), nibble::Error);
    EXPECT_THROW(nibble::dequantize(ctx, f, q.data(), 1, 48, y.data()), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), 2, 40, x.data(), y.data()), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), -1, 64, x.data(), y.data()), nibble::Error);
    EXPECT_THROW((void)nibble::row_bytes(f, 31), nibble::Error);
  }
  for (Format f : kFormats) {
    // NaN / Inf inputs, null pointers, negative importance
    std::vector<float> bad(256, 0.5f), xx(256, 1.0f), yy(256);
    bad[17] = std::nanf("");
    EXPECT_THROW(nibble::quantize(ctx, f, bad.data(), 1, 256, q.data()), nibble::Error);
    bad[17] = INFINITY;
    EXPECT_THROW(nibble::gemv(ctx, f, q.data(), 1, 256, bad.data(), yy.data()), nibble::Error);
    EXPECT_THROW(nibble::quantize(ctx, f, xx.data(), 1, 256, nullptr), nibble::Error);
    EXPECT_THROW(nibble::gemv(ctx, f, nullptr, 1, 256, xx.data(), yy.data()), nibble::Error);
    std::vector<float> imp(256, 1.0f);
    imp[3] = -1.0f;
    EXPECT_THROW(nibble::quantize(ctx, f, xx.data(), 1, 256, q.data(), imp.data()), nibble::Error);
  }
  // One past the last enumerator is not a format.
  const auto past = static_cast<Format>(static_cast<int>(nibble::kLastFormat) + 1);
  EXPECT_THROW(nibble::gemv(ctx, past, q.data(), 1, 32, x.data(), y.data()), nibble::Error);
  EXPECT_THROW(nibble::quantize(ctx, past, x.data(), 1, 32, q.data()), nibble::Error);
  EXPECT_THROW((void)nibble::row_bytes(past, 32), nibble::Error);
}

NIBBLE_INSTANTIATE_KERNEL_TEST(LegacyKernels);

// GGUF traits of the new enumerators (ggml.h type ids, ggml-common.h block sizes).
TEST(LegacyTraits, MatchGgml) {
  struct T {
    Format f;
    const char* name;
    std::int64_t elems;
    std::size_t bytes;
    int id;
  };
  const T want[] = {
      {Format::q4_0, "q4_0", 32, 18, 2},      {Format::q4_1, "q4_1", 32, 20, 3},
      {Format::q5_0, "q5_0", 32, 22, 6},      {Format::q5_1, "q5_1", 32, 24, 7},
      {Format::q2_K, "q2_K", 256, 84, 10},    {Format::q3_K, "q3_K", 256, 110, 11},
      {Format::iq4_nl, "iq4_nl", 32, 18, 20}, {Format::iq4_xs, "iq4_xs", 256, 136, 23},
      {Format::mxfp4, "mxfp4", 32, 17, 39},   {Format::bf16, "bf16", 1, 2, 30},
      {Format::q8_1, "q8_1", 32, 36, 9}};
  int expected_value = static_cast<int>(Format::fp4) + 1;
  for (const T& t : want) {
    EXPECT_EQ(static_cast<int>(t.f), expected_value++) << t.name;  // appended in this order
    EXPECT_STREQ(nibble::traits(t.f).name, t.name);
    EXPECT_EQ(nibble::traits(t.f).block_elems, t.elems) << t.name;
    EXPECT_EQ(nibble::traits(t.f).block_bytes, t.bytes) << t.name;
    EXPECT_EQ(nibble::traits(t.f).gguf_type, t.id) << t.name;
    EXPECT_EQ(nibble::row_bytes(t.f, 4096), static_cast<std::size_t>(4096 / t.elems) * t.bytes);
  }
  EXPECT_EQ(sizeof(nibble::BlockQ4_0), 18u);
  EXPECT_EQ(sizeof(nibble::BlockQ4_1), 20u);
  EXPECT_EQ(sizeof(nibble::BlockQ5_0), 22u);
  EXPECT_EQ(sizeof(nibble::BlockQ5_1), 24u);
  EXPECT_EQ(sizeof(nibble::BlockQ8_1), 36u);
}

}  // namespace
