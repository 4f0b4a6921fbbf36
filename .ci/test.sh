#!/usr/bin/env bash
# The whole nibble test suite, as the README gives it and CI runs it:
#   native build (warnings as errors) + ctest (unit, golden, kernels on every ISA this CPU runs,
#   Python, install/consumer), the x86 binaries under qemu as Haswell (AVX2) and Nehalem (scalar),
#   an ASan+UBSan build + ctest, the aarch64 build under qemu (NEON with and without dotprod),
#   and bounded libFuzzer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)
bash .ci/deps.sh

passed=0
failed=0
stage() {  # stage NAME COMMAND...
  local name=$1
  shift
  echo
  echo "=== $name"
  local t0=$SECONDS
  # Each stage runs in its own bash with errexit: a failing command inside fails the stage
  # (errexit would be ignored inside a function called from an `if`).
  if bash -eo pipefail -c "$*"; then
    passed=$((passed + 1))
    echo "=== $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1))
    echo "=== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

native() {
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DNIBBLE_WERROR=ON -DNIBBLE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
  cmake --build build -j"$jobs"
  (cd build && ctest --output-on-failure --no-tests=error -j"$jobs")
}
# Kernel, dispatch, API, quantizer and golden tests on emulated CPUs (smaller random sweeps).
emu_tests="test_dispatch test_api test_kernels_basic test_kernels_kquant test_kernels_legacy test_w8a8 test_quantizers_simd"
emulated_x86() {
  TESTS="$emu_tests" NIBBLE_QZ_SUPERBLOCKS=256 bash tests/cross/run_x86_emulated.sh build
}
sanitizers() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNIBBLE_WERROR=ON \
    -DNIBBLE_SANITIZE=ON -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure --no-tests=error -j"$jobs")
}
neon() {
  TESTS="$emu_tests test_golden_q8_q4_q5 test_golden_q6k test_golden_legacy" NIBBLE_QZ_SUPERBLOCKS=256 \
    bash tests/cross/run_neon.sh build-aarch64
}
fuzz() { bash tests/fuzz/run.sh build-fuzz 20; }

export -f native emulated_x86 sanitizers neon fuzz
export jobs emu_tests

stage "native build + ctest" native
stage "x86 under qemu (Haswell, Nehalem)" emulated_x86
stage "ASan+UBSan build + ctest" sanitizers
stage "aarch64 NEON under qemu" neon
stage "libFuzzer (bounded)" fuzz

echo
echo "ci: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
