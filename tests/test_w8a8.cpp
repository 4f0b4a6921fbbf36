// W8A8 (SmoothQuant) int8 x int8 kernels and the checked nibble::w8a8 API.
//
// What is checked, and against what (never against the code under test):
//  - every runnable kernel variant (KernelTest fixture: scalar, avx2, avx512, avx512vnni, neon,
//    neondot) against an integer reference written here (int64 sums, then the documented float
//    epilogue (float(sum) * w_scale) * a_scale): bit-exact; and against the scalar table:
//    bit-identical. Shapes rows {1, 3, 17, 33, 256} x cols {1, 7, 32, 33, 63, 64, 100, 127, 128,
//    200, 1000, 4096} x n {1, 2, 3, 7, 64}, split row ranges and a Y stride wider than rows;
//    extreme sums (|sum| ~ 2^31 at cols = kMaxCols, W = -128 allowed);
//  - quantize_weights / quantize_activations against the spec (ALGORITHMS.md 4.3): hand-made
//    half-to-even ties, no -128, zero rows -> d = 1e-5 / 127, and q * d equal (bit-exact) to the
//    Eigen fake quantizers of nibble/quant/smoothquant.hpp;
//  - gemm / gemv against the exact (double) product of the Eigen fake-quantized matrices:
//    |y - ref| <= 2^-22 * (sum_k |xq_k wq_k| + |ref|) (one rounding of each fake-quant element
//    plus the three float roundings of the epilogue), and against calib's float
//    smoothquant::w8a8_forward: |y - fwd| <= 1e-5 * sum_k |xq_k wq_k| (float accumulation only);
//  - bit-identical results for threads 1, 2, 3, a caller pool, and every runnable ISA;
//  - bad input -> nibble::Error with outputs untouched.
// A disabled test (W8A8Perf) prints single-thread GEMV GB/s and GEMM GOP/s per variant:
//   test_w8a8 --gtest_also_run_disabled_tests --gtest_filter='*Perf*'
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.hpp"
#include "nibble/core/cpu.hpp"
#include "nibble/quant/smoothquant.hpp"
#include "nibble/quant/w8a8.hpp"

namespace {

using nibble::test::KernelTest;
namespace w8 = nibble::w8a8;
namespace nt = nibble::test;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<std::int8_t> random_i8(std::size_t n, std::uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::int8_t> v(n);
  for (auto& x : v) x = static_cast<std::int8_t>(d(g));
  return v;
}

// The independent integer reference: int64 sums, then the documented float epilogue.
float ref_out(std::int64_t sum, float ws, float as) {
  return (static_cast<float>(sum) * ws) * as;
}

std::vector<float> ref_gemm(const std::vector<std::int8_t>& W, const std::vector<float>& ws,
                            std::int64_t rows, std::int64_t cols, const std::vector<std::int8_t>& A,
                            const std::vector<float>& as, std::int64_t n, std::int64_t ldy) {
  std::vector<float> Y(static_cast<std::size_t>(n * ldy), std::nanf(""));
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int64_t s = 0;
      for (std::int64_t k = 0; k < cols; ++k)
        s +=
            static_cast<std::int64_t>(W[r * cols + k]) * static_cast<std::int64_t>(A[j * cols + k]);
      Y[j * ldy + r] = ref_out(s, ws[r], as[j]);
    }
  }
  return Y;
}

using GemmFn = decltype(nibble::kernels::KernelTable::w8a8_gemm);

// Runs fn over rows [0, rows) in the given pieces; Y (n x ldy) starts as NaN.
std::vector<float> run_kernel(GemmFn fn, const std::vector<std::int8_t>& W,
                              const std::vector<float>& ws, std::int64_t rows, std::int64_t cols,
                              const std::vector<std::int8_t>& A, const std::vector<float>& as,
                              std::int64_t n, std::int64_t ldy,
                              const std::vector<std::int64_t>& cuts = {}) {
  std::vector<float> Y(static_cast<std::size_t>(n * ldy), std::nanf(""));
  std::int64_t r0 = 0;
  std::vector<std::int64_t> ends = cuts;
  ends.push_back(rows);
  for (std::int64_t r1 : ends) {
    fn(W.data(), ws.data(), r0, r1, cols, A.data(), as.data(), n, Y.data(), ldy);
    r0 = r1;
  }
  return Y;
}

