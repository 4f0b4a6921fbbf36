#!/usr/bin/env bash
# Regenerates the expected ids of tests/data/tokenizer (test_tokenizer.cpp) with llama.cpp:
#   tests/cross/tokenizer/make_expected.sh LLAMA_CPP_DIR
# random_texts.bin: 200 texts of gen_texts.py (seed 12345) on the committed gpt-2 vocabulary;
# NAME.ids for every line of variants.txt: llama_tokenize() on the derived vocabulary.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="$(cd "$HERE/../../data/tokenizer" && pwd)"
LL="$(cd "$1" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PY="${PYTHON:-python3}"
"${CXX:-g++}" -std=c++17 -O1 -I"$LL/include" -I"$LL/ggml/include" "$HERE/llama_tok.cpp" \
  -L"$LL/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LL/build/bin" -o "$WORK/llama_tok"
"$PY" "$HERE/gen_texts.py" "$DATA/ggml-vocab-gpt-2.gguf" 200 12345 "$DATA/random_texts.bin"
grep -v '^#' "$DATA/variants.txt" | while read -r name base add rest; do
  # shellcheck disable=SC2086
  "$PY" "$HERE/derive_vocab.py" "$DATA/ggml-vocab-$base.gguf" "$WORK/v.gguf" $rest
  "$WORK/llama_tok" "$WORK/v.gguf" "$DATA/random_texts.bin" "$add" >"$DATA/$name.ids"
  echo "$name: $(wc -l <"$DATA/$name.ids") texts, $(grep -c '^ERR$' "$DATA/$name.ids" || true) errors"
done
