// nibble CLI: `nibble perplexity` and `nibble imatrix` (llama-perplexity / llama-imatrix
// protocols on nibble's reference forward pass, nibble/llm/model.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "llm_input.hpp"
#include "nibble/core/error.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/io/imatrix.hpp"
#include "nibble/llm/imatrix.hpp"
#include "nibble/llm/model.hpp"
#include "nibble/llm/perplexity.hpp"
#include "nibble/llm/tokenizer.hpp"

namespace {

using nibble::detail::fail;

}  // namespace

// ---- vocabulary facts and tokenization (declared in llm_input.hpp) ----

VocabInfo vocab_info(const nibble::gguf::File& f) {
  VocabInfo v;
  // The tokenizer knows llama.cpp's defaults for every vocabulary type and pre-tokenizer; a
  // model whose vocabulary it cannot build (with --tokens, only these facts are needed) falls
  // back to the keys themselves.
  if (f.find("tokenizer.ggml.model")) {
    bool built = false;
    try {
      const nibble::llm::Tokenizer t = nibble::llm::Tokenizer::from_gguf(f);
      v.bos = t.bos();
      v.add_bos = t.add_bos();
      v.add_eos = t.add_eos();
      built = true;
    } catch (const nibble::Error&) {
    }
    if (built) {
      if (v.add_bos && v.bos < 0) fail("the vocabulary adds BOS but has no BOS token");
      return v;
    }
  }
  std::string model;
  if (const auto* kv = f.find("tokenizer.ggml.model")) model = kv->value.as_string();
  // llama.cpp's defaults: SPM ("llama") vocabularies add BOS, the others do not.
  v.add_bos = model == "llama";
  if (const auto* kv = f.find("tokenizer.ggml.add_bos_token")) v.add_bos = kv->value.as_int() != 0;
  if (const auto* kv = f.find("tokenizer.ggml.add_eos_token")) v.add_eos = kv->value.as_int() != 0;
  if (const auto* kv = f.find("tokenizer.ggml.bos_token_id")) {
    v.bos = static_cast<std::int32_t>(kv->value.as_int());
  } else if (model == "llama") {
    v.bos = 1;
  }
  if (v.add_bos && v.bos < 0)
    fail("the vocabulary adds BOS but has no tokenizer.ggml.bos_token_id");
  return v;
}

// The tokens of `text` as llama.cpp's common_tokenize(ctx, text, add_special = true,
// parse_special = false): BOS (and EOS) when the vocabulary adds them, special tokens not parsed.
std::vector<std::int32_t> tokenize_text(const nibble::gguf::File& f, const std::string& text) {
  return nibble::llm::Tokenizer::from_gguf(f).tokenize(text, true, false);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open \"", path, "\"");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::int32_t> read_tokens(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::int32_t> t;
  std::string w;
  while (in >> w) {
    char* end = nullptr;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 0x7fffffffL) {
      fail("\"", path, "\": token ", t.size(), " \"", w, "\" is not a non-negative integer");
    }
    t.push_back(static_cast<std::int32_t>(v));
  }
  return t;
}

namespace {

// Tokens from --tokens FILE or the text file.
std::vector<std::int32_t> input_tokens(const nibble::gguf::File& f, const std::string& text_path,
                                       const std::string& tokens_path) {
  if (!tokens_path.empty()) return read_tokens(tokens_path);
  if (text_path.empty()) fail("no input text (TEXT or --tokens FILE)");
  return tokenize_text(f, read_file(text_path));
}

// ---- small helpers ----

long parse_int(const char* opt, const char* v) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end) fail(opt, ": \"", v, "\" is not an integer");
  return x;
}

