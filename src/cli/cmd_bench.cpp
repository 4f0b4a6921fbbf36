// nibble CLI: `nibble bench MODEL.gguf` (the model decode step on a user's model; the same code
// as nibble-bench's decode rows, src/decode_step.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../decode_step.hpp"
#include "commands.hpp"

void bench_model_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: nibble bench MODEL.gguf [-t N] [--packed] [--min-time S] "
               "[--membw-bytes N]\n"
               "  one decode step = one GEMV (a single token) through every 2-D weight of the "
               "file in\n"
               "  file order, each in its own format, weights in DRAM (token_embd is a lookup and "
               "is\n"
               "  skipped unless the output projection is tied to it). Prints ms/token, tokens/s "
               "and\n"
               "  weight GB/s against the memory read bandwidth measured in the same run.\n"
               "  -t N             threads (default: 1 and 2)\n"
               "  --packed         time the plain and the packed layout (nibble pack) side by\n"
               "                   side: each weight of 16+ rows in a packable type (see\n"
               "                   `nibble pack --help`) packed at setup (or, in a packed\n"
               "                   file, unpacked for the plain rows); without it the\n"
               "                   weights run as stored in the file\n"
               "  --min-time S     seconds per measurement (default 1)\n"
               "  --membw-bytes N  array size of the bandwidth measurement (default max(4 x LLC, "
               "512 MiB))\n"
               "  Attention, norms and the KV cache are not part of the step.\n");
}

namespace {

std::size_t llc_bytes() {
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v > 0) return static_cast<std::size_t>(v);
#endif
  return std::size_t{32} << 20;
}

}  // namespace

int cmd_bench_model(int argc, char** argv) {
  std::string path;
  std::vector<int> threads;
  double min_time = 1.0;
  std::size_t membw_bytes = 0;
  bool both_layouts = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) throw nibble::Error(std::string("bench: ") + what + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      bench_model_usage(stdout);
      return 0;
    } else if (a == "-t" || a == "--threads") {
      const int t = std::atoi(value("-t").c_str());
      if (t < 1) throw nibble::Error("bench: -t must be a positive thread count");
      threads.push_back(t);
    } else if (a == "--packed") {
      both_layouts = true;
    } else if (a == "--min-time") {
      min_time = std::strtod(value("--min-time").c_str(), nullptr);
      if (!(min_time >= 0)) throw nibble::Error("bench: --min-time must be >= 0");
    } else if (a == "--membw-bytes") {
      membw_bytes = std::strtoull(value("--membw-bytes").c_str(), nullptr, 10);
    } else if (path.empty() && !(a.size() > 1 && a[0] == '-')) {
      path = a;
    } else {
      std::fprintf(stderr, "nibble bench: unexpected argument %s\n", a.c_str());
      bench_model_usage(stderr);
      return 2;
    }
  }
  if (path.empty()) {
    bench_model_usage(stderr);
    return 2;
  }
  if (threads.empty()) threads = {1, 2};
  if (membw_bytes == 0)
    membw_bytes = std::max<std::size_t>(4 * llc_bytes(), std::size_t{512} << 20);
  membw_bytes = std::max<std::size_t>(membw_bytes, std::size_t{1} << 20);

  const nibble::decode::Stack s = nibble::decode::load_gguf_stack(path);
  const double mib = static_cast<double>(s.bytes()) / (1 << 20);
  std::printf("model: %s: %zu linear weights (%zu packed in the file), %.1f MiB read per token\n",
              s.label.c_str(), s.linears.size(), s.packed_count(), mib);
  for (const std::string& k : s.skipped) std::printf("  skipped %s\n", k.c_str());
  // The layouts to time: as stored, or plain and packed (converted at setup).
  std::vector<nibble::decode::Stack> variants;
  std::vector<std::string> names;
  if (both_layouts) {
    variants.push_back(nibble::decode::with_layout(s, false));
    names.emplace_back("plain");
    variants.push_back(nibble::decode::with_layout(s, true));
    names.emplace_back("packed");
    std::printf(
        "layouts: plain (%zu weights unpacked at setup), packed (%zu of %zu weights "
        "packed)\n",
        s.packed_count(), variants.back().packed_count(), s.linears.size());
  } else {
    variants.push_back(s);
    const std::size_t np = s.packed_count();
    names.emplace_back(np == 0 ? "plain" : np == s.linears.size() ? "packed" : "mixed");
  }
  if (s.bytes() < 2 * llc_bytes()) {
    std::printf(
        "  note: the weights are smaller than 2 x LLC (%zu MiB): partly cache-resident, "
        "not a DRAM-bound step\n",
        llc_bytes() >> 20);
  }
  std::printf("isa: %s\n\n%3s %10s %9s %8s %12s %7s  %s\n", nibble::isa_name(nibble::best_isa()),
              "thr", "ms/token", "tokens/s", "wGB/s", "membw GB/s", "%membw", "layout");
  for (int t : threads) {
    const double bw = nibble::decode::read_bandwidth(membw_bytes, t);
    nibble::Context ctx;
    ctx.threads = t;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      nibble::decode::Runner r(variants[v], ctx);
      const double sec = nibble::decode::time_steps(r, min_time);
      const double wbs = static_cast<double>(s.bytes()) / sec;
      std::printf("%3d %10.3f %9.2f %8.2f %12.2f %6.0f%%  %s\n", t, sec * 1e3, 1.0 / sec, wbs / 1e9,
                  bw / 1e9, bw > 0 ? 100.0 * wbs / bw : 0.0, names[v].c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
