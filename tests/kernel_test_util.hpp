// nibble tests: the shared per-ISA kernel fixture.
//
// Usage in a test file:
//   #include "kernel_test_util.hpp"
//   using nibble::test::KernelTest;
//   class MyKernels : public KernelTest {};
//   TEST_P(MyKernels, Something) { const nibble::kernels::KernelTable& t = table(); ... }
//   NIBBLE_INSTANTIATE_KERNEL_TEST(MyKernels);
//
// The fixture is parameterised on every table variant built into the binary that this CPU can
// run (scalar, avx2, avx512, avx512vnni, neon, neondot). A global environment (the coverage
// guard) fails the test binary when a runnable variant was never exercised by a full run
// (no --gtest_filter), and, when NIBBLE_EXPECT_ISAS is set (e.g. "avx2" or "neon,neondot";
// scalar is always implied), when the runnable or the exercised set differs from that list.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../src/dispatch.hpp"
#include "nibble/kernels/table.hpp"
#include "nibble/nibble.hpp"

namespace nibble::test {

using detail::TableVariant;
using kernels::FormatKernels;
using kernels::KernelTable;

/// Every runnable table variant (scalar first).
inline std::vector<TableVariant> variants() {
  return detail::runnable_tables();
}

/// The scalar (reference) table.
inline const KernelTable& scalar_table() {
  return detail::scalar_table();
}

/// Kernels of format `f` in `t`.
inline const FormatKernels& fmt_kernels(const KernelTable& t, Format f) {
  return t.fmt[static_cast<int>(f)];
}

/// Names of variants exercised so far by KernelTest fixtures (the coverage registry).
inline std::set<std::string>& exercised_registry() {
  static std::set<std::string> s;
  return s;
}
inline std::mutex& exercised_mutex() {
  static std::mutex m;
  return m;
}

/// The fixture: GetParam() is the variant; table() its kernel table.
class KernelTest : public ::testing::TestWithParam<TableVariant> {
 protected:
  void SetUp() override {
    std::lock_guard<std::mutex> lock(exercised_mutex());
    exercised_registry().insert(GetParam().name);
  }
  /// The table under test.
  const KernelTable& table() const { return *GetParam().table; }
  /// The variant's name ("avx512vnni", ...).
  std::string variant_name() const { return GetParam().name; }
  /// The Isa of the variant (for a Context{isa}).
  Isa isa() const { return GetParam().isa; }
};

/// Test-name suffix: the variant name.
struct VariantName {
  std::string operator()(const ::testing::TestParamInfo<TableVariant>& info) const {
    return info.param.name;
  }
};

/// Number of KernelTest suites instantiated in this binary (the guard ignores binaries without).
inline int& kernel_suite_count() {
  static int n = 0;
  return n;
}
inline bool mark_kernel_suite() {
  return ++kernel_suite_count() > 0;
}

// Instantiates a KernelTest-derived fixture over every runnable variant.
#define NIBBLE_INSTANTIATE_KERNEL_TEST(Fixture)                                           \
  INSTANTIATE_TEST_SUITE_P(Isa, Fixture, ::testing::ValuesIn(::nibble::test::variants()), \
                           ::nibble::test::VariantName());                                \
  [[maybe_unused]] static const bool nibble_kernel_suite_##Fixture =                      \
      ::nibble::test::mark_kernel_suite()

/// Splits "a,b,c" on commas (empty pieces dropped).
inline std::set<std::string> split_names(const std::string& s) {
  std::set<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.insert(item);
  }
  return out;
}

inline std::string join_names(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ",") + x;
  return out.empty() ? "(none)" : out;
}

