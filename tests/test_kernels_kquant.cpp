// Tests of the Q4_K / Q5_K / Q6_K kernels (dequant + gemm against Q8_K activations) on every
// runnable ISA variant.
//
// - dequant: bit-identical to the scalar table, to an independent decoder written here from the
//   block layouts (docs: tests/data/MANIFEST.md), and (scalar) to ggml's golden dequant files.
// - gemm: vs the scalar table and vs Eigen in double on dequantized weights x dequantized Q8_K
//   activations. The integer sums are exact on every ISA; only the float accumulation order
//   differs, so both use |err| <= 2e-5 * S + 1e-30, where S = sum over k of T_k * |a_k| with
//   T_k = |float(d)*sc*q| + |float(dmin)*m| (Q4_K/Q5_K) or |w_k| (Q6_K): the magnitude of the
//   float terms the kernels add (a float sum of m such terms is off by at most ~m * 2^-24 * S).
// - golden: scalar gemm of ggml's golden blocks x golden Q8_K activations vs ggml's exact
//   double dot (dotexact.f64), same tolerance.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernel_test_util.hpp"
#include "nibble/formats/q4_k.hpp"
#include "nibble/formats/q5_k.hpp"
#include "nibble/formats/q6_k.hpp"
#include "nibble/formats/q8_k.hpp"

