#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and fuzzes each one for
# SECONDS, FERRY_FUZZ_JOBS at a time (one core each); prints per target the
# executions and the crashes found. Exit status 1 if any target crashed (its input is kept in
# BUILD/fuzz-artifacts/<target>/: fix the bug, then copy the input to
# tests/fuzz/regressions/<target>/, where ctest replays it from then on).
#
#   tests/fuzz/run.sh SECONDS [TARGET...]      (default: every target)
#
# Environment:
#   FERRY_FUZZ_BUILD   build folder (default: build-fuzz in the repository)
#   FERRY_FUZZ_NICE    nice level for the fuzzers (default 0; 10 on a shared box)
#   FERRY_FUZZ_JOBS    fuzzers at once (default FERRY_JOBS, else 2)
#   CC, CXX            compilers (default clang-14 / clang++-14, else clang / clang++)
#   FERRY_SKIP_DEPS=1  do not run scripts/install-deps.sh (group `fuzz`)
# The corpus of each target grows in BUILD/fuzz-corpus/<target>/ across runs;
# seeds (fixtures, the tests/bad catalogue, converted models, committed
# seeds) are refreshed in BUILD/fuzz-seeds/<target>/ on every run.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

[ $# -ge 1 ] && [[ "$1" =~ ^[0-9]+$ ]] || { echo "usage: tests/fuzz/run.sh SECONDS [TARGET...]" >&2; exit 2; }
seconds=$1
shift
all_targets=(zip pickle checkpoint legacy legacy_tar safetensors model_load model_run inputs npy dcp pt2 script_chain
  python_source)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all_targets[@]}"); fi
build=$(realpath -m "${FERRY_FUZZ_BUILD:-build-fuzz}")
nice_level=${FERRY_FUZZ_NICE:-0}
pick() { for c in "$@"; do command -v "$c" >/dev/null && { echo "$c"; return; }; done; echo "$1"; }
cc=${CC:-$(pick clang-14 clang)}
cxx=${CXX:-$(pick clang++-14 clang++)}
[ "${FERRY_SKIP_DEPS:-0}" = 1 ] || FERRY_DEPS="fuzz ${FERRY_DEPS:-}" scripts/install-deps.sh

# --- Build: every source instrumented for coverage (fuzzer-no-link) and
# sanitized (FERRY_SANITIZE); the targets link libFuzzer.
echo "fuzz: building in $build with $cxx"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DFERRY_SANITIZE=ON -DFERRY_FUZZ=ON >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target ferry_fuzz ferry -j "${FERRY_JOBS:-2}"

