// nibble: the command-line program. `nibble` alone runs `nibble report`.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "nibble/nibble.hpp"
#include "report.hpp"
#if __has_include("commands.hpp")
#include "commands.hpp"
#define NIBBLE_CLI_HAVE_GGUF 1
#endif

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: nibble [COMMAND] [options]\n"
               "\n"
               "commands:\n"
               "  report     (default) quantize synthetic LLM-like matrices with every format and\n"
               "             print accuracy and speed; see `nibble report --help`\n"
               "  quantize   IN.gguf OUT.gguf TYPE [options]: quantize a GGUF model like\n"
               "             llama-quantize; see `nibble quantize --help`\n"
               "  info       FILE.gguf: metadata and tensor table\n"
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
    if (cmd == "isa") {
      for (nibble::Isa i : nibble::available_isas()) std::printf("%s ", nibble::isa_name(i));
      std::printf("\nbest: %s\n", nibble::isa_name(nibble::best_isa()));
      return 0;
    }
#if defined(NIBBLE_CLI_HAVE_GGUF)
    if (cmd == "quantize") return cmd_quantize(argc - 2, argv + 2);
    if (cmd == "info") return cmd_info(argc - 2, argv + 2);
#endif
    std::fprintf(stderr, "nibble: unknown command '%s'\n\n", cmd.c_str());
    usage(stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
