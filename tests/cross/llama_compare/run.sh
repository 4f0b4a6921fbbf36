#!/usr/bin/env bash
# Byte comparison of `nibble quantize` with llama.cpp's llama-quantize (not part of CI: it needs
# a llama.cpp checkout built outside this project).
#   usage: tests/cross/llama_compare/run.sh NIBBLE LLAMA_QUANTIZE LLAMA_CPP_DIR [WORKDIR]
# NIBBLE: the nibble CLI; LLAMA_QUANTIZE: llama.cpp's llama-quantize binary; LLAMA_CPP_DIR: the
# llama.cpp source tree (its gguf-py writes the inputs). Models (4 query heads, random weights):
#   m8_f32        8 layers, f32, no GQA             m8_f16_gqa    8 layers, f16, GQA 2
#   m8_f16_gqa4   8 layers, f16, GQA 4              m8_bf16_gqa   8 layers, bf16, GQA 2
#   m32_f16_gqa   32 layers, f16, GQA 2             m32_f16_gqa4  32 layers, f16, GQA 4
#   m8_fb_gqa4    8 layers, f32, GQA 4, n_embd 320 and n_ff 864: rows not a multiple of 256
#                 (fallback types Q4_0, IQ4_NL, Q5_0, Q5_1, Q8_0)
#   m4_f16_fb16   4 layers, f16, n_ff 840: ffn_down rows not a multiple of 32 (F16 fallback for
#                 the 256-value types; llama-quantize rejects the 32-value types)
# Every type, without and with both imatrix forms. A case is IDENTICAL when both tools write the
# same bytes, BOTH-REJECT when both refuse the input; anything else is DIFFER. Exits 1 if any
# case differs.
set -u
NB=$1 LQ=$2 LL=$3 WD=${4:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$LL/gguf-py${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-/usr/bin/python3}
cd "$WD" || exit 2
$PY "$here/make_model.py" m8_f32.gguf 8 4 f32 && $PY "$here/make_model.py" m8_f16_gqa.gguf 8 2 f16 &&
  $PY "$here/make_model.py" m8_f16_gqa4.gguf 8 1 f16 && $PY "$here/make_model.py" m8_bf16_gqa.gguf 8 2 bf16 &&
  $PY "$here/make_model.py" m32_f16_gqa.gguf 32 2 f16 && $PY "$here/make_model.py" m32_f16_gqa4.gguf 32 1 f16 &&
  $PY "$here/make_model.py" m8_fb_gqa4.gguf 8 1 f32 320 864 && $PY "$here/make_model.py" m4_f16_fb16.gguf 4 4 f16 256 840 &&
  $PY "$here/make_imatrix_dat.py" im8.dat 8 && $PY "$here/make_imatrix_gguf.py" im8.gguf 8 &&
  $PY "$here/make_imatrix_dat.py" im32.dat 32 && $PY "$here/make_imatrix_gguf.py" imfb.gguf 8 320 864 || exit 2
bad=0 n=0 nrej=0
check() {  # name, model, type, extra args...
  local name=$1 m=$2 t=$3 lr=0 nr=0
  shift 3
  "$LQ" "$@" "$m" "ll_$name.gguf" "$t" 2 >"ll_$name.log" 2>&1 || lr=1
  "$NB" quantize "$m" "nb_$name.gguf" "$t" "$@" --threads 2 >"nb_$name.log" 2>&1 || nr=1
  n=$((n + 1))
  if [ $lr = 1 ] && [ $nr = 1 ]; then
    nrej=$((nrej + 1)); echo "BOTH-REJECT $name: $(grep -m1 -o 'failed to quantize: .*' "ll_$name.log") | $(grep -m1 'quantize: ' "nb_$name.log")"
  elif [ $lr = 1 ] || [ $nr = 1 ]; then
    echo "DIFFER $name: only $([ $lr = 1 ] && echo llama-quantize || echo nibble) failed"; bad=1
  elif cmp -s "ll_$name.gguf" "nb_$name.gguf"; then
    echo "IDENTICAL $name"
  else
    echo "DIFFER $name: $(cmp "ll_$name.gguf" "nb_$name.gguf" | head -1)"; bad=1
  fi
  rm -f "ll_$name.gguf" "nb_$name.gguf"
}
ALL="Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS BF16"
for t in $ALL; do
  check "m8_f32_$t" m8_f32.gguf $t
  check "m8_f16_gqa_$t" m8_f16_gqa.gguf $t
  check "m8_f16_gqa4_$t" m8_f16_gqa4.gguf $t
  check "m8_bf16_gqa_$t" m8_bf16_gqa.gguf $t
  check "m8_f32_${t}_imdat" m8_f32.gguf $t --imatrix im8.dat
  check "m8_f16_gqa_${t}_imgguf" m8_f16_gqa.gguf $t --imatrix im8.gguf
  check "m8_f16_gqa4_${t}_imgguf" m8_f16_gqa4.gguf $t --imatrix im8.gguf
  check "m32_f16_gqa_$t" m32_f16_gqa.gguf $t
  check "m32_f16_gqa4_$t" m32_f16_gqa4.gguf $t
  check "m32_f16_gqa4_${t}_imdat" m32_f16_gqa4.gguf $t --imatrix im32.dat
  check "m8_fb_gqa4_$t" m8_fb_gqa4.gguf $t
  check "m8_fb_gqa4_${t}_imgguf" m8_fb_gqa4.gguf $t --imatrix imfb.gguf
  check "m4_f16_fb16_$t" m4_f16_fb16.gguf $t
done
echo "llama_compare: $n cases compared, $((n - nrej)) quantized, $nrej rejected by both," \
  "$([ $bad = 0 ] && echo all identical || echo SOME DIFFER)"
exit $bad
