// Kernels of the simple formats (f32, f16, q8_0, nf4, fp4) and the activation quantizers, on
// every runnable ISA table variant (the KernelTest fixture of kernel_test_util.hpp).
//
// What is checked, and against what (never against the code under test):
//  - activation quantizers (Q8_0 CPU variant, Q8_K): byte-identical to nibble::ref::* and to the
//    ggml golden activation blocks in tests/data;
//  - dequantizers: bit-identical to the scalar reference codecs of nibble/formats;
//  - GEMM/GEMV: against Eigen in double on the dequantized weights and (dequantized)
//    activations, |y - ref| <= rtol * sum_k |w_k x_k| with rtol = 1e-5 (float accumulation of
//    up to 4096 products); q8_0 GEMV additionally bit-identical to the scalar table on every
//    ISA (GEMM within 2e-5 of it: the repacked engine's float order differs) and to ggml's golden
//    vec_dot results, and exact (== Eigen in double) when every float step is exact (power-of-two
//    scales, small integer sums), which checks the integer dot products of every path;
//  - row sub-ranges give the same bits as the full range (tiling does not change results).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "nibble/core/cpu.hpp"

namespace {

using nibble::Format;
using nibble::test::KernelTest;
namespace nt = nibble::test;

constexpr double kRtol = 1e-5;

std::vector<std::uint8_t> read_file(const std::string& name) {
  const std::string path = std::string(NIBBLE_TEST_DATA_DIR) + "/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(f)),
                                   std::istreambuf_iterator<char>());
}

