#!/usr/bin/env bash
# The quantized reference sets on a Cortex-M4 give the host's bits: builds
# quant_reference_hash.cpp against the runtime for the host and for
# cortex-m4 (targets/arm-none-eabi.cmake), runs the firmware on QEMU's
# mps2-an386 (semihosting console) and compares the printed hashes.
#
#   tests/firmware/quant_reference_m4.sh [BUILD_DIR]    (default build-quant-m4)
#
# Needs gcc-arm-none-eabi and qemu-system-arm (FERRY_DEPS=cross).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$root/build-quant-m4}")
jobs=${FERRY_JOBS:-2}
fw=$root/examples/firmware

cmake -S "$root" -B "$build/host" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CONVERTER=OFF -DFERRY_TESTS=OFF \
  -DFERRY_XNNPACK=OFF >/dev/null
cmake --build "$build/host" -j"$jobs" --target ferry_runtime >/dev/null
cmake -S "$root" -B "$build/m4" -G Ninja -DCMAKE_BUILD_TYPE=MinSizeRel \
  -DCMAKE_TOOLCHAIN_FILE="$root/targets/arm-none-eabi.cmake" -DFERRY_CORTEX_M=cortex-m4 >/dev/null
cmake --build "$build/m4" -j"$jobs" --target ferry_runtime >/dev/null

inc=(-I "$root/runtime/src" -I "$root/runtime/include")
cat >"$build/host_main.cpp" <<'C'
#include <cstdio>
extern "C" void put(const char* s) { std::fputs(s, stdout); }
extern "C" int run_check();
int main() { return run_check(); }
C
cat >"$build/m4_main.c" <<'C'
#include <stdint.h>
static int semihost(int op, const void* arg) {
  register int r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt #0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
void put(const char* s) { semihost(0x04, s); }
int run_check(void);
int main(void) { return run_check(); }
void firmware_exit(int status) {
  semihost(0x18, (const void*)(uintptr_t)(status == 0 ? 0x20026u : 0x20024u));
  for (;;) __asm__ volatile("wfi");
}
C
g++ -O2 -std=c++17 -ffp-contract=off "${inc[@]}" "$here/quant_reference_hash.cpp" "$build/host_main.cpp" \
  "$build/host/runtime/libferry_runtime.a" -lm -o "$build/hash_host"
cpu=(-mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mthumb -mfloat-abi=hard -ffunction-sections -fdata-sections -Os)
arm-none-eabi-g++ "${cpu[@]}" -std=c++17 -fno-exceptions -fno-rtti -ffp-contract=off "${inc[@]}" \
  -c "$here/quant_reference_hash.cpp" -o "$build/hash.o"
arm-none-eabi-gcc "${cpu[@]}" -c "$build/m4_main.c" -o "$build/m4_main.o"
arm-none-eabi-gcc "${cpu[@]}" -c "$fw/startup_cortex_m.c" -o "$build/startup.o"
arm-none-eabi-g++ "${cpu[@]}" -T "$fw/cortex_m.ld" -nostartfiles --specs=nano.specs --specs=nosys.specs \
  -Wl,--gc-sections "$build/m4_main.o" "$build/startup.o" "$build/hash.o" "$build/m4/runtime/libferry_runtime.a" \
  -lm -o "$build/hash_m4.elf" 2>&1 | grep -v "is not implemented and will always fail" || true

"$build/hash_host" >"$build/host.txt"
timeout 120 qemu-system-arm -M mps2-an386 -nographic -monitor none -serial none \
  -semihosting-config enable=on,target=native -kernel "$build/hash_m4.elf" 2>"$build/m4.txt" >/dev/null  # SYS_WRITE0 goes to stderr
echo "host:      $(tr '\n' ' ' <"$build/host.txt")"
echo "cortex-m4: $(tr '\n' ' ' <"$build/m4.txt")"
if diff -q "$build/host.txt" "$build/m4.txt" >/dev/null; then
  echo "quant_reference_m4: the Cortex-M4 computes the host's bits"
else
  echo "quant_reference_m4: MISMATCH" >&2
  exit 1
fi
