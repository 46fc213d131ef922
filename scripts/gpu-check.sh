#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one go, sized for one short session
# on a GPU machine (README, "CUDA backend"):
#
#   scripts/gpu-check.sh [BUILD] [OUTDIR] [STEPS]
#
#   BUILD   the build folder (default build-cuda; configured and built with
#           -DFERRY_CUDA=ON by the `build` step when it has no ferry binary)
#   OUTDIR  where the logs go (default BUILD/gpu-check)
#   STEPS   comma list (default info,build,archs,cuda,fixtures,sanitize):
#
#   info      nvidia-smi, nvcc, driver
#   build     configure and build BUILD when it has no tests binary yet
#   archs     the SASS and PTX each CUDA object carries (scripts/cuda-archs.sh)
#   cuda      the CUDA tests alone (unit: *cuda*/*Cuda*, e2e: CudaCli.*)
#   fixtures  every fixture of tests/fixtures (models, ops, torch2,
#             torch2_forms, trained) converted, and, in fp32 and (models,
#             ops, trained) as f16 / int8 / int4 (--quantize): run with
#             --backend cuda and with --stream against PyTorch's output.
#             fp32: within the fixture's tolerance (1e-5); quantized:
#             within the bound the CPU path is held to against fp32
#             (test_quantized_backends.cpp: f16 2e-3, int8 1e-2, int4 0.1),
#             or within twice the CPU reference backend's own error on the
#             same file where that is larger (both errors and their
#             difference are in the log). --stream: the same bits as the
#             whole run. A file the converter or the CPU
#             refuses is counted apart, not against CUDA.
#             (CHECK_BACKEND=simd runs this step on a CPU: a dry run of the
#             script itself.)
#   sanitize  compute-sanitizer memcheck and racecheck (SANITIZE_TOOLS) on
#             SANITIZE_FILTER (default: CudaBackend.EveryOpAndDtypeOnce, every
#             kernel of every op and weight type, the persistent / graph /
#             zero-copy test, and the resident streaming kernel's test),
#             each under SANITIZE_TIMEOUT seconds (300)
#   suites    the whole unit and e2e suites, sharded over the cores (not default)
#   bench     ferry_bench_cuda --quick (not default)
#
# Prints a summary table; the exit status is the number of failed steps.
set -u
BUILD=${1:-build-cuda}
OUT=${2:-$BUILD/gpu-check}
STEPS=${3:-info,build,archs,cuda,fixtures,sanitize}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
failed=0
summary=""

has_step() { [[ ",$STEPS," == *",$1,"* ]]; }

step() {  # step NAME COMMAND...: run, log, report
  local name=$1; shift
  has_step "$name" || return 0
  local t0=$SECONDS result
  echo "== $name"
  if "$@" >"$OUT/$name.log" 2>&1; then
    result="ok"
  else
    result="FAILED"
    tail -n 30 "$OUT/$name.log" | sed 's/^/   | /'
    failed=$((failed + 1))
  fi
  echo "   $result ($((SECONDS - t0)) s)"
  summary+=$(printf '%-10s %-7s %5ss  %s' "$name" "$result" "$((SECONDS - t0))" "$OUT/$name.log")$'\n'
}

info() {
  nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  nvcc --version | tail -n 2
  uname -r; nproc
}

build() {
  [[ -x "$BUILD/tests/ferry_unit_tests" && -x "$BUILD/converter/ferry" ]] && { echo "built already"; return 0; }
  cmake -S "$HERE" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-native}" && cmake --build "$BUILD" -j"$(nproc)"
}

cuda() {
  local rc=0
  "$BUILD/tests/ferry_unit_tests" --gtest_filter='*cuda*:*Cuda*' || rc=1
  "$BUILD/tests/ferry_e2e_tests" --gtest_filter='CudaCli.*:PyTorch/OpFixtureTest.*' || rc=1
  return $rc
}

