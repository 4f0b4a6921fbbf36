// Cross-check driver (built outside nibble's build, against a llama.cpp checkout): tokenizes
// every text of a file with llama.cpp's llama_tokenize() and prints one line of ids per text.
//   usage: llama_tok VOCAB.gguf TEXTS.bin ADD_SPECIAL(0|1) > ids.txt
// TEXTS.bin: texts back to back, each a little-endian uint32 byte count and the bytes. A text
// that makes llama_tokenize throw prints "ERR".
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf TEXTS.bin ADD_SPECIAL\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::ifstream in(argv[2], std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool add_special = argv[3][0] == '1';
  std::vector<llama_token> toks;
  for (std::size_t at = 0; at + 4 <= all.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(all.data() + at);
    const std::size_t n = p[0] | (p[1] << 8) | (p[2] << 16) | (std::size_t(p[3]) << 24);
    const std::string text = all.substr(at + 4, n);
    at += 4 + n;
    try {
      toks.resize(text.size() + 16);
      int k = llama_tokenize(vocab, text.data(), int(text.size()), toks.data(), int(toks.size()),
                             add_special, false);
      if (k < 0) {
        toks.resize(-k);
        k = llama_tokenize(vocab, text.data(), int(text.size()), toks.data(), int(toks.size()),
                           add_special, false);
      }
      for (int i = 0; i < k; ++i) std::printf(i ? " %d" : "%d", toks[i]);
      std::printf("\n");
    } catch (const std::exception&) {
      std::printf("ERR\n");
    }
  }
  llama_model_free(model);
  return 0;
}
