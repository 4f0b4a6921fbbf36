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
# Kernel, dispatch, API, quantizer and golden tests on emulated CPUs (smaller random sweeps), two
# at a time, the longest first (under qemu as Haswell: 244, 141, 133, 62, 52, 43, 34, 27, 3 s;
# as Nehalem 2-26 s).
emu_tests="test_packed test_kernels_legacy test_kernels_basic test_w8a8 test_quantizers_simd test_api test_dispatch test_kernels_kquant test_capi"
# As Haswell only the tests of dispatch and the public API (every format's quantize, dequantize and
# GEMV through it), where the host runs AVX2 itself: the AVX2 kernel variants' results are then
# checked natively, by every kernel test of the native and ASan+UBSan stages, and the isa_encodings
# test reads all of the AVX2 / AVX-VNNI kernels for AVX-512 instructions; what emulation adds is a
# CPU that lacks AVX-512, for dispatch. qemu's AVX2 is slow: the kernel tests were 600 of the 750
# test-seconds of this stage. A host without AVX2 runs them all as Haswell.
emu_api_tests="test_api test_dispatch test_capi"
emulated_x86() {
  local haswell="$emu_tests"
  if grep -qw avx2 /proc/cpuinfo; then haswell="$emu_api_tests"; fi
  TESTS="$emu_tests" TESTS_HASWELL="$haswell" NIBBLE_QZ_SUPERBLOCKS=256 \
    bash tests/cross/run_x86_emulated.sh build
}
sanitizers() {
  # -O1 -g1: the sanitizers need line tables, not full debug info; the kernel TUs' templates at
  # -O2 -g made this the longest CI stage (about 25 min on 2 cores).
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DNIBBLE_WERROR=ON -DNIBBLE_SANITIZE=ON -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure --no-tests=error -j"$jobs" -E "$asan_skip")
}
# Left out of the sanitizer run only (the native stage runs them): three quality tests that
# repeat the AWQ / GPTQ code of shorter tests on larger layers for their error statistics. Eigen
# at -O1 under ASan made them 138, 94 and 65 s of the stage's 375 s on 2 cores (natively 2-11 s);
# AWQ with norm folding, GPTQ and the AWQ search still run under the sanitizers in
# LlamaQuantEndToEnd.*, SequentialCalibration.Gptq*, test_gptq and test_awq's other cases.
asan_skip='^(SequentialCalibration\.AwqFoldsItsScalesIntoTheNorms|GptqQuality\.BeatsRtnOnLlmLikeLayers|AwqQuality\.BeatsRtnOnLlmLikeLayer)$'

# cortex-a53 (no dotprod) runs the dispatch, API and golden tests; the neon kernel variants' results
# are checked by every test under -cpu max (which runs both neon and neondot variants), and
# run_neon.sh reads all of the library but the neondot kernels for dot-product instructions.
neon() {
  TESTS="$emu_tests test_golden_q8_q4_q5 test_golden_q6k test_golden_legacy" \
    TESTS_A53="$emu_api_tests test_golden_q8_q4_q5 test_golden_q6k test_golden_legacy" \
    NIBBLE_QZ_SUPERBLOCKS=256 bash tests/cross/run_neon.sh build-aarch64
}
# The fuzz, ThreadSanitizer and shared-library stages test decoders, parsers, threads and linkage,
# not the kernels' arithmetic (every kernel variant runs in the native and ASan+UBSan stages):
# the fuzz library is built with the scalar, AVX2 and AVX-512 (no VNNI) kernel TUs only, the
# ThreadSanitizer and shared libraries with scalar and AVX2 only (capi_isas below).
# The x86 kernel TUs are about three quarters of the library's compile time, and the AVX-512 VNNI
# one is the slowest (clang-14 with coverage: 156 s of the fuzz library's 411 CPU-s). The variants
# left out, AVX-VNNI and AVX-512 VNNI, share their decoders with AVX2 and AVX-512 and differ from
# them in the integer dot products, which none of these stages checks.
lean_isas=""
if [ "$(uname -m)" = x86_64 ]; then lean_isas="avx2;avx512"; fi
fuzz() { FUZZ_ISAS="$lean_isas" bash tests/fuzz/run.sh build-fuzz 10; }
# The C API stages check threads (the pool, concurrent callers) and linkage (exported symbols,
# SONAME, pkg-config), which are the same code for every kernel ISA: one SIMD variant (AVX2, which
# dispatch picks when it is the best built; its objects are in the symbol check) is enough. The
# AVX-512 TU was the longest compile of both stages (214 CPU-s at -O3 here, against 134 for AVX2).
capi_isas=""
if [ "$(uname -m)" = x86_64 ]; then capi_isas="avx2"; fi
# C API: only the library, the C API tests, the embedding example and (shared) the symbol and
# install/pkg-config tests -- not the whole suite.
capi_tests='^(CApi|capi_)'
capi_targets="nibble test_capi test_capi_stress nibble_embed"
# ThreadSanitizer on the C API tests and the concurrent stress test. OpenMP off (libgomp is not
# instrumented and gives false positives; only the GPTQ / AWQ loops use it): multi-threaded calls
# run on nibble's own pool (src/pool.cpp, std::thread), which TSan sees.
tsan() {
  local f="-fsanitize=thread -g1 -fno-omit-frame-pointer"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DNIBBLE_WERROR=ON -DNIBBLE_OPENMP=OFF \
    -DNIBBLE_BUILD_PYTHON=OFF -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF \
    -DNIBBLE_ISAS="$capi_isas" -DCMAKE_CXX_FLAGS="$f" -DCMAKE_C_FLAGS="$f" \
    -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread >/dev/null
  cmake --build build-tsan -j"$jobs" --target $capi_targets
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --output-on-failure --no-tests=error -R "$capi_tests" -j"$jobs")
}
shared_lib() {
  cmake -S . -B build-shared -DCMAKE_BUILD_TYPE=Release -DNIBBLE_WERROR=ON -DBUILD_SHARED_LIBS=ON \
    -DNIBBLE_BUILD_PYTHON=OFF -DNIBBLE_BUILD_BENCH=OFF -DNIBBLE_BUILD_CLI=OFF \
    -DNIBBLE_ISAS="$capi_isas" >/dev/null
  cmake --build build-shared -j"$jobs" --target $capi_targets
  (cd build-shared && ctest --output-on-failure --no-tests=error -R "$capi_tests|^install_consumer\$" \
    -j"$jobs")
}

export -f native emulated_x86 sanitizers neon fuzz tsan shared_lib
export jobs emu_tests emu_api_tests capi_tests capi_targets asan_skip lean_isas capi_isas
# Tests run two at a time on 2 cores and several use OpenMP: waiting threads sleep instead of
# spinning, so oversubscribed tests do not starve each other.
export OMP_WAIT_POLICY=PASSIVE

stage "native build + ctest" native
stage "x86 under qemu (Haswell, Nehalem)" emulated_x86
stage "ASan+UBSan build + ctest" sanitizers
stage "aarch64 NEON under qemu" neon
stage "libFuzzer (bounded)" fuzz
stage "ThreadSanitizer (C API + stress)" tsan
stage "shared library (C API, symbols, pkg-config)" shared_lib

echo
echo "ci: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
