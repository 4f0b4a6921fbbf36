// nibble CLI: `nibble tokenize` (the tokens of a text, printed like llama-tokenize).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "nibble/core/error.hpp"
#include "nibble/llm/tokenizer.hpp"

namespace {

using nibble::detail::fail;

void tokenize_usage(std::FILE* f) {
  std::fprintf(
      f,
      "usage: nibble tokenize MODEL.gguf (-p TEXT | -f FILE | --stdin) [--ids] [--no-bos]\n"
      "  Tokenizes a text with the model's vocabulary and prints the tokens as llama-tokenize\n"
      "  does: `ID -> 'piece'` lines, or with --ids one line [id, id, ...]. The text is taken\n"
      "  as it is and special tokens are not parsed from it (llama-tokenize --no-escape\n"
      "  --no-parse-special); BOS / EOS are added when the model asks for BOS.\n"
      "  -m, --model MODEL.gguf   the model (or vocab-only GGUF); may also come first\n"
      "  -p, --prompt TEXT        the text\n"
      "  -f, --file FILE          read the text from FILE (bytes as they are)\n"
      "  --stdin                  read the text from standard input\n"
      "  --ids                    print only the ids, as [1, 2, 3]\n"
      "  --no-bos                 never add BOS (nor EOS)\n"
      "  --escape                 process escapes in the text first (\\n \\r \\t \\' \\\" \\\\ "
      "\\xHH),\n"
      "                           as llama-tokenize does by default\n"
      "  --show-count             also print the number of tokens\n"
      "  --no-escape, --no-parse-special, --log-disable\n"
      "                           accepted for compatibility with llama-tokenize (no effect)\n");
}

std::string read_all(std::istream& in) {
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// llama-tokenize's escape processing: \n \r \t \' \" \\ and \xHH (two characters that strtol
// reads entirely as a base-16 number); any other backslash stays as it is.
std::string process_escapes(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out += '\n';
        continue;
      case 'r':
        out += '\r';
        continue;
      case 't':
        out += '\t';
        continue;
      case '\'':
        out += '\'';
        continue;
      case '"':
        out += '"';
        continue;
      case '\\':
        out += '\\';
        continue;
      case 'x':
        if (i + 2 < s.size()) {
          const char hex[3] = {s[i + 1], s[i + 2], 0};
          char* end = nullptr;
          const long v = std::strtol(hex, &end, 16);
          if (end == hex + 2) {
            out += static_cast<char>(v);
            i += 2;
            continue;
          }
        }
        break;
      default:
        break;
    }
    out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  std::string model_path, prompt, file;
  bool have_prompt = false, have_file = false, from_stdin = false;
  bool ids = false, no_bos = false, escape = false, show_count = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) fail("tokenize: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      tokenize_usage(stdout);
      return 0;
    } else if (a == "-m" || a == "--model") {
      if (!model_path.empty()) fail("tokenize: the model is given twice");
      model_path = next();
    } else if (a == "-p" || a == "--prompt") {
      if (have_prompt) fail("tokenize: -p / --prompt is given twice");
      prompt = next();
      have_prompt = true;
    } else if (a == "-f" || a == "--file") {
      if (have_file) fail("tokenize: -f / --file is given twice");
      file = next();
      have_file = true;
    } else if (a == "--stdin") {
      from_stdin = true;
    } else if (a == "--ids") {
      ids = true;
    } else if (a == "--no-bos") {
      no_bos = true;
    } else if (a == "--escape") {
      escape = true;
    } else if (a == "--show-count") {
      show_count = true;
    } else if (a == "--no-escape" || a == "--no-parse-special" || a == "--log-disable") {
      // llama-tokenize options whose effect is nibble's behaviour anyway (or irrelevant)
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "tokenize: unknown option %s\n\n", a.c_str());
      tokenize_usage(stderr);
      return 2;
    } else if (model_path.empty()) {
      model_path = a;
    } else {
      std::fprintf(stderr, "tokenize: unexpected argument %s\n\n", a.c_str());
      tokenize_usage(stderr);
      return 2;
    }
  }
  if (model_path.empty()) {
    tokenize_usage(stderr);
    return 2;
  }
  if (have_prompt + have_file + from_stdin != 1) {
    std::fprintf(stderr, "tokenize: give exactly one of -p TEXT, -f FILE, --stdin\n\n");
    tokenize_usage(stderr);
    return 2;
  }

  const nibble::llm::Tokenizer tok = nibble::llm::Tokenizer::load(model_path);
  std::string text;
  if (have_prompt) {
    text = prompt;
  } else if (have_file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("tokenize: cannot open \"", file, "\"");
    text = read_all(in);
    if (in.bad()) fail("tokenize: reading \"", file, "\" failed");
  } else {
    text = read_all(std::cin);
  }
  if (escape) text = process_escapes(text);

  // As llama-tokenize: BOS (and EOS) only when the model adds BOS and --no-bos is not given.
  const std::vector<std::int32_t> tokens = tok.tokenize(text, tok.add_bos() && !no_bos, false);
  if (ids) {
    std::printf("[");
    for (std::size_t i = 0; i < tokens.size(); ++i) std::printf(i ? ", %d" : "%d", tokens[i]);
    std::printf("]\n");
  } else {
    for (const std::int32_t t : tokens) {
      const std::string piece = tok.token_to_piece(t, true);
      // printf("%s") as llama-tokenize (a piece stops at a NUL byte)
      std::printf("%6d -> '%s'\n", t, piece.c_str());
    }
  }
  if (show_count) std::printf("Total number of tokens: %zu\n", tokens.size());
  return 0;
}
