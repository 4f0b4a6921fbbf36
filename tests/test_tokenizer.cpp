// Tests of the text tokenizer (nibble/llm/tokenizer.hpp) against llama.cpp.
//
// Expected ids all come from llama.cpp, never from nibble: the vocabulary test suites of
// llama.cpp (models/ggml-vocab-*.gguf.inp / .out, made with the Hugging Face tokenizers) for the
// gpt-2 (byte-level BPE), phi-3 (SPM) and bert-bge (WordPiece) vocabularies, and llama_tokenize()
// on 200 random texts (random_texts.bin: vocabulary pieces, many scripts, white space, malformed
// UTF-8) for every variant of tests/data/tokenizer/variants.txt -- the vocabularies with other
// pre-tokenizers (tokenizer.ggml.pre), user-defined tokens and settings, applied here to the parsed
// metadata exactly as tests/cross/tokenizer/derive_vocab.py applied them to the files llama.cpp
// read (tests/cross/tokenizer/make_expected.sh). Plus round trips through token_to_piece, the
// errors, and concurrent use.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nibble/core/error.hpp"
#include "nibble/io/gguf.hpp"
#include "nibble/llm/tokenizer.hpp"
#include "tiny_llama.hpp"

namespace {

namespace g = nibble::gguf;
using nibble::llm::Tokenizer;

const std::string kDir = std::string(NIBBLE_TEST_DATA_DIR) + "/tokenizer/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string trim(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::vector<std::int32_t> parse_ids(const std::string& line) {
  std::vector<std::int32_t> ids;
  std::istringstream in(line);
  for (long v; in >> v;) ids.push_back(static_cast<std::int32_t>(v));
  return ids;
}

// The texts of random_texts.bin (uint32 byte count + bytes, back to back).
std::vector<std::string> random_texts() {
  const std::string all = read_file(kDir + "random_texts.bin");
  std::vector<std::string> texts;
  for (std::size_t at = 0; at + 4 <= all.size();) {
    std::uint32_t n;
    std::memcpy(&n, all.data() + at, 4);
    texts.push_back(all.substr(at + 4, n));
    at += 4 + n;
  }
  return texts;
}

// Parsed vocabularies, kept for the whole test program (the files stay mapped).
const g::File& vocab_file(const std::string& base) {
  static std::vector<std::pair<std::string, std::unique_ptr<g::File>>> cache;
  for (const auto& c : cache) {
    if (c.first == base) return *c.second;
  }
  cache.emplace_back(
      base, std::make_unique<g::File>(g::File::open(kDir + "ggml-vocab-" + base + ".gguf")));
  return *cache.back().second;
}