class W8A8Kernels : public KernelTest {};

TEST_P(W8A8Kernels, MatchesIntegerReferenceAndScalar) {
  const GemmFn fn = table().w8a8_gemm;
  const GemmFn sfn = nt::scalar_table().w8a8_gemm;
  ASSERT_NE(fn, nullptr) << variant_name() << " has no w8a8 kernel";
  ASSERT_NE(sfn, nullptr);
  const std::int64_t rows_list[] = {1, 3, 17, 33, 256};
  const std::int64_t cols_list[] = {1, 7, 32, 33, 63, 64, 100, 127, 128, 200, 1000, 4096};
  const std::int64_t n_list[] = {1, 2, 3, 7, 64};
  std::uint32_t seed = 100;
  for (std::int64_t rows : rows_list) {
    for (std::int64_t cols : cols_list) {
      for (std::int64_t n : n_list) {
        // Keep the suite fast: the biggest shapes only with a few n.
        if (rows == 256 && cols == 4096 && n != 1 && n != 7) continue;
        ++seed;
        // W: full int8 range (the kernel contract); A: [-127, 127] (what the quantizer makes).
        const auto W = random_i8(static_cast<std::size_t>(rows * cols), seed, -128, 127);
        const auto A = random_i8(static_cast<std::size_t>(n * cols), seed + 7777, -127, 127);
        const auto ws = nt::random_uniform(static_cast<std::size_t>(rows), seed + 1, 1e-4f, 2e-2f);
        const auto as = nt::random_uniform(static_cast<std::size_t>(n), seed + 2, 1e-3f, 1e-1f);
        const std::int64_t ldy = rows + 3;
        const std::string what = variant_name() + " rows=" + std::to_string(rows) +
                                 " cols=" + std::to_string(cols) + " n=" + std::to_string(n);
        const auto ref = ref_gemm(W, ws, rows, cols, A, as, n, ldy);
        const auto got = run_kernel(fn, W, ws, rows, cols, A, as, n, ldy);
        nt::expect_bitwise_equal(got, ref, what + " vs int64 reference");
        const auto sc = run_kernel(sfn, W, ws, rows, cols, A, as, n, ldy);
        nt::expect_bitwise_equal(got, sc, what + " vs scalar table");
        if (rows >= 3) {  // split row range (tile edges at odd rows)
          const std::int64_t a = rows / 3, b = rows / 3 + rows / 2;
          const auto split = run_kernel(fn, W, ws, rows, cols, A, as, n, ldy, {a, b});
          nt::expect_bitwise_equal(split, ref, what + " split rows");
        }
        if (n == 1) {
          // Both vendor tunings of the GEMV: adjacent row groups, and far-apart row streams
          // (33 rows: eight per stream and one tail row; 256: 64 per stream).
          struct Restore {
            ~Restore() { nibble::detail::set_vendor_tuning_override(-1); }
          } restore;
          for (int tuning : {0, 1}) {
            nibble::detail::set_vendor_tuning_override(tuning);
            const auto t = run_kernel(fn, W, ws, rows, cols, A, as, n, ldy);
            nt::expect_bitwise_equal(t, ref, what + " tuning " + std::to_string(tuning));
          }
        }
        if (HasFailure()) return;
      }
    }
  }
}

