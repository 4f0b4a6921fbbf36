// nibble: the command-line program. `nibble` alone runs `nibble report`.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <unistd.h>

#include "nibble/nibble.hpp"
#include "report.hpp"
#if __has_include("commands.hpp")
#include "commands.hpp"
#define NIBBLE_CLI_HAVE_GGUF 1
#endif

namespace {

// `nibble bench`: replaces this process by the nibble-bench next to it, with --summary.
int cmd_bench(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: nibble bench [nibble-bench options]\n"
          "  runs `nibble-bench --summary` (next to this program) with these options: every\n"
          "  format and ISA against fp32 OpenBLAS / Eigen, the scalar path and the memory\n"
          "  read bandwidth, then a table of ratios from that run. `nibble-bench --help` lists\n"
          "  its options (--threads=LIST, --model=FILE.gguf, --benchmark_filter=REGEX, ...).\n\n");
      bench_model_usage(stdout);
      return 0;
    }
  }
  std::string self(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", &self[0], self.size() - 1);
  std::string dir = n > 0 ? self.substr(0, static_cast<std::size_t>(n)) : std::string(argv[0]);
  dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  const std::string exe = dir + "/nibble-bench";
  std::vector<std::string> args = {exe, "--summary"};
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(&a[0]);
  cargs.push_back(nullptr);
  std::fflush(stdout);
  execv(exe.c_str(), cargs.data());
  std::fprintf(stderr,
               "nibble bench: cannot run %s (%s); configure with -DNIBBLE_BUILD_BENCH=ON and build "
               "the nibble-bench target\n",
               exe.c_str(), std::strerror(errno));
  return 2;
}

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: nibble [COMMAND] [options]\n"
               "\n"
               "commands:\n"
               "  report     (default) quantize synthetic LLM-like matrices with every format and\n"
               "             print accuracy and speed; see `nibble report --help`\n"
               "  quantize   IN.gguf OUT.gguf TYPE [options]: quantize a GGUF model like\n"
               "             llama-quantize; see `nibble quantize --help`\n"
               "  pack       IN.gguf OUT.gguf [--threads N]: every packable tensor in the packed\n"
               "             layout (fast decode, same size; see `nibble pack --help`)\n"
               "  unpack     IN.gguf OUT.gguf [--threads N]: back to the plain GGUF layout\n"
               "  info       FILE.gguf: metadata and tensor table\n"
               "  perplexity MODEL.gguf TEXT [options]: perplexity / KL divergence like\n"
               "             llama-perplexity (llama, qwen2); see `nibble perplexity --help`\n"
               "  imatrix    MODEL.gguf TEXT -o OUT [options]: importance matrix like\n"
               "             llama-imatrix; see `nibble imatrix --help`\n"
               "  tokenize   MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-bos]: the tokens of a\n"
               "             text, printed like llama-tokenize; see `nibble tokenize --help`\n"
               "  bench      [nibble-bench options]: run the kernel comparison on this machine\n"
               "             (every format vs fp32 OpenBLAS/Eigen, scalar, bandwidth roofline)\n"
               "             and print the ratio table; runs `nibble-bench --summary`, which\n"
               "             must sit next to this program (build with NIBBLE_BUILD_BENCH=ON)\n"
               "  bench      MODEL.gguf [-t N] [--packed]: one decode step (a GEMV through every\n"
               "             linear weight) of this model: tokens/s and %% of the memory\n"
               "             bandwidth (--packed: plain and packed layout side by side)\n"
               "  isa        print the ISAs this binary can run here and the one it picks\n"
               "  -h, --help this text\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "report";
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      usage(stdout);
      return 0;
    }
    if (cmd == "report") return nibble::cli::cmd_report(argc > 1 ? argc - 2 : 0, argv + 2);
#if defined(NIBBLE_CLI_HAVE_GGUF)
    // `nibble bench MODEL.gguf ...`: the model decode step in this process.
    if (cmd == "bench" && argc > 2 && argv[2][0] != '-') return cmd_bench_model(argc - 2, argv + 2);
#endif
    if (cmd == "bench") return cmd_bench(argc, argv);
    if (cmd == "isa") {
      if (argc > 2) {
        const std::string a = argv[2];
        const bool help = a == "-h" || a == "--help";
        if (!help) std::fprintf(stderr, "nibble isa: unexpected argument %s\n", argv[2]);
        std::fprintf(help ? stdout : stderr,
                     "usage: nibble isa\n"
                     "  prints the kernel ISAs this binary can run on this CPU (the values of\n"
                     "  nibble::Context::isa it accepts here) and the one it picks by default\n");
        return help ? 0 : 2;
      }
      for (nibble::Isa i : nibble::available_isas()) std::printf("%s ", nibble::isa_name(i));
      std::printf("\nbest: %s\n", nibble::isa_name(nibble::best_isa()));
      return 0;
    }
#if defined(NIBBLE_CLI_HAVE_GGUF)
    if (cmd == "quantize") return cmd_quantize(argc - 2, argv + 2);
    if (cmd == "pack") return cmd_pack(argc - 2, argv + 2);
    if (cmd == "unpack") return cmd_unpack(argc - 2, argv + 2);
    if (cmd == "info") return cmd_info(argc - 2, argv + 2);
    if (cmd == "perplexity") return cmd_perplexity(argc - 2, argv + 2);
    if (cmd == "imatrix") return cmd_imatrix(argc - 2, argv + 2);
    if (cmd == "tokenize") return cmd_tokenize(argc - 2, argv + 2);
#endif
    std::fprintf(stderr, "nibble: unknown command '%s'\n\n", cmd.c_str());
    usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
