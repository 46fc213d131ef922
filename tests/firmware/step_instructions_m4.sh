#!/usr/bin/env bash
# Instructions per ferry_step on a Cortex-M4F, counted on QEMU (which is not
# cycle-accurate, so instructions are what can be compared between builds):
# builds the example firmware for a model (default: the peers' W1 LSTM H=16,
# else examples/lstm_gpu.pt), runs it on mps2-an386 with one instruction per
# translation block and the execution trace on, and counts the instructions
# from each entry into ferry_step to its return into main. Prints each
# call's count and the median of the calls after the first.
#
#   tests/firmware/step_instructions_m4.sh [BUILD_DIR] [MODEL.pt] [GRAPH] [FLAGS]
#
# Compare two commits by running this script from each one's checkout.
# Needs gcc-arm-none-eabi and qemu-system-arm (FERRY_DEPS=cross), python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$root/build-step-m4}")
model=${2:-/tmp/peers_data/W1_lstm_H16/state_dict.pt}
graph=${3:-root}  # a bare nn.LSTM state dict: its one module is the root
flags=${4:-}
if [ ! -f "$model" ]; then
  model=$root/examples/lstm_gpu.pt graph="lstm > last > fc" flags=--batch-first
fi
cli=${FERRY_HOST_CLI:-$root/build/converter/ferry}
[ -x "$cli" ] || { echo "step_instructions_m4: no host ferry CLI at $cli (set FERRY_HOST_CLI)" >&2; exit 2; }

cmake -S "$root/examples/firmware" -B "$build" -G Ninja -DFERRY_CORTEX_M=cortex-m4 -DFERRY_HOST_CLI="$cli" \
  -DFIRMWARE_MODEL="$model" -DFIRMWARE_GRAPH="$graph" -DFIRMWARE_CONVERT_FLAGS="$flags" \
  >/dev/null
cmake --build "$build" -j"${FERRY_JOBS:-2}" >"$build.log" 2>&1 || { cat "$build.log"; exit 1; }
elf=$build/firmware.elf
trace=$build/exec_trace.log
rm -f "$trace"
timeout 600 qemu-system-arm -M mps2-an386 -nographic -monitor none -serial none -singlestep \
  -d exec,nochain -D "$trace" -semihosting-config enable=on,target=native -kernel "$elf" >"$build/console.txt"
step=$(arm-none-eabi-nm "$elf" | awk '$3 == "ferry_step" { print $1 }')
[ -n "$step" ] || { echo "step_instructions_m4: no ferry_step symbol in $elf" >&2; exit 1; }
python3 - "$trace" "$step" "$elf" <<'PY'
import re, statistics, subprocess, sys
trace, step_hex, elf = sys.argv[1], int(sys.argv[2], 16), sys.argv[3]
step_pc = step_hex & ~1
# Return addresses: the instruction after each `bl ferry_step` in the image.
dis = subprocess.run(["arm-none-eabi-objdump", "-d", elf], capture_output=True, text=True).stdout
returns = set()
for line in dis.splitlines():
    m = re.match(r"\s*([0-9a-f]+):\s+([0-9a-f]{4}) ([0-9a-f]{4})\s+bl\s+[0-9a-f]+ <ferry_step>", line)
    if m:
        returns.add(int(m.group(1), 16) + 4)
pc_re = re.compile(r"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/")
counts, inside, n = [], False, 0
with open(trace) as f:
    for line in f:
        m = pc_re.match(line)
        if not m:
            continue
        pc = int(m.group(1), 16)
        if not inside:
            if pc == step_pc:
                inside, n = True, 1
        elif pc in returns:
            counts.append(n)
            inside = False
        else:
            n += 1
if not counts:
    sys.exit("step_instructions_m4: no ferry_step call found in the trace")
print("instructions per ferry_step call:", " ".join(str(c) for c in counts))
later = counts[1:] or counts
print(f"median of calls 2..{len(counts)}: {statistics.median(later):.0f} instructions")
PY
