#!/usr/bin/env bash
# Builds the libFuzzer targets of nibble with clang++-14 (the library with ASan, the targets with
# ASan + UBSan) and runs each for a bounded time, JOBS (default 2) targets at a time.
#   usage: tests/fuzz/run.sh BUILD_DIR SECONDS
# Targets: fuzz_gguf (GGUF reader + writer fixed point), fuzz_imatrix (imatrix reader),
# fuzz_tokenizer (the text tokenizer on arbitrary bytes, tests/data/tokenizer vocabularies),
# fuzz_dequant_<fmt> for the block decoders q8_0 q4_K q5_K q6_K q8_K nf4 fp4 q5_1 iq4_xs q3_K (the
# dispatched nibble::dequantize on every ISA of this CPU against the header-only reference
# decoder; fuzz_dequant.cpp also knows q4_0 q4_1 q5_0 q8_1 q2_K iq4_nl mxfp4 bf16, not run here to
# keep CI short).
# FUZZ_ISAS (optional): the kernel TUs to build (CMake's NIBBLE_ISAS, e.g. "avx2;avx512"; empty:
# all of them); CI builds scalar, AVX2 and AVX-512, whose decoders the two VNNI variants share.
# Exit status: 0 when no target found a crash, 1 otherwise (crash inputs stay in
# BUILD_DIR/artifacts). Not part of the default CMake build.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(mkdir -p "$1" && cd "$1" && pwd)"
SECONDS_PER_TARGET="$2"
CXX="${CXX_FUZZ:-clang++-14}"
JOBS="${JOBS:-2}"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# The library itself gets ASan without UBSan: clang-14 took over 10 minutes on the AVX-512 kernel
# translation unit with UBSan and coverage, 2 minutes without UBSan (UBSan over the library runs
# in the gcc ASan+UBSan stage of .ci/test.sh). The fuzz targets, with the reference decoders they
# compare against, keep both.
LIB_SAN="-fsanitize=address -fno-sanitize-recover=all -fno-omit-frame-pointer"

start=$(date +%s)
# 1. The library, instrumented for coverage and sanitizers (no tests, CLI, OpenMP or BLAS).
cmake -S "$ROOT" -B "$BUILD/lib" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $LIB_SAN" \
  -DNIBBLE_BUILD_TESTS=OFF -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF \
  -DNIBBLE_BUILD_PYTHON=OFF -DNIBBLE_OPENMP=OFF -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON \
  -DNIBBLE_ISAS="${FUZZ_ISAS:-}" >"$BUILD/cmake.log" 2>&1 || { tail -n 30 "$BUILD/cmake.log"; exit 1; }
cmake --build "$BUILD/lib" --target nibble -j"$JOBS" >"$BUILD/build.log" 2>&1 ||
  { grep -m 20 -A 3 "error" "$BUILD/build.log"; exit 1; }

# 2. The targets.
EIGEN_INC="$(pkg-config --cflags-only-I eigen3 2>/dev/null || echo -I/usr/include/eigen3)"
build_target() {  # name source [extra flags...]
  local name="$1" src="$2"
  shift 2
  "$CXX" -std=c++17 -g -O1 -ffp-contract=off -fsanitize=fuzzer $SAN "$@" \
    -I"$ROOT/include" -I"$BUILD/lib/kinc" $EIGEN_INC \
    "$ROOT/tests/fuzz/$src" "$BUILD/lib/libnibble.a" -o "$BUILD/$name"
}
# JOBS (default 2) at a time: bg_job / bg_wait.
BG_DIR="$BUILD/jobs"
# shellcheck source=../cross/jobs.sh
source "$ROOT/tests/cross/jobs.sh"
targets=(fuzz_gguf fuzz_imatrix fuzz_tokenizer)
for f in q8_0 q4_K q5_K q6_K q8_K nf4 fp4 q5_1 iq4_xs q3_K; do targets+=("fuzz_dequant_$f"); done
for t in "${targets[@]}"; do
  case "$t" in
    fuzz_tokenizer) extra=(-DNIBBLE_FUZZ_TOKENIZER_DATA="\"$ROOT/tests/data/tokenizer\"") ;;
    fuzz_dequant_*) extra=(-DNIBBLE_FUZZ_FORMAT="${t#fuzz_dequant_}") ;;
    *) extra=() ;;
  esac
  src="$t.cpp"
  case "$t" in fuzz_dequant_*) src=fuzz_dequant.cpp ;; esac
  bg_job "build_$t" build_target "$t" "$src" "${extra[@]}"
