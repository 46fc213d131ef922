#!/usr/bin/env bash
# The tests, on a fresh machine: install the Debian packages, build
# everything (runtime, converter, CLI, tests) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
