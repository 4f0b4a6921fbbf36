// Cross-check driver, nibble's side of llama_tok.cpp: the same input and output formats.
//   usage: nibble_tok VOCAB.gguf TEXTS.bin ADD_SPECIAL(0|1) > ids.txt
// A text for which nibble throws nibble::Error prints "ERR".
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/llm/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf TEXTS.bin ADD_SPECIAL\n", argv[0]);
    return 2;
  }
  const nibble::llm::Tokenizer tok = nibble::llm::Tokenizer::load(argv[1]);
  std::ifstream in(argv[2], std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool add_special = argv[3][0] == '1';
  for (std::size_t at = 0; at + 4 <= all.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(all.data() + at);
    const std::size_t n = p[0] | (p[1] << 8) | (p[2] << 16) | (std::size_t(p[3]) << 24);
    const std::string text = all.substr(at + 4, n);
    at += 4 + n;
    try {
      const std::vector<std::int32_t> ids = tok.tokenize(text, add_special, false);
      for (std::size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
    } catch (const nibble::Error&) {
      std::printf("ERR\n");
    }
  }
  return 0;
}
