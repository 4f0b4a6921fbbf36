// nibble: the text tokenizer of GGUF models (nibble/llm/tokenizer.hpp): SentencePiece-style
// (SPM) and byte-level BPE vocabularies, token for token as llama.cpp's llama_tokenize().
#include "nibble/llm/tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "llm_pretokenize.hpp"
#include "llm_unicode.hpp"
#include "nibble/core/error.hpp"

namespace nibble::llm {

using detail::fail;

namespace {

constexpr const char* kSpaceEscape = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// ---- GGUF metadata access ----

const gguf::Value* find_value(const gguf::File& f, const char* key) {
  const gguf::KeyValue* kv = f.find(key);
  return kv ? &kv->value : nullptr;
}

std::string get_string(const gguf::File& f, const char* key, bool required) {
  const gguf::Value* v = find_value(f, key);
  if (!v) {
    if (required) fail("tokenizer: the model has no ", key, " (not a model with a vocabulary?)");
    return {};
  }
  if (v->type != gguf::ValueType::string) {
    fail("tokenizer: ", key, " is a ", gguf::value_type_name(v->type), ", expected a string");
  }
  return v->str;
}

// Boolean key (bool or integer); `def` when absent.
bool get_bool(const gguf::File& f, const char* key, bool def) {
  const gguf::Value* v = find_value(f, key);
  if (!v) return def;
  if (!v->is_integer() || v->type == gguf::ValueType::array) {
    fail("tokenizer: ", key, " is a ", gguf::value_type_name(v->type), ", expected a bool");
  }
  return v->as_int() != 0;
}

// Token id key: true and `id` set when present and inside the vocabulary (llama.cpp ignores an
// id outside it and keeps its default).
bool get_token_id(const gguf::File& f, const char* key, std::int32_t n_tokens, std::int32_t& id) {
  const gguf::Value* v = find_value(f, key);
  if (!v) return false;
  if (!v->is_integer() || v->type == gguf::ValueType::array) {
    fail("tokenizer: ", key, " is a ", gguf::value_type_name(v->type), ", expected a token id");
  }
  const std::int64_t x = v->as_int();
  if (x < 0 || x >= n_tokens) return false;
  id = static_cast<std::int32_t>(x);
  return true;
}

const gguf::Value* get_array(const gguf::File& f, const char* key, gguf::ValueType elem,
                             std::uint64_t min_count) {
  const gguf::Value* v = find_value(f, key);
  if (!v) return nullptr;
  if (v->type != gguf::ValueType::array || v->elem != elem) {
    fail("tokenizer: ", key, " must be an array of ", gguf::value_type_name(elem), ", not a ",
         gguf::value_type_name(v->type),
         v->type == gguf::ValueType::array ? std::string(" of ") + gguf::value_type_name(v->elem)
                                           : std::string());
  }
  if (v->count < min_count) {
    fail("tokenizer: ", key, " has ", v->count, " entries for ", min_count, " tokens");
  }
  return v;
}

// ---- token texts llama.cpp recognises ----

bool one_of(const std::string& s, std::initializer_list<const char*> list) {
  return std::any_of(list.begin(), list.end(), [&](const char* x) { return s == x; });
}

const std::initializer_list<const char*> kEotTexts = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
const std::initializer_list<const char*> kEomTexts = {"<|eom_id|>"};
const std::initializer_list<const char*> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    "<｜fim▁begin｜>",
    "<PRE>",          "▁<PRE>",       "<|code_prefix|>", "<|prefix|>"};
const std::initializer_list<const char*> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    "<｜fim▁hole｜>",
    "<SUF>",          "▁<SUF>",       "<|code_suffix|>", "<|suffix|>"};
const std::initializer_list<const char*> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",    "<｜fim▁end｜>",
    "<MID>",          "▁<MID>",       "<|code_middle|>", "<|middle|>"};
const std::initializer_list<const char*> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                         "<PAD>", "[PAD]"};
const std::initializer_list<const char*> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                         "<fim-repo>", "<REPO>", "<reponame>"};
const std::initializer_list<const char*> kFimSepTexts = {"<|file_sep|>"};
// End-of-generation texts: always control tokens.
const std::initializer_list<const char*> kEogTexts = {"<|eot_id|>",
                                                      "<|im_end|>",
                                                      "<|end|>",
                                                      "<|return|>",
                                                      "<|call|>",
                                                      "<|flush|>",
                                                      "<|calls|>",
                                                      "<end_of_turn>",
                                                      "<|endoftext|>",
                                                      "</s>",
                                                      "<|eom_id|>",
                                                      "<EOT>",
                                                      "_<EOT>",
                                                      "[EOT]",
                                                      "[EOS]",
                                                      "<|end_of_text|>",
                                                      "<end_of_utterance>",
                                                      "<eos>",
                                                      "<turn|>",
                                                      "<|tool_response>",
                                                      "<｜end▁of▁sentence｜>"};

