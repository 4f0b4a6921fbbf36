#!/usr/bin/env bash
# Runs nibble's x86 test binaries under qemu-x86_64 on CPUs without AVX-512:
#   -cpu Haswell  (AVX2 + FMA + F16C, no AVX-512: dispatch must pick avx2)
#   -cpu Nehalem  (no AVX at all: dispatch must pick scalar)
# with the coverage guard (NIBBLE_EXPECT_ISAS) and Dispatch.ExpectedBestIsa (NIBBLE_EXPECT_BEST)
# asserting which kernel variants ran. Any SIGILL fails the run.
#
# usage: tests/cross/run_x86_emulated.sh BUILD_DIR
#   BUILD_DIR: a native x86-64 build directory (configured and built here if needed).
#   env: JOBS=2, TESTS="test_a test_b" (default: test_dispatch test_api test_kernels_*)
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:?usage: $0 BUILD_DIR}"
JOBS="${JOBS:-2}"
t0=$(date +%s)

if [ -z "${TESTS:-}" ]; then
  TESTS="test_dispatch"
  [ -f "$SRC/tests/test_api.cpp" ] && TESTS="$TESTS test_api"
  for f in "$SRC"/tests/test_kernels_*.cpp; do TESTS="$TESTS $(basename "$f" .cpp)"; done
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNIBBLE_WERROR=ON \
    -DNIBBLE_BUILD_BENCH=OFF > /dev/null
fi
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $TESTS -j"$JOBS"
echo "== built $TESTS [$(($(date +%s) - t0)) s]"

fail=0
run() {  # cpu expect_isas expect_best
  local cpu="$1" expect="$2" best="$3" t s
  for t in $TESTS; do
    s=$(date +%s)
    if NIBBLE_EXPECT_ISAS="$expect" NIBBLE_EXPECT_BEST="$best" \
        qemu-x86_64 -cpu "$cpu" "$BUILD/tests/$t" --gtest_brief=1; then
      echo "== PASS $t (qemu -cpu $cpu, expect $expect) [$(($(date +%s) - s)) s]"
    else
      echo "== FAIL $t (qemu -cpu $cpu, expect $expect, exit $?)"
      fail=1
    fi
  done
}
run Haswell avx2 avx2
run Nehalem scalar scalar
echo "== total $(($(date +%s) - t0)) s"
exit $fail