std::vector<float> read_f32(const std::string& name) {
  const std::vector<std::uint8_t> b = read_file(name);
  std::vector<float> v(b.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Activation rows that exercise the quantizers' edge cases (all multiples of 256 long).
std::vector<std::vector<float>> activation_cases() {
  std::vector<std::vector<float>> cases;
  cases.push_back(nt::random_normal(4096, 11));
  cases.push_back(nt::random_normal(512, 12, 1e-20f));  // tiny: fp16(d) underflows
  cases.push_back(nt::random_normal(512, 13, 1e30f));   // huge: fp16(d) overflows to inf
  cases.push_back(std::vector<float>(512, 0.0f));       // zeros
  cases.push_back(std::vector<float>(512, -0.75f));     // constant
  {
    // Exact .5 ties after scaling: amax = 127 gives id = 1 (Q8_0).
    std::vector<float> t(512);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i % 64) - 31.5f;
    for (std::size_t i = 0; i < t.size(); i += 32) t[i] = 127.0f;
    cases.push_back(t);
  }
  {
    // Largest magnitude present with both signs (Q8_K keeps the first one).
    std::vector<float> t = nt::random_uniform(512, 14, -1.0f, 1.0f);
    t[3] = -2.0f;
    t[100] = 2.0f;
    t[300] = 2.0f;
    t[301] = -2.0f;
    cases.push_back(t);
  }
  {
    // Blocks whose max |x| is so small that the inverse scale overflows to inf (1e-38, and a
    // subnormal 1e-40): the references store Q8_K zero quants and sums with d = -0, and Q8_0
    // quants of -128 (x86's conversion of inf / NaN); scalar and NEON failed this before.
    std::vector<float> t = nt::random_normal(512, 16);
    for (int i = 0; i < 256; ++i) t[i] = 1e-38f * static_cast<float>(i % 7 - 3);
    for (int i = 256; i < 512; ++i) t[i] *= 1e-40f;
    cases.push_back(t);
  }
  {
    // Mixed magnitudes per block and a zero block in the middle.
    std::vector<float> t = nt::random_normal(1024, 15);
    for (int i = 256; i < 512; ++i) t[i] = 0.0f;
    for (int i = 0; i < 32; ++i) t[i] *= 1e4f;
    cases.push_back(t);
  }
  return cases;
}

class BasicKernels : public KernelTest {};

TEST_P(BasicKernels, ActivationQ8_0MatchesReference) {
  auto q = table().quantize_act_q8_0;
  ASSERT_NE(q, nullptr);
  for (const std::vector<float>& x : activation_cases()) {
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    std::vector<std::uint8_t> got(static_cast<std::size_t>(n / 32 * 34), 0xAA);
    std::vector<std::uint8_t> want(got.size(), 0x55);
    q(x.data(), n, got.data());
    nibble::ref::quantize_q8_0_act(x.data(), reinterpret_cast<nibble::BlockQ8_0*>(want.data()), n);
    nt::expect_bytes_equal(got, want, variant_name() + " q8_0 act, n = " + std::to_string(n));
  }
}

TEST_P(BasicKernels, ActivationQ8_KMatchesReference) {
  auto q = table().quantize_act_q8_K;
  ASSERT_NE(q, nullptr);
  for (const std::vector<float>& x : activation_cases()) {
    const std::int64_t n = static_cast<std::int64_t>(x.size());
    std::vector<std::uint8_t> got(static_cast<std::size_t>(n / 256 * 292), 0xAA);
    std::vector<std::uint8_t> want(got.size(), 0x55);
    q(x.data(), n, got.data());
    nibble::ref::quantize_q8_K(x.data(), reinterpret_cast<nibble::BlockQ8_K*>(want.data()), n);
    nt::expect_bytes_equal(got, want, variant_name() + " q8_K act, n = " + std::to_string(n));
  }
}

TEST_P(BasicKernels, ActivationQuantizersMatchGgmlGolden) {
  for (const char* name :
       {"gauss_s1", "gauss_s0.02", "uniform_pm1", "zeros", "const_0.75", "student_t3"}) {
    const std::string base = name;
    const std::vector<float> act = read_f32(base + ".act.f32");
    ASSERT_EQ(act.size(), 4096u) << base;
    std::vector<std::uint8_t> got0(128 * 34), gotk(16 * 292);
    table().quantize_act_q8_0(act.data(), 4096, got0.data());
    table().quantize_act_q8_K(act.data(), 4096, gotk.data());
    nt::expect_bytes_equal(got0, read_file(base + ".q8_0_q8_0.act.blocks"), base + " q8_0 act");
    nt::expect_bytes_equal(gotk, read_file(base + ".q4_K_q8_K.act.blocks"), base + " q8_K act");
    // Q8_K storage blocks of the input row come from the same (reference) quantizer.
    const std::vector<float> in = read_f32(base + ".input.f32");
    table().quantize_act_q8_K(in.data(), 4096, gotk.data());
    nt::expect_bytes_equal(gotk, read_file(base + ".q8_K.blocks"), base + " q8_K input");
  }
}

// Reference dequantization of rows x cols weights (nibble/formats codecs).
std::vector<float> reference_dequant(Format f, const std::vector<std::uint8_t>& q,
                                     std::int64_t rows, std::int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  const std::int64_t n = rows * cols;
  switch (f) {
    case Format::f32:
      std::memcpy(out.data(), q.data(), out.size() * 4);
      break;
    case Format::f16:
      for (std::int64_t i = 0; i < n; ++i) {
        nibble::fp16_t h;
        std::memcpy(&h, q.data() + 2 * i, 2);
        out[static_cast<std::size_t>(i)] = nibble::fp16_to_fp32(h);
      }
      break;
    case Format::q8_0:
      nibble::ref::dequantize_q8_0(reinterpret_cast<const nibble::BlockQ8_0*>(q.data()), out.data(),
                                   n);
      break;
    case Format::nf4:
    case Format::fp4:
      nibble::ref::dequantize_nf4(reinterpret_cast<const nibble::BlockNF4*>(q.data()), out.data(),
                                  n, f == Format::fp4);
      break;
    default:
      ADD_FAILURE() << "unexpected format";
  }
  return out;
}

// Weights of a format, quantized by the reference codecs (independent of the tables).
std::vector<std::uint8_t> reference_quantize(Format f, const std::vector<float>& w,
                                             std::int64_t rows, std::int64_t cols) {
  std::vector<std::uint8_t> q(nt::row_size(f, cols) * static_cast<std::size_t>(rows));
  const std::int64_t n = rows * cols;
  switch (f) {
    case Format::f32:
      std::memcpy(q.data(), w.data(), q.size());
      break;
    case Format::f16:
      for (std::int64_t i = 0; i < n; ++i) {
        const nibble::fp16_t h = nibble::fp32_to_fp16(w[static_cast<std::size_t>(i)]);
        std::memcpy(q.data() + 2 * i, &h, 2);
      }
      break;
    case Format::q8_0:
      nibble::ref::quantize_q8_0(w.data(), reinterpret_cast<nibble::BlockQ8_0*>(q.data()), n);
      break;
    case Format::nf4:
    case Format::fp4:
      nibble::ref::quantize_nf4(w.data(), reinterpret_cast<nibble::BlockNF4*>(q.data()), n,
                                f == Format::fp4);
      break;
    default:
      ADD_FAILURE() << "unexpected format";
  }
  return q;
}

const Format kFormats[] = {Format::f32, Format::f16, Format::q8_0, Format::nf4, Format::fp4};

TEST_P(BasicKernels, DequantMatchesReference) {
  for (Format f : kFormats) {
    const auto& k = nt::fmt_kernels(table(), f);
    ASSERT_NE(k.dequant, nullptr) << nibble::traits(f).name;
    for (std::int64_t cols : {std::int64_t{64}, std::int64_t{4096}}) {
      const std::int64_t rows = 3;
      std::vector<float> w = nt::random_normal(static_cast<std::size_t>(rows * cols), 21, 0.05f);
      w[5] = 0.0f;
      w[6] = -0.0f;
      const std::vector<std::uint8_t> q = reference_quantize(f, w, rows, cols);
      std::vector<float> got(w.size(), std::nanf(""));
      k.dequant(q.data(), rows * cols, got.data());
      nt::expect_bitwise_equal(got, reference_dequant(f, q, rows, cols),
                               variant_name() + " dequant " + nibble::traits(f).name);
    }
  }
  // f16 specials: subnormals, infinities, largest finite.
  const std::uint16_t specials[16] = {0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00,
                                      0x8001, 0x8000, 0x0000, 0x3C00, 0xBC00, 0x3555,
                                      0x0200, 0x83FF, 0xFBFF, 0x1234};
  std::vector<std::uint8_t> raw(32);
  std::memcpy(raw.data(), specials, 32);
  std::vector<float> got(16);
  nt::fmt_kernels(table(), Format::f16).dequant(raw.data(), 16, got.data());
  for (int i = 0; i < 16; ++i) {
    const float want = nibble::fp16_to_fp32(specials[i]);
    EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0) << "f16 0x" << std::hex << specials[i];
  }
}

