// nibble-bench: shared pieces of the benchmark harness (shapes, naming, aligned buffers, the
// cold-cache weight pool, counters). Implementations in common.cpp.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nibble/core/cpu.hpp"
#include "nibble/nibble.hpp"

namespace nibble_bench {

/// A weight matrix shape: rows (output features) x cols (input features).
struct Shape {
  std::int64_t rows;
  std::int64_t cols;
};

/// Shapes of real model projections (LLaMA-7B attention/MLP, Mistral-7B MLP).
const std::vector<Shape>& model_shapes();
/// Activation counts: 1 (decode, GEMV) and 8, 64, 512 (prefill, GEMM).
const std::vector<int>& batch_sizes();
/// Thread counts measured, ascending (default 1 and 2; --threads=LIST).
const std::vector<int>& thread_counts();
/// Sets thread_counts() from a comma-separated list of counts in 1..1024 (sorted, duplicates
/// dropped). Returns false, changing nothing, if the list is malformed.
bool set_thread_counts(const std::string& list);
/// Weight formats measured by the GEMV/GEMM benchmarks.
const std::vector<nibble::Format>& weight_formats();

/// Run-wide settings (set once in main before registration).
struct Config {
  std::size_t llc_bytes = 0;    ///< last-level cache size used for the cold rotation
  double cold_factor = 2.0;     ///< rotated copies span at least cold_factor * llc_bytes
  std::size_t membw_bytes = 0;  ///< array size of the memory-bandwidth kernel
  std::size_t l2_bytes = 0;     ///< per-core L2 size (warm_l2 rows: weights of l2_bytes / 2)
  int decode_layers = 4;        ///< layers of the built-in decode stack (--layers)
  std::string decode_model;     ///< GGUF file for the decode rows instead (--model)
};
Config& config();

/// Last-level cache size in bytes: sysconf(_SC_LEVEL3_CACHE_SIZE), else the largest
/// /sys/devices/system/cpu/cpu0/cache/index*/size, else 32 MiB.
std::size_t detect_llc_bytes();

/// Per-core L2 cache size in bytes: sysconf(_SC_LEVEL2_CACHE_SIZE), else the level-2 entry of
/// /sys/devices/system/cpu/cpu0/cache/index*/, else 1 MiB.
std::size_t detect_l2_bytes();

/// Weight bytes of the warm GEMV rows: warm_l2 = l2_bytes / 2 (fits one core's L2 with room for
/// activations), warm_l3 = min(llc_bytes / 2, 16 MiB) (fits the last-level cache, not L2).
std::size_t warm_target_bytes(bool l3);
/// Shape of a warm GEMV row for format `f`: 4096 columns, rows (a multiple of 16, at least 16)
/// so that rows * row_bytes(f, 4096) is at most warm_target_bytes(l3).
Shape warm_shape(nibble::Format f, bool l3);

/// A memory region a paired bandwidth sweep reads.
struct Region {
  const void* p;
  std::size_t bytes;
};

/// Owning 64-byte (2 MiB when large, with transparent huge pages requested) aligned buffer.
struct Buffer {
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr;
  std::size_t bytes = 0;
  void* data() const { return ptr.get(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr.get());
  }
};
/// Allocates and zero-fills (first touch) `bytes` bytes.
Buffer make_buffer(std::size_t bytes);

/// Deterministic pseudo-random values, roughly N(0, sigma^2) (Irwin-Hall with 4 uniforms).
void fill_gaussian(float* dst, std::size_t n, std::uint64_t seed, float sigma);

/// A quantized weight matrix and `copies` identical copies of it, `stride` bytes apart.
/// Decode benchmarks (n = 1) rotate over the copies so that the bytes touched between two uses
/// of the same copy exceed the last-level cache: every GEMV reads its weights from DRAM.
struct WeightSet {
  nibble::Format format;
  bool packed = false;  ///< copies hold the packed layout (nibble/packed.hpp)
  Shape shape;
  std::size_t bytes = 0;   ///< bytes of one copy (rows * row_bytes)
  std::size_t stride = 0;  ///< distance between copies (bytes rounded up to 4 KiB)
  int copies = 0;
  Buffer buffer;
  mutable std::size_t next = 0;  ///< rotation position, kept across runs and benchmarks
  /// The next copy of the rotation: successive calls (also across Google Benchmark's repeated
  /// invocations of one benchmark, and across benchmarks sharing this set) walk all copies, so a
  /// copy is reused only after all the others were read.
  const void* next_cold() const { return copy(next++); }
  /// All copies as one region (what a paired bandwidth sweep reads).
  Region all_copies() const { return {buffer.data(), stride * static_cast<std::size_t>(copies)}; }
  const void* copy(std::size_t i) const {
    return static_cast<const char*>(buffer.data()) +
           (i % static_cast<std::size_t>(copies)) * stride;
  }
};

/// The weights of `f` at shape `s`, quantized from a fixed pseudo-random fp32 matrix (sigma
/// 0.02). Cached: the harness keeps one weight set alive at a time (benchmarks are registered
/// grouped by format and shape), so memory stays at about cold_factor * LLC.
const WeightSet& weight_set(nibble::Format f, Shape s, bool packed = false);
/// A single-copy weight set for the warm (cache-resident) GEMV rows, cached separately from
/// weight_set() so that the two do not evict each other.
const WeightSet& warm_weight_set(nibble::Format f, Shape s, bool packed = false);
/// Frees the cached weight set and fp32 source (before the bandwidth kernel allocates its array).
void release_weights();
/// The memory-bandwidth kernel's array (allocated on first use of the membw benchmarks,
/// freed by weight_set() so the two never coexist).
Buffer& membw_slot();

/// Deterministic activations: n rows of `cols` values, sigma 1.
std::vector<float> activations(std::int64_t n, std::int64_t cols, std::uint64_t seed = 7);

/// Number of rotated copies a decode benchmark uses for `bytes` of weights.
int cold_copies(std::size_t bytes);

/// Benchmark name: kernel/format/impl/RxC[/n:N]/threads:T[/cold|/warm]. (Google Benchmark
/// appends /real_time.) n < 0 omits the n field; cache empty omits the cache field.
std::string bench_name(const std::string& kernel, const std::string& format,
                       const std::string& impl, Shape s, int n, int threads,
                       const std::string& cache);

/// Sets bytes_per_second (= `bytes` per iteration) and the FLOP/s rate counter (`flops` per
/// iteration, skipped when 0).
void set_rates(benchmark::State& st, double bytes, double flops);

/// Label of a cold (rotated) or warm benchmark.
std::string cache_label(const WeightSet& w, bool cold);

/// Checks y (n x rows, row-major) against double-precision products of the dequantized weights
/// of `w` for a few rows and activation rows. Returns an empty string when every checked value
/// is within tol * sum_k |w_k x_k| (+1e-6), else a message. Used once per benchmark, before
/// timing, so a broken kernel is reported as an error instead of a number.
std::string check_product(const WeightSet& w, const float* X, std::int64_t n, const float* Y,
                          double tol);
/// Relative tolerance for check_product for format `f` (integer activation paths are looser).
double product_tolerance(nibble::Format f);

/// Registration entry points (called from main). Products are registered grouped by shape and
/// format so that consecutive benchmarks share the cached weight set.
void register_membw(const std::vector<int>& threads);
/// Memory read bandwidth (bytes/s) of one sweep over the regions with `threads` workers, the
/// same read loop as the membw rows: their bytes over the total time.
double read_bandwidth(const std::vector<Region>& regions, int threads);
/// Records the paired bandwidth counters of a row: `membw_GB/s` (the mean of the sweeps before
/// and after the timed loop) and `x_membw` (the row's weight bytes/s over it).
void set_paired_bandwidth(benchmark::State& st, double bytes_per_s, double bw_before,
                          double bw_after);
/// The timed loop of a product or decode row: body() once per iteration. With `paired` (cold
/// rows) the weights in `regions` are swept with read_bandwidth just before and just after the
/// loop and the row gets the paired counters for `bytes` of weights per iteration, so that its
/// ratio to the bandwidth comes from the same seconds of a shared, noisy host.
template <class Body>
void timed_loop(benchmark::State& st, bool paired, const std::vector<Region>& regions, double bytes,
                int threads, Body&& body) {
  const double bw0 = paired ? read_bandwidth(regions, threads) : 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) body();
  const auto t1 = std::chrono::steady_clock::now();
  if (!paired) return;
  const double sec = std::chrono::duration<double>(t1 - t0).count();
  if (sec > 0)
    set_paired_bandwidth(st, bytes * static_cast<double>(st.iterations()) / sec, bw0,
                         read_bandwidth(regions, threads));
}
/// Model decode step rows (bench_decode.cpp): every linear of the built-in llama-2-7B-shaped
/// Q4_K_M stack (config().decode_layers) or of config().decode_model, one token, per thread count,
/// in the plain and in the packed layout (format name + ".x16"; packed at setup).
void register_decode(const std::vector<int>& threads);
/// Frees the decode stack (weight_set() calls it so the two never coexist).
void release_decode();
void register_nibble_products(Shape s, nibble::Format f, const std::vector<nibble::Isa>& isas,
                              bool packed);
void register_blas_products(Shape s);
void register_eigen_products(Shape s);
void register_quantizers(const std::vector<nibble::Isa>& isas);
/// W8A8 (SmoothQuant int8) gemv/gemm per ISA and threads at shape `s` (bench_w8a8.cpp).
void register_w8a8_products(Shape s, const std::vector<nibble::Isa>& isas);
void register_calibration(bool full);  // full: also AWQ and 11008x4096 (slow)

/// Context strings the native/BLAS TUs want in the report (name, value).
std::vector<std::pair<std::string, std::string>> blas_context();
std::vector<std::pair<std::string, std::string>> native_context();

}  // namespace nibble_bench