namespace {

using nibble::BlockQ4_K;
using nibble::BlockQ5_K;
using nibble::BlockQ6_K;
using nibble::BlockQ8_K;
using nibble::Format;
using nibble::test::KernelTest;

constexpr double kRtol = 2e-5;
constexpr double kAtol = 1e-30;

std::size_t block_bytes(Format f) {
  return nibble::traits(f).block_bytes;
}

/// Independent decoder: value k of a block as float (the reference order of operations) and
/// its float-term magnitude T_k (see the file comment).
void decode_block(Format f, const std::uint8_t* blk, float* w, float* t) {
  if (f == Format::q4_K || f == Format::q5_K) {
    const bool q5 = f == Format::q5_K;
    std::uint16_t hd, hm;
    std::memcpy(&hd, blk, 2);
    std::memcpy(&hm, blk + 2, 2);
    const float d = nibble::fp16_to_fp32(hd), dmin = nibble::fp16_to_fp32(hm);
    const std::uint8_t* s = blk + 4;
    const std::uint8_t* qh = q5 ? blk + 16 : nullptr;
    const std::uint8_t* qs = blk + (q5 ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
      const int g = j / 2;
      for (int l = 0; l < 32; ++l) {
        int q = (j % 2 == 0) ? (qs[32 * g + l] & 0x0F) : (qs[32 * g + l] >> 4);
        if (q5) q |= ((qh[l] >> j) & 1) << 4;
        const int k = 32 * j + l;
        w[k] = ds * static_cast<float>(q) - dm;
        t[k] = std::fabs(ds * static_cast<float>(q)) + std::fabs(dm);
      }
    }
    return;
  }
  // q6_K
  std::uint16_t hd;
  std::memcpy(&hd, blk + 208, 2);
  const float d = nibble::fp16_to_fp32(hd);
  const std::uint8_t* ql = blk;
  const std::uint8_t* qh = blk + 128;
  const std::int8_t* sc = reinterpret_cast<const std::int8_t*>(blk + 192);
  for (int k = 0; k < 256; ++k) {
    const int h = k / 128, c = (k % 128) / 32, l = k % 32;
    const std::uint8_t lb = ql[64 * h + 32 * (c % 2) + l];
    const int lo = (c < 2) ? (lb & 0x0F) : (lb >> 4);
    const int hi = (qh[32 * h + l] >> (2 * c)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    w[k] = (d * static_cast<float>(sc[k / 16])) * static_cast<float>(q);
    t[k] = std::fabs(w[k]);
  }
}

void decode_rows(Format f, const std::vector<std::uint8_t>& W, std::int64_t rows, std::int64_t cols,
                 std::vector<float>* w, std::vector<float>* t) {
  w->resize(static_cast<std::size_t>(rows * cols));
  t->resize(w->size());
  const std::size_t bb = block_bytes(f);
  for (std::int64_t b = 0; b < rows * cols / 256; ++b) {
    decode_block(f, W.data() + b * bb, w->data() + b * 256, t->data() + b * 256);
  }
}

/// Random valid blocks: random bytes, fp16 scales set to small finite values.
std::vector<std::uint8_t> random_blocks(Format f, std::int64_t nblocks, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.0005f, 0.05f);
  const std::size_t bb = block_bytes(f);
  std::vector<std::uint8_t> v(bb * static_cast<std::size_t>(nblocks));
  for (auto& x : v) x = static_cast<std::uint8_t>(byte(g));
  for (std::int64_t b = 0; b < nblocks; ++b) {
    std::uint8_t* blk = v.data() + b * bb;
    if (f == Format::q6_K) {
      const float d = (byte(g) & 1 ? -1.0f : 1.0f) * mag(g) * 0.1f;
      const std::uint16_t h = nibble::fp32_to_fp16(d);
      std::memcpy(blk + 208, &h, 2);
    } else {
      const std::uint16_t hd = nibble::fp32_to_fp16(mag(g) * 0.05f);
      const std::uint16_t hm = nibble::fp32_to_fp16(mag(g) * 0.05f);
      std::memcpy(blk, &hd, 2);
      std::memcpy(blk + 2, &hm, 2);
    }
  }
  return v;
}

/// n activation rows of `cols` values, quantized to Q8_K with the reference quantizer.
std::vector<BlockQ8_K> random_act(std::int64_t n, std::int64_t cols, std::uint32_t seed) {
  const std::vector<float> x =
      nibble::test::random_normal(static_cast<std::size_t>(n * cols), seed);
  std::vector<BlockQ8_K> a(static_cast<std::size_t>(n * cols / 256));
  for (std::int64_t j = 0; j < n; ++j) {
    nibble::ref::quantize_q8_K(x.data() + j * cols, a.data() + j * cols / 256, cols);
  }
  return a;
}

std::vector<float> dequant_act(const std::vector<BlockQ8_K>& a) {
  std::vector<float> x(a.size() * 256);
  for (std::size_t b = 0; b < a.size(); ++b)
    for (int i = 0; i < 256; ++i) x[b * 256 + i] = a[b].d * static_cast<float>(a[b].qs[i]);
  return x;
}

struct Shape {
  std::int64_t rows, cols, n;
};

const Format kFormats[] = {Format::q4_K, Format::q5_K, Format::q6_K};

class KQuantKernels : public KernelTest {};

TEST_P(KQuantKernels, DequantMatchesScalarAndDecoder) {
  for (Format f : kFormats) {
    const std::int64_t rows = 5, cols = 1024;
    const auto W = random_blocks(f, rows * cols / 256, 11 + static_cast<int>(f));
    const auto& k = nibble::test::fmt_kernels(table(), f);
    const auto& ks = nibble::test::fmt_kernels(nibble::test::scalar_table(), f);
    ASSERT_NE(k.dequant, nullptr) << nibble::traits(f).name;
    ASSERT_NE(ks.dequant, nullptr) << nibble::traits(f).name;
    std::vector<float> got(static_cast<std::size_t>(rows * cols)), ref(got.size());
    k.dequant(W.data(), rows * cols, got.data());
    ks.dequant(W.data(), rows * cols, ref.data());
    nibble::test::expect_bitwise_equal(got, ref,
                                       std::string(nibble::traits(f).name) + " vs scalar");
    std::vector<float> dec, t;
    decode_rows(f, W, rows, cols, &dec, &t);
    nibble::test::expect_bitwise_equal(got, dec,
                                       std::string(nibble::traits(f).name) + " vs decoder");
  }
}

/// Inputs and references of one (format, shape) case, computed once and shared by every ISA.
struct GemmCase {
  std::vector<std::uint8_t> W;
  std::vector<BlockQ8_K> A;
  nibble::test::RefProduct ref;  ///< Eigen y, scale = S (see the file comment)
  std::vector<float> scalar;     ///< the scalar table's gemm
};

const GemmCase& gemm_case(Format f, int shape_index, const Shape& s) {
  static std::map<std::pair<int, int>, GemmCase> cache;
  const auto key = std::make_pair(static_cast<int>(f), shape_index);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  GemmCase c;
  const std::uint32_t seed =
      1000u * static_cast<std::uint32_t>(f) + 2u * static_cast<std::uint32_t>(shape_index);
  c.W = random_blocks(f, s.rows * s.cols / 256, seed);
  c.A = random_act(s.n, s.cols, seed + 1);
  const std::size_t arb = static_cast<std::size_t>(s.cols / 256) * sizeof(BlockQ8_K);
  c.scalar = nibble::test::gemm_raw(nibble::test::scalar_table(), f, c.W.data(), s.rows, s.cols,
                                    c.A.data(), arb, s.n, 0, s.rows);
  std::vector<float> wd, wt;
  decode_rows(f, c.W, s.rows, s.cols, &wd, &wt);
  const std::vector<float> xd = dequant_act(c.A);
  c.ref = nibble::test::eigen_reference(wd.data(), s.rows, s.cols, xd.data(), s.n);
  c.ref.scale = nibble::test::eigen_reference(wt.data(), s.rows, s.cols, xd.data(), s.n).scale;
  return cache.emplace(key, std::move(c)).first->second;
}

TEST_P(KQuantKernels, GemmMatchesScalarAndEigen) {
  // rows 1, 3, 17, 33, 256 (plus tails of the 4-row tiles), cols 256..4096, n 1, 2, 3, 7, 64
  // (plus 5 and 9: tails of the 5-column tiles; 8, 12, 13 and rows 16, 19, 40: the 16-row
  // engine of avx512vnni, its 8-column passes and masked row tails).
  const Shape shapes[] = {{1, 256, 1},    {3, 512, 2},    {17, 256, 3},  {33, 4096, 7},
                          {256, 4096, 1}, {17, 1024, 64}, {33, 768, 5},  {256, 512, 64},
                          {4, 2048, 2},   {1, 4096, 64},  {8, 256, 9},   {6, 1280, 1},
                          {33, 3072, 1},  {3, 256, 64},   {256, 256, 7}, {2, 4096, 3},
                          {19, 512, 13},  {40, 768, 12},  {16, 256, 8}};
  for (Format f : kFormats) {
    const auto& k = nibble::test::fmt_kernels(table(), f);
    ASSERT_NE(k.gemm, nullptr) << nibble::traits(f).name;
    int si = 0;
    for (const Shape& s : shapes) {
      const GemmCase& c = gemm_case(f, si++, s);
      const std::string what = std::string(nibble::traits(f).name) +
                               " rows=" + std::to_string(s.rows) +
                               " cols=" + std::to_string(s.cols) + " n=" + std::to_string(s.n);
      const std::size_t arb = static_cast<std::size_t>(s.cols / 256) * sizeof(BlockQ8_K);
      const auto got = nibble::test::gemm_raw(table(), f, c.W.data(), s.rows, s.cols, c.A.data(),
                                              arb, s.n, 0, s.rows);
      nibble::test::expect_close(got, c.ref, kRtol, kAtol, what + " vs Eigen");
      nibble::test::RefProduct vs_scalar = c.ref;
      vs_scalar.y.assign(c.scalar.begin(), c.scalar.end());
      nibble::test::expect_close(got, vs_scalar, kRtol, kAtol, what + " vs scalar");
    }
  }
}

TEST_P(KQuantKernels, GemmRowRangeWritesOnlyItsRows) {
  // n = 6 and n = 13: on avx512vnni the two GEMM engines (unpacked tiles; 16-row lanes with
  // masked stores, used from 6 columns for Q4_K/Q5_K and 12 for Q6_K).
  for (const std::int64_t n : {std::int64_t{6}, std::int64_t{13}})
    for (Format f : kFormats) {
      const std::int64_t rows = 37, cols = 512, r0 = 5, r1 = 30;
      const auto W = random_blocks(f, rows * cols / 256, 901);
      const auto A = random_act(n, cols, 902);
      const std::size_t arb = static_cast<std::size_t>(cols / 256) * sizeof(BlockQ8_K);
      const auto full =
          nibble::test::gemm_raw(table(), f, W.data(), rows, cols, A.data(), arb, n, 0, rows);
      const auto part =
          nibble::test::gemm_raw(table(), f, W.data(), rows, cols, A.data(), arb, n, r0, r1);
      for (std::int64_t j = 0; j < n; ++j) {
        for (std::int64_t r = 0; r < rows; ++r) {
          const float v = part[static_cast<std::size_t>(j * rows + r)];
          if (r < r0 || r >= r1) {
            EXPECT_TRUE(std::isnan(v)) << nibble::traits(f).name << " wrote row " << r;
          } else {
            // Same rows and columns, same tiles or fewer: compared with the full-range call.
            const float u = full[static_cast<std::size_t>(j * rows + r)];
            EXPECT_NEAR(v, u, 1e-5 * (std::fabs(u) + 1e-3)) << nibble::traits(f).name << " r=" << r;
          }
        }
      }
    }
}

NIBBLE_INSTANTIATE_KERNEL_TEST(KQuantKernels);

// ---- golden data (ggml): scalar table only ----

std::vector<std::uint8_t> read_file(const std::string& name) {
  const std::string path = std::string(NIBBLE_TEST_DATA_DIR) + "/" + name;
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  std::vector<std::uint8_t> v;
  if (!fp) return v;
  std::uint8_t buf[4096];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, fp)) > 0) v.insert(v.end(), buf, buf + got);
  std::fclose(fp);
  return v;
}