struct Shape {
  std::int64_t rows, cols, n;
};

std::vector<Shape> shapes_for(Format f) {
  const std::int64_t blk = nibble::traits(f).block_elems == 1 ? 64 : nibble::traits(f).block_elems;
  std::vector<Shape> s = {{1, blk, 1},       {3, blk, 2},    {17, 4 * blk, 3}, {33, 8 * blk, 7},
                          {16, 2 * blk, 64}, {256, 4096, 1}, {40, 1024, 9},    {5, 3 * blk, 3}};
  if (f == Format::f32 || f == Format::f16) {
    s.push_back({5, 67, 3});  // cols not a multiple of any vector width
    s.push_back({7, 1, 2});
    // GEMV row groups of 4 or 8 (FloatGemv::four_streams) with a tail, and with a column tail.
    s.push_back({21, 320, 1});
    s.push_back({13, 67, 1});
  }
  return s;
}

TEST_P(BasicKernels, GemmMatchesEigenAndScalar) {
  for (Format f : kFormats) {
    ASSERT_NE(nt::fmt_kernels(table(), f).gemm, nullptr) << nibble::traits(f).name;
    for (const Shape& s : shapes_for(f)) {
      const std::string what = variant_name() + " " + nibble::traits(f).name + " " +
                               std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                               " n=" + std::to_string(s.n);
      const std::vector<float> w =
          nt::random_normal(static_cast<std::size_t>(s.rows * s.cols),
                            static_cast<std::uint32_t>(s.rows + 7 * s.n), 0.05f);
      const std::vector<float> x = nt::random_normal(static_cast<std::size_t>(s.n * s.cols),
                                                     static_cast<std::uint32_t>(s.cols + s.n));
      const std::vector<std::uint8_t> q = reference_quantize(f, w, s.rows, s.cols);
      const std::vector<float> wd = reference_dequant(f, q, s.rows, s.cols);
      // The activations the kernel sees: fp32, or Q8_0 blocks from the reference quantizer.
      std::size_t arb = 0;
      std::vector<std::uint8_t> a;
      std::vector<float> xd = x;
      if (f == Format::q8_0) {
        arb = nt::row_size(Format::q8_0, s.cols);
        a.resize(arb * static_cast<std::size_t>(s.n));
        for (std::int64_t j = 0; j < s.n; ++j) {
          nibble::ref::quantize_q8_0_act(x.data() + j * s.cols,
                                         reinterpret_cast<nibble::BlockQ8_0*>(a.data() + j * arb),
                                         s.cols);
          nibble::ref::dequantize_q8_0(
              reinterpret_cast<const nibble::BlockQ8_0*>(a.data() + j * arb),
              xd.data() + j * s.cols, s.cols);
        }
      } else {
        arb = static_cast<std::size_t>(s.cols) * 4;
        a.resize(arb * static_cast<std::size_t>(s.n));
        std::memcpy(a.data(), x.data(), a.size());
      }
      const std::vector<float> got =
          nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, a.data(), arb, s.n, 0, s.rows);
      const nt::RefProduct ref = nt::eigen_reference(wd.data(), s.rows, s.cols, xd.data(), s.n);
      // NF4/FP4 GEMV on x86 rounds the code book and the activations to int16: its rounding
      // bound on top of the fp32 tolerance (0 elsewhere).
      const bool int16 =
          (f == Format::nf4 || f == Format::fp4) && s.n == 1 && nt::nf4_int16_gemv(variant_name());
      const std::vector<double> extra =
          int16 ? nt::nf4_int16_bound(q.data(), s.rows, s.cols, x.data(), s.n, f == Format::fp4)
                : std::vector<double>(ref.y.size(), 0.0);
      nt::expect_close(got, ref, kRtol, extra, what + " vs Eigen");
      const std::vector<float> sca = nt::gemm_raw(nt::scalar_table(), f, q.data(), s.rows, s.cols,
                                                  a.data(), arb, s.n, 0, s.rows);
      if (f == Format::q8_0 && s.n == 1) {
        // GEMV keeps ggml's operation order on every ISA; GEMM (the repacked integer engine of
        // kernels/detail/rows-inl.hpp) scales per row lane in another float order.
        nt::expect_bitwise_equal(got, sca, what + " vs scalar (bit-identical)");
      } else {
        nt::RefProduct vs = ref;
        for (std::size_t i = 0; i < vs.y.size(); ++i) vs.y[i] = sca[i];
        nt::expect_close(got, vs, 2 * kRtol, extra, what + " vs scalar");
      }
      // The exact variant (fp32 activations), where the table has one: within the fp32
      // tolerance of Eigen for every n.
      if (nt::fmt_kernels(table(), f).gemm_exact) {
        nibble::kernels::KernelTable exact = table();
        nibble::kernels::FormatKernels& e = exact.fmt[static_cast<int>(f)];
        e.gemm = e.gemm_exact;
        e.act_bytes = e.act_bytes_exact;
        e.act_relayout = e.act_relayout_exact;
        const std::vector<float> ge =
            nt::gemm_raw(exact, f, q.data(), s.rows, s.cols, a.data(), arb, s.n, 0, s.rows);
        nt::expect_close(ge, ref, kRtol, 0.0, what + " exact vs Eigen");
      }
      // A sub-range of rows gives the same bits as the full range.
      if (s.rows >= 3) {
        const std::int64_t r0 = 1, r1 = s.rows - 1;
        const std::vector<float> part =
            nt::gemm_raw(table(), f, q.data(), s.rows, s.cols, a.data(), arb, s.n, r0, r1);
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

TEST_P(BasicKernels, Q8_0DotMatchesGgmlGolden) {
  for (const char* name :
       {"gauss_s1", "gauss_s0.02", "uniform_pm1", "zeros", "const_0.75", "student_t3"}) {
    const std::string base = name;
    const std::vector<std::uint8_t> w = read_file(base + ".q8_0.blocks");
    const std::vector<std::uint8_t> a = read_file(base + ".q8_0_q8_0.act.blocks");
    const std::vector<float> want = read_f32(base + ".q8_0_q8_0.dot.f32");
    ASSERT_EQ(w.size(), 128u * 34u);
    ASSERT_EQ(want.size(), 1u);
    const std::vector<float> got =
        nt::gemm_raw(table(), Format::q8_0, w.data(), 1, 4096, a.data(), a.size(), 1, 0, 1);
    EXPECT_EQ(std::memcmp(&got[0], &want[0], 4), 0)
        << base << ": " << got[0] << " vs ggml " << want[0];
  }
}

TEST_P(BasicKernels, Q8_0ExactWhenFloatStepsAreExact) {
  // Weight scale 2^-6, activation scale 2^-7, |q| <= 127, 512 columns: every product and
  // partial sum is an exact float, so every ISA must return exactly the double result.
  const std::int64_t rows = 19, cols = 512, n = 5;
  std::mt19937 g(99);
  std::uniform_int_distribution<int> qd(-127, 127);
  std::vector<std::uint8_t> W(nt::row_size(Format::q8_0, cols) * rows);
  std::vector<float> wd(static_cast<std::size_t>(rows * cols));
  for (std::int64_t b = 0; b < rows * cols / 32; ++b) {
    nibble::BlockQ8_0 blk;
    blk.d = nibble::fp32_to_fp16(1.0f / 64);
    for (int j = 0; j < 32; ++j) {
      blk.qs[j] = static_cast<std::int8_t>(qd(g));
      wd[static_cast<std::size_t>(b * 32 + j)] = blk.qs[j] / 64.0f;
    }
    std::memcpy(W.data() + b * 34, &blk, 34);
  }
  // Activations x = q / 128 with one |q| = 127 per block: quantized exactly (d = 2^-7).
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 32 == 0 ? 127 : qd(g)) / 128.0f;
  std::size_t arb = 0;
  const std::vector<std::uint8_t> A =
      nt::quantize_act(table(), Format::q8_0, x.data(), n, cols, &arb);
  const std::vector<float> got =
      nt::gemm_raw(table(), Format::q8_0, W.data(), rows, cols, A.data(), arb, n, 0, rows);
  const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), n);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(static_cast<double>(got[i]), ref.y[i]) << variant_name() << " element " << i;
  }
}

