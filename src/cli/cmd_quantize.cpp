// nibble CLI: `nibble quantize` (llama-quantize-compatible GGUF quantization).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "llm_input.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/io/imatrix.hpp"
#include "nibble/io/llama_quant.hpp"
#include "nibble/llm/calibrate.hpp"

namespace {

void usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: nibble quantize IN.gguf OUT.gguf TYPE [--imatrix FILE]\n"
      "                       [--method rtn|gptq|awq] [--calib FILE] [--threads N]\n"
      "       nibble quantize IN.gguf OUT.gguf TYPE --method gptq|awq --calib-text TEXT\n"
      "                       [-c N] [--chunks N] [--threads N]\n"
      "  TYPE: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M\n"
      "        Q6_K IQ4_NL IQ4_XS BF16 (aliases: Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M)\n"
      "  Chooses every tensor's type as llama.cpp's llama-quantize does (the per-tensor\n"
      "  mixes, output.weight -> Q6_K, ...). Rows that do not fit a 256-value block fall back:\n"
      "  Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and\n"
      "  F16 when not a multiple of 32 either. Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL\n"
      "  have no fallback: rows that are not a multiple of 32 are an error (as there).\n"
      "  --imatrix FILE  importance matrix (legacy imatrix.dat or GGUF imatrix)\n"
      "  --method        rtn (default) | gptq | awq (both need --calib or --calib-text;\n"
      "                  gptq: tensors that end up Q2_K..Q6_K, and with --calib-text also\n"
      "                  Q8_0/Q5_0/Q4_0; the other types are rounded as llama-quantize does;\n"
      "                  awq: Q4_K*/Q5_K*, dense llama models, folds its scales into the norms)\n"
      "  --calib FILE    GGUF with NAME.hessian [cols, cols] (gptq) or NAME.inputs\n"
      "                  [cols, tokens] (gptq, awq) f32 tensors per weight NAME\n"
      "                  (see nibble/io/llama_quant.hpp)\n"
      "  --calib-text TEXT\n"
      "                  sequential calibration: the text runs through the model block by\n"
      "                  block (llama/qwen2, f32/f16/bf16 weights), each block quantized on the\n"
      "                  inputs computed with the blocks before it already quantized\n"
      "                  (see nibble/llm/calibrate.hpp)\n"
      "  --calib-tokens FILE  the same from token ids (whitespace-separated, BOS included)\n"
      "  -c, --ctx-size N     calibration chunk length in tokens (default 512, >= 16)\n"
      "  --chunks N      at most N calibration chunks (default: all whole chunks)\n"
      "  --threads N     worker threads (default: all)\n");
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