g::KeyValue* find_kv(g::File& f, const std::string& key) {
  for (auto& kv : f.metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

void set_kv(g::File& f, const std::string& key, g::Value v) {
  if (g::KeyValue* kv = find_kv(f, key)) {
    kv->value = std::move(v);
  } else {
    f.metadata.push_back({key, std::move(v)});
  }
}

// A copy of the metadata of `base` with derive_vocab.py's options applied.
g::File derive(const std::string& base, const std::vector<std::string>& opts) {
  const g::File& src = vocab_file(base);
  g::File f;
  f.metadata = src.metadata;
  for (std::size_t i = 0; i < opts.size(); ++i) {
    const std::string& o = opts[i];
    if (o == "--no-pre") {
      for (auto it = f.metadata.begin(); it != f.metadata.end(); ++it) {
        if (it->key == "tokenizer.ggml.pre") {
          f.metadata.erase(it);
          break;
        }
      }
      continue;
    }
    EXPECT_LT(i + 1, opts.size()) << o;
    const std::string arg = opts[++i];
    if (o == "--pre") {
      set_kv(f, "tokenizer.ggml.pre", g::Value::string(arg));
    } else if (o == "--name") {
      set_kv(f, "general.name", g::Value::string(arg));
    } else if (o == "--bool") {
      const std::size_t eq = arg.find('=');
      set_kv(f, arg.substr(0, eq), g::Value::boolean(arg.substr(eq + 1) != "0"));
    } else if (o == "--token-type") {
      const std::size_t eq = arg.find('=');
      const std::size_t id = std::stoul(arg.substr(0, eq));
      const std::int32_t t = std::stoi(arg.substr(eq + 1));
      g::KeyValue* kv = find_kv(f, "tokenizer.ggml.token_type");
      EXPECT_NE(kv, nullptr);
      std::memcpy(kv->value.raw.data() + 4 * id, &t, 4);
    } else {
      ADD_FAILURE() << "unknown variant option " << o;
    }
  }
  return f;
}

struct Variant {
  std::string name, base;
  bool add_special = false;
  std::vector<std::string> opts;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const std::string& l : lines(read_file(kDir + "variants.txt"))) {
    if (l.empty() || l[0] == '#') continue;
    std::istringstream in(l);
    Variant v;
    std::string add;
    in >> v.name >> v.base >> add;
    v.add_special = add == "1";
    for (std::string o; in >> o;) v.opts.push_back(o);
    out.push_back(v);
  }
  return out;
}

// llama.cpp's own vocabulary suite: texts separated by "\n__ggml_vocab_test__\n", one line of
// expected ids per text, tokenized with add_special = false (tests/test-tokenizer-0.cpp).
void run_llama_suite(const std::string& name) {
  const Tokenizer tok = Tokenizer::from_gguf(vocab_file(name));
  const std::string raw = read_file(kDir + "ggml-vocab-" + name + ".inp");
  const std::vector<std::string> expected = lines(read_file(kDir + "ggml-vocab-" + name + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (std::size_t pos = 0; pos < raw.size();) {
    const std::size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  ASSERT_EQ(texts.size(), expected.size());
  ASSERT_GE(texts.size(), 40u);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok.tokenize(texts[i], false), parse_ids(trim(expected[i])))
        << name << " text " << i << ": \"" << texts[i] << "\"";
  }
}

}  // namespace

TEST(Tokenizer, LlamaCppSuiteGpt2) {
  run_llama_suite("gpt-2");
}

TEST(Tokenizer, LlamaCppSuitePhi3) {
  run_llama_suite("phi-3");
}

TEST(Tokenizer, LlamaCppSuiteBertBge) {
  run_llama_suite("bert-bge");
}

// Every variant of variants.txt on the random texts, against llama_tokenize()'s ids ("ERR": it
// threw, for a 4-byte UTF-8 form above U+10FFFF in a BPE text; nibble throws nibble::Error).
TEST(Tokenizer, RandomTextsAllVariants) {
  const std::vector<std::string> texts = random_texts();
  ASSERT_EQ(texts.size(), 200u);
  const std::vector<Variant> vs = variants();
  ASSERT_GE(vs.size(), 19u);
  for (const Variant& v : vs) {
    SCOPED_TRACE(v.name);
    const g::File f = derive(v.base, v.opts);
    const Tokenizer tok = Tokenizer::from_gguf(f);
    const std::vector<std::string> expected = lines(read_file(kDir + v.name + ".ids"));
    ASSERT_EQ(expected.size(), texts.size());
    int errors = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (expected[i] == "ERR") {
        ++errors;
        EXPECT_THROW(tok.tokenize(texts[i], v.add_special), nibble::Error) << "text " << i;
        continue;
      }
      EXPECT_EQ(tok.tokenize(texts[i], v.add_special), parse_ids(expected[i])) << "text " << i;
    }
    EXPECT_LT(errors, 20);
  }
}

TEST(Tokenizer, VocabularyFacts) {
  const Tokenizer gpt2 = Tokenizer::from_gguf(vocab_file("gpt-2"));
  EXPECT_EQ(gpt2.model(), "gpt2");
  EXPECT_EQ(gpt2.pre(), "gpt-2");
  EXPECT_EQ(gpt2.n_tokens(), 50257);
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_EQ(gpt2.bos(), 50256);  // tokenizer.ggml.bos_token_id
  EXPECT_EQ(gpt2.find_token("<|endoftext|>"), 50256);
  EXPECT_EQ(gpt2.find_token("no such token"), -1);
  // llama.cpp marks "<|endoftext|>" as a control (end-of-generation) token.
  EXPECT_TRUE(gpt2.token_attr(50256) & nibble::llm::kAttrControl);

  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  EXPECT_EQ(phi3.model(), "llama");
  EXPECT_TRUE(phi3.add_bos());
  EXPECT_FALSE(phi3.add_eos());
  EXPECT_EQ(phi3.bos(), 1);
  EXPECT_EQ(phi3.eos(), 32000);
  // general.name "Phi3": llama.cpp strips white space after its special tokens.
  EXPECT_TRUE(phi3.token_attr(phi3.find_token("<|assistant|>")) & nibble::llm::kAttrRstrip);
  EXPECT_FALSE(phi3.token_attr(phi3.find_token("<s>")) & nibble::llm::kAttrRstrip);
}

