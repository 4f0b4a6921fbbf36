// nibble-bench: the model decode step (one token through every linear layer, weights in DRAM).
// The stack and the step are shared with `nibble bench MODEL.gguf` (src/decode_step.hpp).
#include <memory>
#include <string>

#include "../src/decode_step.hpp"
#include "common.hpp"

namespace nibble_bench {
namespace {

// The stack as built or stored in the file (0), and in the plain (1) and packed (2) layouts.
std::unique_ptr<nibble::decode::Stack>& decode_slot(int which) {
  static std::unique_ptr<nibble::decode::Stack> s[3];
  return s[which];
}

const nibble::decode::Stack& decode_stack(bool packed) {
  std::unique_ptr<nibble::decode::Stack>& stored = decode_slot(0);
  if (!stored) {
    release_weights();
    membw_slot() = Buffer{};
    stored = std::make_unique<nibble::decode::Stack>(
        config().decode_model.empty()
            ? nibble::decode::make_llama7b_q4km_stack(config().decode_layers)
            : nibble::decode::load_gguf_stack(config().decode_model));
  }
  std::unique_ptr<nibble::decode::Stack>& slot = decode_slot(packed ? 2 : 1);
  if (!slot)
    slot = std::make_unique<nibble::decode::Stack>(nibble::decode::with_layout(*stored, packed));
  return *slot;
}

void run_decode(benchmark::State& st, int threads, bool packed) {
  try {
    const nibble::decode::Stack& s = decode_stack(packed);
    nibble::Context ctx;
    ctx.threads = threads;
    nibble::decode::Runner r(s, ctx);
    r.step();                     // untimed: first touch of the activations, thread start-up
    std::vector<Region> regions;  // every linear's weights (the paired sweeps)
    for (const nibble::decode::Linear& l : s.linears) regions.push_back({l.data, l.bytes});
    timed_loop(st, true, regions, static_cast<double>(s.bytes()), threads, [&] {
      r.step();
      benchmark::DoNotOptimize(r.y());
      benchmark::ClobberMemory();
    });
    set_rates(st, static_cast<double>(s.bytes()), 0);
    st.counters["tokens/s"] =
        benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
    std::string label = s.label + ": " + std::to_string(s.linears.size()) + " GEMVs, " +
                        std::to_string(s.bytes() >> 20) + " MiB of weights";
    if (s.bytes() < 2 * config().llc_bytes) label += " (< 2x LLC: partly cache-resident)";
    if (!s.skipped.empty())
      label += ", " + std::to_string(s.skipped.size()) + " 2-D tensors skipped";
    st.SetLabel(label);
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
  }
}

}  // namespace

void release_decode() {
  for (int i = 2; i >= 0; --i) decode_slot(i).reset();
}

void register_decode(const std::vector<int>& threads) {
  std::string what;
  if (config().decode_model.empty()) {
    what = "llama7b_q4_K_M/" + std::to_string(config().decode_layers) + "L";
  } else {
    const std::string& p = config().decode_model;
    const std::size_t slash = p.find_last_of('/');
    what = "gguf/" + (slash == std::string::npos ? p : p.substr(slash + 1));
  }
  const std::string isa = nibble::isa_name(nibble::best_isa());
  for (int t : threads) {
    // kernel/format/impl/shape/threads:T/cold, as the other rows (format = the type mix, with
    // ".x16" for the packed layout as in the product rows), plain and packed interleaved.
    for (bool packed : {false, true}) {
      const std::string name = "decode/" + what.substr(0, what.find('/')) + (packed ? ".x16" : "") +
                               "/" + isa + "/" + what.substr(what.find('/') + 1) +
                               "/threads:" + std::to_string(t) + "/cold";
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& st) { run_decode(st, t, packed); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace nibble_bench
