// nibble-bench: W8A8 (SmoothQuant) int8 products beside the other formats: gemv (n = 1, cold
// weights rotated over copies larger than the LLC) and gemm (n > 1, warm), per ISA and threads.
#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "nibble/quant/w8a8.hpp"

namespace nibble_bench {
namespace {

using nibble::Isa;

/// Quantized int8 weights of one shape and the rotated copies used for cold decode.
struct W8A8Set {
  Shape shape{0, 0};
  std::vector<nibble::w8a8::Weights> copies;
  std::size_t bytes = 0;  ///< int8 weights + fp32 scales of one copy
  std::size_t next = 0;
};

W8A8Set& w8a8_set(Shape s) {
  static std::unique_ptr<W8A8Set> cached;
  if (!cached || cached->shape.rows != s.rows || cached->shape.cols != s.cols) {
    cached.reset();
    release_weights();  // keep at most one large weight pool alive
    auto set = std::make_unique<W8A8Set>();
    set->shape = s;
    std::vector<float> w(static_cast<std::size_t>(s.rows * s.cols));
    fill_gaussian(w.data(), w.size(), 11, 0.02f);
    nibble::w8a8::Weights q = nibble::w8a8::quantize_weights(w.data(), s.rows, s.cols);
    set->bytes = q.q.size() + 4 * q.scale.size();
    const int n = cold_copies(set->bytes);
    set->copies.assign(static_cast<std::size_t>(n), q);
    cached = std::move(set);
  }
  return *cached;
}

void run_w8a8(benchmark::State& st, Isa isa, Shape s, int n, int threads) {
  try {
    W8A8Set& set = w8a8_set(s);
    nibble::Context ctx;
    ctx.isa = isa;
    ctx.threads = threads;
    const std::vector<float> X = activations(n, s.cols);
    std::vector<float> Y(static_cast<std::size_t>(n * s.rows));
    std::vector<Region> regions;  // the int8 weights of every copy (the paired sweeps)
    for (const auto& w : set.copies) regions.push_back({w.q.data(), w.q.size()});
    timed_loop(st, n == 1, regions, static_cast<double>(set.bytes), threads, [&] {
      if (n == 1) {
        const auto& w = set.copies[set.next++ % set.copies.size()];
        nibble::w8a8::gemv(ctx, w, X.data(), Y.data());
      } else {
        nibble::w8a8::gemm(ctx, set.copies[0], X.data(), n, Y.data());
      }
      benchmark::DoNotOptimize(Y.data());
      benchmark::ClobberMemory();
    });
    set_rates(st, static_cast<double>(set.bytes), 2.0 * s.rows * s.cols * n);
    st.SetLabel(n == 1 ? "cold: " + std::to_string(set.copies.size()) + " rotated copies"
                       : std::string("warm"));
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

void register_w8a8_products(Shape s, const std::vector<Isa>& isas) {
  for (int n : batch_sizes()) {
    for (Isa isa : isas) {
      if (isa == Isa::scalar && !(s.rows == 4096 && s.cols == 4096 && n <= 8)) continue;
      for (int t : thread_counts()) {
        const std::string name = bench_name(n == 1 ? "gemv" : "gemm", "w8a8", nibble::isa_name(isa),
                                            s, n, t, n == 1 ? "cold" : "warm");
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& st) { run_w8a8(st, isa, s, n, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace nibble_bench
