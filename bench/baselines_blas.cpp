// nibble-bench: fp32 OpenBLAS baseline (cblas_sgemv for n = 1 with cold weights, cblas_sgemm for
// n > 1), on the same fp32 weights as nibble's f32 benchmarks.
#include <string>
#include <vector>

#include "common.hpp"

#if defined(NIBBLE_HAVE_BLAS)
#include <cblas.h>
// OpenBLAS extensions (declared by OpenBLAS' cblas.h; repeated in case another cblas.h is found).
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
char* openblas_get_config(void);
}
#endif

namespace nibble_bench {

#if defined(NIBBLE_HAVE_BLAS)

namespace {

void run_blas(benchmark::State& st, Shape s, int n, int threads) {
  const bool cold = n == 1;
  try {
    const WeightSet& w = weight_set(nibble::Format::f32, s);
    openblas_set_num_threads(threads);
    if (openblas_get_num_threads() != threads) {
      st.SkipWithError("openblas_set_num_threads did not take effect");
      return;
    }
    const std::vector<float> X = activations(n, s.cols);
    std::vector<float> Y(static_cast<std::size_t>(n * s.rows));
    const int rows = static_cast<int>(s.rows), cols = static_cast<int>(s.cols);
    auto call = [&](const void* W) {
      const float* Wf = static_cast<const float*>(W);
      if (n == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, Wf, cols, X.data(), 1, 0.0f,
                    Y.data(), 1);
      } else {
        // Y (n x rows) = X (n x cols) * W^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, X.data(), cols,
                    Wf, cols, 0.0f, Y.data(), rows);
      }
    };
    call(w.copy(0));
    const std::string err = check_product(w, X.data(), n, Y.data(), 1e-4);
    if (!err.empty()) {
      st.SkipWithError(err.c_str());
      return;
    }
    timed_loop(st, cold, {w.all_copies()}, static_cast<double>(w.bytes), threads, [&] {
      call(cold ? w.next_cold() : w.copy(0));
      benchmark::DoNotOptimize(Y.data());
      benchmark::ClobberMemory();
    });
    set_rates(st, static_cast<double>(w.bytes), 2.0 * s.rows * s.cols * n);
    st.SetLabel(cache_label(w, cold) + "; OpenBLAS core " + openblas_get_corename());
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

void register_blas_products(Shape s) {
  for (int n : batch_sizes()) {
    for (int t : thread_counts()) {
      const std::string name = bench_name(n == 1 ? "gemv" : "gemm", "f32", "openblas", s, n, t,
                                          n == 1 ? "cold" : "warm");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& st) { run_blas(st, s, n, t); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

std::vector<std::pair<std::string, std::string>> blas_context() {
  return {{"openblas_corename", openblas_get_corename()},
          {"openblas_config", openblas_get_config()}};
}

#else

void register_blas_products(Shape) {}
std::vector<std::pair<std::string, std::string>> blas_context() {
  return {{"openblas", "not built (BLAS not found)"}};
}

#endif

}  // namespace nibble_bench
