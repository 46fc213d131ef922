#!/usr/bin/env bash
# Builds the example firmware for a Cortex-M core, prints the sizes the
# ferry runtime takes in the image, and runs it on QEMU's MPS2/MPS3 board
# for that core when qemu-system-arm is installed: the inference and the
# model's golden self-test, on the emulated core. QEMU runs with
# -icount shift=0 (one guest instruction = 1 ns of virtual time), so the
# firmware's SysTick timing of ferry_step reads as an instruction count.
#
#   examples/firmware/build.sh [cortex-m3|cortex-m4|cortex-m7|cortex-m33|cortex-m55] [BUILD_DIR]
#
#   core        QEMU board    SYSCLK   code (vector table)        RAM
#   cortex-m3   mps2-an385    25 MHz   0x00000000 SSRAM1          0x20000000 SSRAM2/3
#   cortex-m4   mps2-an386    25 MHz   0x00000000 SSRAM1          0x20000000 SSRAM2/3
#   cortex-m7   mps2-an500    25 MHz   0x00000000 SSRAM1          0x20000000 SSRAM2/3
#   cortex-m33  mps2-an505    20 MHz   0x10000000 SSRAM-0, 4 MiB  0x38000000 SSRAM-1/2, 4 MiB
#   cortex-m55  mps3-an547    32 MHz   0x10000000 ITCM, 512 KiB   0x30000000 DTCM, 512 KiB
#
# The an505 and an547 (IoT Kit / SSE-300 subsystems) start the core in the
# secure state, so the image is linked at the secure aliases (address bit 28
# set) of their memories. Reset reads the vector table at INITSVTOR: in QEMU
# 7.2 0x10000000 on the an505 and 0x00000000 (the ITCM, which 0x10000000
# aliases) on the an547, so the table is there on both. The IoT Kit's own
# SRAM on the an505 (32 KiB at 0x30000000) is too small for the firmware's
# .bss. SYSCLK is the clock QEMU gives the core (hw/arm/mps2.c,
# hw/arm/mps2-tz.c), which SysTick counts.
#
# The model header is made by the host's ferry CLI: $FERRY_HOST_CLI, else
# build/converter/ferry (scripts/test.sh builds it), else a CLI built here.
# Packages: FERRY_DEPS=cross scripts/install-deps.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
core=${1:-cortex-m4}
link_defs=""
case "$core" in
  cortex-m3) machine=mps2-an385 sysclk_hz=25000000 ;;
  cortex-m4) machine=mps2-an386 sysclk_hz=25000000 ;;
  cortex-m7) machine=mps2-an500 sysclk_hz=25000000 ;;
  cortex-m33)
    machine=mps2-an505 sysclk_hz=20000000
    link_defs="FLASH_ORIGIN=0x10000000;FLASH_LENGTH=4M;RAM_ORIGIN=0x38000000;RAM_LENGTH=4M" ;;
  cortex-m55)
    machine=mps3-an547 sysclk_hz=32000000
    link_defs="FLASH_ORIGIN=0x10000000;FLASH_LENGTH=512K;RAM_ORIGIN=0x30000000;RAM_LENGTH=512K" ;;
  *) echo "usage: examples/firmware/build.sh [cortex-m3|cortex-m4|cortex-m7|cortex-m33|cortex-m55] [BUILD_DIR]" >&2
     exit 2 ;;
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

cmake -S "$here" -B "$build/$core" -G Ninja -DFERRY_CORTEX_M="$core" -DFERRY_HOST_CLI="$cli" \
  -DFIRMWARE_LINK_DEFS="$link_defs" -DFIRMWARE_SYSCLK_HZ="$sysclk_hz" -DFIRMWARE_QEMU_ICOUNT_SHIFT=0 >/dev/null
cmake --build "$build/$core" -j"$jobs"   # prints the sizes (also in sizes.txt)

if command -v qemu-system-arm >/dev/null; then
  echo "firmware: running on qemu-system-arm -M $machine -icount shift=0 (semihosting console)"
  timeout 120 qemu-system-arm -M "$machine" -icount shift=0 -nographic -monitor none -serial none \
    -semihosting-config enable=on,target=native -kernel "$build/$core/firmware.elf"
  echo "firmware: exit status 0 (self-test passed on the emulated $core)"
else
  echo "firmware: qemu-system-arm not installed; not run"
fi
