#!/usr/bin/env bash
# Byte comparison of `nibble quantize` with llama.cpp's llama-quantize (not part of CI: it needs
# a llama.cpp checkout built outside this project).
#   usage: tests/cross/llama_compare/run.sh NIBBLE LLAMA_QUANTIZE LLAMA_CPP_DIR [WORKDIR]
# NIBBLE: the nibble CLI; LLAMA_QUANTIZE: llama.cpp's llama-quantize binary; LLAMA_CPP_DIR: the
# llama.cpp source tree (its gguf-py writes the inputs). Models: 8 layers f32 (no GQA), 8 layers
# f16 with GQA, 32 layers f16 with GQA; every supported type, without and with both imatrix forms.
# Prints IDENTICAL/DIFFER per case and exits 1 if any case differs.
set -u
NB=$1 LQ=$2 LL=$3 WD=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$LL/gguf-py${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-/usr/bin/python3}
cd "$WD" || exit 2
$PY "$here/make_model.py" m8_f32.gguf 8 4 f32 && $PY "$here/make_model.py" m8_f16_gqa.gguf 8 2 f16 &&
  $PY "$here/make_model.py" m32_f16_gqa.gguf 32 2 f16 && $PY "$here/make_imatrix_dat.py" im8.dat 8 &&
  $PY "$here/make_imatrix_gguf.py" im8.gguf 8 || exit 2
bad=0 n=0
check() {  # name, model, type, extra args...
  local name=$1 m=$2 t=$3
  shift 3
  "$LQ" "$@" "$m" "ll_$name.gguf" "$t" 2 >"ll_$name.log" 2>&1 || { echo "llama-quantize failed: $name"; bad=1; return; }
  "$NB" quantize "$m" "nb_$name.gguf" "$t" "$@" --threads 2 >"nb_$name.log" 2>&1 || { echo "nibble failed: $name"; bad=1; return; }
  n=$((n + 1))
  if cmp -s "ll_$name.gguf" "nb_$name.gguf"; then echo "IDENTICAL $name"; else echo "DIFFER $name: $(cmp "ll_$name.gguf" "nb_$name.gguf" | head -1)"; bad=1; fi
}
for t in Q8_0 Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K; do
  check "m8_f32_$t" m8_f32.gguf $t
  check "m8_f16_gqa_$t" m8_f16_gqa.gguf $t
  check "m8_f32_${t}_imdat" m8_f32.gguf $t --imatrix im8.dat
  check "m8_f16_gqa_${t}_imgguf" m8_f16_gqa.gguf $t --imatrix im8.gguf
done
for t in Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K; do check "m32_f16_gqa_$t" m32_f16_gqa.gguf $t; done
echo "llama_compare: $n cases compared, $([ $bad = 0 ] && echo all identical || echo SOME DIFFER)"
exit $bad