TEST_P(W8A8Kernels, ExtremeSumsAtMaxCols) {
  const GemmFn fn = table().w8a8_gemm;
  ASSERT_NE(fn, nullptr);
  const std::int64_t cols = w8::kMaxCols, rows = 5, n = 3;
  std::vector<std::int8_t> W(static_cast<std::size_t>(rows * cols));
  std::vector<std::int8_t> A(static_cast<std::size_t>(n * cols));
  for (std::int64_t k = 0; k < cols; ++k) {
    W[0 * cols + k] = -128;  // 128 * 127 * cols ~ 2^31 - 2^24
    W[1 * cols + k] = 127;
    W[2 * cols + k] = static_cast<std::int8_t>(k % 2 ? 127 : -127);
    W[3 * cols + k] = -127;
    W[4 * cols + k] = static_cast<std::int8_t>(k % 3 == 0 ? -128 : 1);
    A[0 * cols + k] = -127;
    A[1 * cols + k] = 127;
    A[2 * cols + k] = static_cast<std::int8_t>(k % 2 ? -127 : 127);
  }
  const std::vector<float> ws = {1.0f, 0.5f, 0.25f, 3.0f, 1.0f};
  const std::vector<float> as = {1.0f, 1.0f, 2.0f};
  const auto ref = ref_gemm(W, ws, rows, cols, A, as, n, rows);
  const auto got = run_kernel(fn, W, ws, rows, cols, A, as, n, rows);
  nt::expect_bitwise_equal(got, ref, variant_name() + " extreme sums");
  const auto gemv = run_kernel(fn, W, ws, rows, cols, A, as, 1, rows);
  nt::expect_bitwise_equal(gemv, std::vector<float>(ref.begin(), ref.begin() + rows),
                           variant_name() + " extreme sums gemv");
  EXPECT_EQ(ref[0], static_cast<float>(128.0 * 127.0 * cols));  // the sum itself is exact
}

NIBBLE_INSTANTIATE_KERNEL_TEST(W8A8Kernels);

// ---- quantizers ----

TEST(W8A8Quant, WeightsHandMadeTiesAndRange) {
  // Row 0: max 127 -> d = 1 exactly; ties 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2.
  // Row 1: zeros -> d = 1e-5 / 127, codes 0.  Row 2: max 254 -> d = 2: 3 -> 2 (1.5 -> 2),
  // 5 -> 2 (2.5 -> 2), -254 -> -127.
  const std::vector<float> W = {127.0f, 0.5f, 1.5f,   2.5f,  -0.5f, -1.5f, -127.0f, 126.5f,  //
                                0.0f,   0.0f, 0.0f,   0.0f,  0.0f,  0.0f,  0.0f,    0.0f,    //
                                3.0f,   5.0f, -254.f, 254.f, 1.0f,  -1.0f, 0.0f,    7.0f};
  const w8::Weights q = w8::quantize_weights(W.data(), 3, 8);
  ASSERT_EQ(q.rows, 3);
  ASSERT_EQ(q.cols, 8);
  ASSERT_EQ(q.q.size(), 24u);
  ASSERT_EQ(q.scale.size(), 3u);
  EXPECT_EQ(q.scale[0], 1.0f);
  EXPECT_EQ(q.scale[1], 1e-5f / 127.0f);
  EXPECT_EQ(q.scale[2], 2.0f);
  const std::int8_t want[24] = {127, 0, 2,    2,   0, -2, -127, 126,  //
                                0,   0, 0,    0,   0, 0,  0,    0,    //
                                2,   2, -127, 127, 0, 0,  0,    4};
  for (int i = 0; i < 24; ++i) EXPECT_EQ(q.q[i], want[i]) << "element " << i;
}

TEST(W8A8Quant, MatchesEigenFakeQuantAndSpec) {
  for (std::int64_t cols : {1, 33, 100, 4096}) {
    const std::int64_t rows = 17;
    std::vector<float> W = nt::random_normal(static_cast<std::size_t>(rows * cols), 5 + cols, 0.3f);
    for (std::int64_t k = 0; k < cols; ++k) W[3 * cols + k] = 0.0f;  // zero row
    W[5 * cols] = -7.0f;                                             // negative max
    const w8::Weights q = w8::quantize_weights(W.data(), rows, cols);
    const MatF Wm = Eigen::Map<const MatF>(W.data(), rows, cols);
    const Eigen::MatrixXf F = nibble::smoothquant::fake_quant_weight_per_channel(Wm);
    for (std::int64_t r = 0; r < rows; ++r) {
      float m = 0.0f;
      for (std::int64_t k = 0; k < cols; ++k) m = std::max(m, std::fabs(W[r * cols + k]));
      const float d = std::max(m, 1e-5f) / 127.0f;
      ASSERT_EQ(q.scale[r], d) << "row " << r;
      for (std::int64_t k = 0; k < cols; ++k) {
        const int c = q.q[r * cols + k];
        ASSERT_GE(c, -127);
        ASSERT_LE(c, 127);
        ASSERT_EQ(static_cast<float>(c), std::nearbyint(W[r * cols + k] / d));
        ASSERT_EQ(static_cast<float>(c) * d, F(r, k)) << "row " << r << " col " << k;
      }
    }
    EXPECT_EQ(q.scale[3], 1e-5f / 127.0f);
    EXPECT_EQ(q.q[5 * cols], -127);
  }
}

