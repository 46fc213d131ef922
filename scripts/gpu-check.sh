#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go, on a build made with
# -DFERRY_CUDA=ON (README, "CUDA backend"):
#
#   scripts/gpu-check.sh [BUILD] [OUTDIR] [STEPS]
#
#   BUILD   the build folder (default build-cuda)
#   OUTDIR  where the logs go (default BUILD/gpu-check)
#   STEPS   comma list of: info,fixtures,cuda,suites,sanitize,bench
#           (default: all of them, in that order)
#
#   info      nvidia-smi, nvcc, torch versions
#   fixtures  tests/fixtures/make_gpu_fixtures.py (torch 2.x with CUDA) into
#             OUTDIR/torch2, then run_ferry_on_manifest.py converts and runs
#             each with BUILD's ferry and compares with PyTorch
#   cuda      the CUDA tests alone, verbosely (unit: *cuda*/*Cuda*, e2e: CudaCli.*)
#   suites    the whole unit and e2e suites, sharded over the cores
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck on CudaBackend.*
#             (each under SANITIZE_TIMEOUT seconds, default 900)
#   bench     ferry_bench_cuda --quick (PyTorch's cuDNN and onnxruntime beside)
#
# Each step writes OUTDIR/<step>.log; the exit status is the number of steps
# that failed. Steps whose tool is missing are reported and counted as failed.
set -u
BUILD=${1:-build-cuda}
OUT=${2:-$BUILD/gpu-check}
STEPS=${3:-info,fixtures,cuda,suites,sanitize,bench}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
failed=0

has_step() { [[ ",$STEPS," == *",$1,"* ]]; }

step() {  # step NAME COMMAND...: run, log, report
  local name=$1; shift
  has_step "$name" || return 0
  local t0=$SECONDS
  echo "== $name"
  if "$@" >"$OUT/$name.log" 2>&1; then
    echo "   ok ($((SECONDS - t0)) s)"
  else
    echo "   FAILED ($((SECONDS - t0)) s): tail of $OUT/$name.log"
    tail -n 30 "$OUT/$name.log" | sed 's/^/   | /'
    failed=$((failed + 1))
  fi
}

info() {
  nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  nvcc --version | tail -n 2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  uname -r; nproc
}

fixtures() {
  python3 "$HERE/tests/fixtures/make_gpu_fixtures.py" --out "$OUT/torch2" &&
    python3 "$HERE/tests/fixtures/run_ferry_on_manifest.py" "$BUILD/converter/ferry" \
      "$OUT/torch2/manifest.json" -v
}

cuda() {
  local rc=0
  "$BUILD/tests/ferry_unit_tests" --gtest_filter='*cuda*:*Cuda*' || rc=1
  "$BUILD/tests/ferry_e2e_tests" --gtest_filter='CudaCli.*' || rc=1
  return $rc
}

sharded() {  # sharded BINARY: all its tests over nproc shards, one log
  local bin=$1 n; n=$(nproc); local rc=0 i
  for ((i = 0; i < n; i++)); do
    GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i "$bin" --gtest_brief=1 >"$OUT/shard.$i" 2>&1 &
  done
  for ((i = 0; i < n; i++)); do wait -n || rc=1; done
  cat "$OUT"/shard.* && rm -f "$OUT"/shard.*
  return $rc
}

suites() {
  local rc=0
  sharded "$BUILD/tests/ferry_unit_tests" || rc=1
  sharded "$BUILD/tests/ferry_e2e_tests" || rc=1
  return $rc
}

sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local rc=0 tool
  for tool in memcheck racecheck synccheck; do
    echo "-- $tool"
    timeout "${SANITIZE_TIMEOUT:-900}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$BUILD/tests/ferry_unit_tests" --gtest_filter='CudaBackend.*' --gtest_brief=1 || rc=1
  done
  return $rc
}

bench() {
  "$BUILD/tests/bench/ferry_bench_cuda" --quick --json "$OUT/bench.json"
}

step info info
step fixtures fixtures
step cuda cuda
step suites suites
step sanitize sanitize
step bench bench
echo "gpu-check: $failed step(s) failed; logs in $OUT"
exit "$failed"
