#!/usr/bin/env bash
# The tests, on a fresh machine: install the Debian packages, build
# everything (runtime, converter, CLI, tests) and run the whole suite, then
# the Python package's (scripts/test-python.sh).
#
# The CUDA backend is built whenever nvcc is found (on PATH or in
# /usr/local/cuda/bin), so that it never rots; without a GPU its tests skip
# with the reason. FERRY_CUDA=ON|OFF in the environment overrides.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
nvcc_path=$(command -v nvcc || true)
if [ -z "$nvcc_path" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc_path=/usr/local/cuda/bin/nvcc; fi
cuda=${FERRY_CUDA:-$([ -n "$nvcc_path" ] && echo ON || echo OFF)}
cuda_args=(-DFERRY_CUDA="$cuda")
if [ "$cuda" = ON ] && [ -n "$nvcc_path" ]; then cuda_args+=(-DCMAKE_CUDA_COMPILER="$nvcc_path"); fi
echo "scripts/test.sh: FERRY_CUDA=$cuda${nvcc_path:+ ($nvcc_path)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2
# The Python package: built from the tree by pip, its pytest suite.
scripts/test-python.sh