TEST(W8A8Quant, ActivationsPerTokenAndPerTensor) {
  const std::int64_t n = 7, cols = 300;
  std::vector<float> X = nt::random_normal(static_cast<std::size_t>(n * cols), 77, 2.0f);
  for (std::int64_t k = 0; k < cols; ++k) X[2 * cols + k] = 0.0f;  // zero token
  X[4 * cols + 9] = 50.0f;                                         // outlier
  const MatF Xm = Eigen::Map<const MatF>(X.data(), n, cols);
  std::vector<std::int8_t> q(static_cast<std::size_t>(n * cols));
  std::vector<float> s(static_cast<std::size_t>(n));
  {
    w8::quantize_activations(X.data(), n, cols, w8::ActScale::per_token, q.data(), s.data());
    const Eigen::MatrixXf F = nibble::smoothquant::fake_quant_act_per_token(Xm);
    EXPECT_EQ(s[2], 1e-5f / 127.0f);
    EXPECT_EQ(q[4 * cols + 9], 127);
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < cols; ++k) {
        ASSERT_GE(q[j * cols + k], -127);
        ASSERT_EQ(static_cast<float>(q[j * cols + k]) * s[j], F(j, k)) << j << "," << k;
      }
  }
  {
    w8::quantize_activations(X.data(), n, cols, w8::ActScale::per_tensor, q.data(), s.data());
    const Eigen::MatrixXf F = nibble::smoothquant::fake_quant_act_per_tensor(Xm);
    EXPECT_EQ(s[0], 50.0f / 127.0f);
    for (std::int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(s[j], s[0]);
      for (std::int64_t k = 0; k < cols; ++k) {
        ASSERT_GE(q[j * cols + k], -127);
        ASSERT_EQ(static_cast<float>(q[j * cols + k]) * s[j], F(j, k)) << j << "," << k;
      }
    }
  }
  // Ties: token max 127 -> d = 1.
  const std::vector<float> t = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 3.5f, -126.5f, 0.0f};
  std::vector<std::int8_t> tq(8);
  float ts = 0.0f;
  w8::quantize_activations(t.data(), 1, 8, w8::ActScale::per_token, tq.data(), &ts);
  EXPECT_EQ(ts, 1.0f);
  const std::int8_t want[8] = {127, 0, 0, 2, -2, 4, -126, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(tq[i], want[i]) << i;
}

// ---- the public products ----

