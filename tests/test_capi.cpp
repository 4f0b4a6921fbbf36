// The C API (include/nibble/nibble.h): formats, golden quantize/dequantize/dot through the C
// entry points, error codes with nothing written, the per-thread last error, contexts and pools,
// gemm layout, and read-only GGUF access. Uses nibble.h only, so it also links against the
// shared library (whose C++ internals are not exported).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "nibble/nibble.h"

namespace {

const std::string kData = NIBBLE_TEST_DATA_DIR;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> read_f32(const std::string& path) {
  const auto b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

int fmt(const char* name) {
  const int f = nibble_format_from_name(name);
  EXPECT_GE(f, 0) << name;
  return f;
}

const char* const kCases[] = {"gauss_s1", "student_t3", "uniform_pm1"};

TEST(CApi, Version) {
  EXPECT_STREQ(nibble_version(), NIBBLE_PROJECT_VERSION);
  const std::string hdr = std::to_string(NIBBLE_VERSION_MAJOR) + "." +
                          std::to_string(NIBBLE_VERSION_MINOR) + "." +
                          std::to_string(NIBBLE_VERSION_PATCH);
  EXPECT_EQ(hdr, NIBBLE_PROJECT_VERSION) << "update the NIBBLE_VERSION_* macros in nibble.h";
}

TEST(CApi, Formats) {
  const int n = nibble_format_count();
  ASSERT_GE(n, 9);
  for (int f = 0; f < n; ++f) {
    const char* name = nibble_format_name(f);
    ASSERT_NE(name, nullptr) << f;
    EXPECT_EQ(nibble_format_from_name(name), f) << name;
    EXPECT_GT(nibble_block_elems(f), 0);
  }
  EXPECT_EQ(nibble_format_name(-1), nullptr);
  EXPECT_EQ(nibble_format_name(n), nullptr);
  EXPECT_EQ(nibble_block_elems(n), 0);
  // Enum values are the C API values (documented in nibble.h).
  EXPECT_EQ(fmt("f32"), 0);
  EXPECT_EQ(fmt("q8_0"), 2);
  EXPECT_EQ(fmt("q4_K"), 3);
  EXPECT_EQ(fmt("fp4"), 8);
  EXPECT_EQ(nibble_format_from_name("Q4_K"), 3);
  EXPECT_EQ(nibble_format_from_name("q4_k"), 3);
  EXPECT_EQ(nibble_format_from_name("q3_K_XL"), -1);
  EXPECT_EQ(nibble_format_from_name(""), -1);
  EXPECT_EQ(nibble_format_from_name(nullptr), -1);
  // ggml type ids.
  EXPECT_EQ(nibble_format_from_gguf_type(0), fmt("f32"));
  EXPECT_EQ(nibble_format_from_gguf_type(8), fmt("q8_0"));
  EXPECT_EQ(nibble_format_from_gguf_type(12), fmt("q4_K"));
  EXPECT_EQ(nibble_format_from_gguf_type(14), fmt("q6_K"));
  EXPECT_EQ(nibble_format_from_gguf_type(2), fmt("q4_0"));
  EXPECT_EQ(nibble_format_from_gguf_type(1000), -1);  // no such ggml type
  // Row sizes (GGUF block sizes).
  EXPECT_EQ(nibble_row_bytes(fmt("q4_K"), 4096), 16u * 144u);
  EXPECT_EQ(nibble_row_bytes(fmt("q8_0"), 64), 2u * 34u);
  EXPECT_EQ(nibble_row_bytes(fmt("f16"), 3), 6u);
  EXPECT_EQ(nibble_row_bytes(fmt("q4_K"), 100), 0u);
  EXPECT_NE(std::string(nibble_last_error()).find("100"), std::string::npos) << nibble_last_error();
  EXPECT_EQ(nibble_row_bytes(99, 256), 0u);
  EXPECT_NE(std::string(nibble_last_error()).find("99"), std::string::npos) << nibble_last_error();
}

TEST(CApi, Isas) {
  int best = -1;
  ASSERT_EQ(nibble_best_isa(nullptr, &best), NIBBLE_OK) << nibble_last_error();
  EXPECT_EQ(nibble_isa_supported(best), 1);
  EXPECT_EQ(nibble_isa_supported(NIBBLE_ISA_SCALAR), 1);
  EXPECT_STREQ(nibble_isa_name(NIBBLE_ISA_SCALAR), "scalar");
  EXPECT_STREQ(nibble_isa_name(NIBBLE_ISA_AVX2), "avx2");
  EXPECT_STREQ(nibble_isa_name(NIBBLE_ISA_AVXVNNI), "avxvnni");
  EXPECT_EQ(nibble_isa_name(-1), nullptr);
  EXPECT_EQ(nibble_isa_supported(77), 0);
  nibble_context ctx;
  std::memset(&ctx, 0, sizeof ctx);
  int isa = -1;
  ASSERT_EQ(nibble_best_isa(&ctx, &isa), NIBBLE_OK);
  EXPECT_EQ(isa, best);  // all-zero context == defaults
  ctx.force_isa = 1;
  ctx.isa = NIBBLE_ISA_SCALAR;
  ASSERT_EQ(nibble_best_isa(&ctx, &isa), NIBBLE_OK);
  EXPECT_EQ(isa, NIBBLE_ISA_SCALAR);
  ctx.isa = 77;
  isa = -5;
  EXPECT_EQ(nibble_best_isa(&ctx, &isa), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(isa, -5);
  for (int i = 0; i <= NIBBLE_ISA_AVXVNNI; ++i) {
    if (nibble_isa_supported(i)) continue;
    ctx.isa = i;  // built for another processor or not supported by this CPU
    EXPECT_EQ(nibble_best_isa(&ctx, &isa), NIBBLE_ERROR_UNSUPPORTED) << i;
    EXPECT_NE(std::string(nibble_last_error()).find(nibble_isa_name(i)), std::string::npos);
    EXPECT_EQ(isa, -5);
  }
  EXPECT_EQ(nibble_best_isa(nullptr, nullptr), NIBBLE_ERROR_INVALID_ARGUMENT);
}

// quantize and dequantize through the C API reproduce ggml's reference outputs byte for byte.
TEST(CApi, GoldenQuantizeDequantize) {
  for (const char* c : kCases) {
    const auto x = read_f32(kData + "/" + c + ".input.f32");
    const int64_t n = static_cast<int64_t>(x.size());
    for (const char* t : {"q8_0", "q4_K", "q5_K", "q6_K", "q8_K"}) {
      SCOPED_TRACE(std::string(c) + " " + t);
      const int f = fmt(t);
      const auto want = read_bytes(kData + "/" + c + "." + t + ".blocks");
      std::vector<unsigned char> got(nibble_row_bytes(f, n));
      ASSERT_EQ(got.size(), want.size());
      ASSERT_EQ(nibble_quantize(f, x.data(), 1, n, got.data(), nullptr), NIBBLE_OK)
          << nibble_last_error();
      EXPECT_EQ(got, want);
      const auto want_dq = read_f32(kData + "/" + c + "." + t + ".dequant.f32");
      std::vector<float> dq(x.size());
      ASSERT_EQ(nibble_dequantize(f, want.data(), 1, n, dq.data()), NIBBLE_OK);
      EXPECT_EQ(0, std::memcmp(dq.data(), want_dq.data(), dq.size() * 4));
    }
    for (const char* t : {"q4_K", "q5_K", "q6_K"}) {  // importance-weighted
      SCOPED_TRACE(std::string(c) + " imatrix " + t);
      const int f = fmt(t);
      const auto imp = read_f32(kData + "/" + c + "." + t + ".imatrix.f32");
      const auto want = read_bytes(kData + "/" + c + "." + t + ".iq.blocks");
      std::vector<unsigned char> got(nibble_row_bytes(f, n));
      ASSERT_EQ(nibble_quantize(f, x.data(), 1, n, got.data(), imp.data()), NIBBLE_OK);
      EXPECT_EQ(got, want);
    }
  }
}

// gemv of one golden row against ggml's dot-product goldens (the exact dot of the dequantized
// weights and activations).
TEST(CApi, GoldenGemv) {
  for (const char* c : kCases) {
    const auto act = read_f32(kData + "/" + c + ".act.f32");
    for (const char* t : {"q8_0", "q4_K", "q5_K", "q6_K"}) {
      SCOPED_TRACE(std::string(c) + " " + t);
      const std::string pair = std::string(t) + (std::string(t) == "q8_0" ? "_q8_0" : "_q8_K");
      const auto w = read_bytes(kData + "/" + c + "." + t + ".blocks");
      const auto exact = read_bytes(kData + "/" + c + "." + pair + ".dotexact.f64");
      double want;
      std::memcpy(&want, exact.data(), 8);
      float y = 0;
      ASSERT_EQ(nibble_gemv(nullptr, fmt(t), w.data(), 1, static_cast<int64_t>(act.size()),
                            act.data(), &y),
                NIBBLE_OK)
          << nibble_last_error();
      EXPECT_NEAR(y, want, 1e-4 * (1.0 + std::fabs(want)));
    }
  }
}

// A failing call returns the error class, leaves a message naming the problem and writes nothing.
TEST(CApi, ErrorsWriteNothing) {
  const int q4 = fmt("q4_K");
  std::vector<float> x(512, 0.5f);
  std::vector<unsigned char> dst(4096, 0xAB);
  const std::vector<unsigned char> untouched = dst;

  // cols not a multiple of the block size
  EXPECT_EQ(nibble_quantize(q4, x.data(), 2, 100, dst.data(), nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nibble_last_error()).find("cols"), std::string::npos)
      << nibble_last_error();
  EXPECT_EQ(dst, untouched);
  // NaN in the second row
  x[300] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(nibble_quantize(q4, x.data(), 2, 256, dst.data(), nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dst, untouched);
  x[300] = 0.5f;
  // negative importance weight
  std::vector<float> imp(256, 1.0f);
  imp[7] = -1.0f;
  EXPECT_EQ(nibble_quantize(q4, x.data(), 2, 256, dst.data(), imp.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dst, untouched);
  // unknown format, NULL pointers, negative rows
  EXPECT_EQ(nibble_quantize(1000, x.data(), 1, 256, dst.data(), nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nibble_last_error()).find("1000"), std::string::npos);
  EXPECT_EQ(nibble_quantize(q4, nullptr, 1, 256, dst.data(), nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_quantize(q4, x.data(), -1, 256, dst.data(), nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dst, untouched);

  // gemv / gemm / dequantize
  std::vector<unsigned char> w(2 * nibble_row_bytes(q4, 256));
  ASSERT_EQ(nibble_quantize(q4, x.data(), 2, 256, w.data(), nullptr), NIBBLE_OK);
  std::vector<float> y(8, 7.0f);
  EXPECT_EQ(nibble_gemv(nullptr, q4, w.data(), 2, 256, nullptr, y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gemv(nullptr, q4, w.data(), 2, 200, x.data(), y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gemm(nullptr, q4, w.data(), 2, 256, x.data(), -3, y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_dequantize(q4, w.data(), 2, 255, reinterpret_cast<float*>(dst.data())),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  // q8_K is an activation format: valid but not multipliable
  std::vector<unsigned char> a(nibble_row_bytes(fmt("q8_K"), 256));
  ASSERT_EQ(nibble_quantize(fmt("q8_K"), x.data(), 1, 256, a.data(), nullptr), NIBBLE_OK);
  EXPECT_EQ(nibble_gemv(nullptr, fmt("q8_K"), a.data(), 1, 256, x.data(), y.data()),
            NIBBLE_ERROR_UNSUPPORTED)
      << nibble_last_error();
  // bad contexts
  nibble_context ctx;
  std::memset(&ctx, 0, sizeof ctx);
  ctx.threads = -2;
  EXPECT_EQ(nibble_gemv(&ctx, q4, w.data(), 2, 256, x.data(), y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nibble_last_error()).find("threads"), std::string::npos);
  ctx.threads = 0;
  ctx.force_isa = 1;
  ctx.isa = 1234;
  EXPECT_EQ(nibble_gemv(&ctx, q4, w.data(), 2, 256, x.data(), y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  for (float v : y) EXPECT_EQ(v, 7.0f);
  EXPECT_EQ(dst, untouched);
  EXPECT_STREQ(nibble_status_name(NIBBLE_ERROR_UNSUPPORTED), "unsupported");
}

// nibble_last_error is per thread: another thread's failure does not change this thread's message.
TEST(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(nibble_quantize(fmt("q8_0"), nullptr, 1, 32, nullptr, nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  const std::string mine = nibble_last_error();
  ASSERT_FALSE(mine.empty());
  std::string fresh = "unset", theirs;
  std::thread t([&] {
    fresh = nibble_last_error();
    EXPECT_EQ(nibble_row_bytes(fmt("q4_K"), 17), 0u);
    theirs = nibble_last_error();
  });
  t.join();
  EXPECT_EQ(fresh, "");
  EXPECT_NE(theirs.find("17"), std::string::npos);
  EXPECT_EQ(mine, nibble_last_error());
  // A success does not clear it.
  EXPECT_GT(nibble_row_bytes(fmt("q8_0"), 32), 0u);
  EXPECT_EQ(mine, nibble_last_error());
}

struct CountingPool {
  std::atomic<int> calls{0};
  static void run(void* pool, int64_t n, void (*task)(void*, int64_t), void* ctx) {
    auto* p = static_cast<CountingPool*>(pool);
    p->calls++;
    std::vector<std::thread> ts;
    for (int64_t i = 0; i < n; ++i) ts.emplace_back(task, ctx, i);
    for (auto& t : ts) t.join();
  }
};

// Y = X W^T layout (Y[j * rows + r]); the result matches dequantize + dot and does not depend on
// the thread count or on the caller's pool.
TEST(CApi, GemmLayoutAndPools) {
  const int64_t rows = 96, cols = 1024, n = 5;
  std::vector<float> wf(rows * cols), X(n * cols);
  for (int64_t i = 0; i < rows * cols; ++i) wf[i] = std::sin(0.013f * static_cast<float>(i));
  for (int64_t i = 0; i < n * cols; ++i) X[i] = std::cos(0.021f * static_cast<float>(i));
  for (const char* t : {"q8_0", "q4_K", "q6_K", "nf4", "f16"}) {
    SCOPED_TRACE(t);
    const int f = fmt(t);
    std::vector<unsigned char> W(rows * nibble_row_bytes(f, cols));
    ASSERT_EQ(nibble_quantize(f, wf.data(), rows, cols, W.data(), nullptr), NIBBLE_OK);
    std::vector<float> dq(rows * cols);
    ASSERT_EQ(nibble_dequantize(f, W.data(), rows, cols, dq.data()), NIBBLE_OK);

    nibble_context serial;
    std::memset(&serial, 0, sizeof serial);
    serial.threads = 1;
    std::vector<float> Y(n * rows);
    ASSERT_EQ(nibble_gemm(&serial, f, W.data(), rows, cols, X.data(), n, Y.data()), NIBBLE_OK)
        << nibble_last_error();
    for (int64_t j = 0; j < n; ++j)
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          ref += static_cast<double>(dq[r * cols + c]) * X[j * cols + c];
          mag += std::fabs(static_cast<double>(dq[r * cols + c]) * X[j * cols + c]);
        }
        ASSERT_NEAR(Y[j * rows + r], ref, 1e-2 * mag + 1e-6) << "j " << j << " r " << r;
      }
    // gemv of row j of X equals row j of Y within rounding.
    std::vector<float> y(rows);
    ASSERT_EQ(nibble_gemv(&serial, f, W.data(), rows, cols, X.data() + 2 * cols, y.data()),
              NIBBLE_OK);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(y[r], Y[2 * rows + r], 1e-3 + 1e-3 * std::fabs(y[r]));

    // Same bits with 3 threads and with our own pool.
    CountingPool pool;
    nibble_context own;
    std::memset(&own, 0, sizeof own);
    own.threads = 3;
    std::vector<float> Y3(n * rows), Yp(n * rows);
    ASSERT_EQ(nibble_gemm(&own, f, W.data(), rows, cols, X.data(), n, Y3.data()), NIBBLE_OK);
    own.parallel_for = &CountingPool::run;
    own.pool = &pool;
    ASSERT_EQ(nibble_gemm(&own, f, W.data(), rows, cols, X.data(), n, Yp.data()), NIBBLE_OK);
    EXPECT_GT(pool.calls.load(), 0);
    EXPECT_EQ(0, std::memcmp(Y.data(), Y3.data(), Y.size() * 4));
    EXPECT_EQ(0, std::memcmp(Y.data(), Yp.data(), Y.size() * 4));
  }
}

// exact_nf4: the NF4 GEMV in fp32 (as the GEMM's rows) instead of x86's int16 dot product.
TEST(CApi, ExactNf4) {
  const int64_t rows = 64, cols = 2048, n = 2;
  std::vector<float> wf(rows * cols), X(n * cols);
  // Blocks of one absmax weight (code 1.0) and 63 weights on the code 0.0796 (NF4 code 9), whose
  // int16 image 0.0796 * 16382 = 1303.7 rounds by 2.5e-4 relative, all with the same sign, so the
  // int16 GEMV is off by about 2e-4 of sum |w x| while the fp32 one is exact to float rounding.
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float scale = 1.0f + static_cast<float>((i / cols) % 7);
    wf[i] = scale * (i % 64 == 0 ? 1.0f : 0.0796f);
  }
  for (int64_t i = 0; i < n * cols; ++i) X[i] = 0.5f + 0.25f * static_cast<float>(i % 3);
  const int f = fmt("nf4");
  std::vector<unsigned char> W(rows * nibble_row_bytes(f, cols));
  ASSERT_EQ(nibble_quantize(f, wf.data(), rows, cols, W.data(), nullptr), NIBBLE_OK);
  std::vector<float> dq(rows * cols);
  ASSERT_EQ(nibble_dequantize(f, W.data(), rows, cols, dq.data()), NIBBLE_OK);
  nibble_context c;
  std::memset(&c, 0, sizeof c);
  c.threads = 1;
  std::vector<float> y_int(rows), y_exact(rows);
  ASSERT_EQ(nibble_gemv(&c, f, W.data(), rows, cols, X.data(), y_int.data()), NIBBLE_OK);
  c.exact_nf4 = 1;
  ASSERT_EQ(nibble_gemv(&c, f, W.data(), rows, cols, X.data(), y_exact.data()), NIBBLE_OK);
  double err_exact = 0, err_int = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < cols; ++k) {
      ref += static_cast<double>(dq[r * cols + k]) * X[k];
      mag += std::fabs(static_cast<double>(dq[r * cols + k]) * X[k]);
    }
    // fp32 accumulation of exact products (2048 same-sign terms: about 1e-5 of the magnitude in
    // the scalar path's one running sum, 1e-7 in the SIMD paths' lanes)
    EXPECT_NEAR(y_exact[r], ref, 3e-5 * mag) << r;
    // int16 rounding on x86 (fp32 elsewhere): within 1e-3 of the magnitude
    EXPECT_NEAR(y_int[r], ref, 1e-3 * mag) << r;
    err_exact = std::max(err_exact, std::fabs(y_exact[r] - ref) / mag);
    err_int = std::max(err_int, std::fabs(y_int[r] - ref) / mag);
  }
  EXPECT_LE(err_exact, err_int);
  nibble_context probe;
  std::memset(&probe, 0, sizeof probe);
  int isa = 0;
  ASSERT_EQ(nibble_best_isa(&probe, &isa), NIBBLE_OK);
  const bool x86 = isa == NIBBLE_ISA_AVX2 || isa == NIBBLE_ISA_AVX512 || isa == NIBBLE_ISA_AVXVNNI;
  if (x86) {
    EXPECT_LT(err_exact, 3e-6);
    EXPECT_GT(err_int, 1e-4) << "the x86 NF4 GEMV is expected to round to int16";
  }
}

class CApiGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nibble_gguf_open((kData + "/capi_small.gguf").c_str(), &g_), NIBBLE_OK)
        << nibble_last_error();
  }
  void TearDown() override { nibble_gguf_close(g_); }
  nibble_gguf* g_ = nullptr;
};

TEST_F(CApiGguf, Metadata) {
  ASSERT_EQ(nibble_gguf_metadata_count(g_), 5);
  const char* key = nullptr;
  ASSERT_EQ(nibble_gguf_metadata_key(g_, 0, &key), NIBBLE_OK);
  EXPECT_STREQ(key, "general.architecture");
  EXPECT_EQ(nibble_gguf_metadata_key(g_, 5, &key), NIBBLE_ERROR_INVALID_ARGUMENT);
  const char* s = nullptr;
  ASSERT_EQ(nibble_gguf_get_string(g_, "general.name", &s), NIBBLE_OK);
  EXPECT_STREQ(s, "capi test");
  int64_t i = 0;
  ASSERT_EQ(nibble_gguf_get_int(g_, "nibble-test.context_length", &i), NIBBLE_OK);
  EXPECT_EQ(i, 128);
  double d = 0;
  ASSERT_EQ(nibble_gguf_get_float(g_, "nibble-test.attention.layer_norm_rms_epsilon", &d),
            NIBBLE_OK);
  EXPECT_EQ(d, static_cast<double>(1e-5f));
  ASSERT_EQ(nibble_gguf_get_float(g_, "nibble-test.context_length", &d), NIBBLE_OK);
  EXPECT_EQ(d, 128.0);
  uint64_t len = 0;
  ASSERT_EQ(nibble_gguf_get_array_length(g_, "tokenizer.ggml.tokens", &len), NIBBLE_OK);
  EXPECT_EQ(len, 3u);
  ASSERT_EQ(nibble_gguf_get_array_string(g_, "tokenizer.ggml.tokens", 2, &s), NIBBLE_OK);
  EXPECT_STREQ(s, "hello");
  // Errors leave the outputs alone.
  s = "keep";
  i = -7;
  EXPECT_EQ(nibble_gguf_get_array_string(g_, "tokenizer.ggml.tokens", 3, &s),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gguf_get_string(g_, "no.such.key", &s), NIBBLE_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(nibble_last_error()).find("no.such.key"), std::string::npos);
  EXPECT_EQ(nibble_gguf_get_string(g_, "nibble-test.context_length", &s), NIBBLE_ERROR_TYPE);
  EXPECT_EQ(nibble_gguf_get_int(g_, "general.name", &i), NIBBLE_ERROR_TYPE);
  EXPECT_EQ(nibble_gguf_get_int(g_, "nibble-test.attention.layer_norm_rms_epsilon", &i),
            NIBBLE_ERROR_TYPE);
  EXPECT_EQ(nibble_gguf_get_float(g_, "tokenizer.ggml.tokens", &d), NIBBLE_ERROR_TYPE);
  EXPECT_EQ(nibble_gguf_get_array_length(g_, "general.name", &len), NIBBLE_ERROR_TYPE);
  EXPECT_EQ(nibble_gguf_get_int(nullptr, "general.name", &i), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(s, "keep");
  EXPECT_EQ(i, -7);
  EXPECT_EQ(len, 3u);
}

TEST_F(CApiGguf, Tensors) {
  ASSERT_EQ(nibble_gguf_tensor_count(g_), 3);
  int64_t idx = -1;
  ASSERT_EQ(nibble_gguf_find_tensor(g_, "blk.0.ffn_up.weight", &idx), NIBBLE_OK);
  EXPECT_EQ(idx, 1);
  EXPECT_EQ(nibble_gguf_find_tensor(g_, "blk.9.ffn_up.weight", &idx), NIBBLE_ERROR_NOT_FOUND);
  EXPECT_EQ(idx, 1);
  nibble_gguf_tensor t;
  ASSERT_EQ(nibble_gguf_tensor_info(g_, 1, &t), NIBBLE_OK);
  EXPECT_STREQ(t.name, "blk.0.ffn_up.weight");
  EXPECT_EQ(t.type, 8u);
  EXPECT_EQ(t.format, fmt("q8_0"));
  EXPECT_EQ(t.n_dims, 2);
  EXPECT_EQ(t.shape[0], 4096);
  EXPECT_EQ(t.shape[1], 4);
  EXPECT_EQ(t.shape[2], 1);
  EXPECT_EQ(t.cols, 4096);
  EXPECT_EQ(t.rows, 4);
  EXPECT_EQ(t.nbytes, 4u * nibble_row_bytes(t.format, 4096));
  // The tensor data are the ggml golden q8_0 blocks, one case per row.
  const char* rows[] = {"gauss_s1", "gauss_s0.02", "student_t3", "uniform_pm1"};
  for (int r = 0; r < 4; ++r) {
    const auto want = read_bytes(kData + "/" + rows[r] + ".q8_0.blocks");
    EXPECT_EQ(0, std::memcmp(static_cast<const unsigned char*>(t.data) + r * want.size(),
                             want.data(), want.size()))
        << r;
  }
  ASSERT_EQ(nibble_gguf_tensor_info(g_, 2, &t), NIBBLE_OK);
  EXPECT_EQ(t.n_dims, 1);
  EXPECT_EQ(t.rows, 1);
  EXPECT_EQ(t.format, fmt("f32"));
  EXPECT_EQ(static_cast<const float*>(t.data)[10], 1.0f + 0.001f * 10);
  t.rows = -99;
  EXPECT_EQ(nibble_gguf_tensor_info(g_, 3, &t), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gguf_tensor_info(g_, -1, &t), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(t.rows, -99);
}

TEST(CApiGgufOpen, BadFiles) {
  nibble_gguf* g = reinterpret_cast<nibble_gguf*>(0x1);
  EXPECT_EQ(nibble_gguf_open("/nonexistent/dir/x.gguf", &g), NIBBLE_ERROR_IO);
  EXPECT_NE(std::string(nibble_last_error()).find("x.gguf"), std::string::npos)
      << nibble_last_error();
  EXPECT_EQ(nibble_gguf_open(nullptr, &g), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(g, reinterpret_cast<nibble_gguf*>(0x1));
  // A truncated copy: IO with a message, no handle.
  auto bytes = read_bytes(kData + "/capi_small.gguf");
  bytes.resize(bytes.size() / 2);
  const std::string path = ::testing::TempDir() + "capi_truncated.gguf";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(nibble_gguf_open(path.c_str(), &g), NIBBLE_ERROR_IO);
  EXPECT_FALSE(std::string(nibble_last_error()).empty());
  EXPECT_EQ(g, reinterpret_cast<nibble_gguf*>(0x1));
  std::remove(path.c_str());
  nibble_gguf_close(nullptr);
  EXPECT_EQ(nibble_gguf_tensor_count(nullptr), 0);
}

// Packed weights: pack / unpack round trip, products against the plain layout, errors write
// nothing.
TEST(CApi, Packed) {
  for (const char* name : {"q8_0", "q4_K", "q5_K", "q6_K", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K",
                           "q3_K", "iq4_nl", "iq4_xs", "mxfp4", "nf4", "fp4", "f16", "bf16"})
    EXPECT_EQ(nibble_packable(fmt(name)), 1);
  for (const char* name : {"f32", "q8_K", "q8_1"}) EXPECT_EQ(nibble_packable(fmt(name)), 0);
  EXPECT_EQ(nibble_packable(-1), 0);
  EXPECT_EQ(nibble_packable(nibble_format_count()), 0);

  const int64_t rows = 37, cols = 512;  // two groups of 16 and 5 plain rows
  std::vector<float> w(static_cast<size_t>(rows * cols)), X(3 * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < X.size(); ++i) X[i] = std::cos(0.11f * static_cast<float>(i));
  for (const char* name : {"q8_0", "q4_K", "q5_K", "q6_K"}) {
    SCOPED_TRACE(name);
    const int f = fmt(name);
    const size_t bytes = static_cast<size_t>(rows) * nibble_row_bytes(f, cols);
    std::vector<unsigned char> W(bytes), P(bytes), U(bytes);
    ASSERT_EQ(nibble_quantize(f, w.data(), rows, cols, W.data(), nullptr), NIBBLE_OK);
    nibble_context ctx{};
    ctx.threads = 2;
    ASSERT_EQ(nibble_pack(&ctx, f, W.data(), rows, cols, P.data()), NIBBLE_OK);
    EXPECT_NE(P, W);
    EXPECT_EQ(0, std::memcmp(P.data() + 32 * bytes / rows, W.data() + 32 * bytes / rows,
                             5 * bytes / rows));  // the tail rows stay plain
    ASSERT_EQ(nibble_unpack(nullptr, f, P.data(), rows, cols, U.data()), NIBBLE_OK);
    EXPECT_EQ(U, W);
    std::vector<unsigned char> B = W;  // in place: the same bytes as into another buffer
    ASSERT_EQ(nibble_pack_in_place(&ctx, f, B.data(), rows, cols), NIBBLE_OK);
    EXPECT_EQ(B, P);
    ASSERT_EQ(nibble_unpack_in_place(nullptr, f, B.data(), rows, cols), NIBBLE_OK);
    EXPECT_EQ(B, W);
    std::vector<float> y(rows), yp(rows), Y(3 * rows), Yp(3 * rows);
    ASSERT_EQ(nibble_gemv(nullptr, f, W.data(), rows, cols, X.data(), y.data()), NIBBLE_OK);
    ASSERT_EQ(nibble_gemv_packed(&ctx, f, P.data(), rows, cols, X.data(), yp.data()), NIBBLE_OK)
        << nibble_last_error();
    ASSERT_EQ(nibble_gemm(nullptr, f, W.data(), rows, cols, X.data(), 3, Y.data()), NIBBLE_OK);
    ASSERT_EQ(nibble_gemm_packed(nullptr, f, P.data(), rows, cols, X.data(), 3, Yp.data()),
              NIBBLE_OK);
    for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(yp[r], y[r], 1e-4 * (1 + std::fabs(y[r]))) << r;
    for (size_t i = 0; i < Y.size(); ++i)
      EXPECT_NEAR(Yp[i], Y[i], 1e-4 * (1 + std::fabs(Y[i]))) << i;
  }

  // Errors: the status, a message, nothing written.
  const int q4 = fmt("q4_K");
  const size_t bytes = static_cast<size_t>(rows) * nibble_row_bytes(q4, cols);
  std::vector<unsigned char> W(bytes, 0x11), dst(bytes, 0xAB);
  const std::vector<unsigned char> untouched = dst;
  EXPECT_EQ(nibble_pack(nullptr, fmt("q8_K"), W.data(), rows, cols, dst.data()),
            NIBBLE_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(nibble_last_error()).find("no packed layout"), std::string::npos)
      << nibble_last_error();
  EXPECT_EQ(nibble_unpack(nullptr, fmt("f32"), W.data(), rows, cols, dst.data()),
            NIBBLE_ERROR_UNSUPPORTED);
  EXPECT_EQ(nibble_pack(nullptr, 999, W.data(), rows, cols, dst.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_pack(nullptr, q4, nullptr, rows, cols, dst.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nibble_last_error()).find("W"), std::string::npos) << nibble_last_error();
  EXPECT_EQ(nibble_pack(nullptr, q4, W.data(), rows, 100, dst.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_unpack(nullptr, q4, W.data(), -1, cols, dst.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_pack(nullptr, q4, dst.data(), 16, cols, dst.data() + 100),
            NIBBLE_ERROR_INVALID_ARGUMENT);  // overlapping
  nibble_context bad{};
  bad.threads = -1;
  EXPECT_EQ(nibble_pack(&bad, q4, W.data(), rows, cols, dst.data()), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_pack_in_place(&bad, q4, dst.data(), rows, cols), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_pack_in_place(nullptr, fmt("q8_K"), dst.data(), rows, cols),
            NIBBLE_ERROR_UNSUPPORTED);
  EXPECT_EQ(nibble_unpack_in_place(nullptr, q4, dst.data(), rows, 100),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_unpack_in_place(nullptr, q4, nullptr, rows, cols),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dst, untouched);
  std::vector<float> x(cols, 1.0f), y(3 * rows, 7.0f);
  const std::vector<float> y0 = y;
  x[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(nibble_gemv_packed(nullptr, q4, W.data(), rows, cols, x.data(), y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  x[5] = 1.0f;
  EXPECT_EQ(nibble_gemv_packed(nullptr, fmt("q8_K"), W.data(), rows, cols, x.data(), y.data()),
            NIBBLE_ERROR_UNSUPPORTED);
  EXPECT_EQ(nibble_gemv_packed(nullptr, q4, nullptr, rows, cols, x.data(), y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gemm_packed(nullptr, q4, W.data(), rows, cols, x.data(), -1, y.data()),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gemm_packed(nullptr, q4, W.data(), rows, cols, x.data(), 1, nullptr),
            NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(y, y0);
}

// A GGUF file with a packed tensor (made here: tensor 0 of capi_small.gguf packed in place and its
// type id flagged, as `nibble pack` writes it): reported with the flag, format -1, and its format
// by nibble_gguf_tensor_packed; its mapped bytes go to nibble_gemv_packed.
TEST(CApi, GgufPackedTensor) {
  const std::string src = kData + "/capi_small.gguf";
  auto bytes = read_bytes(src);
  nibble_gguf* g = nullptr;
  ASSERT_EQ(nibble_gguf_open(src.c_str(), &g), NIBBLE_OK);
  nibble_gguf_tensor t;
  ASSERT_EQ(nibble_gguf_tensor_info(g, 0, &t), NIBBLE_OK);
  ASSERT_EQ(t.type, 12u);
  int pf = 7;
  for (int64_t i = 0; i < nibble_gguf_tensor_count(g); ++i) {
    ASSERT_EQ(nibble_gguf_tensor_packed(g, i, &pf), NIBBLE_OK);
    EXPECT_EQ(pf, -1);
  }
  pf = 7;
  EXPECT_EQ(nibble_gguf_tensor_packed(g, 3, &pf), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gguf_tensor_packed(g, 0, nullptr), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nibble_gguf_tensor_packed(nullptr, 0, &pf), NIBBLE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(pf, 7);
  // locate the tensor's type id (after its name, n_dims and 2 dims) and data in the file bytes
  const std::string name = t.name;
  size_t name_at = 0;
  for (size_t k = 0; k + name.size() < bytes.size(); ++k)
    if (std::memcmp(bytes.data() + k, name.data(), name.size()) == 0) {
      name_at = k;
      break;
    }
  ASSERT_GT(name_at, 0u);
  const size_t type_at = name_at + name.size() + 4 + 2 * 8;
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + type_at, 4);
  ASSERT_EQ(type, 12u);
  size_t data_at = 0;
  for (size_t k = type_at; k + t.nbytes <= bytes.size(); ++k)
    if (std::memcmp(bytes.data() + k, t.data, static_cast<size_t>(t.nbytes)) == 0) {
      data_at = k;
      break;
    }
  ASSERT_GT(data_at, 0u);
  type = NIBBLE_GGUF_PACKED_FLAG | 12u;
  std::memcpy(bytes.data() + type_at, &type, 4);
  ASSERT_EQ(nibble_pack(nullptr, t.format, t.data, t.rows, t.cols, bytes.data() + data_at),
            NIBBLE_OK);
  const std::string path = ::testing::TempDir() + "capi_packed.gguf";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  nibble_gguf* p = nullptr;
  ASSERT_EQ(nibble_gguf_open(path.c_str(), &p), NIBBLE_OK) << nibble_last_error();
  nibble_gguf_tensor pt;
  ASSERT_EQ(nibble_gguf_tensor_info(p, 0, &pt), NIBBLE_OK);
  EXPECT_EQ(pt.type, NIBBLE_GGUF_PACKED_FLAG | 12u);
  EXPECT_EQ(pt.format, -1);
  EXPECT_EQ(nibble_format_from_gguf_type(pt.type), -1);
  EXPECT_EQ(pt.nbytes, t.nbytes);
  EXPECT_EQ(pt.rows, t.rows);
  ASSERT_EQ(nibble_gguf_tensor_packed(p, 0, &pf), NIBBLE_OK);
  EXPECT_EQ(pf, fmt("q4_K"));
  int pf1 = 7;
  ASSERT_EQ(nibble_gguf_tensor_packed(p, 1, &pf1), NIBBLE_OK);
  EXPECT_EQ(pf1, -1);
  std::vector<float> x(static_cast<size_t>(t.cols)), y(t.rows), yp(t.rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * static_cast<float>(i));
  ASSERT_EQ(nibble_gemv(nullptr, t.format, t.data, t.rows, t.cols, x.data(), y.data()), NIBBLE_OK);
  ASSERT_EQ(nibble_gemv_packed(nullptr, pf, pt.data, pt.rows, pt.cols, x.data(), yp.data()),
            NIBBLE_OK)
      << nibble_last_error();
  for (int64_t r = 0; r < t.rows; ++r) EXPECT_NEAR(yp[r], y[r], 1e-4 * (1 + std::fabs(y[r])));
  // the flag on a type without a packed layout is a malformed file
  type = NIBBLE_GGUF_PACKED_FLAG | 0u;  // f32
  std::memcpy(bytes.data() + type_at, &type, 4);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  nibble_gguf* q = reinterpret_cast<nibble_gguf*>(0x1);
  EXPECT_EQ(nibble_gguf_open(path.c_str(), &q), NIBBLE_ERROR_IO);
  EXPECT_NE(std::string(nibble_last_error()).find("no packed layout"), std::string::npos)
      << nibble_last_error();
  EXPECT_EQ(q, reinterpret_cast<nibble_gguf*>(0x1));
  nibble_gguf_close(p);
  nibble_gguf_close(g);
  std::remove(path.c_str());
}

}  // namespace