done
bg_wait || { echo "fuzz: building the targets FAILED"; exit 1; }
built=$(date +%s)
echo "fuzz: built ${#targets[@]} targets in $((built - start)) s"

# 3. Seed corpora: a small valid GGUF (every value type, two tensors) and a legacy imatrix.
mkdir -p "$BUILD/corpus" "$BUILD/artifacts"
python3 - "$BUILD/corpus" <<'PY'
import os, struct, sys
d = sys.argv[1]
def s(x): return struct.pack('<Q', len(x)) + x
def kv(k, t, v): return s(k) + struct.pack('<I', t) + v
meta = [kv(b'general.architecture', 8, s(b'llama')), kv(b'a.u8', 0, b'\x07'),
        kv(b'a.i16', 3, struct.pack('<h', -3)), kv(b'a.f32', 6, struct.pack('<f', 1.5)),
        kv(b'a.b', 7, b'\x01'), kv(b'a.u64', 10, struct.pack('<Q', 9)),
        kv(b'a.f64', 12, struct.pack('<d', 2.5)),
        kv(b'a.arr', 9, struct.pack('<IQ', 5, 2) + struct.pack('<ii', 1, -1)),
        kv(b'a.sarr', 9, struct.pack('<IQ', 8, 2) + s(b'x') + s(b'yz')),
        kv(b'a.nest', 9, struct.pack('<IQ', 9, 1) + struct.pack('<IQ', 4, 1) + struct.pack('<I', 3))]
ti = s(b'w') + struct.pack('<IqqIQ', 2, 32, 2, 8, 0) + s(b'f') + struct.pack('<IqIQ', 1, 8, 0, 96)
body = struct.pack('<IIQQ', 0x46554747, 3, 2, len(meta)) + b''.join(meta) + ti
body += b'\0' * (-len(body) % 32)
data = bytes(range(68)) + b'\0' * 28 + struct.pack('<8f', *range(8))
for name, v in (('gguf_v3', 3), ('gguf_v2', 2)):
    b = bytearray(body + data); b[4] = v
    open(os.path.join(d, name), 'wb').write(bytes(b))
im = struct.pack('<i', 1) + struct.pack('<i', 3) + b'a.w' + struct.pack('<ii', 2, 2) + struct.pack('<ff', 1, 2)
im += struct.pack('<ii', 5, 4) + b'wiki'
open(os.path.join(d, 'imatrix_legacy'), 'wb').write(im)
# tokenizer: a selector byte, then the text
texts = ["Hello world, it's 2024!\n  \tx", "Gr\u00fc\u00dfe \U0001f999 \u6771 \u0661 \u3000 a\u0301",
         "<s>Hi<|end|>  there 'll'RE 12345"]
for i, t in enumerate(texts):
    open(os.path.join(d, 'text%d' % i), 'wb').write(bytes([i * 37 % 256]) + t.encode() + (b'\xff\xc3' if i == 2 else b''))
PY

# 4. Run, JOBS targets at a time.
run_target() {  # name
  local t="$1" t0
  t0=$(date +%s)
  if "$BUILD/$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 "$BUILD/corpus_$t" \
      >"$BUILD/$t.log" 2>&1; then
    echo "fuzz: $t ok ($(( $(date +%s) - t0 )) s, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$BUILD/$t.log" | grep -o '[0-9]*$' || echo '?') runs)"
  else
    echo "fuzz: $t FAILED (see $BUILD/$t.log and $BUILD/artifacts)"
    tail -n 30 "$BUILD/$t.log"
    return 1
  fi
}
for t in "${targets[@]}"; do
  mkdir -p "$BUILD/corpus_$t"
  cp -n "$BUILD"/corpus/* "$BUILD/corpus_$t/" 2>/dev/null || true
  bg_job "run_$t" run_target "$t"
done
status=0
bg_wait || status=1
echo "fuzz: total $(( $(date +%s) - start )) s"
exit $status