# --- Seeds.
seeds=$build/fuzz-seeds
rm -rf "$seeds"
mkdir -p "$seeds"
fixtures=$root/tests/fixtures/models
bad=$root/tests/bad
small() { find "$@" -maxdepth 1 -type f -size -64k 2>/dev/null; }  # libFuzzer's max_len cuts the rest
copy_seeds() {  # copy_seeds TARGET FILE...
  local dir=$seeds/$1
  shift
  mkdir -p "$dir"
  for f in "$@"; do cp "$f" "$dir/$(basename "$(dirname "$f")")_$(basename "$f")"; done
}
numpy_fixtures=("$root"/tests/fixtures/ops/numpy*.pt)  # numpy arrays and scalars as data
t215=("$root"/tests/fixtures/torch215/*.pt)  # every torch.save layout choice of torch 2.15
copy_seeds zip $(small "$fixtures"/*.pt "${numpy_fixtures[@]}" "${t215[@]}" "$bad"/checkpoints/*)
copy_seeds checkpoint $(small "$fixtures"/*.pt "${numpy_fixtures[@]}" "${t215[@]}" "$fixtures"/*.safetensors \
  "$bad"/checkpoints/*)
copy_seeds pickle $(small "$root"/tests/fuzz/seeds/pickle/*)
copy_seeds legacy "$fixtures"/lstm_legacy.pt "$root"/tests/fixtures/old_torch/module_v0[34].pt
copy_seeds legacy_tar "$root"/tests/fixtures/old_torch/module_v02_tar.pt "$bad"/checkpoints/*tar*.pt
copy_seeds safetensors "$root"/tests/fuzz/seeds/safetensors/*
copy_seeds inputs "$root"/tests/fuzz/seeds/inputs/*
copy_seeds npy "$fixtures"/*.npy
copy_seeds dcp "$root"/tests/fixtures/torch2_forms/dcp_*/.metadata "$root"/tests/fixtures/dcp_values/*/.metadata \
  "$root"/tests/fixtures/torch215/dcp_*/.metadata "$bad"/checkpoints/dcp_*/.metadata
copy_seeds pt2 "$root"/tests/fuzz/seeds/pt2/*
copy_seeds script_chain "$root"/tests/fuzz/seeds/script_chain/*
copy_seeds python_source "$root"/tests/fuzz/seeds/python_source/*
# Models: fixtures converted by this build's CLI (with self-test vectors),
# and the catalogue's model files.
mkdir -p "$seeds/models"
while read -r name graph; do
  "$build/converter/ferry" convert "$fixtures/$name.pt" "$seeds/models/$name.fb" --graph "$graph" >/dev/null
done <<'EOF'
lstm_1l_tm lstm > last > fc
lstm_proj_2l lstm > last > fc
gru_bi gru > last > fc
rnn_relu rnn(relu) > last > fc
mlp fc1 > relu > fc2 > softmax
lstm_seq_fc lstm > fc
gru_seq_tanh_fc_sigmoid gru > tanh > fc > sigmoid
EOF
# The format 1.2 ops (conv, batch norm, embedding, residual, pooling), from
# the op fixtures.
ops=$root/tests/fixtures/ops
while IFS='|' read -r name layout graph; do
  "$build/converter/ferry" convert "$ops/$name.pt" "$seeds/models/op_$name.fb" --layout "$layout" \
    --graph "$graph" >/dev/null
done <<'EOF'
conv_k3_valid|btf|conv
conv_reflect|btf|conv(padding=1,padding_mode=reflect)
conv_causal_lstm_seq|btf|conv(padding=causal) > lstm > fc
bn_after_conv|btf|conv1(padding=1) > bn1 > relu > conv2 > bn2
pool_mean_lengths|btf|gru > mean > fc
residual_inner_tm|tbf|proj > (lstm > fc) + input > tanh
char_lstm|btf|emb > lstm > fc > logsoftmax
EOF
# User metadata (text, a number, an array).
"$build/converter/ferry" convert "$fixtures/mlp.pt" "$seeds/models/mlp_metadata.fb" --graph "fc1 > relu > fc2" \
  --meta labels=text:yes,no --meta sample_rate=16000 --meta mean=0.5,-1,2 >/dev/null
copy_seeds model_load "$seeds"/models/*.fb "$bad"/models/*
copy_seeds model_run "$seeds"/models/*.fb "$bad"/models/*

dict_for() {
  case "$1" in
    zip) echo "$root/tests/fuzz/dict/zip.dict" ;;
    pickle | legacy | dcp) echo "$root/tests/fuzz/dict/pickle.dict" ;;
    legacy_tar) cat "$root"/tests/fuzz/dict/{tar,pickle}.dict >"$build/legacy_tar.dict"; echo "$build/legacy_tar.dict" ;;
    safetensors) echo "$root/tests/fuzz/dict/safetensors.dict" ;;
    checkpoint) cat "$root"/tests/fuzz/dict/{zip,pickle}.dict >"$build/checkpoint.dict"; echo "$build/checkpoint.dict" ;;
    model_load | model_run | inputs) echo "$root/tests/fuzz/dict/model.dict" ;;
    npy) echo "$root/tests/fuzz/dict/npy.dict" ;;
    pt2) echo "$root/tests/fuzz/dict/pt2.dict" ;;
    script_chain) echo "$root/tests/fuzz/dict/script.dict" ;;
    python_source) cat "$root"/tests/fuzz/dict/{script,python}.dict >"$build/python_source.dict"; echo "$build/python_source.dict" ;;
  esac
}
max_len_for() {
  case "$1" in
    zip | checkpoint | model_load | model_run | legacy_tar) echo 32768 ;;  # legacy_tar: 512-byte blocks
    pt2) echo 131072 ;;  # a graph JSON and its storages
    python_source) echo 16384 ;;  # a model file with its training script
    *) echo 8192 ;;
  esac
}

# --- Fuzz.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:handle_abort=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: fuzzes it, then writes its summary line, executions and
# whether it crashed to $build/fuzz-$t.result (read back below, in order).
fuzz_one() {
  local t=$1 bin=$build/tests/fuzz/fuzz_$1
  local corpus=$build/fuzz-corpus/$t artifacts=$build/fuzz-artifacts/$t log=$build/fuzz-$t.log
  mkdir -p "$corpus" "$artifacts" "$seeds/$t"
  local before after new files execs rc line crashed=0
  before=$(find "$artifacts" -type f | wc -l)
  set +e
  nice -n "$nice_level" "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
    -rss_limit_mb=2560 -max_len="$(max_len_for "$t")" -dict="$(dict_for "$t")" -use_value_profile=1 \
    -artifact_prefix="$artifacts/" "$corpus" "$seeds/$t" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs=${execs:-0}
  after=$(find "$artifacts" -type f | wc -l)
  new=$((after - before))
  files=$(find "$corpus" -type f | wc -l)
  line=$(printf '%-12s %4ss  %12s execs  %7s/s  corpus %6s  crashes %s' "$t" "$seconds" "$execs" \
    "$((execs / (seconds > 0 ? seconds : 1)))" "$files" "$new")
  if [ "$rc" -ne 0 ] || [ "$new" -gt 0 ]; then
    crashed=1
    line="$line  <-- exit $rc; see $log, inputs in $artifacts/"
  fi
  printf '%s\n%s\n%s\n' "$crashed" "$execs" "$line" >"$build/fuzz-$t.result"
}

# Each fuzzer is one process on one core: FERRY_FUZZ_JOBS of them at once
# (default FERRY_JOBS, else 2), each for the full SECONDS.
fuzz_jobs=${FERRY_FUZZ_JOBS:-${FERRY_JOBS:-2}}
for t in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$t" ] || { echo "fuzz: no target '$t' (have: ${all_targets[*]})" >&2; exit 2; }
  rm -f "$build/fuzz-$t.result"
done
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, $fuzz_jobs at a time"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$fuzz_jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  echo "fuzz: $t for ${seconds}s (log: $build/fuzz-$t.log)"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

summary=()
crashed=0
total_execs=0
for t in "${targets[@]}"; do
  result=$build/fuzz-$t.result
  if [ ! -f "$result" ]; then
    crashed=1
    summary+=("$(printf '%-12s no result: the run script failed, see %s' "$t" "$build/fuzz-$t.log")")
    continue
  fi
  { read -r c; read -r execs; read -r line; } <"$result"
  total_execs=$((total_execs + execs))
  if [ "$c" = 1 ]; then
    crashed=1
    echo "fuzz: $line"
    grep -m3 -E "ERROR: |runtime error|invariant broken|SUMMARY" "$build/fuzz-$t.log" | sed 's/^/      /' || true
  fi
  summary+=("$line")
done

echo
echo "fuzz summary (${seconds}s per target, ASan + UBSan):"
printf '  %s\n' "${summary[@]}"
echo "  total executions: $total_execs"
exit "$crashed"
