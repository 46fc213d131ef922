#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer:
# the runtime, the converter, the ferry CLI the end-to-end tests drive and
# every test binary are built with -DFERRY_SANITIZE=ON; any sanitizer report
# (a memory error, a leak, undefined behaviour) fails the test it happens in.
#
#   scripts/test-sanitize.sh [BUILD_DIR]        (default: build-asan)
#
# The `package` test is left out: it builds an outside project against the
# installed static library, which would need the sanitizer runtime too.
# Environment: FERRY_JOBS (default 2), FERRY_CTEST_ARGS (extra ctest args).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-asan}
jobs=${FERRY_JOBS:-2}
scripts/install-deps.sh
# -O1 -g1 (line tables; -O1 is the level AddressSanitizer's documentation suggests):
# reports still name file:line, and the build takes about half the time of -O2 -g.
opt="-O1 -g1 -DNDEBUG"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" >/dev/null
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE package ${FERRY_CTEST_ARGS:-}