TEST_P(BasicKernels, Nf4EdgeBlocks) {
  // Zero absmax, all codes, negative absmax (not produced by the quantizer but well defined).
  for (Format f : {Format::nf4, Format::fp4}) {
    const std::int64_t rows = 3, cols = 128, n = 2;
    std::vector<std::uint8_t> W(nt::row_size(f, cols) * rows);
    for (std::int64_t b = 0; b < rows * cols / 64; ++b) {
      const float amax = b == 0 ? 0.0f : (b == 3 ? -1.5f : 0.25f * static_cast<float>(b));
      std::memcpy(W.data() + b * 36, &amax, 4);
      for (int i = 0; i < 32; ++i)
        W[static_cast<std::size_t>(b * 36 + 4 + i)] = static_cast<std::uint8_t>(i * 8 + b);
    }
    const std::vector<float> wd = reference_dequant(f, W, rows, cols);
    const std::vector<float> x = nt::random_normal(static_cast<std::size_t>(n * cols), 5);
    const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), n);
    const std::vector<float> got = nt::gemm_raw(table(), f, W.data(), rows, cols, x.data(),
                                                static_cast<std::size_t>(cols) * 4, n, 0, rows);
    nt::expect_close(got, ref, kRtol, 0.0,
                     variant_name() + " " + nibble::traits(f).name + " edge blocks");
    // The same blocks through the GEMV (n = 1).
    const std::vector<float> got1 = nt::gemm_raw(table(), f, W.data(), rows, cols, x.data(),
                                                 static_cast<std::size_t>(cols) * 4, 1, 0, rows);
    const nt::RefProduct ref1 = nt::eigen_reference(wd.data(), rows, cols, x.data(), 1);
    nt::expect_close(got1, ref1, kRtol,
                     nt::nf4_int16_gemv(variant_name())
                         ? nt::nf4_int16_bound(W.data(), rows, cols, x.data(), 1, f == Format::fp4)
                         : std::vector<double>(ref1.y.size(), 0.0),
                     variant_name() + " " + nibble::traits(f).name + " edge blocks, n = 1");
    std::vector<float> dq(wd.size());
    nt::fmt_kernels(table(), f).dequant(W.data(), rows * cols, dq.data());
    nt::expect_bitwise_equal(dq, wd, variant_name() + " edge dequant");
  }
}