std::string fmt_eta(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

// Progress line on stderr: chunk i of n done, time per chunk, estimated time left.
struct Progress {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  void report(int done, int total) const {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per = el / done;
    std::fprintf(stderr, "\rchunk %d/%d, %.2f s per chunk, ETA %s   ", done, total, per,
                 fmt_eta(per * (total - done)).c_str());
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

void check_vocab(const nibble::llm::Model& m, const std::vector<std::int32_t>& tokens) {
  const auto nv = m.hparams().n_vocab;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= nv) {
      fail("token ", i, " = ", tokens[i], " is outside the model's vocabulary [0, ", nv, ")");
    }
  }
}

// Chunk c of the token stream with llama.cpp's BOS substitution.
std::vector<std::int32_t> chunk_tokens(const std::vector<std::int32_t>& tokens, int c, int n_ctx,
                                       const VocabInfo& v) {
  std::vector<std::int32_t> t(tokens.begin() + static_cast<std::ptrdiff_t>(c) * n_ctx,
                              tokens.begin() + static_cast<std::ptrdiff_t>(c + 1) * n_ctx);
  if (v.add_bos) t[0] = v.bos;
  return t;
}

// ---- nibble perplexity ----

void ppl_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: nibble perplexity MODEL.gguf [TEXT] [options]\n"
      "  Perplexity over non-overlapping chunks as llama-perplexity computes it: each chunk of\n"
      "  N tokens starts with BOS (when the vocabulary adds it) and its second half is scored.\n"
      "  -c, --ctx-size N          chunk length (default 512)\n"
      "  -b, --batch-size N        accepted for compatibility (chunks are evaluated whole)\n"
      "  --chunks N                at most N chunks\n"
      "  --tokens FILE             token ids (whitespace-separated) instead of TEXT\n"
      "  --kl-divergence-base FILE without --kl-divergence: also write the base log-probs\n"
      "                            in llama-perplexity's format; with it: read them\n"
      "  --kl-divergence           KL divergence against --kl-divergence-base FILE (the\n"
      "                            tokens come from the file)\n"
      "  --kl-divergence-model BASE.gguf\n"
      "                            KL divergence against BASE run side by side (no file;\n"
      "                            with --kl-divergence-base FILE, BASE's log-probs are\n"
      "                            written there too)\n"
      "  -t, --threads N           threads (default: all)\n");
}

void print_kld_row(int chunk, const nibble::llm::KldAccumulator& k) {
  using nibble::llm::mean_and_uncertainty;
  const auto lp = mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
  const double ppl = std::exp(lp.first);
  std::printf("%4d    %9.4lf ± %9.4lf", chunk, ppl, ppl * lp.second);
  const auto lb = mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
  double cov = 0.0;
  if (k.count >= 10) {
    const double c = static_cast<double>(k.count);
    cov = (k.sum_nll_nll_base / c - (k.sum_nll / c) * (k.sum_nll_base / c)) / (c - 1);
  }
  std::printf("    %10.5lf ± %10.5lf", lp.first - lb.first,
              std::sqrt(lp.second * lp.second + lb.second * lb.second - 2.0 * cov));
  const auto kl = mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
  std::printf("    %10.5lf ± %10.5lf", kl.first, kl.second);
  const auto mse = mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
  const double rms = std::sqrt(mse.first);
  std::printf("    %6.3lf ± %6.3lf %%", 100.0 * rms,
              rms > 0 ? 100.0 * 0.5 / rms * mse.second : 0.0);
  const double top = static_cast<double>(k.n_same_top) / static_cast<double>(k.count);
  const double top_unc =
      k.count > 1 ? std::sqrt(top * (1 - top) / static_cast<double>(k.count - 1)) : 0.0;
  std::printf("    %6.3lf ± %6.3lf %%\n", 100.0 * top, 100.0 * top_unc);
  std::fflush(stdout);
}

