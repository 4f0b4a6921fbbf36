#!/usr/bin/env bash
# Cross-check of nibble's tokenizer against llama.cpp, outside CI (it needs a llama.cpp checkout
# with its libraries built and its vocabulary test files, models/ggml-vocab-*.gguf):
#   tests/cross/tokenizer/run.sh NIBBLE_BUILD_DIR LLAMA_CPP_DIR [COUNT] [WORK_DIR]
# 1. every vocabulary's llama.cpp test suite (.inp/.out, add_special = false as
#    tests/test-tokenizer-0.cpp calls it) through nibble;
# 2. COUNT random texts (gen_texts.py: vocabulary pieces, many scripts, white space, malformed
#    UTF-8) through llama_tokenize() and nibble side by side, with add_special 0 and 1, on every
#    vocabulary and on variants (derive_vocab.py) that give the gpt-2, mpt and llama-spm
#    vocabularies other pre-tokenizers and settings;
# 3. `nibble tokenize` against `llama-tokenize` (their printed output) on some of those texts.
# Prints one line per case and a total; exit status 1 if any id differs.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 NIBBLE_BUILD_DIR LLAMA_CPP_DIR [COUNT] [WORK_DIR]" >&2
  exit 2
fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
NB="$(cd "$1" && pwd)"
LL="$(cd "$2" && pwd)"
COUNT="${3:-2000}"
WORK="${4:-$NB/tokenizer-cross}"
mkdir -p "$WORK"
PY="${PYTHON:-python3}"
CXX="${CXX:-g++}"

"$CXX" -std=c++17 -O1 -I"$LL/include" -I"$LL/ggml/include" "$HERE/llama_tok.cpp" \
  -L"$LL/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LL/build/bin" -o "$WORK/llama_tok"
"$CXX" -std=c++17 -O2 -I"$ROOT/include" "$HERE/nibble_tok.cpp" "$NB/libnibble.a" -fopenmp \
  -o "$WORK/nibble_tok"

M="$LL/models"
fail=0
total=0
same=0

# 1. llama.cpp's own suites.
for inp in "$M"/ggml-vocab-*.gguf.inp; do
  v="${inp%.inp}"
  [ -f "$v" ] || continue
  name="$(basename "$v" .gguf)"
  "$PY" - "$inp" "$WORK/$name.suite.bin" <<'PY'
import struct, sys
raw = open(sys.argv[1], 'rb').read()
sep = b'\n__ggml_vocab_test__\n'
texts = raw.split(sep)
if texts and texts[-1] == b'':
    texts.pop()
with open(sys.argv[2], 'wb') as f:
    for t in texts:
        f.write(struct.pack('<I', len(t)) + t)
PY
  if ! "$WORK/nibble_tok" "$v" "$WORK/$name.suite.bin" 0 >"$WORK/$name.suite.nibble" 2>"$WORK/err"; then
    echo "suite  $name: nibble cannot load it: $(head -c 200 "$WORK/err")"
    continue
  fi
  n=$(wc -l <"$WORK/$name.suite.nibble")
  ok=$(paste -d'\t' <(sed 's/^ *//; s/ *$//' "$v.out" | head -n "$n") "$WORK/$name.suite.nibble" |
    awk -F'\t' '$1 == $2' | wc -l)
  echo "suite  $name: $ok/$n identical"
  total=$((total + n))
  same=$((same + ok))
  [ "$ok" -eq "$n" ] || fail=1
done

# 2. Random texts side by side.
compare() {  # compare NAME VOCAB SEED
  local name=$1 vocab=$2 seed=$3
  "$PY" "$HERE/gen_texts.py" "$vocab" "$COUNT" "$seed" "$WORK/$name.bin"
  local line="random $name:"
  for s in 0 1; do
    "$WORK/llama_tok" "$vocab" "$WORK/$name.bin" "$s" >"$WORK/$name.$s.llama"
    if ! "$WORK/nibble_tok" "$vocab" "$WORK/$name.bin" "$s" >"$WORK/$name.$s.nibble" 2>"$WORK/err"; then
      echo "$line nibble cannot load it: $(head -c 200 "$WORK/err")"
      return
    fi
    local n ok err
    n=$(wc -l <"$WORK/$name.$s.llama")
    ok=$(paste -d'\t' "$WORK/$name.$s.llama" "$WORK/$name.$s.nibble" | awk -F'\t' '$1 == $2' | wc -l)
    err=$(grep -c '^ERR$' "$WORK/$name.$s.llama" || true)
    line="$line add_special=$s $ok/$n identical ($err errors in both);"
    total=$((total + n))
    same=$((same + ok))
    [ "$ok" -eq "$n" ] || fail=1
  done
  echo "$line"
}