// NF4/FP4 GEMV accuracy on LLM-like data, against the exact product of the dequantized weights
// (Eigen in double), next to the 4-bit format's own error (against the unquantized weights).
// The x86 int16 GEMV must stay within its rounding bound per element, within 5e-4 relative (l2)
// overall and at least 100 times below the format's own error; the fp32 GEMVs within 1e-5
// (fp32 accumulation of 4096 products, relative to |y|).
TEST_P(BasicKernels, Nf4GemvAccuracyOnLlmLikeData) {
  const std::int64_t rows = 64, cols = 4096;
  const bool int16 = nt::nf4_int16_gemv(variant_name());
  for (Format f : {Format::nf4, Format::fp4}) {
    for (int wkind = 0; wkind < 2; ++wkind) {
      std::mt19937 g(77 + wkind);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::student_t_distribution<float> td(4.0f);
      std::vector<float> w(static_cast<std::size_t>(rows * cols));
      for (float& v : w) v = 0.02f * (wkind == 0 ? nd(g) : td(g));
      const std::vector<std::uint8_t> q = reference_quantize(f, w, rows, cols);
      const std::vector<float> wd = reference_dequant(f, q, rows, cols);
      for (int xkind = 0; xkind < 3; ++xkind) {
        std::vector<float> x = nt::random_normal(static_cast<std::size_t>(cols), 300 + xkind);
        if (xkind >= 1)
          for (std::int64_t k = 0; k < cols; k += 97) x[static_cast<std::size_t>(k)] *= 20.0f;
        if (xkind == 2) {
          x[5] = 800.0f;
          x[1234] = -500.0f;
        }
        const std::vector<float> y = nt::gemm_raw(table(), f, q.data(), rows, cols, x.data(),
                                                  static_cast<std::size_t>(cols) * 4, 1, 0, rows);
        const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), 1);
        const nt::RefProduct orig = nt::eigen_reference(w.data(), rows, cols, x.data(), 1);
        double e2 = 0, r2 = 0, o2 = 0, t2 = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          e2 += (y[r] - ref.y[r]) * (y[r] - ref.y[r]);
          r2 += ref.y[r] * ref.y[r];
          o2 += (ref.y[r] - orig.y[r]) * (ref.y[r] - orig.y[r]);
          t2 += orig.y[r] * orig.y[r];
        }
        const double rel = std::sqrt(e2 / r2), own = std::sqrt(o2 / t2);
        const std::string what = variant_name() + " " + nibble::traits(f).name + " weights " +
                                 (wkind ? "student-t" : "gaussian") + ", activations " +
                                 (xkind == 0   ? "gaussian"
                                  : xkind == 1 ? "outliers"
                                               : "massive");
        std::printf("%-58s rel l2 error %.2e, 4-bit format's own %.3f\n", what.c_str(), rel, own);
        EXPECT_LE(rel, int16 ? 5e-4 : 1e-5) << what;
        EXPECT_LE(rel, own / 100) << what;
        nt::expect_close(
            y, ref, kRtol,
            int16 ? nt::nf4_int16_bound(q.data(), rows, cols, x.data(), 1, f == Format::fp4)
                  : std::vector<double>(ref.y.size(), 0.0),
            what);
      }
    }
  }
}

