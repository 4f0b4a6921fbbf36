// nibble CLI: the text / token-id input shared by `nibble perplexity`, `nibble imatrix` and
// `nibble quantize --calib-text` (defined in cmd_llm.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"

/// What the llama.cpp protocols need to know about the vocabulary, from the GGUF metadata.
struct VocabInfo {
  std::int32_t bos = -1;  ///< BOS token id (-1: none)
  bool add_bos = false;   ///< the tokenizer puts BOS in front of a text
  bool add_eos = false;   ///< the tokenizer appends EOS
};

/// The VocabInfo of a model file (llama.cpp's defaults for absent keys). Throws nibble::Error if
/// the vocabulary adds BOS but has no BOS id.
VocabInfo vocab_info(const nibble::gguf::File& f);

/// The tokens of `text` with the model's tokenizer (with BOS when the vocabulary adds it, no
/// special-token parsing), as llama.cpp's common_tokenize(ctx, text, true). Throws
/// nibble::Error when the text cannot be tokenized.
std::vector<std::int32_t> tokenize_text(const nibble::gguf::File& f, const std::string& text);

/// The whole file as bytes. Throws nibble::Error if it cannot be opened.
std::string read_file(const std::string& path);

/// Whitespace-separated non-negative token ids from a file. Throws nibble::Error on anything
/// else.
std::vector<std::int32_t> read_tokens(const std::string& path);
