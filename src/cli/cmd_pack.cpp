// nibble CLI: `nibble pack` / `nibble unpack` (GGUF tensors in the packed layout and back,
// nibble/io/packed_gguf.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "commands.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/io/packed_gguf.hpp"

namespace {

void usage(std::FILE* f, bool pack) {
  if (pack) {
    std::fprintf(f,
                 "usage: nibble pack IN.gguf OUT.gguf [--threads N]\n"
                 "  Writes IN with every q8_0 / q4_0 / q4_1 / q5_0 / q5_1 / q2_K / q3_K / q4_K /\n"
                 "  q5_K / q6_K / iq4_nl / iq4_xs / mxfp4 tensor of at least 16 rows in nibble's\n"
                 "  packed (row-interleaved) layout, type id 0x1000 | ggml type (shown as\n"
                 "  q4_K.x16, ...): the same bytes permuted, so the file has the same size and\n"
                 "  decodes at the memory bandwidth when mapped (see docs/embedding.md). Tensors\n"
                 "  of 3 or more dimensions are packed when ne[1] is a multiple of 16. Everything\n"
                 "  else (metadata, other tensors, alignment, order) is copied byte for byte;\n"
                 "  `nibble unpack` gives back IN exactly. llama.cpp refuses packed files\n"
                 "  (unknown type).\n"
                 "  --threads N  worker threads (default: all)\n");
  } else {
    std::fprintf(f,
                 "usage: nibble unpack IN.gguf OUT.gguf [--threads N]\n"
                 "  Writes IN with every packed tensor (type q4_K.x16, ...) back in the plain\n"
                 "  GGUF layout of its type: the inverse of `nibble pack`, byte for byte.\n"
                 "  --threads N  worker threads (default: all)\n");
  }
}

std::string fmt_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  } else if (b >= 1024.0) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  }
  return buf;
}

int run(int argc, char** argv, bool pack) {
  const char* cmd = pack ? "pack" : "unpack";
  std::string in, out;
  int threads = 0, pos = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout, pack);
      return 0;
    } else if (a == "--threads" || a == "-t") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "nibble %s: %s needs a value\n", cmd, a.c_str());
        return 2;
      }
      const std::string v = argv[++i];
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 4096) {
        std::fprintf(stderr, "nibble %s: --threads %s: expected an integer in 1..4096\n", cmd,
                     v.c_str());
        return 2;
      }
      threads = static_cast<int>(n);
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "nibble %s: unknown option %s\n", cmd, a.c_str());
      usage(stderr, pack);
      return 2;
    } else {
      if (pos >= 2) {
        std::fprintf(stderr, "nibble %s: too many arguments\n", cmd);
        usage(stderr, pack);
        return 2;
      }
      (pos++ == 0 ? in : out) = a;
    }
  }
  if (pos != 2) {
    usage(stderr, pack);
    return 2;
  }
  try {
    std::printf("%s %s -> %s\n", pack ? "packing" : "unpacking", in.c_str(), out.c_str());
    std::fflush(stdout);
    const bool tty = isatty(fileno(stdout)) != 0;
    auto progress = [&](const nibble::PackGgufProgress& p) {
      const double frac = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
      const char* tname = nibble::gguf::type_info(p.type).name;
      if (tty) {
        const int width = 30;
        std::string bar(static_cast<std::size_t>(frac * width + 0.5), '#');
        bar.resize(width, '.');
        std::printf("\r[%s] %3.0f%% %zu/%zu  %-28.28s %-9s\x1b[K", bar.c_str(), frac * 100.0,
                    p.index, p.count, p.name.c_str(), tname ? tname : "?");
        if (p.index == p.count) std::printf("\n");
      } else if (p.converted) {
        std::printf("[%zu/%zu] %-40s -> %-9s %5.1f%%\n", p.index, p.count, p.name.c_str(),
                    tname ? tname : "?", frac * 100.0);
      }
      std::fflush(stdout);
    };
    nibble::Context ctx;
    ctx.threads = threads;
    const nibble::PackGgufSummary s = pack ? nibble::pack_gguf(in, out, ctx, progress)
                                           : nibble::unpack_gguf(in, out, ctx, progress);
    std::printf("tensors: %d %s, %d copied\n", s.converted, pack ? "packed" : "unpacked", s.copied);
    std::printf("size: %s (%s of it %s)\n", fmt_bytes(double(s.file_bytes)).c_str(),
                fmt_bytes(double(s.converted_bytes)).c_str(), pack ? "packed" : "unpacked");
    std::printf("time: %.2f s, %.2f GB/s of file\n", s.seconds,
                s.seconds > 0 ? double(s.file_bytes) / s.seconds / 1e9 : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace

int cmd_pack(int argc, char** argv) {
  return run(argc, argv, true);
}

int cmd_unpack(int argc, char** argv) {
  return run(argc, argv, false);
}
