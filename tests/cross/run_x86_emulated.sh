#!/usr/bin/env bash
# Runs nibble's x86 test binaries under qemu-x86_64 on CPUs without AVX-512:
#   -cpu Haswell  (AVX2 + FMA + F16C, no AVX-512: dispatch must pick avx2)
#   -cpu Nehalem  (no AVX at all: dispatch must pick scalar)
# with the coverage guard (NIBBLE_EXPECT_ISAS) and Dispatch.ExpectedBestIsa (NIBBLE_EXPECT_BEST)
# asserting which kernel variants ran. Any SIGILL fails the run.
#
# usage: tests/cross/run_x86_emulated.sh BUILD_DIR
#   BUILD_DIR: a native x86-64 build directory (configured and built here if needed).
#   env: JOBS=2 (tests run at a time), TESTS="test_a test_b" (default: test_dispatch test_api
#   test_kernels_*; list the longest first, they are started in that order), TESTS_HASWELL (the
#   tests run as Haswell, a subset of TESTS, default TESTS; Nehalem runs TESTS)
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
TESTS_HASWELL="${TESTS_HASWELL:-$TESTS}"
# shellcheck disable=SC2086
cmake --build "$BUILD" --target $TESTS -j"$JOBS"
echo "== built $TESTS [$(($(date +%s) - t0)) s]"

# Every (cpu, test) pair is one job, JOBS at a time (each job's output is printed when it ends).
# shellcheck source=jobs.sh
source "$SRC/tests/cross/jobs.sh"
one() {  # cpu expect_isas expect_best test
  local cpu="$1" expect="$2" best="$3" t="$4" s
  s=$(date +%s)
  if NIBBLE_EXPECT_ISAS="$expect" NIBBLE_EXPECT_BEST="$best" \
      qemu-x86_64 -cpu "$cpu" "$BUILD/tests/$t" --gtest_brief=1; then
    echo "== PASS $t (qemu -cpu $cpu, expect $expect) [$(($(date +%s) - s)) s]"
  else
    echo "== FAIL $t (qemu -cpu $cpu, expect $expect, exit $?)"
    return 1
  fi
}
for t in $TESTS_HASWELL; do bg_job "$t.Haswell" one Haswell avx2 avx2 "$t"; done
for t in $TESTS; do bg_job "$t.Nehalem" one Nehalem scalar scalar "$t"; done
fail=0
bg_wait || fail=1
echo "== total $(($(date +%s) - t0)) s"
exit $fail