// Priority of SPM merge candidates: the highest score first, then the leftmost.
struct SpmBigram {
  int left, right;
  float score;
  std::size_t size;
};
struct SpmLess {
  bool operator()(const SpmBigram& l, const SpmBigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

// Priority of BPE merge candidates: the lowest merge rank first, then the leftmost.
struct BpeBigram {
  int left, right;
  int rank;
  std::size_t size;
};
struct BpeGreater {
  bool operator()(const BpeBigram& l, const BpeBigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

// A piece of the text being merged: [start, start + n) of the text, linked to its neighbours.
struct Symbol {
  int prev, next;
  std::size_t start, n;
};

// A fragment of the text after special tokens are split out: raw text or one token.
struct Fragment {
  std::int32_t token;       // -1 for raw text
  std::size_t offset, len;  // raw text
};

bool c_isspace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

}  // namespace

// ---- the vocabulary ----

struct Tokenizer::Impl {
  bool bpe = false;  // byte-level BPE (gpt2, gemma4)
  bool wpm = false;  // WordPiece (bert); neither: SPM (llama)
  std::string model, pre;
  detail::PreTokenizer pre_tok;
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<std::uint32_t> attr;
  std::unordered_map<std::string_view, std::int32_t> to_id;  // views into `text`
  std::string merge_keys;                                    // "first\xffsecond" back to back
  std::unordered_map<std::string_view, int> ranks;           // views into merge_keys
  std::vector<std::int32_t> special;  // control / user-defined / unknown tokens, longest first
  std::int32_t bos = -1, eos = -1, unk = -1, sep = -1;
  std::size_t max_token_len = 0;  // bytes of the longest token text (WordPiece's search)
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool spm_split = false;                       // SPM: merge between impossible pairs separately
  std::unordered_set<std::uint64_t> spm_pairs;  // adjacent character pairs inside tokens

  std::int32_t id_of(std::string_view s) const {
    const auto it = to_id.find(s);
    return it == to_id.end() ? -1 : it->second;
  }

  void load(const gguf::File& f);
  void derive_attributes(const gguf::File& f, const std::int32_t (&set_ids)[8], bool eot_set[8]);
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void build_spm_pairs();
  void spm_tokenize(const std::string& text, std::vector<std::int32_t>& out) const;
  void wpm_tokenize(std::string_view text, std::vector<std::int32_t>& out) const;
  void spm_merge(const std::string& s, std::size_t begin, std::size_t end, std::vector<Symbol>& sym,
                 std::vector<std::int32_t>& out) const;
  void bpe_tokenize(std::string_view text, std::vector<std::int32_t>& out) const;
  void bpe_word(const std::string& word, std::vector<Symbol>& syms, std::string& key,
                std::vector<std::int32_t>& out) const;
  std::int32_t spm_byte_token(unsigned char b) const;
};

void Tokenizer::Impl::load(const gguf::File& f) {
  model = get_string(f, "tokenizer.ggml.model", true);
  pre = get_string(f, "tokenizer.ggml.pre", false);
  std::string pre_name = pre;
  if (model == "llama") {
    bpe = false;
    bos = 1;
    eos = 2;
    unk = 0;
    add_space_prefix = true;
    add_bos = true;
  } else if (model == "gpt2" || model == "gemma4") {
    bpe = true;
    bos = eos = model == "gpt2" ? 11 : -1;
    if (model == "gemma4") pre_name = "gemma4";
  } else if (model == "no_vocab" || model == "none") {
    fail("tokenizer: the model has no vocabulary (tokenizer.ggml.model = \"", model, "\")");
  } else if (model == "bert") {
    wpm = true;
    bos = 101;  // [CLS]
    unk = 100;
    sep = 102;
    add_bos = true;
  } else if (model == "t5" || model == "rwkv" || model == "plamo2") {
    fail("tokenizer: tokenizer.ggml.model = \"", model,
         "\" is not supported by nibble (supported: llama, gpt2, gemma4, bert)");
  } else {
    fail("tokenizer: unknown tokenizer model tokenizer.ggml.model = \"", model, "\"");
  }
  if (bpe) {
    switch (detail::find_pre_tokenizer(pre_name, pre_tok)) {
      case detail::PreLookup::found:
        break;
      case detail::PreLookup::unsupported:
        fail("tokenizer: the pre-tokenizer tokenizer.ggml.pre = \"", pre_name,
             "\" is not supported by nibble yet");
      case detail::PreLookup::unknown:
        fail("tokenizer: unknown pre-tokenizer tokenizer.ggml.pre = \"", pre_name, "\"");
    }
    add_bos = pre_tok.add_bos;
    if (pre_tok.no_default_bos) bos = -1;
  }
  add_space_prefix = get_bool(f, "tokenizer.ggml.add_space_prefix", add_space_prefix);

  const gguf::Value* tokens = get_array(f, "tokenizer.ggml.tokens", gguf::ValueType::string, 0);
  if (!tokens) fail("tokenizer: the model has no tokenizer.ggml.tokens (no vocabulary)");
  if (tokens->count > 0x7fffffffu) fail("tokenizer: ", tokens->count, " tokens is too many");
  const auto n = static_cast<std::int32_t>(tokens->count);
  if (n == 0) fail("tokenizer: tokenizer.ggml.tokens is empty");
  const gguf::Value* scores = get_array(f, "tokenizer.ggml.scores", gguf::ValueType::f32, n);
  const gguf::Value* types = get_array(f, "tokenizer.ggml.token_type", gguf::ValueType::i32, n);

  text.resize(n);
  score.assign(n, 0.0f);
  attr.assign(n, kAttrNormal);
  for (std::int32_t i = 0; i < n; ++i) {
    text[i] = tokens->strings[i];
    if (text[i].empty()) text[i] = "[EMPTY_" + std::to_string(i) + "]";
    if (scores) std::memcpy(&score[i], scores->raw.data() + 4 * static_cast<std::size_t>(i), 4);
    if (types) {
      std::int32_t t;
      std::memcpy(&t, types->raw.data() + 4 * static_cast<std::size_t>(i), 4);
      static constexpr std::uint32_t kTypeAttr[7] = {kAttrUndefined, kAttrNormal,      kAttrUnknown,
                                                     kAttrControl,   kAttrUserDefined, kAttrUnused,
                                                     kAttrByte};
      attr[i] = t >= 0 && t < 7 ? kTypeAttr[t] : kAttrUndefined;
    }
  }
  to_id.reserve(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    const auto ins = to_id.emplace(std::string_view(text[i]), i);
    if (!ins.second) {
      fail("tokenizer: tokens ", ins.first->second, " and ", i, " have the same text \"", text[i],
           "\" (llama.cpp rejects such a vocabulary too)");
    }
  }

  if (bpe) {
    const gguf::Value* merges = get_array(f, "tokenizer.ggml.merges", gguf::ValueType::string, 0);
    if (!merges)
      fail("tokenizer: a BPE vocabulary needs tokenizer.ggml.merges; the model has none");
    // "first second", split at the first space after the first byte; one without a space is the
    // pair ("", "") for llama.cpp. Keys "first\xffsecond" (0xFF never occurs in the UTF-8 words
    // looked up, so a key with 0xFF inside first or second can never match, as in llama.cpp).
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    spans.reserve(merges->strings.size());
    for (const std::string& m : merges->strings) {
      const std::size_t sp = m.find(' ', 1);
      const std::size_t at = merge_keys.size();
      if (sp != std::string::npos) {
        merge_keys.append(m, 0, sp);
        merge_keys.push_back('\xff');
        merge_keys.append(m, sp + 1, std::string::npos);
      } else {
        merge_keys.push_back('\xff');
      }
      spans.emplace_back(at, merge_keys.size() - at);
    }
    ranks.reserve(spans.size());
    for (std::size_t r = 0; r < spans.size(); ++r) {
      ranks.emplace(std::string_view(merge_keys).substr(spans[r].first, spans[r].second),
                    static_cast<int>(r));  // the first of duplicates keeps its rank
    }
  }

  // Special token ids (a key with an id outside the vocabulary is ignored, as llama.cpp does).
  get_token_id(f, "tokenizer.ggml.bos_token_id", n, bos);
  get_token_id(f, "tokenizer.ggml.eos_token_id", n, eos);
  get_token_id(f, "tokenizer.ggml.unknown_token_id", n, unk);
  get_token_id(f, "tokenizer.ggml.seperator_token_id", n, sep);  // sic, llama.cpp's key
  // EOT, EOM, FIM prefix / suffix / middle / pad / repo / separator: set by a key or detected
  // from the token texts below.
  std::int32_t ids[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  bool set[8] = {false, false, false, false, false, false, false, false};
  const char* keys[8] = {"tokenizer.ggml.eot_token_id",     "tokenizer.ggml.eom_token_id",
                         "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
                         "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
                         "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
  for (int k = 0; k < 8; ++k) set[k] = get_token_id(f, keys[k], n, ids[k]);
  const char* deprecated[3] = {"tokenizer.ggml.prefix_token_id", "tokenizer.ggml.suffix_token_id",
                               "tokenizer.ggml.middle_token_id"};
  for (int k = 0; k < 3; ++k)
    set[2 + k] = get_token_id(f, deprecated[k], n, ids[2 + k]) || set[2 + k];

  add_bos = get_bool(f, "tokenizer.ggml.add_bos_token", add_bos);
  add_eos = get_bool(f, "tokenizer.ggml.add_eos_token", add_eos);
  if (bpe && pre_tok.family == "gemma4") add_bos = true;  // llama.cpp forces it for Gemma 4

  derive_attributes(f, ids, set);
  for (const std::string& t : text) max_token_len = std::max(max_token_len, t.size());
  if (!bpe && !wpm) build_spm_pairs();
}

// llama.cpp's rules that change token attributes from the token texts and the model's names.
void Tokenizer::Impl::derive_attributes(const gguf::File& f, const std::int32_t (&set_ids)[8],
                                        bool set[8]) {
  const auto n = static_cast<std::int32_t>(text.size());
  std::int32_t ids[8];
  std::copy(std::begin(set_ids), std::end(set_ids), ids);
  // Tokens whose text marks them as EOT / EOM / FIM become control tokens when their id was not
  // given by a key (the first such token in id order; llama.cpp takes the first in its hash
  // map's order, which only differs for a vocabulary with several candidates).
  const std::initializer_list<const char*>* lists[8] = {&kEotTexts,    &kEomTexts,    &kFimPreTexts,
                                                        &kFimSufTexts, &kFimMidTexts, &kFimPadTexts,
                                                        &kFimRepTexts, &kFimSepTexts};
  for (int k = 0; k < 8; ++k) {
    if (set[k]) continue;
    for (std::int32_t i = 0; i < n; ++i) {
      if (one_of(text[i], *lists[k])) {
        ids[k] = i;
        attr[i] |= kAttrControl;
        break;
      }
    }
  }
  // End-of-generation tokens.
  std::vector<std::int32_t> eog;
  for (const int k : {5, 6, 7}) {
    if (ids[k] >= 0) eog.push_back(ids[k]);
  }
  for (std::int32_t i = 0; i < n; ++i) {
    if (one_of(text[i], kEogTexts)) {
      eog.push_back(i);
      attr[i] |= kAttrControl;
    }
  }
  for (std::int32_t i = 0; i < n; ++i) {
    if (one_of(text[i], {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      attr[i] = kAttrUserDefined;  // gpt-oss: always rendered
    }
  }
  for (const std::int32_t id : {eos, ids[0], ids[1]}) {
    if (id >= 0 && id < n) eog.push_back(id);
  }
  auto eog_has = [&](const char* s) {
    return std::any_of(eog.begin(), eog.end(), [&](std::int32_t id) { return text[id] == s; });
  };
  // o200k_harmony and solar-open: "<|end|>" is not an end of generation but a user-defined token.
  const bool has_call = eog_has("<|call|>") || eog_has("<|calls|>");
  if (eog_has("<|end|>") && has_call && (eog_has("<|return|>") || eog_has("<|flush|>"))) {
    attr[id_of("<|end|>")] = kAttrUserDefined;
  }
  // Gemma 4 and PaddleOCR: "</s>" is a normal token when "<|tool_response>" ends generation.
  if (eog_has("<|tool_response>") && eog_has("</s>")) attr[id_of("</s>")] = kAttrNormal;

  // Special tokens, longest first: the order in which they are split out of a text. The same
  // sort (std::sort, not stable, on the ids in increasing order) as llama.cpp, so that tokens of
  // equal length keep llama.cpp's relative order with the same standard library.
  for (std::int32_t i = 0; i < n; ++i) {
    if (attr[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special.push_back(i);
  }
  std::sort(special.begin(), special.end(),
            [&](std::int32_t a, std::int32_t b) { return text[a].size() > text[b].size(); });

  // Per-model strip attributes.
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  auto contains = [](const std::string& s, std::initializer_list<const char*> subs) {
    return std::any_of(subs.begin(), subs.end(),
                       [&](const char* x) { return s.find(x) != std::string::npos; });
  };
  const std::string name = lower(get_string(f, "general.name", false));
  const std::string arch = get_string(f, "general.architecture", false);
  auto must = [&](const char* s) {
    const std::int32_t id = id_of(s);
    if (id < 0) fail("tokenizer: a phi-3 model (general.name) needs the token \"", s, "\"");
    return id;
  };
  if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    if (const std::int32_t id = id_of("<mask>"); id >= 0) attr[id] |= kAttrLstrip;
  } else if (contains(name, {"phi-3", "phi3"})) {
    for (const std::int32_t id : special) attr[id] |= kAttrRstrip;
    attr[must("</s>")] |= kAttrRstrip;
    for (const char* s : {"<unk>", "<s>", "<|endoftext|>"}) attr[must(s)] &= ~kAttrRstrip;
  } else if (contains(name, {"modern-bert"})) {
    if (const std::int32_t id = id_of("[MASK]"); id >= 0) attr[id] |= kAttrLstrip;
  }
}

// ---- splitting out special tokens ----

std::vector<Fragment> Tokenizer::Impl::partition(std::string_view s, bool parse_special) const {
  std::vector<Fragment> frags, next;
  if (!s.empty()) frags.push_back({-1, 0, s.size()});
  for (const std::int32_t id : special) {
    const std::uint32_t a = attr[id];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& tok = text[id];
    next.clear();
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      std::size_t base = fr.offset, end = fr.offset + fr.len;
      while (base < end) {
        const std::size_t m = s.substr(0, end).find(tok, base);
        if (m == std::string_view::npos) break;
        std::size_t left_len = m - base;
        if (a & kAttrLstrip) {
          while (left_len > 0 && c_isspace(s[base + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({-1, base, left_len});
        next.push_back({id, 0, 0});
        base = m + tok.size();
        if (a & kAttrRstrip) {
          while (base < end && c_isspace(s[base])) ++base;
        }
      }
      if (base < end) next.push_back({-1, base, end - base});
    }
    frags.swap(next);
  }
  return frags;
}

// ---- SentencePiece-style merging ----

std::int32_t Tokenizer::Impl::spm_byte_token(unsigned char b) const {
  static const char* hex = "0123456789ABCDEF";
  const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  std::int32_t id = id_of(std::string_view(name, 6));
  if (id < 0) id = id_of(std::string_view(reinterpret_cast<const char*>(&b), 1));
  if (id < 0) {
    fail("tokenizer: the SPM vocabulary has no byte token <0x", hex[b >> 4], hex[b & 15],
         "> (nor the byte itself) for a piece of the text that has no token");
  }
  return id;
}

namespace {
// The UTF-8 "character" (as the symbol splitting cuts it) at s[i .. i + n) as a number: its bytes,
// big-endian (lead bytes make the lengths unambiguous).
std::uint32_t pack_char(std::string_view s, std::size_t i, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t k = 0; k < n; ++k) v = (v << 8) | static_cast<unsigned char>(s[i + k]);
  return v;
}
}  // namespace

void Tokenizer::Impl::build_spm_pairs() {
  // Every pair of adjacent characters inside some token. Two adjacent characters of a text that
  // no token holds side by side can never end up in one piece, so the merging can run on the
  // stretches between such places independently, with the same result as on the whole text
  // (merges never interact across them) and small priority queues. Not with a NaN score: the
  // merge order is then not a strict weak ordering and only the whole text reproduces
  // llama.cpp's queue.
  spm_split = std::none_of(score.begin(), score.end(), [](float x) { return x != x; });
  if (!spm_split) return;
  for (const std::string& t : text) {
    std::uint32_t prev = 0;
    for (std::size_t off = 0; off < t.size();) {
      const std::size_t n =
          std::min(detail::utf8_len_from_lead(static_cast<unsigned char>(t[off])), t.size() - off);
      const std::uint32_t c = pack_char(t, off, n);
      if (off > 0) spm_pairs.insert((static_cast<std::uint64_t>(prev) << 32) | c);
      prev = c;
      off += n;
    }
  }
}

void Tokenizer::Impl::spm_tokenize(const std::string& s, std::vector<std::int32_t>& out) const {
  std::vector<Symbol> sym;
  std::size_t seg = 0, prev_at = 0, prev_n = 0;
  for (std::size_t off = 0; off < s.size();) {
    const std::size_t n =
        std::min(detail::utf8_len_from_lead(static_cast<unsigned char>(s[off])), s.size() - off);
    if (spm_split && off > 0) {
      const std::uint64_t key =
          (static_cast<std::uint64_t>(pack_char(s, prev_at, prev_n)) << 32) | pack_char(s, off, n);
      if (spm_pairs.count(key) == 0) {
        spm_merge(s, seg, off, sym, out);
        seg = off;
      }
    }
    prev_at = off;
    prev_n = n;
    off += n;
  }
  spm_merge(s, seg, s.size(), sym, out);
}

// llama.cpp's SPM merging of s[begin, end): adjacent pieces whose concatenation is a token are
// merged, the highest-scoring (then leftmost) pair first; a final piece that is not a token
// becomes its bytes' tokens.
void Tokenizer::Impl::spm_merge(const std::string& s, std::size_t begin, std::size_t end,
                                std::vector<Symbol>& sym, std::vector<std::int32_t>& out) const {
  sym.clear();
  for (std::size_t off = begin; off < end;) {
    const std::size_t len =
        std::min(detail::utf8_len_from_lead(static_cast<unsigned char>(s[off])), end - off);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, off + len == end ? -1 : idx + 1, off, len});
    off += len;
  }
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmLess> queue;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::size_t size = sym[l].n + sym[r].n;
    const std::int32_t id = id_of(std::string_view(s).substr(sym[l].start, size));
    if (id < 0) return;
    queue.push({l, r, score[id], size});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_pair(i - 1, i);
  while (!queue.empty()) {
    const SpmBigram bg = queue.top();
    queue.pop();
    Symbol& l = sym[bg.left];
    Symbol& r = sym[bg.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;  // outdated
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = bg.left;
    try_pair(l.prev, bg.left);
    try_pair(bg.left, l.next);
  }
  if (sym.empty()) return;
  for (int i = 0; i != -1; i = sym[i].next) {
    const std::string_view piece = std::string_view(s).substr(sym[i].start, sym[i].n);
    const std::int32_t id = id_of(piece);
    if (id >= 0) {
      out.push_back(id);
    } else {
      for (const char c : piece) out.push_back(spm_byte_token(static_cast<unsigned char>(c)));
    }
  }
}

// ---- byte-level BPE ----

void Tokenizer::Impl::bpe_word(const std::string& w, std::vector<Symbol>& sym, std::string& key,
                               std::vector<std::int32_t>& out) const {
  sym.clear();
  const bool whole = (pre_tok.ignore_merges || (pre_tok.newline_words_whole &&
                                                w.find_first_not_of('\n') == std::string::npos)) &&
                     id_of(w) >= 0;
  if (whole) {
    sym.push_back({-1, -1, 0, w.size()});
  } else {
    for (std::size_t off = 0; off < w.size();) {
      const std::size_t len =
          std::min(detail::utf8_len_from_lead(static_cast<unsigned char>(w[off])), w.size() - off);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, off + len == w.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeGreater> queue;
    auto try_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      key.assign(w, sym[l].start, sym[l].n);
      key.push_back('\xff');
      key.append(w, sym[r].start, sym[r].n);
      const auto it = ranks.find(key);
      if (it == ranks.end()) return;
      queue.push({l, r, it->second, sym[l].n + sym[r].n});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const BpeBigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;  // outdated
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_pair(l.prev, bg.left);
      try_pair(bg.left, l.next);
    }
  }
  for (const Symbol& x : sym) {
    if (x.n == 0) continue;
    const std::string_view piece = std::string_view(w).substr(x.start, x.n);
    const std::int32_t id = id_of(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // No token: each byte on its own, if it is one (GPT-2 byte-encoded words: only the bytes
    // of the ASCII code points can be; raw UTF-8 words: the <0xXX> tokens).
    for (const char c : piece) {
      std::int32_t b;
      if (pre_tok.byte_encode) {
        b = id_of(std::string_view(&c, 1));
      } else {
        static const char* hex = "0123456789ABCDEF";
        const auto u = static_cast<unsigned char>(c);
        const char name[6] = {'<', '0', 'x', hex[u >> 4], hex[u & 15], '>'};
        b = id_of(std::string_view(name, 6));
      }
      if (b >= 0) out.push_back(b);
    }
  }
}

void Tokenizer::Impl::bpe_tokenize(std::string_view s, std::vector<std::int32_t>& out) const {
  std::string escaped;
  if (pre_tok.escape_whitespace) {
    for (const char c : s) {
      if (c == ' ') {
        escaped += kSpaceEscape;
      } else {
        escaped += c;
      }
    }
    s = escaped;
  }
  std::vector<std::uint32_t> cps;
  cps.reserve(s.size());
  detail::decode_utf8_lenient(s, cps);
  const std::vector<std::size_t> words = detail::pre_tokenize(pre_tok.steps, cps);
  std::vector<Symbol> sym;
  std::string word, encoded, key;
  // The ids of the short words already seen in this text (a word's ids depend on it alone).
  constexpr std::size_t kCacheWordBytes = 32, kCacheWords = 1 << 16;
  std::unordered_map<std::string, std::pair<std::size_t, std::size_t>> cache;
  std::vector<std::int32_t> cached;
  std::size_t at = 0;
  for (const std::size_t len : words) {
    word.clear();
    for (std::size_t i = at; i < at + len; ++i) {
      if (!detail::append_utf8(word, cps[i])) {
        fail("tokenizer: the text holds the code point 0x", std::hex, cps[i],
             " (a 4-byte UTF-8 form above U+10FFFF), which llama.cpp cannot tokenize either");
      }
    }
    at += len;
    const bool cacheable = word.size() <= kCacheWordBytes;
    if (cacheable) {
      const auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), cached.begin() + static_cast<std::ptrdiff_t>(it->second.first),
                   cached.begin() + static_cast<std::ptrdiff_t>(it->second.second));
        continue;
      }
    }
    const std::size_t before = out.size();
    if (pre_tok.byte_encode) {
      encoded.clear();
      for (const char c : word) encoded += detail::byte_to_unicode(static_cast<unsigned char>(c));
      bpe_word(encoded, sym, key, out);
    } else {
      bpe_word(word, sym, key, out);
    }
    if (cacheable && cache.size() < kCacheWords) {
      const std::size_t b = cached.size();
      cached.insert(cached.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
      cache.emplace(word, std::make_pair(b, cached.size()));
    }
  }
}

// ---- WordPiece (BERT) ----

namespace {
// The CJK ideographs that BERT's normaliser makes words of their own (its ranges, including the
// Hugging Face implementation's start of Extension E at U+2B920).
bool bert_chinese(std::uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}
}  // namespace

void Tokenizer::Impl::wpm_tokenize(std::string_view s, std::vector<std::int32_t>& out) const {
  // Normalise (first code point of each code point's NFD, lower case, control characters
  // dropped) and split at white space, punctuation, ASCII symbols and CJK ideographs.
  std::vector<std::uint32_t> cps;
  detail::decode_utf8_lenient(s, cps);
  std::vector<std::string> words(1);
  for (std::uint32_t cp : cps) {
    cp = detail::unicode_nfd_first(cp);
    const std::uint8_t cl = detail::unicode_class(cp);
    if (cl & detail::kUnicodeWhiteSpace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const std::uint8_t cat = cl & 7;
    if (cp == 0 || cp == 0xfffd || cat == detail::kCatOther) continue;
    std::string u;
    if (!detail::append_utf8(u, detail::unicode_tolower(cp))) {
      fail("tokenizer: the text holds the code point 0x", std::hex, cp,
           " (a 4-byte UTF-8 form above U+10FFFF), which llama.cpp cannot tokenize either");
    }
    if (cat == detail::kCatPunct || (cp < 0x7f && cat == detail::kCatSymbol) || bert_chinese(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = u;
      words.emplace_back();
    } else {
      words.back() += u;
    }
  }
  // Each word, with U+2581 in front, as the longest tokens from the left; a word that cannot be
  // covered this way is the unknown token.
  std::string w;
  for (const std::string& word : words) {
    if (word.empty()) continue;
    w = kSpaceEscape + word;
    const std::size_t n = w.size(), before = out.size();
    for (std::size_t i = 0; i < n; ++i) {
      bool found = false;
      for (std::size_t j = std::min(n, i + max_token_len + 1); j > i; --j) {
        const std::int32_t id = id_of(std::string_view(w).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          found = true;
          i = j - 1;
          break;
        }
      }
      if (!found) {
        out.resize(before);
        break;
      }
    }
    if (out.size() == before) {
      if (unk < 0) fail("tokenizer: a word has no tokens and the vocabulary no unknown token");
      out.push_back(unk);
    }
  }
}

// ---- Tokenizer ----

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_shared<Impl>();
  impl->load(file);
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  return from_gguf(gguf::File::open(path));
}

const Tokenizer::Impl& Tokenizer::self() const {
  if (!impl_) fail("tokenizer: this Tokenizer is empty (default-constructed or moved from)");
  return *impl_;
}

std::vector<std::int32_t> Tokenizer::tokenize(std::string_view text, bool add_special,
                                              bool parse_special) const {
  const Impl& v = self();
  const auto n = static_cast<std::int32_t>(v.text.size());
  auto special_id = [&](std::int32_t id, const char* what) {
    if (id < 0 || id >= n) {
      fail("tokenizer: the vocabulary adds ", what, " but its ", what, " id ", id,
           " is not a token of the ", n, "-token vocabulary");
    }
    return id;
  };
  std::vector<std::int32_t> out;
  const std::vector<Fragment> frags = v.partition(text, parse_special);
  if (v.wpm) {
    // WordPiece: [CLS] text [SEP] with add_special, whatever add_bos says (as llama.cpp).
    if (add_special) out.push_back(special_id(v.bos, "BOS"));
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
      } else {
        v.wpm_tokenize(text.substr(fr.offset, fr.len), out);
      }
    }
    if (add_special) out.push_back(special_id(v.sep, "SEP"));
    return out;
  }
  if (add_special && v.add_bos) out.push_back(special_id(v.bos, "BOS"));
  if (!v.bpe) {
    bool prev_special = true;  // a leading space before the first text and after special tokens
    std::string s;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
        prev_special = true;
        continue;
      }
      s.clear();
      if (v.add_space_prefix && prev_special) s += kSpaceEscape;
      for (const char c : text.substr(fr.offset, fr.len)) {
        if (c == ' ') {
          s += kSpaceEscape;
        } else {
          s += c;
        }
      }
      v.spm_tokenize(s, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& fr : frags) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
      } else {
        v.bpe_tokenize(text.substr(fr.offset, fr.len), out);
      }
    }
  }
  if (add_special && v.add_eos) out.push_back(special_id(v.eos, "EOS"));
  return out;
}

std::string Tokenizer::token_to_piece(std::int32_t id, bool special) const {
  const Impl& v = self();
  const std::uint32_t a = token_attr(id);
  const std::string& t = v.text[id];
  if (a & (kAttrControl | kAttrUnknown)) return special ? t : std::string();
  if (a & kAttrUserDefined) return t;
  if (a & kAttrNormal) {
    if (!v.bpe || v.pre_tok.escape_whitespace) {  // SPM, WordPiece, gemma4
      std::string r;
      for (std::size_t i = 0; i < t.size();) {
        if (t.compare(i, 3, kSpaceEscape) == 0) {
          r += ' ';
          i += 3;
        } else {
          r += t[i++];
        }
      }
      return r;
    }
    // GPT-2 byte mapping back to bytes; a code point outside it is shown as llama.cpp does.
    std::vector<std::uint32_t> cps;
    detail::decode_utf8_lenient(t, cps);
    std::string r;
    for (const std::uint32_t cp : cps) {
      const int b = detail::unicode_to_byte(cp);
      if (b >= 0) {
        r += static_cast<char>(b);
        continue;
      }
      std::string u;
      detail::append_utf8(u, cp);
      r += "[UNK_BYTE_0x";
      static const char* hex = "0123456789abcdef";
      for (const char c : u) {
        r += hex[static_cast<unsigned char>(c) >> 4];
        r += hex[static_cast<unsigned char>(c) & 15];
      }
      r += t + "]";
    }
    return r;
  }
  if (a & kAttrByte) {
    // <0xXX>: the byte (llama.cpp reads the two hex digits after "<0x").
    unsigned value = 0;
    for (std::size_t i = 3; i < 5 && i < t.size(); ++i) {
      const char c = t[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) break;
      value = value * 16 + static_cast<unsigned>(d);
    }
    return std::string(1, static_cast<char>(value));
  }
  return std::string();  // unused / undefined tokens render as nothing
}

std::int32_t Tokenizer::n_tokens() const {
  return static_cast<std::int32_t>(self().text.size());
}

const std::string& Tokenizer::token_text(std::int32_t id) const {
  const Impl& v = self();
  if (id < 0 || id >= static_cast<std::int32_t>(v.text.size())) {
    fail("tokenizer: token id ", id, " is outside the vocabulary [0, ", v.text.size(), ")");
  }
  return v.text[id];
}

std::uint32_t Tokenizer::token_attr(std::int32_t id) const {
  token_text(id);  // range check
  return impl_->attr[id];
}

std::int32_t Tokenizer::find_token(std::string_view text) const {
  return self().id_of(text);
}

const std::string& Tokenizer::model() const {
  return self().model;
}
const std::string& Tokenizer::pre() const {
  return self().pre;
}
std::int32_t Tokenizer::bos() const {
  return self().bos;
}
std::int32_t Tokenizer::eos() const {
  return self().eos;
}
bool Tokenizer::add_bos() const {
  return self().add_bos;
}
bool Tokenizer::add_eos() const {
  return self().add_eos;
}

}  // namespace nibble::llm