# Every fixture on the GPU (python3, standard library only: the CLI compares).
fixtures() {
  python3 - "$BUILD/converter/ferry" "$HERE/tests/fixtures" "$OUT" "${CHECK_BACKEND:-cuda}" <<'EOF'
import concurrent.futures, json, os, re, subprocess, sys, tempfile
ferry, root, out, backend = sys.argv[1:5]
LAYOUT = {"batch_first": "btf", "btf": "btf", "time_major": "tbf", "tbf": "tbf", "channels_first": "bft",
          "bft": "bft", "bf": None}
GROUPS = {"conv_groups2": "conv(padding=1,groups=2)", "conv_depthwise_nobias": "conv(padding=2,groups=8)",
          "conv_depthwise_mult2": "conv(padding=1,groups=4)"}
def load(name):
    path = os.path.join(root, name, "manifest.json")
    return json.load(open(path)) if os.path.exists(path) else []
fx = []  # (set, name, source, graph or None, layout, key, x, y, tolerance, lengths, quantize?)
for kind in ("models", "torch2"):  # run_ferry_on_manifest.py's conventions
    for e in load(kind):
        recorded = e.get("form") in ("whole_module", "torchscript")
        g = e["graph"]
        if e.get("nonlinearity") == "relu" and not recorded: g = g.replace("rnn", "rnn(relu)", 1)
        fx.append((kind, e["name"], f"{kind}/{e['pt']}", g, "--batch-first" if e.get("batch_first") and not recorded
                   else None, e.get("key"), f"{kind}/{e['input']}", f"{kind}/{e['output']}", e["tolerance"],
                   e.get("lengths"), kind == "models"))
for e in load("ops"):
    g = GROUPS.get(e["name"], e["graph"] if isinstance(e["graph"], str) else None)
    if g is None and not isinstance(e.get("expect_chain"), str): continue  # refused on purpose
    fx.append(("ops", e["name"], f"ops/{e['pt']}", g, LAYOUT[e["layout"]], e.get("key"), f"ops/{e['input']}",
               f"ops/{e['output']}", e["tolerance"], e.get("lengths"), True))
t2 = load("torch2_forms")
for e in (t2.get("cases", []) if isinstance(t2, dict) else []):
    if e.get("expect_refusal"): continue
    fx.append(("torch2_forms", e["name"], f"torch2_forms/{e['file']}", None if e.get("records_chain") else e["graph"],
               LAYOUT[e["layout"]], e.get("key"), f"torch2_forms/{e['name']}.x.npy", f"torch2_forms/{e['name']}.y.npy",
               e.get("tol", 1e-5), None, False))
for e in load("trained"):
    fx.append(("trained", e["name"], f"trained/{e['pt']}", e["graph"], LAYOUT[e["layout"]], e.get("key"),
               f"trained/{e['input']}", f"trained/{e['torch_output']}", e["tolerance"], None, True))

def sh(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"max abs error vs \S+: (\S+)", r.stdout + r.stderr)
    return r.returncode, (float(m.group(1)) if m else None), (r.stderr.strip().splitlines() or [""])[-1]

def check(f, dtype):
    kind, name, src, graph, layout, key, x, y, tol, lengths, _ = f
    d = tempfile.mkdtemp(dir=out)
    fb = f"{d}/m.fb"
    conv = [ferry, "convert", f"{root}/{src}", fb]
    if layout: conv += [layout] if layout.startswith("--") else ["--layout", layout]
    if graph: conv += ["--graph", graph]
    if key: conv += ["--key", key]
    if dtype != "f32": conv += ["--quantize", dtype]
    rc, _, why = sh(*conv)
    if rc: return (kind, dtype, name, "not converted", why)
    run = [ferry, "run", fb, "--input", f"{root}/{x}", "--quiet"]
    if lengths: run += ["--lengths", ",".join(map(str, lengths))]
    rc, e_cpu, why = sh(*run, "--output", f"{d}/cpu.npy", "--backend", "reference", "--expect", f"{root}/{y}",
                        "--tolerance", "1e30")
    if rc: return (kind, dtype, name, "cpu refuses", why)
    # fp32: the fixture's tolerance; quantized: the bound the CPU path is held to against fp32
    # (test_quantized_backends.cpp), or twice the CPU reference's own error on this file.
    t = tol if dtype == "f32" else max({"f16": 2e-3, "int8": 1e-2, "int4": 0.1}[dtype], 2 * e_cpu)
    rc, e_gpu_pt, why = sh(*run, "--output", f"{d}/gpu.npy", "--backend", backend, "--expect", f"{root}/{y}",
                           "--tolerance", str(t))
    _, e_gpu, _ = sh(*run, "--output", f"{d}/gpu2.npy", "--backend", backend, "--expect", f"{d}/cpu.npy",
                     "--tolerance", "1e30")
    if rc: return (kind, dtype, name, "CUDA FAILS", f"{why} (cpu vs pytorch {e_cpu}, bound {t:.3g})")
    stream = "n/a"
    if not lengths:
        rc, _, why = sh(ferry, "run", fb, "--input", f"{root}/{x}", "--quiet", "--stream", "--backend", backend,
                        "--output", f"{d}/st.npy", "--expect", f"{d}/gpu.npy", "--tolerance", "0")
        stream = "same bits" if rc == 0 else ("STREAM DIFFERS" if "differs" in why else "does not stream")
        if stream == "STREAM DIFFERS": return (kind, dtype, name, "STREAM DIFFERS", why)
    g = lambda v: "?" if v is None else format(v, ".3g")
    return (kind, dtype, name, "ok", f"vs pytorch: {backend} {g(e_gpu_pt)} cpu {g(e_cpu)}; "
            f"{'vs cpu ' + g(e_gpu) + '; ' if dtype != 'f32' else ''}stream {stream}")

jobs = [(f, dt) for f in fx for dt in (["f32", "f16", "int8", "int4"] if f[10] else ["f32"])]
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    results = list(pool.map(lambda j: check(*j), jobs))
table = {}
for kind, dtype, name, status, note in results:
    print(f"{kind:13} {dtype:5} {name:36} {status:15} {note}")
    row = table.setdefault((kind, dtype), {"ok": 0, "CUDA FAILS": 0, "STREAM DIFFERS": 0, "not converted": 0,
                                           "cpu refuses": 0})
    row[status] += 1
print(f"\n{'fixtures':13} {'dtype':5} {'cuda ok':>8} {'CUDA FAILS':>11} {'STREAM DIFF':>12} "
      f"{'not conv.':>10} {'cpu refuses':>12}")
for (kind, dtype), r in table.items():
    print(f"{kind:13} {dtype:5} {r['ok']:8} {r['CUDA FAILS']:11} {r['STREAM DIFFERS']:12} {r['not converted']:10} "
          f"{r['cpu refuses']:12}")
sys.exit(1 if any(r["CUDA FAILS"] or r["STREAM DIFFERS"] for r in table.values()) else 0)
EOF
}

sanitize() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found"; return 1; }
  local rc=0 tool
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    echo "-- $tool"
    timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$BUILD/tests/ferry_unit_tests" --gtest_brief=1 \
      --gtest_filter="${SANITIZE_FILTER:-CudaBackend.EveryOpAndDtypeOnce:CudaBackend.PersistentGraphZeroCopy*:CudaBackend.ResidentSteps*}" || rc=1
  done
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

bench() { "$BUILD/tests/bench/ferry_bench_cuda" --quick --json "$OUT/bench.json"; }

step info info
step build build
step archs "$HERE/scripts/cuda-archs.sh" "$BUILD"
step cuda cuda
step fixtures fixtures
step sanitize sanitize
step suites suites
step bench bench
echo
echo "gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1):"
printf '%s' "$summary"
[[ -f "$OUT/fixtures.log" ]] && sed -n '/^fixtures /,$p' "$OUT/fixtures.log"
echo "gpu-check: $failed step(s) failed; logs in $OUT"
exit "$failed"
