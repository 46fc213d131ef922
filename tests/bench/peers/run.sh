#!/usr/bin/env bash
# ferry beside ONNX Runtime, ExecuTorch and LiteRT, one command on a fresh
# machine (Debian with network access to PyPI):
#
#   tests/bench/peers/run.sh [--quick] [--only TEXT] [--rounds N]   # ~25 min; --quick ~10
#
# 1. the Debian packages and a Release build of ferry (build/, or $FERRY_BUILD);
# 2. a virtual environment in the build folder with the pinned runtimes
#    (requirements.txt; made once, remade when the file changes) and ferry's
#    Python module;
# 3. bench.py: every runtime's files (cached in build/peers/models), checked
#    against PyTorch, then timed interleaved, one thread; writes
#    build/peers/peers.json;
# 4. report.py: docs/performance.md's peer section and docs/peers.svg from
#    that JSON, and the JSON itself beside them (docs/peers.json), unless
#    --quick or --only (a partial run does not replace the committed figures).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${FERRY_BUILD:-$root/build}
cd "$root"

partial=0
for a in "$@"; do case $a in --quick|--only|--only=*) partial=1;; esac; done

# 1. ferry
if [ ! -x "$build/converter/ferry" ]; then
  scripts/install-deps.sh
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j"${JOBS:-2}" --target ferry >/dev/null

# 2. the environment
venv=$build/peers-venv
stamp=$venv/.requirements
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
  echo "peers: making $venv (torch, ExecuTorch, LiteRT, ONNX Runtime from PyPI: a few GB, several minutes)"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$stamp"
fi
# ferry's Python module, built from this tree (its own build folder: the
# venv's interpreter is not the test suite's).
ferry_py_stamp=$venv/.ferry-built-from
want="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo tree)"
if ! "$venv/bin/python" -c "import ferry" 2>/dev/null || [ "$(cat "$ferry_py_stamp" 2>/dev/null)" != "$want" ]; then
  echo "peers: building ferry's Python module into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
    --config-settings=build-dir="$build/peers-python-build" ./python
  echo "$want" > "$ferry_py_stamp"
fi

# 3. the run
mkdir -p "$build/peers"
"$venv/bin/python" "$here/bench.py" --ferry "$build/converter/ferry" --work "$build/peers" \
  --json "$build/peers/peers.json" "$@"

# 4. the report
if [ "$partial" = 0 ]; then
  cp "$build/peers/peers.json" docs/peers.json
  "$venv/bin/python" "$here/report.py" docs/peers.json --doc docs/performance.md --svg docs/peers.svg
else
  "$venv/bin/python" "$here/report.py" "$build/peers/peers.json"
fi
