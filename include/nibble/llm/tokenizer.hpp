// nibble: the text tokenizer of a GGUF model, built from its `tokenizer.ggml.*` metadata, giving
// the same token ids as llama.cpp's llama_tokenize().
//
// Supported vocabularies (`tokenizer.ggml.model`):
//   - "llama": SentencePiece-style (SPM). Token scores drive the merges of adjacent pieces, a
//     leading space is added per `tokenizer.ggml.add_space_prefix` (default on), spaces become
//     U+2581, and characters without a token fall back to the byte tokens <0xXX>.
//   - "gpt2": byte-level BPE with `tokenizer.ggml.merges` and the pre-tokenizer (word
//     splitting) that llama.cpp selects from `tokenizer.ggml.pre`: default, llama3 / llama-bpe
//     (and its aliases), qwen2 (and aliases), qwen35, deepseek-llm, deepseek-coder, falcon,
//     gpt-2 / mpt / olmo / ... , starcoder / refact / command-r / ..., dbrx, smaug-bpe, chatglm,
//     bloom, viking, gemma4 (see docs/tokenizer.md for the full list).
//   - "gemma4": the SentencePiece-like BPE of Gemma 4 (U+2581 spaces, raw UTF-8, <0xXX> bytes).
//   - "bert": WordPiece (BERT): NFD first code points, lower case, words split at white space,
//     punctuation and CJK ideographs, each word as its longest tokens from the left (else [UNK]);
//     add_special puts [CLS] before and [SEP] after.
// BOS / EOS follow `tokenizer.ggml.add_bos_token` / `add_eos_token`, with llama.cpp's defaults
// when absent (SPM: BOS yes; BPE: no, except for the llama3 and gemma4 families).
//
// User-defined tokens (token type 4, e.g. runs of spaces in GPT-NeoX vocabularies) are split out
// of the text before the rest is tokenized, as llama.cpp does even without special-token
// parsing; control and unknown tokens are recognised in the text only with parse_special.
// Malformed UTF-8 is handled as llama.cpp does (each bad byte becomes U+FFFD in BPE words and a
// byte token in SPM); a tokenizer never crashes on any input bytes, and throws nibble::Error where
// llama.cpp would abort (a code point above U+10FFFF in BPE text, a byte with no byte token).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nibble/io/gguf.hpp"

namespace nibble::llm {

/// llama.cpp's token attributes (llama_token_attr), as the tokenizer derives them from
/// `tokenizer.ggml.token_type` and the token texts.
enum TokenAttr : std::uint32_t {
  kAttrUndefined = 0,          ///< token type 0 or unknown: renders as nothing
  kAttrUnknown = 1u << 0,      ///< the unknown token (<unk>)
  kAttrUnused = 1u << 1,       ///< an unused slot
  kAttrNormal = 1u << 2,       ///< an ordinary piece of text
  kAttrControl = 1u << 3,      ///< BOS, EOS, end-of-turn...: parsed only with parse_special
  kAttrUserDefined = 1u << 4,  ///< always split out of the text before tokenizing the rest
  kAttrByte = 1u << 5,         ///< a byte token <0xXX>
  kAttrLstrip = 1u << 7,       ///< white space before it is dropped when it is split out
  kAttrRstrip = 1u << 8,       ///< white space after it is dropped when it is split out
};

/// A text tokenizer. Cheap to copy (the vocabulary is shared and immutable); all const member
/// functions may be called from several threads at once.
class Tokenizer {
 public:
  /// Builds the tokenizer of a GGUF file from its `tokenizer.ggml.*` metadata (tensors are not
  /// needed: llama.cpp's vocab-only GGUF files work). Throws nibble::Error naming the problem
  /// when `tokenizer.ggml.model` or `tokenizer.ggml.tokens` is missing, the model or the
  /// `tokenizer.ggml.pre` pre-tokenizer is unknown or not supported, the merges are missing
  /// (BPE), an array has the wrong type or too few entries, or two tokens have the same text.
  static Tokenizer from_gguf(const gguf::File& file);

  /// Opens `path` and builds its tokenizer (see from_gguf).
  static Tokenizer load(const std::string& path);

  Tokenizer();
  Tokenizer(const Tokenizer&);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(const Tokenizer&);
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The token ids of `text`, as llama_tokenize(vocab, text, add_special, parse_special):
  /// add_special adds BOS (and EOS) when the vocabulary asks for them; parse_special recognises
  /// the texts of control and unknown tokens in `text` (user-defined tokens always are). Throws
  /// nibble::Error on a default-constructed tokenizer, when BOS / EOS is to be added but its id
  /// is not a token, for a BPE text holding a code point above U+10FFFF (a 4-byte UTF-8 form of
  /// a value llama.cpp cannot re-encode), or an SPM text byte that has no <0xXX> token.
  std::vector<std::int32_t> tokenize(std::string_view text, bool add_special,
                                     bool parse_special = false) const;

  /// The text of token `id` as llama_token_to_piece(vocab, id, ..., lstrip = 0, special): SPM
  /// pieces with U+2581 turned back into spaces, byte tokens as their byte, BPE pieces decoded
  /// from the GPT-2 byte mapping; control and unknown tokens give their text only with
  /// `special`. Throws nibble::Error if id is not in [0, n_tokens()).
  std::string token_to_piece(std::int32_t id, bool special = true) const;

  /// Number of tokens of the vocabulary.
  std::int32_t n_tokens() const;
  /// The stored text of token `id` (Error if out of range).
  const std::string& token_text(std::int32_t id) const;
  /// The attributes (TokenAttr bits) of token `id` (Error if out of range).
  std::uint32_t token_attr(std::int32_t id) const;
  /// The id of the token whose text is exactly `text`, or -1.
  std::int32_t find_token(std::string_view text) const;

  /// `tokenizer.ggml.model`: "llama", "gpt2", "gemma4" or "bert".
  const std::string& model() const;
  /// `tokenizer.ggml.pre` as given ("" when absent).
  const std::string& pre() const;
  /// BOS id (-1 when the vocabulary has none).
  std::int32_t bos() const;
  /// EOS id (-1 when the vocabulary has none).
  std::int32_t eos() const;
  /// Whether tokenize(..., add_special = true, ...) starts with BOS.
  bool add_bos() const;
  /// Whether tokenize(..., add_special = true, ...) ends with EOS.
  bool add_eos() const;

 private:
  struct Impl;
  const Impl& self() const;  // the vocabulary; Error when empty
  std::shared_ptr<const Impl> impl_;
};

}  // namespace nibble::llm
