#!/usr/bin/env bash
# The firmware targets and the embedded export, as CI runs them:
#   1. examples/firmware on every Cortex-M core this project builds for
#      (M3 without an FPU, M4F, M7, M33, M55), each on its QEMU board: the
#      self-test passes, the arena and handle equal the model header's macros;
#   2. scripts/export-embedded.sh, and its manifests checked against it
#      (tests/embedded/check_manifests.py);
#   3. the export compiled the way Arduino compiles a library (every source
#      under src/ with the core's flags and nothing else: no CMake, no -D, no
#      -ffp-contract) and linked into the same firmware for the Cortex-M4F and
#      the Cortex-M3: the outputs and the self-test error equal the CMake
#      build's bit for bit on the same QEMU board;
#   4. the export's own CMakeLists.txt (its plain-library branch) built on
#      this machine, and the export's Arduino sketch compiled against it and
#      a stand-in for the Arduino core (tests/embedded/arduino/), and run.
#
#   scripts/test-embedded.sh [BUILD_DIR]       (default build-embedded)
#
# Packages: FERRY_DEPS=cross scripts/install-deps.sh (gcc-arm-none-eabi,
# qemu-system-arm); the host ferry CLI ($FERRY_HOST_CLI or build/converter/ferry).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(realpath -m "${1:-$root/build-embedded}")
mkdir -p "$work"
fw=$root/examples/firmware
say() { echo "embedded: $*"; }

# 1. The CMake firmware on every core.
cores="cortex-m3 cortex-m4 cortex-m7 cortex-m33 cortex-m55"
for core in $cores; do
  say "firmware on $core"
  "$fw/build.sh" "$core" "$work/firmware-$core" > "$work/firmware-$core.log" 2>&1 || {
    cat "$work/firmware-$core.log"; say "FAILED: the firmware on $core"; exit 1; }
  grep -E "^(ferry runtime in the image|inference|step instructions|selftest max)" "$work/firmware-$core.log" | sed 's/^/  /'
done

# 2. The export and its manifests.
export_dir=$work/ferry-embedded
"$root/scripts/export-embedded.sh" --out "$export_dir"
python3 "$root/tests/embedded/check_manifests.py" "$export_dir"

# 3. The export as Arduino builds a library: no CMake, no flags of ours.
# (-Wall -Wextra -Werror beyond Arduino's flags: ESP-IDF builds components with
# -Werror=all, so the export must compile without a warning.)
arduino_flags_common="-Os -g -ffunction-sections -fdata-sections -fno-threadsafe-statics -fno-rtti -fno-exceptions
  -Wall -Wextra -Werror"
build_bare() {  # core, cpu flags, qemu machine[, defines a user adds]
  local core=$1 cpu=$2 machine=$3 defines=${4:-} out=$work/bare-$1
  rm -rf "$out"
  mkdir -p "$out/obj"
  local objs=()
  while IFS= read -r src; do
    local obj=$out/obj/$(echo "${src#"$export_dir"/src/}" | tr / _).o
    arm-none-eabi-g++ $cpu $arduino_flags_common $defines -I "$export_dir/src" -c "$src" -o "$obj"
    objs+=("$obj")
  done < <(find "$export_dir/src" -name '*.cpp' | sort)
  # The firmware example itself, with the export's model header and console.
  local app="-DFIRMWARE_SEMIHOSTING=1 -I $export_dir/src -I $export_dir/examples/FerryStream"
  arm-none-eabi-gcc $cpu -Os -ffunction-sections -fdata-sections $app -c "$fw/main.c" -o "$out/main.o"
  arm-none-eabi-gcc $cpu -Os $app -c "$fw/startup_cortex_m.c" -o "$out/startup.o"
  arm-none-eabi-g++ $cpu -Wl,--gc-sections -T "$fw/cortex_m.ld" -nostartfiles --specs=nano.specs --specs=nosys.specs \
    "$out/main.o" "$out/startup.o" "${objs[@]}" -lm -o "$out/firmware.elf"
  timeout 120 qemu-system-arm -M "$machine" -nographic -monitor none -serial none \
    -semihosting-config enable=on,target=native -kernel "$out/firmware.elf" > "$out/run.log" 2>&1 || {
    cat "$out/run.log"; say "FAILED: the export's firmware on $core"; exit 1; }
  for what in "output bits" "selftest bits" "inference"; do
    local want got
    want=$(grep -m1 "^$what" "$work/firmware-$core.log" | sed 's/, [0-9]* cycles//')
    got=$(grep -m1 "^$what" "$out/run.log" | sed 's/, [0-9]* cycles//')
    if [ -z "$want" ] || [ "$want" != "$got" ]; then
      say "FAILED: $core, the export built without flags differs from the CMake build"
      echo "  CMake:  $want"
      echo "  export: $got"
      exit 1
    fi
  done
  say "$core: the export built with no flags of ours${defines:+ (and $defines)} gives the CMake build's bits ($(grep -m1 '^output bits' "$out/run.log" | cut -c13-39)...)"
}
build_bare cortex-m4 "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16" mps2-an386
# The M3 without the per-layer profiler (FERRY_PROFILER 0, as a firmware that
# never profiles sets it in ferry_config.h): the same bits, less code.
build_bare cortex-m3 "-mcpu=cortex-m3 -mthumb -mfloat-abi=soft" mps2-an385 -DFERRY_PROFILER=0

# 4. The export as a plain CMake library, and the Arduino sketch on this
# machine against it and a stand-in core.
sketch=$work/sketch
rm -rf "$sketch"
mkdir -p "$sketch"
cmake -S "$export_dir" -B "$sketch/lib" -G Ninja -DCMAKE_BUILD_TYPE=MinSizeRel > "$sketch/lib.log" 2>&1 &&
  cmake --build "$sketch/lib" -j"${FERRY_JOBS:-2}" >> "$sketch/lib.log" 2>&1 || {
  cat "$sketch/lib.log"; say "FAILED: the export's CMakeLists.txt as a plain library"; exit 1; }
cp "$export_dir/examples/FerryStream/FerryStream.ino" "$sketch/FerryStream.cpp"
${CXX:-g++} -std=gnu++17 -O1 -I "$root/tests/embedded/arduino" -I "$export_dir/src" \
  -I "$export_dir/examples/FerryStream" -include Arduino.h "$sketch/FerryStream.cpp" \
  "$root/tests/embedded/arduino/arduino_main.cpp" "$sketch/lib/libferry_runtime.a" -lm -lpthread -o "$sketch/FerryStream"
FERRY_SKETCH_LOOPS=5 "$sketch/FerryStream" > "$sketch/run.log"
cat "$sketch/run.log" | sed 's/^/  /'
python3 - "$sketch/run.log" <<'EOF'
import math, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines and lines[0].startswith("ferry "), "the sketch's setup() printed no banner"
steps = [l for l in lines if l.startswith("step ")]
assert len(steps) == 5, "the sketch ran %d steps, not 5" % len(steps)
for l in steps:
    values = [float(v) for v in l.split(":", 1)[1].split()]
    assert len(values) == 8 and all(math.isfinite(v) for v in values), l
    assert any(v != 0 for v in values), l
assert steps[0].split(":", 1)[1] != steps[1].split(":", 1)[1], "the state does not carry between steps"
EOF
say "passed"