void print_kld_summary(const nibble::llm::KldAccumulator& k) {
  const nibble::llm::KldSummary s = nibble::llm::summarize(k);
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", s.ppl, s.ppl_unc);
  std::printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", s.ppl_base, s.ppl_base_unc);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * s.cor);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", s.log_ratio, s.log_ratio_unc);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", s.ratio, s.ratio_unc);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", s.diff, s.diff_unc);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6lf ± %10.6lf\n", s.kld_mean, s.kld_unc);
  std::printf("Maximum KLD: %10.6f\n", s.kld_max);
  std::printf("99.9%%   KLD: %10.6f\n", s.kld_999);
  std::printf("99.0%%   KLD: %10.6f\n", s.kld_99);
  std::printf("95.0%%   KLD: %10.6f\n", s.kld_95);
  std::printf("90.0%%   KLD: %10.6f\n", s.kld_90);
  std::printf("Median  KLD: %10.6f\n", s.kld_median);
  std::printf("10.0%%   KLD: %10.6f\n", s.kld_10);
  std::printf(" 5.0%%   KLD: %10.6f\n", s.kld_5);
  std::printf(" 1.0%%   KLD: %10.6f\n", s.kld_1);
  std::printf(" 0.1%%   KLD: %10.6f\n", s.kld_01);
  std::printf("Minimum KLD: %10.6f\n", s.kld_min);
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * s.p_diff_mean, 100.0 * s.p_diff_unc);
  std::printf("Maximum Δp: %6.3lf%%\n", 100.0 * s.p_diff_max);
  std::printf("99.9%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_999);
  std::printf("99.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_99);
  std::printf("95.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_95);
  std::printf("90.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_90);
  std::printf("75.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_75);
  std::printf("Median  Δp: %6.3lf%%\n", 100.0 * s.p_diff_median);
  std::printf("25.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_25);
  std::printf("10.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_10);
  std::printf(" 5.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_5);
  std::printf(" 1.0%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_1);
  std::printf(" 0.1%%   Δp: %6.3lf%%\n", 100.0 * s.p_diff_01);
  std::printf("Minimum Δp: %6.3lf%%\n", 100.0 * s.p_diff_min);
  std::printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * s.rms_p_diff, 100.0 * s.rms_p_diff_unc);
  std::printf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * s.same_top, 100.0 * s.same_top_unc);
}

const char* kKldHeader =
    "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence          "
    "    Δp RMS            Same top p\n";

// A file written to PATH.tmp and renamed on success (removed on failure).
struct TmpFile {
  std::string path, tmp;
  std::FILE* f = nullptr;
  explicit TmpFile(const std::string& p) : path(p), tmp(p + ".tmp") {
    f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail("cannot create \"", tmp, "\"");
  }
  void commit() {
    const bool ok = std::fclose(f) == 0;
    f = nullptr;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) fail("writing \"", path, "\" failed");
  }
  ~TmpFile() {
    if (f) {
      std::fclose(f);
      std::remove(tmp.c_str());
    }
  }
};

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  std::string model_path, text_path, tokens_path, base_file, base_model;
  long n_ctx = 512, max_chunks = -1;
  bool kld = false;
  nibble::Context ctx;
  std::vector<std::string> pos;
  bool ctx_given = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail("perplexity: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      ppl_usage(stdout);
      return 0;
    } else if (a == "-c" || a == "--ctx-size") {
      n_ctx = parse_int("-c", next());
      ctx_given = true;
    } else if (a == "-b" || a == "--batch-size") {
      parse_int("-b", next());
    } else if (a == "--chunks") {
      max_chunks = parse_int("--chunks", next());
    } else if (a == "--tokens") {
      tokens_path = next();
    } else if (a == "-f" || a == "--file") {
      text_path = next();
    } else if (a == "--kl-divergence-base") {
      base_file = next();
    } else if (a == "--kl-divergence") {
      kld = true;
    } else if (a == "--kl-divergence-model") {
      base_model = next();
    } else if (a == "-t" || a == "--threads") {
      ctx.threads = static_cast<int>(parse_int("-t", next()));
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "perplexity: unknown option %s\n\n", a.c_str());
      ppl_usage(stderr);
      return 2;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty() || pos.size() > 2) {
    ppl_usage(stderr);
    return 2;
  }
  model_path = pos[0];
  if (pos.size() == 2) text_path = pos[1];
  if (kld && base_file.empty()) fail("perplexity: --kl-divergence needs --kl-divergence-base FILE");
  if (!base_model.empty() && kld) {
    fail("perplexity: use either --kl-divergence-model or --kl-divergence, not both");
  }
  if (ctx.threads < 0) fail("perplexity: --threads must be >= 0");

  const nibble::llm::Model model = nibble::llm::Model::load(model_path);
  const VocabInfo voc = vocab_info(model.file());
  if (voc.add_eos) fail("perplexity: vocabularies that add EOS are not supported (as llama.cpp)");
  const std::int64_t n_vocab = model.hparams().n_vocab;

  std::vector<std::int32_t> tokens;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> base_in(nullptr, &std::fclose);
  int n_chunk = 0;
  if (kld) {
    base_in.reset(std::fopen(base_file.c_str(), "rb"));
    if (!base_in) fail("perplexity: cannot open \"", base_file, "\"");
    std::fseek(base_in.get(), 0, SEEK_END);
    const long fsize = std::ftell(base_in.get());
    std::fseek(base_in.get(), 0, SEEK_SET);
    nibble::llm::BaseLogitsHeader h = nibble::llm::read_base_header(
        base_in.get(), base_file, static_cast<std::uint64_t>(std::max(0L, fsize)),
        static_cast<std::int32_t>(n_vocab));
    if (h.n_vocab != n_vocab) {
      fail("perplexity: \"", base_file, "\" was computed with a vocabulary of ", h.n_vocab,
           " tokens, the model has ", n_vocab);
    }
    if (ctx_given && n_ctx != static_cast<long>(h.n_ctx)) {
      std::fprintf(stderr, "perplexity: using the base file's context %u instead of -c %ld\n",
                   h.n_ctx, n_ctx);
    }
    n_ctx = h.n_ctx;
    n_chunk = h.n_chunk;
    if (max_chunks >= 0) n_chunk = static_cast<int>(std::min<long>(n_chunk, max_chunks));
    tokens = std::move(h.tokens);
  } else {
    tokens = input_tokens(model.file(), text_path, tokens_path);
    if (n_ctx < 4) fail("perplexity: -c ", n_ctx, " is too small (need >= 4)");
    if (static_cast<long>(tokens.size()) < 2 * n_ctx) {
      fail("perplexity: you need at least ", 2 * n_ctx,
           " tokens to evaluate perplexity with a "
           "context of ",
           n_ctx, "; the input has only ", tokens.size());
    }
    n_chunk = static_cast<int>(static_cast<long>(tokens.size()) / n_ctx);
    if (max_chunks >= 0) n_chunk = static_cast<int>(std::min<long>(n_chunk, max_chunks));
  }
  if (n_chunk < 1) fail("perplexity: no chunk to evaluate");
  check_vocab(model, tokens);

  std::unique_ptr<nibble::llm::Model> base;
  if (!base_model.empty()) {
    base = std::make_unique<nibble::llm::Model>(nibble::llm::Model::load(base_model));
    if (base->hparams().n_vocab != n_vocab) {
      fail("perplexity: the base model has a vocabulary of ", base->hparams().n_vocab,
           " tokens, the model has ", n_vocab);
    }
  }

  const int first = static_cast<int>(n_ctx / 2);
  const int n_scored = static_cast<int>(n_ctx) - 1 - first;
  const std::int64_t nv = nibble::llm::kld_record_u16(n_vocab);
  std::vector<std::uint16_t> records(static_cast<std::size_t>(n_scored * nv));

  std::unique_ptr<TmpFile> out;
  if (!base_file.empty() && !kld) {
    out = std::make_unique<TmpFile>(base_file);
    nibble::llm::BaseLogitsHeader h;
    h.n_ctx = static_cast<std::uint32_t>(n_ctx);
    h.n_vocab = static_cast<std::int32_t>(n_vocab);
    h.n_chunk = n_chunk;
    h.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_chunk) * n_ctx);
    nibble::llm::write_base_header(out->f, h);
  }

  std::fprintf(stderr, "perplexity: %d chunks, n_ctx=%ld, %s %s, %lld threads\n", n_chunk, n_ctx,
               model.hparams().arch.c_str(), model_path.c_str(),
               static_cast<long long>(ctx.threads));
  const bool kld_mode = kld || base;
  nibble::llm::PplAccumulator acc;
  nibble::llm::KldAccumulator kacc;
  Progress prog;
  if (kld_mode) std::printf("%s", kKldHeader);
  for (int c = 0; c < n_chunk; ++c) {
    const std::vector<std::int32_t> t = chunk_tokens(tokens, c, static_cast<int>(n_ctx), voc);
    const std::int32_t* next_tok = tokens.data() + static_cast<std::ptrdiff_t>(c) * n_ctx + first;
    const std::vector<float> logits = model.forward(ctx, t.data(), n_ctx, first);
    if (kld_mode) {
      if (kld) {
        if (std::fread(records.data(), 2, records.size(), base_in.get()) != records.size()) {
          fail("perplexity: \"", base_file, "\": failed reading the log-probs of chunk ", c);
        }
      } else {
        const std::vector<float> bl = base->forward(ctx, t.data(), n_ctx, first);
        for (int i = 0; i < n_scored; ++i) {
          nibble::llm::encode_log_probs(bl.data() + static_cast<std::size_t>(i) * n_vocab, n_vocab,
                                        next_tok[i + 1], records.data() + i * nv);
        }
      }
      if (out && std::fwrite(records.data(), 2, records.size(), out->f) != records.size()) {
        fail("perplexity: writing \"", base_file, "\" failed");
      }
      for (int i = 0; i < n_scored; ++i) {
        kacc.add(logits.data() + static_cast<std::size_t>(i) * n_vocab, n_vocab,
                 records.data() + i * nv, next_tok[i + 1]);
      }
      print_kld_row(c + 1, kacc);
    } else {
      for (int i = 0; i < n_scored; ++i) {
        const float* l = logits.data() + static_cast<std::size_t>(i) * n_vocab;
        if (out) {
          acc.add(
              nibble::llm::encode_log_probs(l, n_vocab, next_tok[i + 1], records.data() + i * nv));
        } else {
          acc.add(nibble::llm::token_nll(l, n_vocab, next_tok[i + 1]));
        }
      }
      if (out && std::fwrite(records.data(), 2, records.size(), out->f) != records.size()) {
        fail("perplexity: writing \"", base_file, "\" failed");
      }
      std::printf("[%d]%.4lf,", c + 1, acc.ppl());
      std::fflush(stdout);
    }
    prog.report(c + 1, n_chunk);
  }
  std::printf("\n");
  if (kld_mode) {
    print_kld_summary(kacc);
  } else {
    const double unc = acc.ppl_uncertainty();
    if (unc < 0) fail("perplexity: unexpected negative standard deviation of log(prob)");
    std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", acc.ppl(), unc);
  }
  if (out) out->commit();
  return 0;
}

// ---- nibble imatrix ----

namespace {

void imatrix_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: nibble imatrix MODEL.gguf [TEXT] -o OUT [options]\n"
      "  Importance matrix as llama-imatrix computes it: the sums over all tokens of the\n"
      "  squared inputs of every matrix product of the blocks (blk.*), and the token counts.\n"
      "  -o, --output FILE          output file (required)\n"
      "  -c, --ctx-size N           chunk length (default 512)\n"
      "  --chunks N                 at most N chunks\n"
      "  --output-format gguf|dat   GGUF imatrix (default) or the legacy imatrix.dat\n"
      "  --process-output           also collect output.weight\n"
      "  --no-ppl                   do not compute the perplexity on the way\n"
      "  --tokens FILE              token ids (whitespace-separated) instead of TEXT\n"
      "  -t, --threads N            threads (default: all)\n");
}

}  // namespace