// The pieces as llama-tokenize prints them (its output for these ids, llama.cpp bf87261).
TEST(Tokenizer, PiecesAsLlamaTokenize) {
  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  EXPECT_EQ(phi3.token_to_piece(1), "<s>");
  EXPECT_EQ(phi3.token_to_piece(1, false), "");  // control tokens need special
  EXPECT_EQ(phi3.token_to_piece(15043), " Hello");
  EXPECT_EQ(phi3.token_to_piece(29871), " ");
  EXPECT_EQ(phi3.token_to_piece(13), "\n");  // byte token <0x0A>
  const Tokenizer bert = Tokenizer::from_gguf(vocab_file("bert-bge"));
  EXPECT_EQ(bert.token_to_piece(101), "[CLS]");
  EXPECT_EQ(bert.token_to_piece(7592), " hello");
  const Tokenizer gpt2 = Tokenizer::from_gguf(vocab_file("gpt-2"));
  EXPECT_EQ(gpt2.token_to_piece(1902), " Gr");
  EXPECT_EQ(gpt2.token_to_piece(9116), "\xc3\xbc");        // ü
  EXPECT_EQ(gpt2.token_to_piece(41492), " na\xc3\xafve");  // naïve
  EXPECT_EQ(gpt2.token_to_piece(12520), " \xf0\x9f");      // half of 🦙
  EXPECT_THROW(gpt2.token_to_piece(-1), nibble::Error);
  EXPECT_THROW(gpt2.token_to_piece(50257), nibble::Error);
}

// Byte-level BPE loses nothing: the pieces of a valid UTF-8 text give the text back; SPM gives
// it back after its leading space.
TEST(Tokenizer, RoundTrip) {
  const Tokenizer gpt2 = Tokenizer::from_gguf(vocab_file("gpt-2"));
  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  const std::string inp = read_file(kDir + "ggml-vocab-gpt-2.inp");
  for (const std::string& text : {inp, std::string("  x\t\ty\r\n\n z  "), std::string("")}) {
    std::string back;
    for (const std::int32_t id : gpt2.tokenize(text, true)) back += gpt2.token_to_piece(id, false);
    EXPECT_EQ(back, text);
    back.clear();
    for (const std::int32_t id : phi3.tokenize(text, false)) back += phi3.token_to_piece(id, false);
    EXPECT_EQ(back, text.empty() ? text : " " + text);  // no text, no prefix
  }
}

TEST(Tokenizer, BosEos) {
  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  EXPECT_EQ(phi3.tokenize("", true), std::vector<std::int32_t>{1});
  EXPECT_TRUE(phi3.tokenize("", false).empty());
  g::File f = derive("phi-3", {"--bool", "tokenizer.ggml.add_eos_token=1"});
  const Tokenizer eos = Tokenizer::from_gguf(f);
  EXPECT_EQ(eos.tokenize("", true), (std::vector<std::int32_t>{1, 32000}));
  // A BOS id outside the vocabulary keeps the default (1 for SPM); a BPE vocabulary with no
  // valid BOS that must add one is an error at tokenization.
  set_kv(f, "tokenizer.ggml.bos_token_id", g::Value::u32(999999));
  EXPECT_EQ(Tokenizer::from_gguf(f).bos(), 1);
  g::File b = derive("gpt-2", {"--pre", "chatglm-bpe", "--bool", "tokenizer.ggml.add_bos_token=1"});
  for (auto it = b.metadata.begin(); it != b.metadata.end(); ++it) {
    if (it->key == "tokenizer.ggml.bos_token_id") {
      b.metadata.erase(it);
      break;
    }
  }
  const Tokenizer glm = Tokenizer::from_gguf(b);
  EXPECT_EQ(glm.bos(), -1);
  EXPECT_THROW(glm.tokenize("x", true), nibble::Error);
  EXPECT_NO_THROW(glm.tokenize("x", false));
}

