#!/usr/bin/env bash
# Builds the example firmware for a Cortex-M4F (or M7), prints the sizes the
# ferry runtime takes in the image, and runs it on QEMU's MPS2 board for
# that core (mps2-an386 / mps2-an500) when qemu-system-arm is installed:
# the inference and the model's golden self-test, on the emulated core.
#
#   examples/firmware/build.sh [cortex-m4|cortex-m7] [BUILD_DIR]
#
# The model header is made by the host's ferry CLI: $FERRY_HOST_CLI, else
# build/converter/ferry (scripts/test.sh builds it), else a CLI built here.
# Packages: FERRY_DEPS=cross scripts/install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
core=${1:-cortex-m4}
case "$core" in
  cortex-m4) machine=mps2-an386 ;;
  cortex-m7) machine=mps2-an500 ;;
  *) echo "usage: examples/firmware/build.sh [cortex-m4|cortex-m7] [BUILD_DIR]" >&2; exit 2 ;;
esac
build=$(realpath -m "${2:-$root/build-firmware-$core}")
jobs=${FERRY_JOBS:-2}

cli=${FERRY_HOST_CLI:-}
if [ -z "$cli" ] && [ -x "$root/build/converter/ferry" ]; then cli=$root/build/converter/ferry; fi
if [ -z "$cli" ]; then
  echo "firmware: building the host ferry CLI in $build/host"
  cmake -S "$root" -B "$build/host" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_TESTS=OFF >/dev/null
  cmake --build "$build/host" -j"$jobs" --target ferry
  cli=$build/host/converter/ferry
fi

cmake -S "$here" -B "$build/$core" -G Ninja -DFERRY_CORTEX_M="$core" -DFERRY_HOST_CLI="$cli" >/dev/null
cmake --build "$build/$core" -j"$jobs"   # prints the sizes (also in sizes.txt)

if command -v qemu-system-arm >/dev/null; then
  echo "firmware: running on qemu-system-arm -M $machine (semihosting console)"
  timeout 120 qemu-system-arm -M "$machine" -nographic -monitor none -serial none \
    -semihosting-config enable=on,target=native -kernel "$build/$core/firmware.elf"
  echo "firmware: exit status 0 (self-test passed on the emulated $core)"
else
  echo "firmware: qemu-system-arm not installed; not run"
fi
