// nibble-bench: nibble's own kernels. gemv (n = 1, cold weights) / gemm (n > 1) per weight format
// per ISA, and the quantizer / dequantizer throughput.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common.hpp"

namespace nibble_bench {
namespace {

using nibble::Format;
using nibble::Isa;

// Where the weights of a product benchmark come from.
enum class Residency {
  model,    // weight_set(): rotated copies for n = 1 (cold, DRAM), copy 0 for n > 1
  warm_l2,  // warm_weight_set() sized for L2 (n = 1): the compute ceiling of the GEMV
  warm_l3,  // warm_weight_set() sized for the LLC (n = 1)
};

// Runs one product benchmark. Weights are rotated over WeightSet::copies for n = 1 (cold) and
// copy 0 is reused for n > 1 (warm: prefill is compute-bound) and for the warm GEMV rows.
void run_product(benchmark::State& st, const std::string& name, Format f, Isa isa, Shape s, int n,
                 int threads, Residency where = Residency::model, bool packed = false) {
  const bool cold = n == 1 && where == Residency::model;
  try {
    const WeightSet& w =
        where == Residency::model ? weight_set(f, s, packed) : warm_weight_set(f, s, packed);
    nibble::Context ctx;
    ctx.isa = isa;
    ctx.threads = threads;
    const std::vector<float> X = activations(n, s.cols);
    std::vector<float> Y(static_cast<std::size_t>(n * s.rows));
    auto call = [&](const void* W) {
      if (packed) {
        nibble::gemm(ctx, nibble::PackedWeights::view(f, W, s.rows, s.cols), X.data(), n, Y.data());
      } else if (n == 1) {
        nibble::gemv(ctx, f, W, s.rows, s.cols, X.data(), Y.data());
      } else {
        nibble::gemm(ctx, f, W, s.rows, s.cols, X.data(), n, Y.data());
      }
    };
    // Validate once per benchmark (untimed) so a broken kernel is reported, not timed.
    static std::set<std::string> checked;
    if (!checked.count(name)) {
      call(w.copy(0));
      const std::string err = check_product(w, X.data(), n, Y.data(), product_tolerance(f));
      if (!err.empty()) {
        st.SkipWithError(err.c_str());
        return;
      }
      checked.insert(name);
    }
    timed_loop(st, cold, {w.all_copies()}, static_cast<double>(w.bytes), threads, [&] {
      call(cold ? w.next_cold() : w.copy(0));
      benchmark::DoNotOptimize(Y.data());
      benchmark::ClobberMemory();
    });
    set_rates(st, static_cast<double>(w.bytes), 2.0 * s.rows * s.cols * n);
    if (where == Residency::model) {
      st.SetLabel(cache_label(w, cold));
    } else {
      st.SetLabel(std::string(where == Residency::warm_l2 ? "warm L2: " : "warm L3: ") +
                  std::to_string(w.bytes >> 10) + " KiB of weights, one copy reused");
    }
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

// The scalar path is slow: measure it on the smallest shape only, at n = 1 and 8.
bool scalar_case(Shape s, int n) {
  return s.rows == 4096 && s.cols == 4096 && n <= 8;
}

}  // namespace

void register_nibble_products(Shape s, Format f, const std::vector<Isa>& isas, bool packed) {
  // The packed layout (nibble/packed.hpp) is a format of its own in the names: "q4_K.x16".
  const std::string fname = std::string(nibble::traits(f).name) + (packed ? ".x16" : "");
  for (int n : batch_sizes()) {
    for (Isa isa : isas) {
      if (isa == Isa::scalar && !scalar_case(s, n)) continue;
      if (packed && isa == Isa::scalar) continue;  // the scalar table unpacks: not a kernel
      for (int t : thread_counts()) {
        const std::string name = bench_name(n == 1 ? "gemv" : "gemm", fname, nibble::isa_name(isa),
                                            s, n, t, n == 1 ? "cold" : "warm");
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& st) {
                                       run_product(st, name, f, isa, s, n, t, Residency::model,
                                                   packed);
                                     })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  // Warm GEMV rows (cache-resident weights: the compute ceiling) next to the cold rows of the
  // first model shape, for the same ISAs and thread counts. Registered after the gemm rows so
  // that the cached cold weight set is not rebuilt.
  if (s.rows != model_shapes().front().rows || s.cols != model_shapes().front().cols) return;
  for (Residency where : {Residency::warm_l2, Residency::warm_l3}) {
    const Shape ws = warm_shape(f, where == Residency::warm_l3);
    const char* tag = where == Residency::warm_l2 ? "warm_l2" : "warm_l3";
    for (Isa isa : isas) {
      if (packed && isa == Isa::scalar) continue;
      for (int t : thread_counts()) {
        const std::string name = bench_name("gemv", fname, nibble::isa_name(isa), ws, 1, t, tag);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& st) { run_product(st, name, f, isa, ws, 1, t, where, packed); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

// ---- quantizer / dequantizer throughput ----

namespace {

constexpr Shape kQuantShape{1024, 4096};

// fp32 input of the quantizer benchmarks (16 MiB) and its importance weights.
const std::vector<float>& quant_input() {
  static const std::vector<float> x = [] {
    std::vector<float> v(static_cast<std::size_t>(kQuantShape.rows * kQuantShape.cols));
    fill_gaussian(v.data(), v.size(), 99, 0.02f);
    return v;
  }();
  return x;
}
const std::vector<float>& quant_importance() {
  static const std::vector<float> w = [] {
    std::vector<float> g(static_cast<std::size_t>(kQuantShape.cols));
    fill_gaussian(g.data(), g.size(), 123, 1.0f);
    for (float& v : g) v = std::exp(0.5f * v);
    return g;
  }();
  return w;
}

void run_quantize(benchmark::State& st, Format f, Isa isa, int threads, bool imatrix) {
  try {
    const Shape s = kQuantShape;
    const std::vector<float>& x = quant_input();
    const float* imp = imatrix ? quant_importance().data() : nullptr;
    Buffer out = make_buffer(static_cast<std::size_t>(s.rows) * nibble::row_bytes(f, s.cols));
    nibble::Context ctx;
    ctx.isa = isa;
    ctx.threads = threads;
    for (auto _ : st) {
      nibble::quantize(ctx, f, x.data(), s.rows, s.cols, out.data(), imp);
      benchmark::DoNotOptimize(out.data());
      benchmark::ClobberMemory();
    }
    set_rates(st, static_cast<double>(x.size() * sizeof(float)), 0);
    st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) *
                         static_cast<std::int64_t>(x.size()));
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

void run_dequantize(benchmark::State& st, Format f, Isa isa, int threads) {
  try {
    const Shape s = kQuantShape;
    const std::vector<float>& x = quant_input();
    Buffer q = make_buffer(static_cast<std::size_t>(s.rows) * nibble::row_bytes(f, s.cols));
    nibble::quantize(f, x.data(), s.rows, s.cols, q.data());
    std::vector<float> y(x.size());
    nibble::Context ctx;
    ctx.isa = isa;
    ctx.threads = threads;
    for (auto _ : st) {
      nibble::dequantize(ctx, f, q.data(), s.rows, s.cols, y.data());
      benchmark::DoNotOptimize(y.data());
      benchmark::ClobberMemory();
    }
    set_rates(st, static_cast<double>(y.size() * sizeof(float)), 0);
    st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) *
                         static_cast<std::int64_t>(y.size()));
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

// pack / unpack (nibble/packed.hpp) of a quantized kQuantShape matrix: bytes per second.
// in_place: pack_in_place / unpack_in_place on one buffer (each iteration permutes the previous
// iteration's result again: the same work).
void run_pack(benchmark::State& st, Format f, int threads, bool unpack, bool in_place) {
  try {
    const Shape s = kQuantShape;
    const std::size_t bytes = static_cast<std::size_t>(s.rows) * nibble::row_bytes(f, s.cols);
    Buffer q = make_buffer(bytes), out = make_buffer(bytes);
    nibble::quantize(f, quant_input().data(), s.rows, s.cols, q.data());
    nibble::Context ctx;
    ctx.threads = threads;
    if (unpack) nibble::pack(ctx, f, q.data(), s.rows, s.cols, out.data());
    for (auto _ : st) {
      if (in_place) {
        if (unpack) {
          nibble::unpack_in_place(ctx, f, out.data(), s.rows, s.cols);
        } else {
          nibble::pack_in_place(ctx, f, q.data(), s.rows, s.cols);
        }
      } else if (unpack) {
        nibble::unpack(ctx, f, out.data(), s.rows, s.cols, q.data());
      } else {
        nibble::pack(ctx, f, q.data(), s.rows, s.cols, out.data());
      }
      benchmark::ClobberMemory();
    }
    set_rates(st, static_cast<double>(bytes), 0);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

// bitsandbytes-style NF4 (nibble::nf4::quantize), single-threaded reference API.
void run_quantize_bnb(benchmark::State& st, bool double_quant) {
  try {
    const std::vector<float>& x = quant_input();
    for (auto _ : st) {
      nibble::nf4::Quantized q =
          nibble::nf4::quantize(x.data(), static_cast<std::int64_t>(x.size()), 64, double_quant);
      benchmark::DoNotOptimize(q.packed.data());
    }
    set_rates(st, static_cast<double>(x.size() * sizeof(float)), 0);
    st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) *
                         static_cast<std::int64_t>(x.size()));
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

void register_quantizers(const std::vector<Isa>& isas) {
  std::vector<Format> formats = weight_formats();
  formats.push_back(Format::q8_K);  // the activation format of the K-quant products
  auto reg = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  for (Format f : formats) {
    const std::string fname = nibble::traits(f).name;
    const bool has_imatrix = nibble::has_importance_quantizer(f);
    for (Isa isa : isas) {
      const std::string iname = nibble::isa_name(isa);
      for (int t : thread_counts()) {
        reg(bench_name("quantize", fname, iname, kQuantShape, -1, t, ""),
            [=](benchmark::State& st) { run_quantize(st, f, isa, t, false); });
        if (has_imatrix) {
          reg(bench_name("quantize_imatrix", fname, iname, kQuantShape, -1, t, ""),
              [=](benchmark::State& st) { run_quantize(st, f, isa, t, true); });
        }
        if (f != Format::q8_K) {
          reg(bench_name("dequantize", fname, iname, kQuantShape, -1, t, ""),
              [=](benchmark::State& st) { run_dequantize(st, f, isa, t); });
        }
      }
    }
  }
  for (Format f : formats) {
    if (!nibble::packable(f)) continue;
    for (int t : thread_counts())
      for (bool un : {false, true})
        for (bool ip : {false, true})
          reg(bench_name(un ? "unpack" : "pack", nibble::traits(f).name,
                         ip ? "nibble_in_place" : "nibble", kQuantShape, -1, t, ""),
              [=](benchmark::State& st) { run_pack(st, f, t, un, ip); });
  }
  for (bool dq : {false, true}) {
    reg(bench_name("quantize_bnb", dq ? "nf4_dq" : "nf4", "ref", kQuantShape, -1, 1, ""),
        [=](benchmark::State& st) { run_quantize_bnb(st, dq); });
  }
}

}  // namespace nibble_bench