// Activation scales far from 1 (the int16 path's per-group scale must neither overflow nor
// flush), and double-quantized statistics: nibble's row blocks keep an fp32 absmax, so a
// bitsandbytes tensor with nested absmax enters the kernels as its decoded absmax
// (dynamic_map[code] * nested_absmax + offset, ALGORITHMS.md 5.4).
TEST_P(BasicKernels, Nf4GemvScalesAndDoubleQuant) {
  const std::int64_t rows = 24, cols = 1024;
  const bool int16 = nt::nf4_int16_gemv(variant_name());
  for (bool fp4 : {false, true}) {
    const Format f = fp4 ? Format::fp4 : Format::nf4;
    const std::vector<float> w =
        nt::random_normal(static_cast<std::size_t>(rows * cols), 40 + fp4, 0.03f);
    const nibble::nf4::Quantized dq = nibble::nf4::quantize(w.data(), rows * cols, 64, true, fp4);
    std::vector<nibble::BlockNF4> blocks(static_cast<std::size_t>(rows * cols / 64));
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      blocks[b].absmax =
          nibble::ref::dynamic_map[dq.qabsmax[b]] * dq.nested_absmax[b / 256] + dq.offset;
      std::memcpy(blocks[b].qs, dq.packed.data() + 32 * b, 32);
    }
    std::vector<float> wd(w.size());
    nibble::nf4::dequantize(dq, wd.data());
    for (float scale : {1.0f, 1e-32f, 1e-20f, 1e20f, 1e30f}) {
      std::vector<float> x = nt::random_normal(static_cast<std::size_t>(cols), 41);
      for (float& v : x) v *= scale;
      const std::vector<float> y = nt::gemm_raw(table(), f, blocks.data(), rows, cols, x.data(),
                                                static_cast<std::size_t>(cols) * 4, 1, 0, rows);
      const nt::RefProduct ref = nt::eigen_reference(wd.data(), rows, cols, x.data(), 1);
      nt::expect_close(y, ref, kRtol,
                       int16 ? nt::nf4_int16_bound(blocks.data(), rows, cols, x.data(), 1, fp4)
                             : std::vector<double>(ref.y.size(), 0.0),
                       variant_name() + " " + nibble::traits(f).name + " double-quant, x scale " +
                           std::to_string(scale));
    }
  }
}

