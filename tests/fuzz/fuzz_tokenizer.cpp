// libFuzzer target: the text tokenizer on arbitrary bytes. The first input byte picks the
// vocabulary (gpt-2 with one of several pre-tokenizers, or phi-3, the SPM vocabulary) and the
// add_special / parse_special flags; the rest is the text. Tokenizing must either give ids inside
// the vocabulary or throw nibble::Error (where llama.cpp aborts); for the byte-level gpt-2
// vocabulary a text that is well-formed UTF-8 must come back from the pieces byte for byte.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/llm/tokenizer.hpp"

#ifndef NIBBLE_FUZZ_TOKENIZER_DATA
#error "define NIBBLE_FUZZ_TOKENIZER_DATA to the tests/data/tokenizer directory"
#endif

namespace {

namespace g = nibble::gguf;
using nibble::llm::Tokenizer;

const char* const kPre[] = {"gpt-2",     "default", "llama-bpe",    "qwen2",
                            "qwen35",    "falcon",  "deepseek-llm", "deepseek-coder",
                            "starcoder", "bloom",   "viking",       "gemma4"};
constexpr std::size_t kNumPre = sizeof(kPre) / sizeof(kPre[0]);

struct Vocabs {
  std::vector<Tokenizer> gpt2;  // one per kPre
  Tokenizer phi3;
  Vocabs() {
    const std::string dir = NIBBLE_FUZZ_TOKENIZER_DATA;
    const g::File base = g::File::open(dir + "/ggml-vocab-gpt-2.gguf");
    for (const char* pre : kPre) {
      g::File f;
      f.metadata = base.metadata;
      for (auto& kv : f.metadata) {
        if (kv.key == "tokenizer.ggml.pre") kv.value = g::Value::string(pre);
      }
      gpt2.push_back(Tokenizer::from_gguf(f));
    }
    phi3 = Tokenizer::load(dir + "/ggml-vocab-phi-3.gguf");
  }
};

// Well-formed UTF-8 (shortest forms, at most U+10FFFF; surrogates pass, as llama.cpp's decoder
// re-encodes them unchanged).
bool well_formed(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    std::uint32_t cp;
    if (c < 0x80) {
      n = 1, cp = c;
    } else if (c >= 0xc0 && c < 0xe0) {
      n = 2, cp = c & 0x1f;
    } else if (c >= 0xe0 && c < 0xf0) {
      n = 3, cp = c & 0x0f;
    } else if (c >= 0xf0 && c < 0xf8) {
      n = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    const std::uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Vocabs v;
  if (size == 0) return 0;
  const std::uint8_t sel = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t which = (sel & 0x3f) % (kNumPre + 1);
  const Tokenizer& tok = which == kNumPre ? v.phi3 : v.gpt2[which];
  const bool add_special = (sel & 0x40) != 0;
  const bool parse_special = (sel & 0x80) != 0;
  std::vector<std::int32_t> ids;
  try {
    ids = tok.tokenize(text, add_special, parse_special);
  } catch (const nibble::Error&) {
    return 0;
  }
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= tok.n_tokens()) std::abort();
    (void)tok.token_to_piece(id, true);
  }
  if (which == 0 && !parse_special && well_formed(text)) {
    std::string back;
    for (const std::int32_t id : ids) back += tok.token_to_piece(id, false);
    if (back != text) std::abort();
  }
  return 0;
}