// |y - exact product of the Eigen fake-quantized matrices| <= 2^-22 (scale + |ref|), and
// |y - w8a8_forward (float)| <= 1e-5 scale.
void expect_matches_fake_quant(const std::vector<float>& Y, const std::vector<float>& X,
                               const std::vector<float>& W, std::int64_t n, std::int64_t rows,
                               std::int64_t cols, bool per_token, const std::string& what) {
  const MatF Xm = Eigen::Map<const MatF>(X.data(), n, cols);
  const MatF Wm = Eigen::Map<const MatF>(W.data(), rows, cols);
  namespace sq = nibble::smoothquant;
  const Eigen::MatrixXf Xq =
      per_token ? sq::fake_quant_act_per_token(Xm) : sq::fake_quant_act_per_tensor(Xm);
  const Eigen::MatrixXf Wq = sq::fake_quant_weight_per_channel(Wm);
  const Eigen::MatrixXd exact = Xq.cast<double>() * Wq.cast<double>().transpose();
  const Eigen::MatrixXd scale =
      Xq.cast<double>().cwiseAbs() * Wq.cast<double>().cwiseAbs().transpose();
  const Eigen::MatrixXf fwd = sq::w8a8_forward(Xm, Wm, per_token);
  int bad = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const double y = Y[j * rows + r];
      const double tol_exact = std::ldexp(1.0, -22) * (scale(j, r) + std::fabs(exact(j, r)));
      const double tol_fwd = 1e-5 * scale(j, r);
      if (!(std::fabs(y - exact(j, r)) <= tol_exact) || !(std::fabs(y - fwd(j, r)) <= tol_fwd)) {
        if (++bad <= 5)
          ADD_FAILURE() << what << ": (" << j << "," << r << ") got " << y << " exact "
                        << exact(j, r) << " w8a8_forward " << fwd(j, r) << " scale " << scale(j, r);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(W8A8Api, GemmMatchesFakeQuantForwardEveryIsaAndThreadCount) {
  struct Shape {
    std::int64_t rows, cols, n;
  };
  const Shape shapes[] = {{1, 32, 1},     {3, 100, 2},    {17, 4096, 3}, {33, 1000, 7},
                          {256, 200, 64}, {256, 4096, 1}, {40, 129, 64}};
  std::uint32_t seed = 900;
  for (const Shape& s : shapes) {
    ++seed;
    std::vector<float> W = nt::random_normal(static_cast<std::size_t>(s.rows * s.cols), seed, 0.1f);
    std::vector<float> X = nt::random_normal(static_cast<std::size_t>(s.n * s.cols), seed + 1);
    X[0] = 30.0f;  // an outlier channel value
    const w8::Weights w = w8::quantize_weights(W.data(), s.rows, s.cols);
    for (bool per_token : {true, false}) {
      const w8::ActScale mode = per_token ? w8::ActScale::per_token : w8::ActScale::per_tensor;
      const std::string base = "rows=" + std::to_string(s.rows) +
                               " cols=" + std::to_string(s.cols) + " n=" + std::to_string(s.n) +
                               (per_token ? " per_token" : " per_tensor");
      nibble::Context c1;
      c1.isa = nibble::Isa::scalar;
      c1.threads = 1;
      std::vector<float> Y0(static_cast<std::size_t>(s.n * s.rows));
      w8::gemm(c1, w, X.data(), s.n, Y0.data(), mode);
      expect_matches_fake_quant(Y0, X, W, s.n, s.rows, s.cols, per_token, base);
      for (nibble::Isa isa : nibble::available_isas()) {
        for (int threads : {1, 2, 3}) {
          nibble::Context c;
          c.isa = isa;
          c.threads = threads;
          std::vector<float> Y(Y0.size(), std::nanf(""));
          w8::gemm(c, w, X.data(), s.n, Y.data(), mode);
          nt::expect_bitwise_equal(Y, Y0,
                                   base + " isa " + std::to_string(static_cast<int>(isa)) +
                                       " threads " + std::to_string(threads));
        }
      }
      if (s.n == 1) {
        std::vector<float> y(static_cast<std::size_t>(s.rows));
        w8::gemv(nibble::Context{}, w, X.data(), y.data());
        nt::expect_bitwise_equal(y, Y0, base + " gemv");
      }
      if (HasFailure()) return;
    }
  }
}

// A caller pool that runs the tasks in reverse order (results must not depend on it).
void reverse_pool(void* pool, std::int64_t n, void (*task)(void*, std::int64_t), void* arg) {
  ++*static_cast<int*>(pool);
  for (std::int64_t i = n - 1; i >= 0; --i) task(arg, i);
}

TEST(W8A8Api, CallerPoolAndGemvEqualGemmRows) {
  const std::int64_t rows = 300, cols = 777, n = 5;
  const auto W = nt::random_normal(static_cast<std::size_t>(rows * cols), 31, 0.05f);
  const auto X = nt::random_normal(static_cast<std::size_t>(n * cols), 32);
  const w8::Weights w = w8::quantize_weights(W.data(), rows, cols);
  nibble::Context c1;
  c1.threads = 1;
  std::vector<float> Y0(static_cast<std::size_t>(n * rows));
  w8::gemm(c1, w, X.data(), n, Y0.data());
  int calls = 0;
  nibble::Context cp;
  cp.threads = 4;
  cp.parallel_for = &reverse_pool;
  cp.pool = &calls;
  std::vector<float> Y1(Y0.size());
  w8::gemm(cp, w, X.data(), n, Y1.data());
  EXPECT_EQ(calls, 1);
  nt::expect_bitwise_equal(Y1, Y0, "caller pool");
  // Per-token scaling: each row of a gemm equals the gemv of that token.
  for (std::int64_t j = 0; j < n; ++j) {
    std::vector<float> y(static_cast<std::size_t>(rows));
    w8::gemv(c1, w, X.data() + j * cols, y.data());
    nt::expect_bitwise_equal(y,
                             std::vector<float>(Y0.begin() + j * rows, Y0.begin() + (j + 1) * rows),
                             "gemv token " + std::to_string(j));
  }
}

// ---- bad input ----

TEST(W8A8Api, RejectsBadInputWritingNothing) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> W(4 * 8, 0.5f);
  EXPECT_THROW(w8::quantize_weights(W.data(), -1, 8), nibble::Error);
  EXPECT_THROW(w8::quantize_weights(W.data(), 4, -8), nibble::Error);
  EXPECT_THROW(w8::quantize_weights(W.data(), 1, w8::kMaxCols + 1), nibble::Error);
  EXPECT_THROW(w8::quantize_weights(nullptr, 4, 8), nibble::Error);
  EXPECT_NO_THROW(w8::quantize_weights(nullptr, 0, 8));
  W[13] = nan;
  EXPECT_THROW(w8::quantize_weights(W.data(), 4, 8), nibble::Error);
  W[13] = -inf;
  try {
    w8::quantize_weights(W.data(), 4, 8);
    ADD_FAILURE() << "no throw";
  } catch (const nibble::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("row 1 col 5"), std::string::npos) << m;
  }
  W[13] = 0.25f;
  const w8::Weights w = w8::quantize_weights(W.data(), 4, 8);

  std::vector<float> X(3 * 8, 1.0f);
  std::vector<std::int8_t> q(3 * 8, 99);
  std::vector<float> s(3, -1.0f);
  const auto pt = w8::ActScale::per_token;
  EXPECT_THROW(w8::quantize_activations(X.data(), -1, 8, pt, q.data(), s.data()), nibble::Error);
  EXPECT_THROW(w8::quantize_activations(nullptr, 3, 8, pt, q.data(), s.data()), nibble::Error);
  EXPECT_THROW(w8::quantize_activations(X.data(), 3, 8, pt, nullptr, s.data()), nibble::Error);
  EXPECT_THROW(w8::quantize_activations(X.data(), 3, 8, pt, q.data(), nullptr), nibble::Error);
  EXPECT_THROW(
      w8::quantize_activations(X.data(), 3, 8, static_cast<w8::ActScale>(7), q.data(), s.data()),
      nibble::Error);
  X[20] = inf;
  EXPECT_THROW(w8::quantize_activations(X.data(), 3, 8, pt, q.data(), s.data()), nibble::Error);
  for (std::int8_t v : q) EXPECT_EQ(v, 99);
  for (float v : s) EXPECT_EQ(v, -1.0f);

  std::vector<float> Y(3 * 4, 42.0f);
  const nibble::Context ctx;
  EXPECT_THROW(w8::gemm(ctx, w, X.data(), 3, Y.data()), nibble::Error);  // Inf in X
  X[20] = 1.0f;
  EXPECT_THROW(w8::gemm(ctx, w, X.data(), -1, Y.data()), nibble::Error);
  EXPECT_THROW(w8::gemm(ctx, w, nullptr, 3, Y.data()), nibble::Error);
  EXPECT_THROW(w8::gemm(ctx, w, X.data(), 3, nullptr), nibble::Error);
  EXPECT_THROW(w8::gemm(ctx, w, X.data(), 3, Y.data(), static_cast<w8::ActScale>(-1)),
               nibble::Error);
  w8::Weights bad = w;
  bad.q.pop_back();
  EXPECT_THROW(w8::gemm(ctx, bad, X.data(), 3, Y.data()), nibble::Error);
  bad = w;
  bad.scale.push_back(1.0f);
  EXPECT_THROW(w8::gemm(ctx, bad, X.data(), 3, Y.data()), nibble::Error);
  bad = w;
  bad.scale[2] = nan;
  EXPECT_THROW(w8::gemm(ctx, bad, X.data(), 3, Y.data()), nibble::Error);
  bad = w;
  bad.cols = w8::kMaxCols + 1;
  EXPECT_THROW(w8::gemm(ctx, bad, X.data(), 3, Y.data()), nibble::Error);
  bad = w;
  bad.rows = -4;
  EXPECT_THROW(w8::gemm(ctx, bad, X.data(), 3, Y.data()), nibble::Error);
  EXPECT_THROW(w8::gemv(ctx, w, nullptr, Y.data()), nibble::Error);
  for (float v : Y) EXPECT_EQ(v, 42.0f);

  // Empty shapes are no-ops; cols = 0 gives zeros.
  EXPECT_NO_THROW(w8::gemm(ctx, w, X.data(), 0, nullptr));
  const w8::Weights w0 = w8::quantize_weights(nullptr, 4, 0);
  EXPECT_EQ(w0.scale[0], 1e-5f / 127.0f);
  w8::gemm(ctx, w0, nullptr, 3, Y.data());
  for (float v : Y) EXPECT_EQ(v, 0.0f);
}