/// The coverage guard (a global environment; failures in TearDown fail the binary).
class CoverageGuard : public ::testing::Environment {
 public:
  void TearDown() override {
    std::set<std::string> runnable;
    for (const TableVariant& v : variants()) runnable.insert(v.name);
    const std::set<std::string>& ran = exercised_registry();
    if (kernel_suite_count() == 0) return;  // this binary has no KernelTest suites
    if (const char* e = std::getenv("NIBBLE_EXPECT_ISAS"); e != nullptr && *e != '\0') {
      std::set<std::string> expect = split_names(e);
      expect.insert("scalar");
      EXPECT_EQ(join_names(runnable), join_names(expect))
          << "NIBBLE_EXPECT_ISAS: the variants this CPU can run differ from the expected ones";
      EXPECT_EQ(join_names(ran), join_names(expect))
          << "NIBBLE_EXPECT_ISAS: the variants exercised differ from the expected ones";
      return;
    }
#if defined(GTEST_FLAG_GET)
    const std::string filter = GTEST_FLAG_GET(filter);
#else
    const std::string filter = ::testing::GTEST_FLAG(filter);
#endif
    if (filter != "*" && !filter.empty()) return;  // partial run: nothing to guarantee
    for (const std::string& name : runnable) {
      EXPECT_TRUE(ran.count(name) != 0)
          << "coverage guard: runnable kernel variant '" << name << "' was never exercised";
    }
  }
};

inline const bool kCoverageGuardRegistered =
    (::testing::AddGlobalTestEnvironment(new CoverageGuard), true);

// ---- data helpers ----

