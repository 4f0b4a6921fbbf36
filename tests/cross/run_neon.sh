#!/usr/bin/env bash
# Builds nibble's kernel tests for aarch64 with the cross compiler and runs them under qemu:
#   -cpu max         (Advanced SIMD + dotprod: variants scalar, neon, neondot)
#   -cpu cortex-a53  (Advanced SIMD only:      variants scalar, neon)
# The tests' coverage guard (NIBBLE_EXPECT_ISAS) and Dispatch.ExpectedBestIsa
# (NIBBLE_EXPECT_BEST) assert which kernel variants ran and which ISA dispatch picked.
#
# usage: tests/cross/run_neon.sh BUILD_DIR
#   env: JOBS=2, TESTS="test_a test_b" (default: test_dispatch test_kernels_*), TESTS_A53 (the
#   tests run on cortex-a53, a subset of TESTS, default TESTS; -cpu max runs TESTS)
# Before the runs, check_isa_encodings.py checks that no object of the library but the neondot
# kernels holds a dot-product instruction (which a cortex-a53 lacks), in all of its code.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:?usage: $0 BUILD_DIR}"
JOBS="${JOBS:-2}"
mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" && pwd)"
TOOLCHAIN="$SRC/src/cmake/aarch64-toolchain.cmake"
SYSROOT=/usr/aarch64-linux-gnu
t0=$(date +%s)

# 1. GoogleTest for aarch64, from Debian's sources (once per build dir).
GTEST_CFG="$(find "$BUILD/gtest-install" -name GTestConfig.cmake 2>/dev/null | head -n1 || true)"
if [ -z "$GTEST_CFG" ]; then
  cmake -S /usr/src/googletest -B "$BUILD/gtest-build" -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$BUILD/gtest-install" \
    -DBUILD_GMOCK=OFF -DINSTALL_GTEST=ON > "$BUILD/gtest-configure.log"
  cmake --build "$BUILD/gtest-build" -j"$JOBS" > "$BUILD/gtest-build.log"
  cmake --install "$BUILD/gtest-build" > /dev/null
  GTEST_CFG="$(find "$BUILD/gtest-install" -name GTestConfig.cmake | head -n1)"
fi
echo "== googletest (aarch64): $(dirname "$GTEST_CFG") [$(($(date +%s) - t0)) s]"

# 2. nibble for aarch64 (xsimd's CMake package lives in the host's multiarch dir).
XSIMD_DIR="${XSIMD_DIR:-$(dirname "$(find /usr/lib /usr/share -name xsimdConfig.cmake 2>/dev/null | head -n1)")}"
cmake -S "$SRC" -B "$BUILD/nibble" -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DCMAKE_BUILD_TYPE=Release \
  -DGTest_DIR="$(dirname "$GTEST_CFG")" -Dxsimd_DIR="$XSIMD_DIR" -DNIBBLE_WERROR=ON \
  -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF -DNIBBLE_BUILD_PYTHON=OFF > "$BUILD/nibble-configure.log"

if [ -z "${TESTS:-}" ]; then
  TESTS="test_dispatch"
  for f in "$SRC"/tests/test_kernels_*.cpp; do TESTS="$TESTS $(basename "$f" .cpp)"; done
fi
TESTS_A53="${TESTS_A53:-$TESTS}"
# shellcheck disable=SC2086
cmake --build "$BUILD/nibble" --target $TESTS -j"$JOBS"
echo "== built $TESTS [$(($(date +%s) - t0)) s]"
enc="$BUILD/isa-encodings.txt"
if ! python3 "$SRC/tests/check_isa_encodings.py" aarch64-linux-gnu-objdump aarch64 \
    "$BUILD/nibble/libnibble.a" > "$enc"; then
  grep "^FAIL" "$enc"
  exit 1
fi
grep "neon" "$enc"
echo "== dot-product instructions only in the neondot kernels [$(($(date +%s) - t0)) s]"

# 3. Run under qemu with and without dotprod.
# Every (cpu, test) pair is one job, JOBS at a time (each job's output is printed when it ends).
# shellcheck source=jobs.sh
source "$SRC/tests/cross/jobs.sh"
one() {  # cpu expect_isas test
  local cpu="$1" expect="$2" t="$3" s
  s=$(date +%s)
  if NIBBLE_EXPECT_ISAS="$expect" NIBBLE_EXPECT_BEST=neon \
      qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" "$BUILD/nibble/tests/$t" --gtest_brief=1; then
    echo "== PASS $t (qemu -cpu $cpu, expect $expect) [$(($(date +%s) - s)) s]"
  else
    echo "== FAIL $t (qemu -cpu $cpu, expect $expect)"
    return 1
  fi
}
# NIBBLE_ISA=scalar must make dispatch pick scalar.
scalar_pick() {
  if NIBBLE_ISA=scalar NIBBLE_EXPECT_BEST=scalar NIBBLE_EXPECT_ISAS=neon,neondot \
      qemu-aarch64 -cpu max -L "$SYSROOT" "$BUILD/nibble/tests/test_dispatch" --gtest_brief=1; then
    echo "== PASS test_dispatch with NIBBLE_ISA=scalar"
  else
    echo "== FAIL test_dispatch with NIBBLE_ISA=scalar"
    return 1
  fi
}
for t in $TESTS; do bg_job "$t.max" one max neon,neondot "$t"; done
for t in $TESTS_A53; do bg_job "$t.a53" one cortex-a53 neon "$t"; done
bg_job scalar_pick scalar_pick
fail=0
bg_wait || fail=1
echo "== total $(($(date +%s) - t0)) s"
exit $fail