// ---- timing (disabled by default) ----

class W8A8Perf : public KernelTest {};

TEST_P(W8A8Perf, DISABLED_Throughput) {
  using Clock = std::chrono::steady_clock;
  const GemmFn fn = table().w8a8_gemm;
  ASSERT_NE(fn, nullptr);
  auto best_of = [](int reps, auto&& f) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = Clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  };
  {  // GEMV 11008 x 4096
    const std::int64_t rows = 11008, cols = 4096;
    const auto W = random_i8(static_cast<std::size_t>(rows * cols), 1, -127, 127);
    const auto A = random_i8(static_cast<std::size_t>(cols), 2, -127, 127);
    const std::vector<float> ws(static_cast<std::size_t>(rows), 1e-3f), as(1, 1e-2f);
    std::vector<float> y(static_cast<std::size_t>(rows));
    const int reps = variant_name() == "scalar" ? 3 : 20;
    const double t = best_of(reps, [&] {
      fn(W.data(), ws.data(), 0, rows, cols, A.data(), as.data(), 1, y.data(), rows);
    });
    std::printf("[w8a8 perf] %-10s GEMV 11008x4096: %8.3f ms  %7.2f GB/s (int8 weights)\n",
                variant_name().c_str(), t * 1e3, static_cast<double>(rows * cols) / t * 1e-9);
  }
  {  // GEMM 4096 x 4096, n = 64
    const std::int64_t rows = 4096, cols = 4096, n = 64;
    const auto W = random_i8(static_cast<std::size_t>(rows * cols), 3, -127, 127);
    const auto A = random_i8(static_cast<std::size_t>(n * cols), 4, -127, 127);
    const std::vector<float> ws(static_cast<std::size_t>(rows), 1e-3f), as(n, 1e-2f);
    std::vector<float> Y(static_cast<std::size_t>(n * rows));
    const int reps = variant_name() == "scalar" ? 1 : 5;
    const double t = best_of(reps, [&] {
      fn(W.data(), ws.data(), 0, rows, cols, A.data(), as.data(), n, Y.data(), rows);
    });
    std::printf("[w8a8 perf] %-10s GEMM 4096x4096 n=64: %8.3f ms  %7.2f GOP/s\n",
                variant_name().c_str(), t * 1e3,
                2.0 * static_cast<double>(rows * cols * n) / t * 1e-9);
  }
}

NIBBLE_INSTANTIATE_KERNEL_TEST(W8A8Perf);

}  // namespace
