#!/usr/bin/env bash
# Proves that a change did not change behaviour: two ferry CLIs (the build
# before and the build after) convert every PyTorch fixture of
# tests/fixtures/models/manifest.json, and run each model on every CPU
# backend, whole-sequence and step by step, on 1 and 2 threads. The model
# files must be byte-identical and every output bit-identical (compared as
# the .npy files' bytes). Prints one line per difference and a summary;
# exits non-zero on any difference.
#
#   scripts/compare-builds.sh OLD_BUILD/converter/ferry NEW_BUILD/converter/ferry
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
models=$root/tests/fixtures/models
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

files=0 runs=0 diffs=0 skipped=0
differ() { echo "DIFFERS: $*"; diffs=$((diffs + 1)); }

while IFS='|' read -r name pt input graph flags lengths; do
  for side in old new; do
    cli=${!side}
    mkdir -p "$work/$side"
    # shellcheck disable=SC2086
    "$cli" convert "$models/$pt" "$work/$side/$name.fb" --graph "$graph" $flags >/dev/null 2>"$work/$side/$name.err" ||
      echo "convert failed ($side): $name: $(cat "$work/$side/$name.err")"
  done
  files=$((files + 1))
  cmp -s "$work/old/$name.fb" "$work/new/$name.fb" || differ "$name.fb"
  for backend in reference simd xnnpack auto; do
    for mode in whole stream threads2; do
      extra=""
      case $mode in
        stream) [ -z "$lengths" ] || continue; extra="--stream" ;;
        threads2) extra="--threads 2" ;;
      esac
      [ -z "$lengths" ] || [ "$mode" = stream ] || extra="$extra --lengths $lengths"
      status=()
      for side in old new; do
        cli=${!side}
        # shellcheck disable=SC2086
        "$cli" run "$work/$side/$name.fb" --input "$models/$input" --output "$work/$side/$name.$backend.$mode.npy" \
          --backend "$backend" --quiet $extra >/dev/null 2>"$work/$side/run.err"
        status+=("$?:$(sed "s#$work/$side#WORK#g" "$work/$side/run.err")")
      done
      if [ "${status[0]}" != "${status[1]}" ]; then
        differ "$name $backend $mode: exit/stderr '${status[0]}' vs '${status[1]}'"
        continue
      fi
      if [ "${status[0]%%:*}" != 0 ]; then
        skipped=$((skipped + 1))  # refused the same way by both (e.g. --stream on a bidirectional model)
        continue
      fi
      runs=$((runs + 1))
      cmp -s "$work/old/$name.$backend.$mode.npy" "$work/new/$name.$backend.$mode.npy" ||
        differ "$name $backend $mode: outputs differ"
    done
  done
done < <(python3 - "$models/manifest.json" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1])):
    records = e.get("form") in ("whole_module", "torchscript")
    graph = e["graph"]
    if e.get("nonlinearity") == "relu" and not records:
        graph = graph.replace("rnn", "rnn(relu)", 1)
    flags = "--batch-first" if e["batch_first"] and not records else ""
    lengths = ",".join(str(v) for v in e.get("lengths", []))
    print("|".join([e["name"], e["pt"], e["input"], graph, flags, lengths]))
PY
)

echo "compare-builds: $files model files, $runs runs compared, $skipped refused alike by both, $diffs differences"
[ "$diffs" -eq 0 ]
