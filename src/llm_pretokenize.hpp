// nibble (internal): the pre-tokenizers of byte-level BPE vocabularies -- the splitting of a
// text into words before the BPE merges, one per `tokenizer.ggml.pre` family, as llama.cpp
// does it.
//
// llama.cpp describes each pre-tokenizer as a list of regular expressions applied one after the
// other: each one re-splits every piece of the previous step into its matches and the gaps
// between them. A few expressions it runs through hand-written matchers (GPT-2's, Llama 3's,
// Qwen2's), the others through std::regex on a "collapsed" text in which every non-ASCII code
// point is replaced by one byte standing for its category (\p{L}, \p{N}, \p{P}, ... match those
// bytes), or through std::wregex on the code points where no category is used. The splitting
// functions here are written by hand for each expression, over code points and the generated
// Unicode table, and reproduce those semantics, quirks included (for example, ASCII '~' is
// neither \p{P} nor \p{S} in the collapsed form, and non-ASCII white space only matches \s).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble::detail {

/// One splitting step (one of llama.cpp's expressions).
enum class SplitStep : std::uint8_t {
  gpt2,            ///< 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  llama3,          ///< Llama 3: (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|...
  qwen2,           ///< as llama3 with \p{N} (single digits)
  qwen35,          ///< as qwen2 with [\p{L}\p{M}] for letters
  punct_default,   ///< [\p{P}\$\+<=>\^~\|]+
  punct_falcon,    ///< [\p{P}\$\+<=>\^~\|`]+
  numbers,         ///< \p{N}+
  number,          ///< \p{N}
  digits3,         ///< [0-9][0-9][0-9]
  newline,         ///< [\r\n]
  space_letters,   ///< \s?\p{L}+
  space_punct,     ///< \s?\p{P}+
  ds_letters,      ///< \s?[A-Za-zµÀ-Ö...]+ (deepseek-llm's cased letters)
  ds_punct,        ///< \s?[!-/:-~！-／：-～‘-‟　-。]+
  trailing_space,  ///< \s+$
  cjk,             ///< [一-龥ࠀ-一가-퟿]+
  bloom_words,     ///< " ?[^(\s|.,!?…。，、।۔،)]+"
  newline_runs,    ///< [^\n]+|[\n]+
};

/// A pre-tokenizer and the vocabulary settings llama.cpp ties to its `tokenizer.ggml.pre` name.
struct PreTokenizer {
  std::string family;                ///< llama.cpp's family, e.g. "llama3" for "llama-bpe"
  std::vector<SplitStep> steps;      ///< applied in order
  bool byte_encode = true;           ///< map the words' bytes to GPT-2's code points
  bool escape_whitespace = false;    ///< spaces become U+2581 before splitting (gemma4)
  bool ignore_merges = false;        ///< a word that is a token is taken whole
  bool add_bos = false;              ///< default of tokenizer.ggml.add_bos_token
  bool no_default_bos = false;       ///< no default BOS id (chatglm)
  bool newline_words_whole = false;  ///< a word of newlines that is a token is taken whole
};

/// Result of find_pre_tokenizer.
enum class PreLookup { found, unsupported, unknown };

/// The pre-tokenizer llama.cpp selects for `tokenizer.ggml.pre` = `pre` (an empty string is
/// llama.cpp's "default"): `found` (and `out` set), `unsupported` (a name llama.cpp knows whose
/// expressions nibble does not implement) or `unknown`.
PreLookup find_pre_tokenizer(const std::string& pre, PreTokenizer& out);

/// Splits the code points `cps` (one text fragment) into words with `steps`; returns the
/// words' lengths in code points, in order, all > 0, summing to cps.size().
std::vector<std::size_t> pre_tokenize(const std::vector<SplitStep>& steps,
                                      const std::vector<std::uint32_t>& cps);

}  // namespace nibble::detail
