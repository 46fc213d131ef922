#!/usr/bin/env bash
# The main job, on a fresh machine: install the Debian packages, build the
# ferry CLI, convert the bundled GPU-saved LSTM checkpoint (storages tagged
# cuda:0) and run it on the CPU, comparing with PyTorch's own output.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target ferry

echo
echo "== ferry convert examples/lstm_gpu.pt model.fb"
build/converter/ferry convert examples/lstm_gpu.pt model.fb --graph "lstm > last > fc" --batch-first
echo
echo "== ferry run model.fb --input examples/input.npy --output output.npy"
build/converter/ferry run model.fb --input examples/input.npy --output output.npy \
  --expect examples/expected.npy