// Non-finite activations (the public API rejects them; the kernels get them only through the
// table) give non-finite results, never a finite wrong number.
TEST_P(BasicKernels, Nf4GemvNonFiniteActivations) {
  const std::int64_t rows = 9, cols = 512;
  for (Format f : {Format::nf4, Format::fp4}) {
    const std::vector<float> w = nt::random_normal(static_cast<std::size_t>(rows * cols), 50, 0.1f);
    const std::vector<std::uint8_t> q = reference_quantize(f, w, rows, cols);
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      std::vector<float> x = nt::random_normal(static_cast<std::size_t>(cols), 51);
      x[300] = bad;
      const std::vector<float> y = nt::gemm_raw(table(), f, q.data(), rows, cols, x.data(),
                                                static_cast<std::size_t>(cols) * 4, 1, 0, rows);
      for (std::int64_t r = 0; r < rows; ++r)
        EXPECT_FALSE(std::isfinite(y[r])) << variant_name() << " " << nibble::traits(f).name
                                          << " row " << r << " = " << y[r] << " with x = " << bad;
    }
  }
}

// The tests that switch the vendor tunings (detail::set_vendor_tuning_override): restores the
// CPU's own choice when they end, also on a failed assertion.
struct TuningRestore {
  ~TuningRestore() { nibble::detail::set_vendor_tuning_override(-1); }
};

// Whether f is a weight format (not one of the activation formats q8_K / q8_1).
bool is_weight_format(Format f) {
  return f != Format::q8_K && f != Format::q8_1;
}

// The GEMV (n = 1) of the rows x cols matrix q in format f with x under each of two vendor
// tunings (detail::set_vendor_tuning_override), outputs prefilled with NaN.
std::array<std::vector<float>, 2> gemv_under_tunings(const nibble::kernels::KernelTable& t,
                                                     const nibble::Context& ctx, Format f,
                                                     const std::vector<std::uint8_t>& q,
                                                     std::int64_t rows, std::int64_t cols,
                                                     const std::vector<float>& x,
                                                     std::array<int, 2> tunings) {
  std::array<std::vector<float>, 2> y;
  for (int k = 0; k < 2; ++k) {
    nibble::detail::set_vendor_tuning_override(tunings[k]);
    y[k].assign(static_cast<std::size_t>(rows), std::nanf(""));
    nibble::detail::run_gemm(t, ctx, f, q.data(), rows, cols, x.data(), 1, y[k].data());
  }
  return y;
}

// The plain-layout GEMV reads a thread's rows either as groups of adjacent rows (AMD tuning) or
// as far-apart row streams (Intel tuning, gemv_groups in kernels/detail/intrin-common.hpp): both
// give the same bits for every weight format, on every ISA, with 1 and 3 threads and row counts
// whose runs end unevenly (35 rows: eight per stream and three tail rows).
// GemmMatchesEigenAndScalar checks whichever tuning this CPU picks against Eigen; this covers the
// other one.
TEST_P(BasicKernels, GemvRowStreamsAgree) {
  const TuningRestore restore;
  const std::int64_t cols = 256;
  const auto x = nt::random_normal(static_cast<std::size_t>(cols), 91);
  for (int fi = 0; fi <= static_cast<int>(nibble::kLastFormat); ++fi) {
    const Format f = static_cast<Format>(fi);
    if (!is_weight_format(f)) continue;
    for (std::int64_t rows : {35, 64, 150, 272}) {
      const auto w = nt::random_normal(static_cast<std::size_t>(rows * cols),
                                       static_cast<std::uint32_t>(rows + fi), 0.05f);
      std::vector<std::uint8_t> q(nibble::row_bytes(f, cols) * static_cast<std::size_t>(rows));
      nibble::quantize(f, w.data(), rows, cols, q.data());
      for (bool exact : {false, true}) {
        if (exact && f != Format::nf4 && f != Format::fp4) continue;
        for (int threads : {1, 3}) {
          nibble::Context ctx;
          ctx.threads = threads;
          ctx.exact_nf4 = exact;
          const auto y = gemv_under_tunings(table(), ctx, f, q, rows, cols, x, {0, 1});
          for (std::int64_t r = 0; r < rows; ++r) {
            ASSERT_TRUE(std::isfinite(y[0][r])) << nibble::traits(f).name << " row " << r;
            ASSERT_EQ(std::memcmp(&y[0][r], &y[1][r], sizeof(float)), 0)
                << variant_name() << " " << nibble::traits(f).name << (exact ? " exact " : " ")
                << rows << " rows, " << threads << " threads, row " << r << ": " << y[0][r]
                << " vs " << y[1][r];
          }
        }
      }
    }
  }
}