int cmd_imatrix(int argc, char** argv) {
  std::string out_path, tokens_path, text_path, format = "gguf";
  long n_ctx = 512, max_chunks = -1;
  bool process_output = false, compute_ppl = true;
  nibble::Context ctx;
  std::vector<std::string> pos;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail("imatrix: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      imatrix_usage(stdout);
      return 0;
    } else if (a == "-o" || a == "--output" || a == "--output-file") {
      out_path = next();
    } else if (a == "-c" || a == "--ctx-size") {
      n_ctx = parse_int("-c", next());
    } else if (a == "--chunks") {
      max_chunks = parse_int("--chunks", next());
    } else if (a == "--output-format") {
      format = next();
    } else if (a == "--process-output") {
      process_output = true;
    } else if (a == "--no-ppl") {
      compute_ppl = false;
    } else if (a == "--tokens") {
      tokens_path = next();
    } else if (a == "-f" || a == "--file") {
      text_path = next();
    } else if (a == "-t" || a == "--threads") {
      ctx.threads = static_cast<int>(parse_int("-t", next()));
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "imatrix: unknown option %s\n\n", a.c_str());
      imatrix_usage(stderr);
      return 2;
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty() || pos.size() > 2 || out_path.empty()) {
    imatrix_usage(stderr);
    return 2;
  }
  if (pos.size() == 2) text_path = pos[1];
  if (format != "gguf" && format != "dat") {
    fail("imatrix: --output-format must be gguf or dat, not \"", format, "\"");
  }
  if (ctx.threads < 0) fail("imatrix: --threads must be >= 0");

  const nibble::llm::Model model = nibble::llm::Model::load(pos[0]);
  const VocabInfo voc = vocab_info(model.file());
  const std::vector<std::int32_t> tokens = input_tokens(model.file(), text_path, tokens_path);
  check_vocab(model, tokens);
  nibble::llm::PplAccumulator acc;
  nibble::llm::ImatrixOptions opt;
  opt.n_ctx = n_ctx;
  opt.max_chunks = max_chunks;
  opt.bos = voc.add_bos ? voc.bos : -1;
  opt.process_output = process_output;
  opt.ppl = compute_ppl ? &acc : nullptr;
  Progress prog;
  opt.progress = [&](std::int64_t done, std::int64_t total) {
    if (compute_ppl) {
      std::printf("[%lld]%.4lf,", static_cast<long long>(done), acc.ppl());
      std::fflush(stdout);
    }
    prog.report(static_cast<int>(done), static_cast<int>(total));
  };
  nibble::ImatrixStats stats = nibble::llm::collect_imatrix(ctx, model, tokens, opt);
  stats.datasets.push_back(text_path.empty() ? tokens_path : text_path);
  if (compute_ppl) {
    std::printf("\n");
    const double unc = acc.ppl_uncertainty();
    if (unc >= 0) std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", acc.ppl(), unc);
  }
  if (format == "gguf") {
    nibble::write_imatrix_gguf(out_path, stats);
  } else {
    nibble::write_imatrix_dat(out_path, stats);
  }
  std::fprintf(stderr, "imatrix: %zu entries over %d chunks written to %s\n", stats.entries.size(),
               stats.chunks, out_path.c_str());
  return 0;
}
