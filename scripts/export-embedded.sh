#!/usr/bin/env bash
# The runtime as one folder of sources for any firmware build: Arduino,
# PlatformIO, ESP-IDF, Zephyr, CMake or plain Make (docs/embedding.md).
#
#   scripts/export-embedded.sh [--out DIR] [--max-chain N] [--max-cells N] [--url URL]
#
# Writes dist/ferry-embedded/ (or DIR): src/ (the runtime's sources, the
# generated FlatBuffers header and the FlatBuffers headers it includes), the
# manifests, examples/FerryStream (an Arduino sketch and its model), LICENSE,
# NOTICE. Needs python3, flatc and the FlatBuffers headers (scripts/
# install-deps.sh), and the host ferry CLI for the example's model
# ($FERRY_HOST_CLI, else build/converter/ferry, else one built here).
set -euo pipefail
exec python3 "$(cd "$(dirname "$0")" && pwd)/export_embedded.py" "$@"