// parse_special: control tokens are recognised in the text only when asked (llama.cpp's ids).
TEST(Tokenizer, ParseSpecial) {
  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  // llama-tokenize --no-bos --no-escape -p "<s>Hi<|end|>  there", with and without
  // --no-parse-special (phi-3 strips the spaces after a special token: "there" gets the SPM
  // space prefix instead).
  const std::string text = "<s>Hi<|end|>  there";
  EXPECT_EQ(phi3.tokenize(text, false, true), (std::vector<std::int32_t>{1, 6324, 32007, 727}));
  EXPECT_EQ(phi3.tokenize(text, false, false),
            (std::vector<std::int32_t>{529, 29879, 29958, 18567, 29966, 29989, 355, 29989, 29958,
                                       29871, 727}));
}

TEST(Tokenizer, Errors) {
  const g::File& base = vocab_file("gpt-2");
  auto expect_error = [](const g::File& f, const std::string& what) {
    try {
      Tokenizer::from_gguf(f);
      ADD_FAILURE() << "no error; expected one naming " << what;
    } catch (const nibble::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto without = [&](const std::string& key) {
    g::File f;
    f.metadata = base.metadata;
    for (auto it = f.metadata.begin(); it != f.metadata.end(); ++it) {
      if (it->key == key) {
        f.metadata.erase(it);
        break;
      }
    }
    return f;
  };
  expect_error(without("tokenizer.ggml.model"), "tokenizer.ggml.model");
  expect_error(without("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens");
  expect_error(without("tokenizer.ggml.merges"), "tokenizer.ggml.merges");
  g::File f = without("");
  set_kv(f, "tokenizer.ggml.pre", g::Value::string("no-such-pre"));
  expect_error(f, "\"no-such-pre\"");
  set_kv(f, "tokenizer.ggml.pre", g::Value::string("tekken"));
  expect_error(f, "\"tekken\" is not supported");
  set_kv(f, "tokenizer.ggml.pre", g::Value::string("gpt-2"));
  set_kv(f, "tokenizer.ggml.model", g::Value::string("t5"));
  expect_error(f, "\"t5\" is not supported");
  set_kv(f, "tokenizer.ggml.model", g::Value::string("wordpiece2"));
  expect_error(f, "unknown tokenizer model");
  set_kv(f, "tokenizer.ggml.model", g::Value::u32(3));
  expect_error(f, "expected a string");
  set_kv(f, "tokenizer.ggml.model", g::Value::string("gpt2"));
  set_kv(f, "tokenizer.ggml.scores", g::Value::string_array({"1"}));
  expect_error(f, "tokenizer.ggml.scores must be an array of f32");
  const float s[2] = {0, 0};
  set_kv(f, "tokenizer.ggml.scores", g::Value::scalar_array(g::ValueType::f32, s, 2));
  expect_error(f, "has 2 entries for 50257 tokens");
  f = without("");
  set_kv(f, "tokenizer.ggml.tokens", g::Value::string_array({"a", "b", "a"}));
  set_kv(f, "tokenizer.ggml.token_type", g::Value::scalar_array(g::ValueType::i32, s, 2));
  expect_error(f, "tokenizer.ggml.token_type has 2 entries for 3 tokens");
  const std::int32_t t3[3] = {1, 1, 1};
  set_kv(f, "tokenizer.ggml.token_type", g::Value::scalar_array(g::ValueType::i32, t3, 3));
  expect_error(f, "tokens 0 and 2 have the same text \"a\"");
  set_kv(f, "tokenizer.ggml.tokens", g::Value::string_array({}));
  expect_error(f, "tokenizer.ggml.tokens is empty");
  set_kv(f, "tokenizer.ggml.model", g::Value::string("none"));
  expect_error(f, "no vocabulary");
  EXPECT_THROW(Tokenizer().tokenize("x", true), nibble::Error);
  EXPECT_THROW(Tokenizer().n_tokens(), nibble::Error);
  EXPECT_THROW(Tokenizer::load(kDir + "no-such-file.gguf"), nibble::Error);
}

// Arbitrary bytes never crash: ids inside the vocabulary, or nibble::Error.
TEST(Tokenizer, ArbitraryBytes) {
  const Tokenizer tok[2] = {Tokenizer::from_gguf(vocab_file("gpt-2")),
                            Tokenizer::from_gguf(vocab_file("phi-3"))};
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 ? 0x80 + rng() % 128 : rng() % 256);
    for (const Tokenizer& t : tok) {
      try {
        for (const std::int32_t id : t.tokenize(s, true, i % 2 == 0)) {
          ASSERT_GE(id, 0);
          ASSERT_LT(id, t.n_tokens());
        }
      } catch (const nibble::Error&) {
      }
    }
  }
}

// One tokenizer used from several threads gives the same ids as one thread.
TEST(Tokenizer, ConcurrentUse) {
  const Tokenizer tok = Tokenizer::from_gguf(vocab_file("gpt-2"));
  const std::vector<std::string> texts = random_texts();
  std::vector<std::vector<std::int32_t>> ref(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    try {
      ref[i] = tok.tokenize(texts[i], false);
    } catch (const nibble::Error&) {
      ref[i] = {-1};
    }
  }
  std::vector<int> bad(4, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t) {
    th.emplace_back([&, t] {
      const Tokenizer copy = tok;  // copies share the vocabulary
      for (std::size_t i = 0; i < texts.size(); ++i) {
        std::vector<std::int32_t> ids;
        try {
          ids = copy.tokenize(texts[(i + 50 * t) % texts.size()], false);
        } catch (const nibble::Error&) {
          ids = {-1};
        }
        bad[t] += ids != ref[(i + 50 * t) % texts.size()];
      }
    });
  }
  for (auto& x : th) x.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0);
}

