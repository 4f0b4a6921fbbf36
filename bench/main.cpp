// nibble-bench: entry point. Prepares the environment (OpenBLAS core type and thread count must be
// fixed before OpenBLAS initializes, which happens when the process loads it, so the program
// re-executes itself once with a clean environment), handles nibble-bench's own flags, registers
// every benchmark, and runs them through Google Benchmark.
//
// Own flags (removed before benchmark::Initialize sees argv): print_own_flags below, which
// --help prints.
// Defaults added unless given: --benchmark_min_time=0.2.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common.hpp"
#include "summary.hpp"

namespace {

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// OpenBLAS reads OPENBLAS_CORETYPE (which may force e.g. Haswell kernels on an AVX-512 machine)
// and OPENBLAS_NUM_THREADS in its load-time constructor. Unset the first and pin the second, then
// re-execute this program so the new values are seen from the start.
void reexec_for_openblas(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keep_openblas_env") == 0) return;
  }
  if (std::getenv("NIBBLE_BENCH_REEXECED")) return;
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const char* nthreads = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string want_threads = std::to_string(nibble_bench::thread_counts().back());
  if (!core && nthreads && want_threads == nthreads) return;
  if (core) {
    setenv("NIBBLE_BENCH_UNSET_OPENBLAS_CORETYPE", core, 1);
    unsetenv("OPENBLAS_CORETYPE");
  }
  setenv("OPENBLAS_NUM_THREADS", want_threads.c_str(), 1);
  setenv("NIBBLE_BENCH_REEXECED", "1", 1);
  execv("/proc/self/exe", argv);
  std::perror("nibble-bench: re-exec failed; OpenBLAS keeps its original environment");
}

std::string isa_list(const std::vector<nibble::Isa>& isas) {
  std::string s;
  for (nibble::Isa i : isas) s += std::string(s.empty() ? "" : ",") + nibble::isa_name(i);
  return s;
}

}  // namespace