// Override 2 of detail::set_vendor_tuning_override takes the GEMV schemes chosen for AMD's
// family-25 cores (Zen 3 / Zen 4) on any CPU: Q8_0 and f16 in adjacent groups, the float formats'
// AMD schemes, Q6_K one row at a time on the 256-bit body (from the AVX-512 tables too). Elsewhere
// GemmMatchesEigenAndScalar never runs them. Every weight format's GEMV under override 2 against
// the same product under override 0 (whose schemes that test and GemvRowStreamsAgree cover): the
// schemes differ only in the order of the float steps, so every output agrees within 1e-5 of
// sum_k |w_k x_k| (the dequantized weights), on every ISA, with 1 and 3 threads. The float
// formats also at 4352 columns: up to 3072 (bf16 4096) they read one row at a time there
// (FloatGemv::one_row_x_family25), above it in their multi-row schemes.
TEST_P(BasicKernels, GemvFamily25SchemesAgree) {
  const TuningRestore restore;
  for (int fi = 0; fi <= static_cast<int>(nibble::kLastFormat); ++fi) {
    const Format f = static_cast<Format>(fi);
    if (!is_weight_format(f)) continue;
    const bool is_float = f == Format::f32 || f == Format::f16 || f == Format::bf16;
    const std::vector<std::int64_t> widths =
        is_float ? std::vector<std::int64_t>{512, 4352} : std::vector<std::int64_t>{512};
    for (std::int64_t cols : widths) {
      const auto x = nt::random_normal(static_cast<std::size_t>(cols), 93);
      for (std::int64_t rows : {35, 150}) {
        const auto w = nt::random_normal(static_cast<std::size_t>(rows * cols),
                                         static_cast<std::uint32_t>(3 * rows + fi), 0.05f);
        std::vector<std::uint8_t> q(nibble::row_bytes(f, cols) * static_cast<std::size_t>(rows));
        nibble::quantize(f, w.data(), rows, cols, q.data());
        std::vector<float> wd(static_cast<std::size_t>(rows * cols));
        nibble::dequantize(f, q.data(), rows, cols, wd.data());
        for (int threads : {1, 3}) {
          nibble::Context ctx;
          ctx.threads = threads;
          const auto y = gemv_under_tunings(table(), ctx, f, q, rows, cols, x, {0, 2});
          for (std::int64_t r = 0; r < rows; ++r) {
            double bound = 0;
            for (std::int64_t c = 0; c < cols; ++c)
              bound += std::fabs(static_cast<double>(wd[static_cast<std::size_t>(r * cols + c)]) *
                                 x[static_cast<std::size_t>(c)]);
            const float a = y[0][static_cast<std::size_t>(r)],
                        b = y[1][static_cast<std::size_t>(r)];
            ASSERT_TRUE(std::isfinite(a) && std::isfinite(b))
                << variant_name() << " " << nibble::traits(f).name << " row " << r;
            EXPECT_LE(std::fabs(static_cast<double>(a) - b), 1e-5 * bound)
                << variant_name() << " " << nibble::traits(f).name << " " << rows << " x " << cols
                << ", " << threads << " threads, row " << r << ": " << a << " vs " << b;
          }
        }
      }
    }
  }
}

NIBBLE_INSTANTIATE_KERNEL_TEST(BasicKernels);

}  // namespace
