// nibble-bench: baselines compiled for the build machine (bench/CMakeLists.txt adds -march=native
// to this file when NIBBLE_BENCH_NATIVE is ON): the fp32 Eigen products and the memory
// read-bandwidth kernel that serves as the decode roofline.
//
// ODR note: the library and the other benchmark files instantiate Eigen with the default flags.
// Eigen's heap allocator depends on EIGEN_MAX_ALIGN_BYTES (16 by default on x86-64, 64 with
// AVX-512), and the linker keeps one copy of each inline Eigen function for the whole program, so
// this file pins the alignment to the default: only the instruction selection differs here, never
// the memory layout or the allocator.
#ifndef EIGEN_MAX_ALIGN_BYTES
#define EIGEN_MAX_ALIGN_BYTES 16
#endif
#ifndef EIGEN_MAX_STATIC_ALIGN_BYTES
#define EIGEN_MAX_STATIC_ALIGN_BYTES 16
#endif
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../src/dispatch.hpp"
#include "../src/read_bandwidth.hpp"
#include "common.hpp"

namespace nibble_bench {
namespace {

// ---- memory read bandwidth: sum of 64-bit words over an array much larger than the LLC ----

// Without -march=native (NIBBLE_BENCH_NATIVE off, or a binary built for other machines), the
// default x86-64 target would sum with 128-bit SSE2 adds, which on a fast-memory core cannot keep
// up with DRAM (measured on Zen 5: 30 GB/s against 38-40 with AVX-512). Clone the loop for the
// wide vector units and let the loader pick the clone for the CPU it runs on.
#if !defined(NIBBLE_BENCH_NATIVE) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define NIBBLE_BENCH_SUM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef NIBBLE_BENCH_SUM_CLONES
#define NIBBLE_BENCH_SUM_CLONES
#endif

// One sweep's read loop (src/read_bandwidth.hpp) in pattern k, cloned per ISA.
NIBBLE_BENCH_SUM_CLONES std::uint64_t sum_words(int k, const std::uint64_t* p, std::size_t n) {
  return nibble::membw::sum_pattern(k, p, n);
}
using nibble::membw::kNumReadPatterns;
using nibble::membw::kReadPatternNames;

// Sums the array on `threads` workers, split the way nibble's parallel products split their rows
// (detail::parallel_run): kTasksPerThread slices per thread, each thread sums a contiguous range
// of them in address order and then takes slices from the back of the others' ranges. With one
// contiguous slice per thread the sweep ended with its slowest thread and under-stated the
// bandwidth on many cores: on a 16-core Emerald Rapids VM (3 alternated runs, 16 threads) it read
// 89.5 GB/s against 116.5 with this split, and the paired ratio of the Q4_K_M decode step fell
// from an impossible 1.28 (packed) / 1.11 (plain) to 1.00 / 0.94 (docs/kernels.md, "Many
// threads"). On one thread it is one call of the pattern's loop; on two the split measured the
// same as one slice per thread.
struct SumJob {
  const std::uint64_t* p;
  std::size_t n, slice;
  std::uint64_t* part;
  int pattern;
};

void sum_slice(void* arg, std::int64_t i) {
  const SumJob& j = *static_cast<const SumJob*>(arg);
  const std::size_t b = std::min(j.n, j.slice * static_cast<std::size_t>(i));
  const std::size_t e = std::min(j.n, b + j.slice);
  j.part[i] = sum_words(j.pattern, j.p + b, e - b);
}

std::uint64_t parallel_sum(const std::uint64_t* p, std::size_t n, int threads, int pattern) {
  if (threads <= 1) return sum_words(pattern, p, n);
  const std::size_t slices = static_cast<std::size_t>(threads) * nibble::detail::kTasksPerThread;
  const std::size_t slice = (n / 16 + slices - 1) / slices * 16;
  std::vector<std::uint64_t> part(slices, 0);
  SumJob job{p, n, slice, part.data(), pattern};
  nibble::Context ctx;
  ctx.threads = threads;
  nibble::detail::parallel_run(ctx, static_cast<std::int64_t>(slices), sum_slice, &job);
  std::uint64_t s = 0;
  for (std::uint64_t v : part) s += v;
  return s;
}

/// Bytes/s of one sweep over the regions with `threads` workers and read pattern `pattern`.
double sweep(const std::vector<Region>& regions, int threads, int pattern) {
  double bytes = 0, sec = 0;
  for (const Region& r : regions) {
    const std::size_t words = r.bytes / sizeof(std::uint64_t) / 16 * 16;
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t s = parallel_sum(static_cast<const std::uint64_t*>(r.p), words, threads, pattern);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(s);
    bytes += static_cast<double>(words * sizeof(std::uint64_t));
    sec += std::chrono::duration<double>(t1 - t0).count();
  }
  return sec > 0 ? bytes / sec : 0.0;
}

/// The read pattern of the sweeps at `threads` workers: chosen once per process and thread count,
/// on the first sweep at that count, as the pattern with the highest median over 3 rounds of
/// alternated sweeps of `regions` (arrays of at least 2 x LLC: the membw array or a cold row's
/// rotated weight copies).
int read_pattern(const std::vector<Region>& regions, int threads) {
  static std::map<int, int> chosen;
  auto it = chosen.find(threads);
  if (it != chosen.end()) return it->second;
  constexpr int kRounds = 3;
  double bw[kNumReadPatterns][kRounds];
  for (int r = 0; r < kRounds; ++r)
    for (int k = 0; k < kNumReadPatterns; ++k) bw[k][r] = sweep(regions, threads, k);
  int best = 0;
  double best_bw = -1;
  for (int k = 0; k < kNumReadPatterns; ++k) {
    std::sort(bw[k], bw[k] + kRounds);
    if (bw[k][kRounds / 2] > best_bw) best_bw = bw[k][kRounds / 2], best = k;
  }
  chosen[threads] = best;
  return best;
}

void run_membw(benchmark::State& st, int threads) {
  release_weights();
  release_decode();
  Buffer& buf = membw_slot();
  if (!buf.data()) buf = make_buffer(config().membw_bytes);
  const std::size_t words = buf.bytes / sizeof(std::uint64_t) / 16 * 16;
  const auto* p = buf.as<const std::uint64_t>();
  const int pattern = read_pattern({{p, words * sizeof(std::uint64_t)}}, threads);
  for (auto _ : st) {
    std::uint64_t s = parallel_sum(p, words, threads, pattern);
    benchmark::DoNotOptimize(s);
  }
  set_rates(st, static_cast<double>(words * sizeof(std::uint64_t)), 0);
  st.SetLabel("read roofline: " + std::to_string(buf.bytes >> 20) + " MiB array, LLC " +
              std::to_string(config().llc_bytes >> 20) + " MiB, " + kReadPatternNames[pattern]);
}

// ---- Eigen fp32 products ----

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void run_eigen(benchmark::State& st, Shape s, int n, int threads) {
  const bool cold = n == 1;
  try {
    const WeightSet& w = weight_set(nibble::Format::f32, s);
    Eigen::setNbThreads(threads);
    const std::vector<float> X = activations(n, s.cols);
    std::vector<float> Y(static_cast<std::size_t>(n * s.rows));
    auto call = [&](const void* W) {
      Eigen::Map<const RowMat> Wm(static_cast<const float*>(W), s.rows, s.cols);
      if (n == 1) {
        Eigen::Map<const Eigen::VectorXf> x(X.data(), s.cols);
        Eigen::Map<Eigen::VectorXf> y(Y.data(), s.rows);
        y.noalias() = Wm * x;
      } else {
        Eigen::Map<const RowMat> Xm(X.data(), n, s.cols);
        Eigen::Map<RowMat> Ym(Y.data(), n, s.rows);
        Ym.noalias() = Xm * Wm.transpose();
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
    std::string label = cache_label(w, cold);
    if (n == 1 && threads > 1) label += "; Eigen's GEMV is single-threaded";
    if (Eigen::nbThreads() != threads) label += "; Eigen built without OpenMP: 1 thread";
    st.SetLabel(label);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

double read_bandwidth(const std::vector<Region>& regions, int threads) {
  return sweep(regions, threads, read_pattern(regions, threads));
}

void set_paired_bandwidth(benchmark::State& st, double bytes_per_s, double bw_before,
                          double bw_after) {
  const double bw = 0.5 * (bw_before + bw_after);
  if (bw <= 0) return;
  st.counters["membw_GB/s"] = bw / 1e9;
  st.counters["x_membw"] = bytes_per_s / bw;
}

void register_membw(const std::vector<int>& threads) {
  for (int t : threads) {
    const std::string name = "membw/read/sum/" + std::to_string(config().membw_bytes >> 20) +
                             "MiB/threads:" + std::to_string(t) + "/cold";
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_membw(st, t); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

void register_eigen_products(Shape s) {
  for (int n : batch_sizes()) {
    for (int t : thread_counts()) {
      const std::string name =
          bench_name(n == 1 ? "gemv" : "gemm", "f32", "eigen", s, n, t, n == 1 ? "cold" : "warm");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& st) { run_eigen(st, s, n, t); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

std::vector<std::pair<std::string, std::string>> native_context() {
  std::vector<std::pair<std::string, std::string>> c;
  c.emplace_back("eigen_simd", Eigen::SimdInstructionSetsInUse());
#if defined(NIBBLE_BENCH_NATIVE)
  c.emplace_back("baselines_compiled_for", "-march=native (build machine)");
#else
  c.emplace_back("baselines_compiled_for",
                 "default target (bandwidth loop cloned for AVX-512/AVX2)");
#endif
  return c;
}

}  // namespace nibble_bench