// nibble-bench's own flags, printed by --help before Google Benchmark's.
static void print_own_flags() {
  std::printf(
      "nibble-bench: nibble's GEMV / GEMM and quantizers against fp32 OpenBLAS and Eigen, the\n"
      "scalar path and the memory read bandwidth (docs/benchmarks.md). Own flags:\n"
      "  --summary            a short set (unless --benchmark_filter is given), then a table of\n"
      "                       ratios from this run\n"
      "  --calib              also the slow calibration benchmarks (AWQ, GPTQ 11008x4096)\n"
      "  --threads=LIST       thread counts of the GEMV, decode, membw and OpenBLAS rows\n"
      "                       (default 1,2)\n"
      "  --layers=N           layers of the built-in decode stack (1..32, default 4)\n"
      "  --model=FILE.gguf    decode rows over this GGUF file's linear weights\n"
      "  --llc_bytes=N        last-level cache size for the cold rotation (default: detected)\n"
      "  --cold_factor=X      rotated weight copies span at least X * LLC bytes (default 2)\n"
      "  --membw_bytes=N      array size of the bandwidth kernel (default max(4 * LLC, 1 GiB))\n"
      "  --l2_bytes=N         per-core L2 size for the warm_l2 rows (default: detected)\n"
      "  --keep_openblas_env  do not re-execute with a cleaned OpenBLAS environment\n"
      "Google Benchmark's flags:\n");
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  // --threads first: the OpenBLAS re-execution needs the largest count.
  for (int i = 1; i < argc; ++i) {
    if (starts_with(argv[i], "--threads=") && !nibble_bench::set_thread_counts(argv[i] + 10)) {
      std::fprintf(stderr, "nibble-bench: --threads wants a list like 1,2,4 (counts 1..1024)\n");
      return 2;
    }
  }
  reexec_for_openblas(argc, argv);

  using nibble_bench::config;
  config().llc_bytes = nibble_bench::detect_llc_bytes();
  config().l2_bytes = nibble_bench::detect_l2_bytes();
  bool summary = false, calib = false, list_only = false, has_min_time = false, has_filter = false,
       json_display = false;
  std::size_t membw_bytes = 0;
  std::vector<char*> args;
  args.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0) {
      print_own_flags();  // Google Benchmark prints its own flags and exits
      static char help[] = "--help";
      args.push_back(help);
    } else if (std::strcmp(a, "--summary") == 0) {
      summary = true;
    } else if (std::strcmp(a, "--calib") == 0) {
      calib = true;
    } else if (starts_with(a, "--llc_bytes=")) {
      config().llc_bytes = std::strtoull(a + 12, nullptr, 10);
    } else if (starts_with(a, "--cold_factor=")) {
      config().cold_factor = std::strtod(a + 14, nullptr);
    } else if (starts_with(a, "--membw_bytes=")) {
      membw_bytes = std::strtoull(a + 14, nullptr, 10);
    } else if (starts_with(a, "--l2_bytes=")) {
      config().l2_bytes = std::strtoull(a + 11, nullptr, 10);
    } else if (starts_with(a, "--layers=")) {
      config().decode_layers = std::atoi(a + 9);
    } else if (std::strcmp(a, "--layers") == 0 && i + 1 < argc) {
      config().decode_layers = std::atoi(argv[++i]);
    } else if (starts_with(a, "--model=")) {
      config().decode_model = a + 8;
    } else if (std::strcmp(a, "--keep_openblas_env") == 0 || starts_with(a, "--threads=")) {
    } else {
      if (starts_with(a, "--benchmark_min_time")) has_min_time = true;
      if (starts_with(a, "--benchmark_filter")) has_filter = true;
      if (std::strcmp(a, "--benchmark_format=json") == 0) json_display = true;
      if (starts_with(a, "--benchmark_list_tests")) list_only = true;
      args.push_back(argv[i]);
    }
  }
  if (config().llc_bytes == 0) config().llc_bytes = std::size_t{32} << 20;
  if (!(config().cold_factor > 0)) config().cold_factor = 2.0;
  if (config().l2_bytes == 0) config().l2_bytes = std::size_t{1} << 20;
  if (config().decode_layers < 1 || config().decode_layers > 32) {
    std::fprintf(stderr, "nibble-bench: --layers must be in 1..32\n");
    return 2;
  }
  config().membw_bytes = membw_bytes
                             ? membw_bytes
                             : std::max<std::size_t>(4 * config().llc_bytes, std::size_t{1} << 30);

  static char min_time[] = "--benchmark_min_time=0.2";
  static char summary_filter[] =
      "--benchmark_filter=^(membw/|decode/|(gemv|gemm)/[^/]+/[^/]+/4096x4096/n:(1|64)/|"
      "gemv/[^/]+/[^/]+/[0-9x]+/n:1/threads:[0-9]+/warm_l[23])";
  if (!has_min_time) args.push_back(min_time);
  if (summary && !has_filter) args.push_back(summary_filter);
  int bargc = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&bargc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, args.data())) return 1;

  const std::vector<nibble::Isa> isas = nibble::available_isas();
  benchmark::AddCustomContext("nibble_isas", isa_list(isas));
  benchmark::AddCustomContext("nibble_best_isa", nibble::isa_name(nibble::best_isa()));
  benchmark::AddCustomContext("llc_bytes", std::to_string(config().llc_bytes));
  {
    std::ostringstream os;
    os << config().cold_factor;
    benchmark::AddCustomContext("cold_factor", os.str());
  }
  benchmark::AddCustomContext("membw_bytes", std::to_string(config().membw_bytes));
  benchmark::AddCustomContext("l2_bytes", std::to_string(config().l2_bytes));
  // A/B switch for the vendor-specific streaming tunings (docs/kernels.md): 0 runs the AMD-tuned
  // stream layouts, 1 the Intel-tuned ones, 2 the choices of AMD's family-25 cores (Zen 3 / Zen 4),
  // on whatever CPU this is.
  if (const char* v = std::getenv("NIBBLE_BENCH_VENDOR_TUNING")) {
    if (v[0] >= '0' && v[0] <= '2' && v[1] == '\0') {
      nibble::detail::set_vendor_tuning_override(v[0] - '0');
      benchmark::AddCustomContext("vendor_tuning_override", v);
    } else {
      std::fprintf(stderr, "NIBBLE_BENCH_VENDOR_TUNING must be 0, 1 or 2, got '%s'\n", v);
      return 1;
    }
  }
  if (const char* c = std::getenv("NIBBLE_BENCH_UNSET_OPENBLAS_CORETYPE")) {
    benchmark::AddCustomContext("openblas_coretype_unset", c);
  }
  for (const auto& kv : nibble_bench::blas_context()) {
    benchmark::AddCustomContext(kv.first, kv.second);
  }
  for (const auto& kv : nibble_bench::native_context()) {
    benchmark::AddCustomContext(kv.first, kv.second);
  }

  // Registration order = run order: the roofline first (its array is freed before any weights
  // are allocated), the model decode step (its stack is freed by the first weight set), then per
  // shape and format all products sharing one cached weight set.
  nibble_bench::register_membw(nibble_bench::thread_counts());
  nibble_bench::register_decode(nibble_bench::thread_counts());
  for (const nibble_bench::Shape& s : nibble_bench::model_shapes()) {
    for (nibble::Format f : nibble_bench::weight_formats()) {
      nibble_bench::register_nibble_products(s, f, isas, false);
      if (nibble::packable(f)) nibble_bench::register_nibble_products(s, f, isas, true);
      if (f == nibble::Format::f32) {
        nibble_bench::register_blas_products(s);
        nibble_bench::register_eigen_products(s);
      }
    }
    nibble_bench::register_w8a8_products(s, isas);
  }
  nibble_bench::register_quantizers(isas);
  nibble_bench::register_calibration(calib);

  if (summary) {
    std::unique_ptr<benchmark::BenchmarkReporter> display;
    if (json_display) {
      display = std::make_unique<benchmark::JSONReporter>();
    } else {
      display = std::make_unique<benchmark::ConsoleReporter>(
          isatty(1) ? benchmark::ConsoleReporter::OO_Color : benchmark::ConsoleReporter::OO_None);
    }
    nibble_bench::SummaryReporter rep(std::move(display));
    benchmark::RunSpecifiedBenchmarks(&rep);
    if (!list_only) rep.print_table(json_display ? stderr : stdout);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}