/// n values from N(0, sigma^2), reproducible from `seed`.
inline std::vector<float> random_normal(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// n values uniform in [lo, hi), reproducible from `seed`.
inline std::vector<float> random_uniform(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// Bytes of one row of `cols` values in format `f` (cols a multiple of the block size).
inline std::size_t row_size(Format f, std::int64_t cols) {
  const FormatTraits tr = traits(f);
  return static_cast<std::size_t>(cols / tr.block_elems) * tr.block_bytes;
}

/// Quantizes rows x cols with the entry of `t` (the scalar table's when `t` lacks it).
/// Returns the bytes (rows * row_size). Fails the test if neither table has a quantizer.
inline std::vector<std::uint8_t> quantize_rows(const KernelTable& t, Format f, const float* src,
                                               std::int64_t rows, std::int64_t cols,
                                               const float* importance = nullptr) {
  auto q = fmt_kernels(t, f).quantize;
  if (!q) q = fmt_kernels(scalar_table(), f).quantize;
  const std::size_t rb = row_size(f, cols);
  std::vector<std::uint8_t> out(rb * static_cast<std::size_t>(rows));
  if (f == Format::f32) {
    std::memcpy(out.data(), src, out.size());
    return out;
  }
  if (f == Format::f16) {
    for (std::int64_t i = 0; i < rows * cols; ++i) {
      const fp16_t h = fp32_to_fp16(src[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  if (!q) {
    ADD_FAILURE() << "no quantizer for format " << traits(f).name;
    return out;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    q(src + r * cols, cols, out.data() + r * rb, importance);
  }
  return out;
}

/// Dequantizes rows x cols with the entry of `t` (scalar fallback).
inline std::vector<float> dequant_rows(const KernelTable& t, Format f, const void* src,
                                       std::int64_t rows, std::int64_t cols) {
  auto dq = fmt_kernels(t, f).dequant;
  if (!dq) dq = fmt_kernels(scalar_table(), f).dequant;
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  if (!dq) {
    ADD_FAILURE() << "no dequantizer for format " << traits(f).name;
    return out;
  }
  dq(src, rows * cols, out.data());
  return out;
}

/// Activation rows of `n` x cols fp32 in the activation format of weight format `w`, quantized
/// with `t`'s quantizer (scalar fallback). `row_bytes_out` receives the activation row stride.
inline std::vector<std::uint8_t> quantize_act(const KernelTable& t, Format w, const float* X,
                                              std::int64_t n, std::int64_t cols,
                                              std::size_t* row_bytes_out) {
  const Format a = traits(w).activation;
  const std::size_t rb = row_size(a, cols);
  if (row_bytes_out) *row_bytes_out = rb;
  std::vector<std::uint8_t> out(rb * static_cast<std::size_t>(n));
  if (a == Format::f32) {
    std::memcpy(out.data(), X, out.size());
    return out;
  }
  void (*q)(const float*, std::int64_t, void*) = nullptr;
  if (a == Format::q8_K)
    q = t.quantize_act_q8_K ? t.quantize_act_q8_K : scalar_table().quantize_act_q8_K;
  if (a == Format::q8_0)
    q = t.quantize_act_q8_0 ? t.quantize_act_q8_0 : scalar_table().quantize_act_q8_0;
  if (a == Format::q8_1)
    q = t.quantize_act_q8_1 ? t.quantize_act_q8_1 : scalar_table().quantize_act_q8_1;
  if (!q) {
    ADD_FAILURE() << "no activation quantizer for " << traits(a).name;
    return out;
  }
  for (std::int64_t j = 0; j < n; ++j) q(X + j * cols, cols, out.data() + j * rb);
  return out;
}

/// Calls t's gemm (scalar fallback) on already-quantized activations (rows in the plain
/// activation format, `a_row_bytes` apart; re-laid out first when the table's gemm wants its
/// own activation layout) for rows [r0, r1); returns Y (n x rows, ldy = rows; rows outside
/// [r0, r1) stay NaN).
inline std::vector<float> gemm_raw(const KernelTable& t, Format w, const void* W, std::int64_t rows,
                                   std::int64_t cols, const void* A, std::size_t a_row_bytes,
                                   std::int64_t n, std::int64_t r0, std::int64_t r1) {
  const FormatKernels* k = &fmt_kernels(t, w);
  if (!k->gemm) k = &fmt_kernels(scalar_table(), w);
  std::vector<float> y(static_cast<std::size_t>(n * rows), std::nanf(""));
  if (!k->gemm) {
    ADD_FAILURE() << "no gemm for format " << traits(w).name;
    return y;
  }
  std::vector<std::uint8_t> relaid;
  if (k->act_relayout) {
    const std::size_t rb = k->act_bytes(cols);
    relaid.resize(rb * static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j)
      k->act_relayout(static_cast<const std::uint8_t*>(A) + j * a_row_bytes, cols,
                      relaid.data() + j * rb);
    A = relaid.data();
    a_row_bytes = rb;
  }
  k->gemm(W, row_size(w, cols), r0, r1, cols, A, a_row_bytes, n, y.data(), rows);
  return y;
}

/// Full single-threaded product on table `t`: quantizes X with t's activation quantizer, then
/// calls t's gemm over all rows. Y is n x rows.
inline std::vector<float> gemm_table(const KernelTable& t, Format w, const void* W,
                                     std::int64_t rows, std::int64_t cols, const float* X,
                                     std::int64_t n) {
  std::size_t arb = 0;
  const std::vector<std::uint8_t> a = quantize_act(t, w, X, n, cols, &arb);
  return gemm_raw(t, w, W, rows, cols, a.data(), arb, n, 0, rows);
}

/// Reference product in double (Eigen) on dequantized weights Wd (rows x cols) and dequantized
/// activations Xd (n x cols): y = Xd Wd^T, and scale = |Xd| |Wd|^T (the sum of |products|, the
/// natural magnitude for a relative error bound).
struct RefProduct {
  std::vector<double> y;      ///< n x rows
  std::vector<double> scale;  ///< n x rows
};
inline RefProduct eigen_reference(const float* Wd, std::int64_t rows, std::int64_t cols,
                                  const float* Xd, std::int64_t n) {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Mat w =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          Wd, rows, cols)
          .cast<double>();
  const Mat x =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(Xd, n,
                                                                                              cols)
          .cast<double>();
  const Mat y = x * w.transpose();
  const Mat s = x.cwiseAbs() * w.cwiseAbs().transpose();
  RefProduct r;
  r.y.assign(y.data(), y.data() + y.size());
  r.scale.assign(s.data(), s.data() + s.size());
  return r;
}

/// Expects |got - ref.y| <= rtol * ref.scale + atol elementwise; reports the first few misses.
inline void expect_close(const std::vector<float>& got, const RefProduct& ref, double rtol,
                         const std::vector<double>& atol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.y.size()) << what;
  ASSERT_EQ(atol.size(), ref.y.size()) << what;
  int bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref.y[i]);
    const double tol = rtol * ref.scale[i] + atol[i];
    if (!(err <= tol)) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref.y[i]
                      << " (|err| " << err << " > tol " << tol << ")";
      }
    }
    if (ref.scale[i] > 0) worst = std::max(worst, err / ref.scale[i]);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " elements out of tolerance (worst err/scale " << worst << ")";
}
inline void expect_close(const std::vector<float>& got, const RefProduct& ref, double rtol,
                         double atol, const std::string& what) {
  expect_close(got, ref, rtol, std::vector<double>(ref.y.size(), atol), what);
}

/// True for the table variants whose NF4/FP4 GEMV (n = 1) is the int16 product of
/// kernels/nf4-inl.hpp (Nf4IntGemv: x86 SIMD) rather than the fp32 one.
inline bool nf4_int16_gemv(const std::string& variant) {
  return variant == "avx2" || variant == "avxvnni" || variant == "avx512" ||
         variant == "avx512vnni";
}

/// The rounding bound of that int16 GEMV for Y = X W^T (n x rows, row-major like RefProduct):
/// per block of 64 weights with absmax a, sum |a| * (sum |x| * 0.5 / 8191 + 0.5 * s *
/// sum |code-book value|), where 1/8191 is the code book's int16 step (NF4; FP4's entries are
/// exact) and s = (largest |x| of the activation row) / 32767 the coarsest activation step the
/// kernel may use (it scales per group of blocks); with `per_block` (the packed layout's GEMV,
/// kernels/detail/nf4-packed-inl.hpp) s = (largest |x| of the block) / 8191. Scaled by 1.01 for
/// the float steps of the rounding itself. This is on top of the fp32 accumulation tolerance.
inline std::vector<double> nf4_int16_bound(const void* W, std::int64_t rows, std::int64_t cols,
                                           const float* X, std::int64_t n, bool fp4,
                                           bool per_block = false) {
  const float* book = fp4 ? ref::fp4_codebook : ref::nf4_codebook;
  const auto* blocks = static_cast<const BlockNF4*>(W);
  std::vector<double> out(static_cast<std::size_t>(n * rows));
  for (std::int64_t j = 0; j < n; ++j) {
    const float* x = X + j * cols;
    double xmax = 0;
    for (std::int64_t k = 0; k < cols; ++k) xmax = std::max(xmax, std::fabs(double(x[k])));
    const double s = xmax / 32767.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      double t = 0;
      for (std::int64_t b = 0; b < cols / 64; ++b) {
        const BlockNF4& blk = blocks[r * (cols / 64) + b];
        double sx = 0, sb = 0, bmax = 0;
        for (int i = 0; i < 64; ++i) {
          const int code = (i & 1) ? (blk.qs[i / 2] & 15) : (blk.qs[i / 2] >> 4);
          sx += std::fabs(double(x[64 * b + i]));
          sb += std::fabs(double(book[code]));
          bmax = std::max(bmax, std::fabs(double(x[64 * b + i])));
        }
        const double step = per_block ? bmax / 8191.0 : s;
        t += std::fabs(double(blk.absmax)) * (sx * 0.5 / 8191.0 + 0.5 * step * sb);
      }
      out[static_cast<std::size_t>(j * rows + r)] = 1.01 * t;
    }
  }
  return out;
}

/// Expects two float arrays to be bit-identical.
inline void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b,
                                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0 && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " " << a[i] << " != " << b[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ";
}

/// Expects two byte arrays to be identical (reports the first differing byte).
inline void expect_bytes_equal(const std::vector<std::uint8_t>& a,
                               const std::vector<std::uint8_t>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const auto m = std::mismatch(a.begin(), a.end(), b.begin());
  EXPECT_TRUE(m.first == a.end()) << what << ": first difference at byte " << (m.first - a.begin())
                                  << " of " << a.size();
}

}  // namespace nibble::test
