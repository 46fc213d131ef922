#!/usr/bin/env bash
# The Python package's tests (called by scripts/test.sh, or alone): a virtual
# environment in the build folder made from Debian's python3 (its numpy,
# pytest and torch visible: ferry.check is tested against real torch
# modules), the package installed from the tree with pip (scikit-build-core
# builds the module against the project's CMake targets; its build folder is
# kept, so a rerun rebuilds only what changed), then pytest. Prints pytest's
# summary line; exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

FERRY_DEPS="python" scripts/install-deps.sh
venv=$root/build/python-venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
# The build tools, pinned (PyPI); installed once into the environment so
# that pip builds without fetching them again (--no-build-isolation).
"$venv/bin/python" -m pip install -q --disable-pip-version-check "nanobind==3.1.0" "scikit-build-core==1.1.2"
echo "scripts/test-python.sh: pip install ./python"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
  --config-settings=build-dir="$root/build/python-build" ./python
cd "$root/build"  # not the tree: the tests import the installed package
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests" 2>&1 | tail -n 15
exit "${PIPESTATUS[0]}"