const char* const kCases[] = {"gauss_s1", "gauss_s0.02", "uniform_pm1",
                              "zeros",    "const_0.75",  "student_t3"};

TEST(KQuantGolden, ScalarDequantAndDot) {
  const auto& t = nibble::test::scalar_table();
  for (Format f : kFormats) {
    const std::string fn = nibble::traits(f).name;
    for (const char* c : kCases) {
      const std::string base = std::string(c) + "." + fn;
      const auto blocks = read_file(base + ".blocks");
      const auto deq = read_file(base + ".dequant.f32");
      const auto act = read_file(std::string(c) + "." + fn + "_q8_K.act.blocks");
      const auto exact = read_file(std::string(c) + "." + fn + "_q8_K.dotexact.f64");
      ASSERT_EQ(blocks.size(), 16 * block_bytes(f)) << base;
      ASSERT_EQ(deq.size(), 4096u * 4) << base;
      ASSERT_EQ(act.size(), 16 * sizeof(BlockQ8_K)) << base;
      ASSERT_EQ(exact.size(), 8u) << base;
      std::vector<float> want(4096), got(4096);
      std::memcpy(want.data(), deq.data(), deq.size());
      nibble::test::fmt_kernels(t, f).dequant(blocks.data(), 4096, got.data());
      nibble::test::expect_bitwise_equal(got, want, base + " dequant");
      double dot_exact;
      std::memcpy(&dot_exact, exact.data(), 8);
      std::vector<float> wd, wt;
      decode_rows(f, blocks, 1, 4096, &wd, &wt);
      std::vector<BlockQ8_K> a(16);
      std::memcpy(a.data(), act.data(), act.size());
      const std::vector<float> xd = dequant_act(a);
      double s = 0;
      for (int i = 0; i < 4096; ++i) s += static_cast<double>(wt[i]) * std::fabs(xd[i]);
      for (const auto& v : nibble::test::variants()) {
        const auto y = nibble::test::gemm_raw(*v.table, f, blocks.data(), 1, 4096, a.data(),
                                              16 * sizeof(BlockQ8_K), 1, 0, 1);
        EXPECT_NEAR(y[0], dot_exact, kRtol * s + kAtol) << base << " dot on " << v.name;
      }
    }
  }
}

}  // namespace