seed=1
for v in "$M"/ggml-vocab-*.gguf; do
  name="$(basename "$v" .gguf)"
  model=$("$PY" -c "
import sys; sys.path.insert(0, '$HERE')
from gen_texts import read_tokens
print(read_tokens('$v')[1])")
  case "$model" in llama | gpt2 | bert) ;; *) echo "random $name: skipped (tokenizer model $model)"; continue ;; esac
  compare "$name" "$v" $seed
  seed=$((seed + 1))
done

# Variants: other pre-tokenizers on the gpt-2 and mpt vocabularies, SPM settings.
variant() {  # variant NAME BASE ARGS...
  local name=$1 base=$2
  shift 2
  "$PY" "$HERE/derive_vocab.py" "$M/ggml-vocab-$base.gguf" "$WORK/$name.gguf" "$@"
  compare "$name" "$WORK/$name.gguf" $seed
  seed=$((seed + 1))
}
for pre in default llama-bpe qwen2 qwen35 deepseek-llm deepseek-coder falcon starcoder mpt \
  bloom viking dbrx chatglm-bpe gemma4 sarvam-moe; do
  variant "gpt-2.$pre" gpt-2 --pre "$pre"
done
variant gpt-2.no-pre gpt-2 --no-pre
variant gpt-2.user-defined gpt-2 --pre llama-bpe --token-type 1169=4 --token-type 50256=4 \
  --token-type 11=4 --token-type 220=4
for pre in llama-bpe qwen2 deepseek-llm falcon; do
  variant "mpt.$pre" mpt --pre "$pre"
done
variant llama-spm.no-prefix llama-spm --bool tokenizer.ggml.add_space_prefix=0
variant llama-spm.eos llama-spm --bool tokenizer.ggml.add_eos_token=1 \
  --bool tokenizer.ggml.add_bos_token=0
variant llama-spm.user-defined llama-spm --token-type 1=4 --token-type 11526=4 --token-type 1552=4 \
  --token-type 29871=4
variant phi-3.no-rstrip phi-3 --name other

# 3. The command lines: `nibble tokenize` and `llama-tokenize --no-escape --no-parse-special`
#    print the same bytes (CLI_COUNT texts per vocabulary, --ids and the piece listing, with
#    and without --no-bos; texts llama.cpp cannot tokenize are left out).
CLI_COUNT="${CLI_COUNT:-12}"
LT="$LL/build/bin/llama-tokenize"
if [ -x "$LT" ] && [ -x "$NB/nibble" ]; then
  for v in "$M"/ggml-vocab-*.gguf; do
    name="$(basename "$v" .gguf)"
    [ -f "$WORK/$name.0.llama" ] || continue
    "$PY" - "$WORK/$name.bin" "$WORK/$name.0.llama" "$WORK/cli" "$CLI_COUNT" <<'PY'
import os, struct, sys
raw, ids, out, count = open(sys.argv[1], 'rb').read(), open(sys.argv[2]).read().split('\n'), sys.argv[3], int(sys.argv[4])
os.makedirs(out, exist_ok=True)
for f in os.listdir(out):
    os.remove(os.path.join(out, f))
at, i, n = 0, 0, 0
while at + 4 <= len(raw) and n < count:
    k = struct.unpack('<I', raw[at:at + 4])[0]
    text = raw[at + 4:at + 4 + k]
    at += 4 + k
    if ids[i] != 'ERR' and b'\0' not in text:
        open(os.path.join(out, '%03d' % n), 'wb').write(text)
        n += 1
    i += 1
PY
    n=0
    ok=0
    for t in "$WORK"/cli/*; do
      for flags in "--ids" "--ids --no-bos" ""; do
        # shellcheck disable=SC2086
        a=$("$LT" -m "$v" -f "$t" --no-escape --no-parse-special --log-disable $flags 2>/dev/null | md5sum)
        # shellcheck disable=SC2086
        b=$("$NB/nibble" tokenize "$v" -f "$t" $flags 2>/dev/null | md5sum)
        n=$((n + 1))
        [ "$a" = "$b" ] && ok=$((ok + 1))
      done
    done
    echo "cli    $name: $ok/$n identical outputs"
    total=$((total + n))
    same=$((same + ok))
    [ "$ok" -eq "$n" ] || fail=1
  done
fi

echo "total: $same/$total identical"
exit $fail
