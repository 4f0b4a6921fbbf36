// nibble-bench: calibration algorithms on real layer shapes: Hessian accumulation (2048 tokens),
// GPTQ (4-bit, group 128, act-order) and AWQ (4-bit, group 128) on 4096x4096 and 11008x4096,
// and GPTQ into q4_K blocks. Registered only when include/nibble/quant/*.hpp exist.
// These run for seconds per iteration: Google Benchmark then measures a single iteration.
// The default run has the Hessian and GPTQ on 4096x4096; `--calib` adds GPTQ on 11008x4096 and
// AWQ (about a minute per AWQ iteration on 2 cores).
#include "common.hpp"

#if __has_include("nibble/quant/gptq.hpp") && __has_include(                 \
                                                  "nibble/quant/awq.hpp") && \
                                                  __has_include("nibble/quant/hessian.hpp")
#define NIBBLE_BENCH_CALIB 1
#include "nibble/quant/awq.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#endif

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(NIBBLE_HAVE_BLAS)
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace nibble_bench {

#if defined(NIBBLE_BENCH_CALIB)

namespace {

constexpr std::int64_t kTokens = 2048;    // calibration tokens for the Hessian / GPTQ
constexpr std::int64_t kAwqTokens = 512;  // calibration tokens for AWQ (its clip-search sample)

// Sets every thread pool the calibration code may use (OpenMP loops, Eigen, OpenBLAS) and
// restores the OpenMP default on destruction.
struct ThreadScope {
  int saved = 1;
  explicit ThreadScope(int t) {
#if defined(_OPENMP)
    saved = omp_get_max_threads();
    omp_set_num_threads(t);
#endif
    Eigen::setNbThreads(t);
#if defined(NIBBLE_HAVE_BLAS)
    openblas_set_num_threads(t);
#endif
  }
  ~ThreadScope() {
#if defined(_OPENMP)
    omp_set_num_threads(saved);
#endif
    Eigen::setNbThreads(0);
  }
};

Eigen::MatrixXf random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed,
                              float sigma) {
  Eigen::MatrixXf m(rows, cols);
  fill_gaussian(m.data(), static_cast<std::size_t>(m.size()), seed, sigma);
  return m;
}

// Cached inputs (weights and the 2048-token Hessian) so repeated runs do not rebuild them.
struct CalibInputs {
  Shape shape{0, 0};
  Eigen::MatrixXf W, X, H;
};
CalibInputs& calib_inputs(Shape s) {
  static CalibInputs c;
  if (c.shape.rows != s.rows || c.shape.cols != s.cols) {
    release_weights();
    c.W = random_matrix(s.rows, s.cols, 11, 0.02f);
    c.X = random_matrix(kTokens, s.cols, 12, 1.0f);
    nibble::Hessian h(s.cols);
    h.add_batch(c.X.data(), kTokens);  // X is symmetric in distribution: layout does not matter
    c.H = h.matrix();
    c.shape = s;
  }
  return c;
}

void run_hessian(benchmark::State& st, Shape s, int threads) {
  try {
    ThreadScope scope(threads);
    const Eigen::MatrixXf X = random_matrix(kTokens, s.cols, 12, 1.0f);
    for (auto _ : st) {
      nibble::Hessian h(s.cols);
      h.add_batch(X.data(), kTokens);
      benchmark::DoNotOptimize(h.matrix().data());
    }
    set_rates(st, static_cast<double>(X.size()) * sizeof(float),
              static_cast<double>(kTokens) * s.cols * s.cols);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void run_gptq(benchmark::State& st, Shape s, int threads) {
  try {
    CalibInputs& in = calib_inputs(s);
    ThreadScope scope(threads);
    nibble::gptq::Config cfg;
    cfg.bits = 4;
    cfg.group_size = 128;
    cfg.act_order = true;
    for (auto _ : st) {
      nibble::gptq::Result r = nibble::gptq::quantize(in.W, in.H, cfg);
      benchmark::DoNotOptimize(r.Q.data());
    }
    set_rates(st, static_cast<double>(in.W.size()) * sizeof(float), 0);
    st.SetLabel("Hessian of 2048 tokens; bytes = fp32 weights");
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void run_gptq_blocks(benchmark::State& st, nibble::Format f, Shape s, int threads) {
  try {
    CalibInputs& in = calib_inputs(s);
    ThreadScope scope(threads);
    nibble::gptq::Config cfg;
    for (auto _ : st) {
      std::vector<std::uint8_t> b = nibble::gptq::quantize_blocks(f, in.W, in.H, cfg);
      benchmark::DoNotOptimize(b.data());
    }
    set_rates(st, static_cast<double>(in.W.size()) * sizeof(float), 0);
    st.SetLabel("Hessian of 2048 tokens; bytes = fp32 weights");
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void run_awq(benchmark::State& st, Shape s, int threads) {
  try {
    CalibInputs& in = calib_inputs(s);
    ThreadScope scope(threads);
    const Eigen::MatrixXf X = in.X.topRows(kAwqTokens);
    nibble::awq::Config cfg;
    cfg.bits = 4;
    cfg.group_size = 128;
    for (auto _ : st) {
      nibble::awq::Result r = nibble::awq::search(in.W, X, cfg);
      benchmark::DoNotOptimize(r.W_eff.data());
    }
    set_rates(st, static_cast<double>(in.W.size()) * sizeof(float), 0);
    st.SetLabel("512 calibration tokens; bytes = fp32 weights");
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

void register_calibration(bool full) {
  auto reg = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  };
  for (int t : thread_counts()) {
    const Shape hs{kTokens, 4096};
    reg(bench_name("hessian", "f32", "nibble", hs, -1, t, ""), [=](benchmark::State& st) {
      run_hessian(st, Shape{4096, 4096}, t);
    });
  }
  for (Shape s : {Shape{4096, 4096}, Shape{11008, 4096}}) {
    if (!full && s.rows != 4096) continue;
    for (int t : thread_counts()) {
      reg(bench_name("gptq", "int4_g128_actorder", "nibble", s, -1, t, ""),
          [=](benchmark::State& st) { run_gptq(st, s, t); });
      if (full) {
        reg(bench_name("awq", "int4_g128", "nibble", s, -1, t, ""),
            [=](benchmark::State& st) { run_awq(st, s, t); });
      }
      if (s.rows == 4096) {
        reg(bench_name("gptq", "q4_K", "nibble", s, -1, t, ""),
            [=](benchmark::State& st) { run_gptq_blocks(st, nibble::Format::q4_K, s, t); });
      }
    }
  }
}

#else

void register_calibration(bool) {}

#endif

}  // namespace nibble_bench
