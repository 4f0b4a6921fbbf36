// nibble (internal): byte-level BPE pre-tokenizers (see llm_pretokenize.hpp).
#include "llm_pretokenize.hpp"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "llm_unicode.hpp"

namespace nibble::detail {

namespace {

using Steps = std::vector<SplitStep>;

// ---- per-code-point facts ----

// Class byte of a position outside the piece being split: no category bit pattern of a real
// code point has bit 7 set, and its category bits (0) and white-space bit (0) make every
// "is letter / number / white space" test false.
constexpr std::uint8_t kOutside = 0x80;

inline std::uint8_t category(std::uint8_t c) {
  return c & 7;
}
inline bool is_ws(std::uint8_t c) {
  return (c & kUnicodeWhiteSpace) != 0;
}
inline bool is_letter(std::uint8_t c) {
  return c != kOutside && category(c) == kCatLetter;
}
inline bool is_number(std::uint8_t c) {
  return c != kOutside && category(c) == kCatNumber;
}
inline bool is_mark(std::uint8_t c) {
  return c != kOutside && category(c) == kCatMark;
}

// The text being split: code points and their class bytes.
struct Text {
  const std::vector<std::uint32_t>& cps;
  std::vector<std::uint8_t> cls;
};

// ASCII white space as C's isspace / std::regex's \s see it in the "C" locale.
inline bool ascii_space(std::uint32_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}
inline bool ascii_alpha(std::uint32_t c) {
  return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}
inline bool ascii_digit(std::uint32_t c) {
  return c >= '0' && c <= '9';
}
// ASCII characters of general category P (what llama.cpp's collapsed \p{P} lists for ASCII).
inline bool ascii_punct(std::uint32_t c) {
  switch (c) {
    case '!':
    case '"':
    case '#':
    case '%':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case ',':
    case '-':
    case '.':
    case '/':
    case ':':
    case ';':
    case '?':
    case '@':
    case '[':
    case '\\':
    case ']':
    case '_':
    case '{':
    case '}':
      return true;
    default:
      return false;
  }
}

// The character classes of the std::regex / std::wregex expressions. ASCII code points stand
// for themselves; a non-ASCII one with the White_Space property is seen as '\v' (so \s matches
// it and nothing else does); any other non-ASCII one only by its category (\p{L}, \p{N}, \p{P})
// in the collapsed expressions, and by its value in the wide ones.
struct Classes {
  const Text& t;
  bool space(std::size_t i) const {
    const std::uint32_t c = t.cps[i];
    return c < 0x80 ? ascii_space(c) : is_ws(t.cls[i]);
  }
  bool letter(std::size_t i) const {  // collapsed \p{L}
    const std::uint32_t c = t.cps[i];
    return c < 0x80 ? ascii_alpha(c) : !is_ws(t.cls[i]) && category(t.cls[i]) == kCatLetter;
  }
  bool number(std::size_t i) const {  // collapsed \p{N}
    const std::uint32_t c = t.cps[i];
    return c < 0x80 ? ascii_digit(c) : !is_ws(t.cls[i]) && category(t.cls[i]) == kCatNumber;
  }
  bool punct(std::size_t i) const {  // collapsed \p{P}
    const std::uint32_t c = t.cps[i];
    return c < 0x80 ? ascii_punct(c) : !is_ws(t.cls[i]) && category(t.cls[i]) == kCatPunct;
  }
  // The code point a wide expression sees.
  std::uint32_t wide(std::size_t i) const {
    const std::uint32_t c = t.cps[i];
    return c >= 0x80 && is_ws(t.cls[i]) ? 0x0b : c;
  }
};

struct Range {
  std::uint32_t lo, hi;
};

template <std::size_t N>
bool in_ranges(std::uint32_t c, const Range (&r)[N]) {
  for (const Range& x : r) {
    if (c >= x.lo && c <= x.hi) return true;
  }
  return false;
}

// deepseek-llm's letter class (cased letters: Latin, Greek, Cyrillic, Armenian, Georgian,
// Cherokee, Glagolitic, Coptic, Deseret, Osage, Old Hungarian, Warang Citi, Adlam, ...).
constexpr Range kDeepseekLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// deepseek-llm's punctuation class: ASCII punctuation and symbols, their full-width forms,
// quotation marks U+2018..U+201F, U+3000..U+3002 (U+3000 is white space and never matches).
constexpr Range kDeepseekPunct[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
                                    {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};
// deepseek's CJK class [一-龥ࠀ-一가-퟿]: U+0800..U+9FA5 (two overlapping ranges) and Hangul.
constexpr Range kDeepseekCjk[] = {{0x0800, 0x9FA5}, {0xAC00, 0xD7FF}};
// Characters bloom's expression excludes from its words (besides \s).
constexpr std::uint32_t kBloomStops[] = {'(',    ')',    '|',    '.',    ',',    '!',    '?',
                                         0x2026, 0x3002, 0xFF0C, 0x3001, 0x0964, 0x06D4, 0x060C};

// ---- the hand-written matchers (llama.cpp's custom splitters) ----

// Emits the words of one piece [a, b) into `out`.
class PieceSplitter {
 public:
  PieceSplitter(const Text& t, std::size_t a, std::size_t b, std::vector<std::size_t>& out)
      : t_(t), b_(b), prev_(a), out_(out) {}

  std::uint32_t cp(std::size_t i) const { return i < b_ ? t_.cps[i] : 0xffffffffu; }
  std::uint8_t cl(std::size_t i) const { return i < b_ ? t_.cls[i] : kOutside; }
  // Ends the current word at `end` (nothing if empty).
  void cut(std::size_t end) {
    if (end > prev_) out_.push_back(end - prev_);
    prev_ = end;
  }
  // ASCII-only lower-casing of the contraction letters (the Unicode table has no other code
  // point whose simple lower case is one of s t m d r e v l: checked by the generator).
  static std::uint32_t lower(std::uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
  // Length of a contraction 's 't 'm 'd (2) or 're 've 'll (3) at i, or 0.
  std::size_t contraction(std::size_t i, bool any_case) const {
    if (cp(i) != '\'' || i + 1 >= b_) return 0;
    const std::uint32_t c1 = any_case ? lower(cp(i + 1)) : cp(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= b_) return 0;
    const std::uint32_t c2 = any_case ? lower(cp(i + 2)) : cp(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }
  std::size_t end() const { return b_; }

 private:
  const Text& t_;
  std::size_t b_, prev_;
  std::vector<std::size_t>& out_;
};

void split_gpt2(const Text& t, std::size_t a, std::size_t b, std::vector<std::size_t>& out) {
  PieceSplitter s(t, a, b, out);
  std::size_t pos = a;
  while (pos < b) {
    const std::uint32_t c = s.cp(pos);
    if (const std::size_t n = s.contraction(pos, false)) {
      pos += n;
      s.cut(pos);
      continue;
    }
    // " ?X+" for X = letters, numbers, or neither-space-letter-number: an optional leading
    // space joins the run that follows it.
    const std::uint8_t f = c == ' ' ? s.cl(pos + 1) : s.cl(pos);
    if (is_letter(f) || is_number(f)) {
      const bool letters = is_letter(f);
      pos += c == ' ';
      while (letters ? is_letter(s.cl(pos)) : is_number(s.cl(pos))) ++pos;
      s.cut(pos);
      continue;
    }
    if (f != kOutside && !is_ws(f)) {
      pos += c == ' ';
      for (std::uint8_t g = s.cl(pos); g != kOutside && !is_ws(g) && !is_letter(g) && !is_number(g);
           g = s.cl(++pos)) {
      }
      s.cut(pos);
      continue;
    }
    // White space: a run followed by more text leaves its last character to the next word.
    std::size_t n = 0;
    while (is_ws(s.cl(pos + n))) ++n;
    if (n > 1 && pos + n < b) {
      pos += n - 1;
    } else if (n > 0) {
      pos += n;
    } else {
      ++pos;
    }
    s.cut(pos);
  }
}

// Llama 3 (digits = 3), Qwen2 (digits = 1) and Qwen3.5 (digits = 1, marks join letters).
void split_llama3_like(const Text& t, std::size_t a, std::size_t b, std::size_t digits, bool marks,
                       std::vector<std::size_t>& out) {
  PieceSplitter s(t, a, b, out);
  auto wordish = [&](std::uint8_t g) { return is_letter(g) || (marks && is_mark(g)); };
  std::size_t pos = a;
  while (pos < b) {
    const std::uint32_t c = s.cp(pos);
    const std::uint8_t f = s.cl(pos);
    if (const std::size_t n = s.contraction(pos, true)) {
      pos += n;
      s.cut(pos);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : one leading non-letter (not CR/LF/number) joins the letters.
    if (c != '\r' && c != '\n' && !is_number(f) && (wordish(f) || wordish(s.cl(pos + 1)))) {
      ++pos;
      while (wordish(s.cl(pos))) ++pos;
      s.cut(pos);
      continue;
    }
    // \p{N}{1,digits}
    if (is_number(f)) {
      std::size_t run = 0;
      while (is_number(s.cl(pos))) {
        ++pos;
        if (++run == digits) {
          s.cut(pos);
          run = 0;
        }
      }
      s.cut(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    const std::uint8_t f2 = c == ' ' ? s.cl(pos + 1) : f;
    auto other = [&](std::uint8_t g) {
      return !is_ws(g) && !is_letter(g) && !is_number(g) && !(marks && is_mark(g));
    };
    if (other(f2)) {  // f2 may be kOutside: a lone trailing space is a word of its own
      pos += c == ' ';
      while (s.cl(pos) != kOutside && other(s.cl(pos))) ++pos;
      while (s.cp(pos) == '\r' || s.cp(pos) == '\n') ++pos;
      s.cut(pos);
      continue;
    }
    // \s*[\r\n]+ | \s+(?!\S) | \s+
    std::size_t n = 0, last_newline_end = 0;
    while (is_ws(s.cl(pos + n))) {
      if (s.cp(pos + n) == '\r' || s.cp(pos + n) == '\n') last_newline_end = pos + n + 1;
      ++n;
    }
    if (last_newline_end > 0) {
      pos = last_newline_end;
    } else if (n > 1 && pos + n < b) {
      pos += n - 1;
    } else if (n > 0) {
      pos += n;
    } else {
      ++pos;
    }
    s.cut(pos);
  }
}

// ---- the regular-expression steps: leftmost matches, gaps kept as words ----

// Splits [a, b) into the leftmost-first matches of `match` (match(i) = length of the match
// starting at i, 0 for none) and the gaps between them.
template <class Match>
void split_matches(std::size_t a, std::size_t b, std::vector<std::size_t>& out, Match match) {
  std::size_t gap = a;
  for (std::size_t pos = a; pos < b;) {
    const std::size_t n = match(pos);
    if (n == 0) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back(pos - gap);
    out.push_back(n);
    pos += n;
    gap = pos;
  }
  if (b > gap) out.push_back(b - gap);
}

// Length of the run of positions from i (< b) satisfying `in`.
template <class In>
std::size_t run_length(std::size_t i, std::size_t b, In in) {
  std::size_t j = i;
  while (j < b && in(j)) ++j;
  return j - i;
}

// "\s?X+": an optional white-space character immediately followed by a run of X, or a run of X.
template <class In>
std::size_t space_opt_run(const Classes& k, std::size_t i, std::size_t b, In in) {
  if (k.space(i) && i + 1 < b && in(i + 1)) return 1 + run_length(i + 1, b, in);
  return in(i) ? run_length(i, b, in) : 0;
}

void split_step(SplitStep step, const Text& t, std::size_t a, std::size_t b,
                std::vector<std::size_t>& out) {
  const Classes k{t};
  switch (step) {
    case SplitStep::gpt2:
      return split_gpt2(t, a, b, out);
    case SplitStep::llama3:
      return split_llama3_like(t, a, b, 3, false, out);
    case SplitStep::qwen2:
      return split_llama3_like(t, a, b, 1, false, out);
    case SplitStep::qwen35:
      return split_llama3_like(t, a, b, 1, true, out);
    case SplitStep::punct_default:
    case SplitStep::punct_falcon: {
      const bool tick = step == SplitStep::punct_falcon;
      auto in = [&](std::size_t i) {
        const std::uint32_t c = t.cps[i];
        return k.punct(i) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
               c == '~' || c == '|' || (tick && c == '`');
      };
      return split_matches(a, b, out, [&](std::size_t i) { return run_length(i, b, in); });
    }
    case SplitStep::numbers:
      return split_matches(a, b, out, [&](std::size_t i) {
        return run_length(i, b, [&](std::size_t j) { return k.number(j); });
      });
    case SplitStep::number:
      return split_matches(a, b, out, [&](std::size_t i) -> std::size_t { return k.number(i); });
    case SplitStep::digits3:
      return split_matches(a, b, out, [&](std::size_t i) -> std::size_t {
        return i + 3 <= b && ascii_digit(t.cps[i]) && ascii_digit(t.cps[i + 1]) &&
                       ascii_digit(t.cps[i + 2])
                   ? 3
                   : 0;
      });
    case SplitStep::newline:
      return split_matches(a, b, out, [&](std::size_t i) -> std::size_t {
        return t.cps[i] == '\r' || t.cps[i] == '\n';
      });
    case SplitStep::space_letters:
      return split_matches(a, b, out, [&](std::size_t i) {
        return space_opt_run(k, i, b, [&](std::size_t j) { return k.letter(j); });
      });
    case SplitStep::space_punct:
      return split_matches(a, b, out, [&](std::size_t i) {
        return space_opt_run(k, i, b, [&](std::size_t j) { return k.punct(j); });
      });
    case SplitStep::ds_letters:
      return split_matches(a, b, out, [&](std::size_t i) {
        return space_opt_run(k, i, b,
                             [&](std::size_t j) { return in_ranges(k.wide(j), kDeepseekLetters); });
      });
    case SplitStep::ds_punct:
      return split_matches(a, b, out, [&](std::size_t i) {
        return space_opt_run(k, i, b,
                             [&](std::size_t j) { return in_ranges(k.wide(j), kDeepseekPunct); });
      });
    case SplitStep::cjk:
      return split_matches(a, b, out, [&](std::size_t i) {
        return run_length(i, b, [&](std::size_t j) { return in_ranges(k.wide(j), kDeepseekCjk); });
      });
    case SplitStep::trailing_space: {
      // \s+$: the white space that ends the piece, if any.
      std::size_t e = b;
      while (e > a && k.space(e - 1)) --e;
      if (e > a) out.push_back(e - a);
      if (b > e) out.push_back(b - e);
      return;
    }
    case SplitStep::bloom_words: {
      auto in = [&](std::size_t j) {
        if (k.space(j)) return false;
        const std::uint32_t c = k.wide(j);
        return std::find(std::begin(kBloomStops), std::end(kBloomStops), c) ==
               std::end(kBloomStops);
      };
      return split_matches(a, b, out, [&](std::size_t i) {
        if (t.cps[i] == ' ' && i + 1 < b && in(i + 1)) return 1 + run_length(i + 1, b, in);
        return run_length(i, b, in);
      });
    }
    case SplitStep::newline_runs: {
      for (std::size_t pos = a; pos < b;) {
        const bool nl = t.cps[pos] == '\n';
        std::size_t e = pos;
        while (e < b && (t.cps[e] == '\n') == nl) ++e;
        out.push_back(e - pos);
        pos = e;
      }
      return;
    }
  }
}

struct Family {
  const char* family;
  std::initializer_list<const char*> names;
};

}  // namespace

std::vector<std::size_t> pre_tokenize(const std::vector<SplitStep>& steps,
                                      const std::vector<std::uint32_t>& cps) {
  Text t{cps, {}};
  t.cls.resize(cps.size());
  for (std::size_t i = 0; i < cps.size(); ++i) t.cls[i] = unicode_class(cps[i]);
  std::vector<std::size_t> pieces, next;
  if (!cps.empty()) pieces.push_back(cps.size());
  for (const SplitStep step : steps) {
    next.clear();
    std::size_t a = 0;
    for (const std::size_t n : pieces) {
      split_step(step, t, a, a + n, next);
      a += n;
    }
    pieces.swap(next);
  }
  return pieces;
}

PreLookup find_pre_tokenizer(const std::string& pre, PreTokenizer& out) {
  using S = SplitStep;
  auto is = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return pre == n; });
  };
  PreTokenizer p;
  if (pre.empty() || pre == "default") {
    p.family = "default";
    p.steps = {S::punct_default, S::gpt2, S::numbers, S::digits3};
  } else if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                 "lfm2", "jina-v5-nano"})) {
    p.family = "llama3";
    p.steps = {S::llama3};
    p.ignore_merges = true;
    p.add_bos = true;
  } else if (is({"dbrx", "smaug-bpe"})) {
    p.family = "llama3";
    p.steps = {S::llama3};
  } else if (is({"glm4", "chatglm-bpe"})) {
    p.family = "chatglm4";
    p.steps = {S::llama3};
    p.no_default_bos = true;
  } else if (pre == "deepseek-llm") {
    p.family = "deepseek-llm";
    p.steps = {S::newline, S::ds_letters, S::ds_punct, S::trailing_space, S::cjk, S::numbers};
  } else if (pre == "deepseek-coder") {
    p.family = "deepseek-coder";
    p.steps = {S::newline, S::space_letters, S::space_punct, S::cjk, S::number};
  } else if (pre == "falcon") {
    p.family = "falcon";
    p.steps = {S::punct_falcon, S::gpt2, S::digits3};
  } else if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                 "minerva-7b"})) {
    p.family = "starcoder";
    p.steps = {S::number, S::gpt2};
  } else if (is({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                 "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                 "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"})) {
    p.family = "gpt2";
    p.steps = {S::gpt2};
  } else if (is({"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                 "solar-open", "grok-2"})) {
    p.family = "qwen2";
    p.steps = {S::qwen2};
  } else if (pre == "qwen35") {
    p.family = "qwen35";
    p.steps = {S::qwen35};
  } else if (is({"bloom", "gpt3-finnish", "poro-chat"})) {
    p.family = "bloom";
    p.steps = {S::bloom_words};
  } else if (pre == "viking") {
    p.family = "viking";
    p.steps = {S::bloom_words, S::number};
  } else if (is({"gemma4", "sarvam-moe"})) {
    p.family = pre;
    p.steps = {S::newline_runs};
    p.byte_encode = false;
    p.escape_whitespace = true;
    p.newline_words_whole = pre == "gemma4";
    p.add_bos = pre == "gemma4";
  } else if (is({"jais-2",      "deepseek-v3", "hunyuan-dense", "joyai-llm", "youtu",
                 "tekken",      "chameleon",   "gpt-4o",        "llama4",    "kanana2",
                 "minimax-m2",  "tiny_aya",    "kimi-k2",       "superbpe",  "bailingmoe",
                 "bailingmoe2", "llada-moe",   "seed-coder",    "afmoe",     "exaone-moe"})) {
    return PreLookup::unsupported;
  } else {
    return PreLookup::unknown;
  }
  out = std::move(p);
  return PreLookup::found;
}

}  // namespace nibble::detail
