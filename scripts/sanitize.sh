#!/usr/bin/env bash
# The sanitizer check: builds optpipe and its unit tests with -fsanitize=address,undefined into
# build-asan/ (no runtime, Python module or benchmarks), runs the unit tests, the regression
# inputs and the fuzzer's short mode. Any sanitizer report fails it. CI runs it after the tests.
#   ./scripts/sanitize.sh            # after ./scripts/setup.sh --full
#   FUZZ_CASES=3000 ./scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DOPTPIPE_BUILD_RUNTIME=OFF -DOPTPIPE_BUILD_PYTHON=OFF \
  -DOPTPIPE_BUILD_BENCH=OFF >&2
cmake --build build-asan -j "$jobs" --target optpipe_cmd optpipe_tests >&2
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OPTPIPE_TIMING_CHECKS=0  # the sanitizers run several times slower
# The solver tests run on the clock (they take minutes under the sanitizers); the rest all run.
# CP-SAT is not fetched into build-asan/, so the optimizer runs there without it.
export OPTPIPE_NO_CPSAT=1
./build-asan/optpipe_tests --gtest_brief=1 \
  --gtest_filter='-Milp.*:Cp.*:CpSat.*:Optimize.ExactProvesOptimalityOnTinyProblems:Optimize.ExactKeepsTheBudgetedProof'
./tests/test_hardening.sh build-asan/optpipe
python3 tests/fuzz.py build-asan/optpipe --cases "${FUZZ_CASES:-200}" --out build-asan/fuzz_failures