std::string fmt_time(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

void print_summary(const nibble::QuantizeSummary& s, const std::string& method) {
  std::printf("tensors: %d quantized (%d calibrated with %s), %d copied, %d fallbacks\n",
              s.quantized, s.calibrated, method == "awq" ? "AWQ" : "GPTQ", s.copied, s.fallbacks);
  std::printf("size: %s -> %s (tensor data %s -> %s)\n", fmt_bytes(double(s.in_file_bytes)).c_str(),
              fmt_bytes(double(s.out_file_bytes)).c_str(),
              fmt_bytes(double(s.in_tensor_bytes)).c_str(),
              fmt_bytes(double(s.out_tensor_bytes)).c_str());
  std::printf("bits per weight: %.3f (input %.3f)\n", s.bits_per_weight(),
              s.elements ? 8.0 * double(s.in_tensor_bytes) / double(s.elements) : 0.0);
  std::printf("time: %.2f s\n", s.seconds);
}

// --method gptq|awq --calib-text / --calib-tokens: sequential calibration, progress on stderr.
int run_sequential(const std::string& in, const std::string& out, nibble::LlamaFtype ftype,
                   const std::string& method, const std::string& text_path,
                   const std::string& tokens_path, long n_ctx, long max_chunks, int threads) {
  std::vector<std::int32_t> tokens;
  nibble::llm::SequentialOptions opt;
  {
    const nibble::gguf::File f = nibble::gguf::File::open(in);
    const VocabInfo voc = vocab_info(f);
    tokens =
        tokens_path.empty() ? tokenize_text(f, read_file(text_path)) : read_tokens(tokens_path);
    opt.bos = voc.add_bos ? voc.bos : -1;
  }
  opt.method = method == "awq" ? nibble::QuantMethod::awq : nibble::QuantMethod::gptq;
  opt.n_ctx = n_ctx;
  opt.max_chunks = max_chunks;
  opt.threads = threads;
  const long n_chunk = std::min<long>(static_cast<long>(tokens.size()) / n_ctx,
                                      max_chunks > 0 ? max_chunks : LONG_MAX);
  std::printf(
      "quantizing %s -> %s as %s, %s calibrated on %ld tokens (%ld chunks of %ld; the text has "
      "%zu)\n",
      in.c_str(), out.c_str(), nibble::llama_ftype_name(ftype), method == "awq" ? "AWQ" : "GPTQ",
      n_chunk * n_ctx, n_chunk, n_ctx, tokens.size());
  std::fflush(stdout);
  const bool tty = isatty(fileno(stderr)) != 0;
  opt.progress = [&](const nibble::llm::SequentialProgress& p) {
    std::fprintf(stderr, "%sblock %lld/%lld %-10s %5.1f%% elapsed %s ETA %s%s", tty ? "\r" : "",
                 static_cast<long long>(p.layer + 1), static_cast<long long>(p.n_layer), p.stage,
                 100.0 * p.fraction, fmt_time(p.seconds).c_str(), fmt_time(p.eta).c_str(),
                 tty ? "\x1b[K" : "\n");
    if (tty && p.fraction >= 1.0) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  const nibble::QuantizeSummary s = nibble::llm::quantize_sequential(in, out, ftype, tokens, opt);
  print_summary(s, method);
  return 0;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  std::string in, out, type, imatrix_path, calib, calib_text, calib_tokens, method = "rtn";
  int threads = 0;
  long n_ctx = 512, max_chunks = -1;
  bool ctx_given = false, chunks_given = false;
  int pos = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* opt) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "nibble quantize: %s needs a value\n", opt);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--imatrix") {
      imatrix_path = value("--imatrix");
    } else if (a == "--method") {
      method = value("--method");
    } else if (a == "--calib") {
      calib = value("--calib");
    } else if (a == "--calib-text") {
      calib_text = value("--calib-text");
    } else if (a == "--calib-tokens") {
      calib_tokens = value("--calib-tokens");
    } else if (a == "-c" || a == "--ctx-size" || a == "--chunks") {
      const std::string v = value(a.c_str());
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > (1L << 24)) {
        std::fprintf(stderr, "nibble quantize: %s %s: expected a positive integer\n", a.c_str(),
                     v.c_str());
        return 2;
      }
      (a == "--chunks" ? max_chunks : n_ctx) = n;
      (a == "--chunks" ? chunks_given : ctx_given) = true;
    } else if (a == "--threads") {
      const std::string v = value("--threads");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 1 || n > 4096) {
        std::fprintf(stderr, "nibble quantize: --threads %s: expected an integer in 1..4096\n",
                     v.c_str());
        return 2;
      }
      threads = static_cast<int>(n);
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "nibble quantize: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      (pos == 0 ? in : pos == 1 ? out : type) = a;
      if (++pos > 3) {
        std::fprintf(stderr, "nibble quantize: too many arguments\n");
        usage(stderr);
        return 2;
      }
    }
  }
  if (pos != 3) {
    usage(stderr);
    return 2;
  }
  const bool sequential = !calib_text.empty() || !calib_tokens.empty();
  auto misuse = [](const char* msg) {
    std::fprintf(stderr, "nibble quantize: %s\n", msg);
    return 2;
  };
  if (!calib_text.empty() && !calib_tokens.empty()) {
    return misuse("use either --calib-text or --calib-tokens, not both");
  }
  if (sequential && !calib.empty()) {
    return misuse("use either --calib FILE or --calib-text / --calib-tokens, not both");
  }
  if (sequential && method != "gptq" && method != "awq") {
    return misuse("--calib-text / --calib-tokens need --method gptq or awq");
  }
  if (sequential && !imatrix_path.empty()) {
    return misuse("--imatrix does not combine with --calib-text / --calib-tokens");
  }
  if (!sequential && (ctx_given || chunks_given)) {
    return misuse("-c / --chunks only apply to --calib-text / --calib-tokens");
  }
  try {
    const nibble::LlamaFtype ftype = nibble::parse_llama_ftype(type);
    if (sequential) {
      return run_sequential(in, out, ftype, method, calib_text, calib_tokens, n_ctx, max_chunks,
                            threads);
    }
    nibble::QuantizeOptions opt;
    opt.threads = threads;
    if (method == "rtn") {
      opt.method = nibble::QuantMethod::rtn;
    } else if (method == "gptq" || method == "awq") {
      opt.method = method == "gptq" ? nibble::QuantMethod::gptq : nibble::QuantMethod::awq;
      if (calib.empty()) {
        std::fprintf(stderr,
                     "nibble quantize: --method %s needs --calib FILE or --calib-text TEXT\n",
                     method.c_str());
        return 2;
      }
      opt.calib_path = calib;
    } else {
      std::fprintf(stderr, "nibble quantize: --method %s: expected rtn, gptq or awq\n",
                   method.c_str());
      return 2;
    }
    nibble::Imatrix im;
    if (!imatrix_path.empty()) {
      im = nibble::read_imatrix(imatrix_path);
      opt.imatrix = &im;
      opt.imatrix_path = imatrix_path;
      std::printf("imatrix: %zu entries from %s (%s format, %d chunks)\n", im.entries.size(),
                  imatrix_path.c_str(), im.gguf_format ? "GGUF" : "legacy", im.chunks);
    }
    std::printf("quantizing %s -> %s as %s\n", in.c_str(), out.c_str(),
                nibble::llama_ftype_name(ftype));
    const bool tty = isatty(fileno(stdout)) != 0;
    auto progress = [&](const nibble::QuantizeProgress& p) {
      const double frac =
          p.in_bytes_total ? double(p.in_bytes_done) / double(p.in_bytes_total) : 1.0;
      const double eta = frac > 0 ? p.seconds * (1.0 - frac) / frac : 0.0;
      const char* tname = nibble::gguf::type_info(p.out_type).name;
      if (tty) {
        const int width = 30;
        const int filled = static_cast<int>(frac * width + 0.5);
        std::string bar(static_cast<std::size_t>(filled), '#');
        bar.resize(width, '.');
        std::printf("\r[%s] %3.0f%% %zu/%zu ETA %s  %-28.28s %-6s\x1b[K", bar.c_str(), frac * 100.0,
                    p.index, p.count, fmt_time(eta).c_str(), p.name.c_str(), tname ? tname : "?");
        if (p.index == p.count) std::printf("\n");
      } else {
        std::printf("[%zu/%zu] %-40s -> %-6s %5.1f%% elapsed %s ETA %s\n", p.index, p.count,
                    p.name.c_str(), tname ? tname : "?", frac * 100.0, fmt_time(p.seconds).c_str(),
                    fmt_time(eta).c_str());
      }
      std::fflush(stdout);
    };
    const nibble::QuantizeSummary s = nibble::quantize_model(in, out, ftype, opt, progress);
    print_summary(s, method);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