// A large text in one piece (prints the speed; llama.cpp-like quadratic behaviour would show).
TEST(Tokenizer, LargeText) {
  const Tokenizer gpt2 = Tokenizer::from_gguf(vocab_file("gpt-2"));
  const Tokenizer phi3 = Tokenizer::from_gguf(vocab_file("phi-3"));
  std::string text;
  const std::string inp = read_file(kDir + "ggml-vocab-gpt-2.inp");
  while (text.size() < (256u << 10)) text += inp;
  text += std::string(20000, ' ') + "x" + std::string(20000, '7');
  for (const Tokenizer* t : {&gpt2, &phi3}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::int32_t> ids = t->tokenize(text, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", t->model().c_str(),
                text.size(), ids.size(), s, text.size() / s / 1e6);
    EXPECT_GT(ids.size(), text.size() / 10);
  }
}

// The minimal SPM vocabulary of the tiny test models (tests/tiny_llama.hpp: <unk> <s> </s>, the
// 256 byte tokens <0x00>.. at ids 3.., no space prefix): every byte of a text becomes its byte
// token, spaces as the three bytes of U+2581 (llama-tokenize gives the same ids on this file).
// Also writes the file for the `nibble perplexity / imatrix MODEL TEXT` ctests to
// $NIBBLE_TOKENIZER_TINY_GGUF when that is set.
TEST(Tokenizer, TinyModelVocabulary) {
  const char* env = std::getenv("NIBBLE_TOKENIZER_TINY_GGUF");
  const std::string path =
      env && *env ? std::string(env) : ::testing::TempDir() + "nibble_tokenizer_tiny.gguf";
  nibble::test::TinyLlama p;
  p.n_vocab = 300;
  nibble::test::write_tiny_llama(path, p);
  const Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.n_tokens(), 300);
  const std::vector<std::int32_t> want = {1,        3 + 'H',  3 + 'i',  3 + 0xe2,
                                          3 + 0x96, 3 + 0x81, 3 + 0xc3, 3 + 0xa9};
  EXPECT_EQ(tok.tokenize("Hi \xc3\xa9", true), want);
}
