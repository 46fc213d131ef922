"""ferry beside the runtimes a PyTorch user would pick instead for a CPU or
an edge board: ONNX Runtime, ExecuTorch (XNNPACK delegate, and its portable
kernels) and LiteRT, all from PyPI at the versions tests/bench/peers/
requirements.txt pins, on the same weights, in one run, interleaved, one
thread, pinned to one CPU. Run it with tests/bench/peers/run.sh (which makes
the virtual environment and builds ferry); by hand:

    python bench.py --ferry build/converter/ferry --work build/peers --json OUT.json
        [--rounds 5] [--budget 0.4] [--only TEXT] [--cpu N] [--quick]

1. Every runtime's files (export_models.py, one process per runtime, cached
   in WORK/models).
2. Every file is checked before it is timed: its output for a seeded input
   against PyTorch's fp32 output (a stream case over 64 steps with the state
   carried, a sequence case whole): max abs and RMS error.
3. Rounds: in each, for every case, every runtime is timed in turn (the
   order rotates from round to round), each for about --budget seconds of
   single calls; a trial's figure is the median of its calls. The result is
   the median of the trials' medians, with their min and max (the spread).
   ferry is timed twice: through its C API (`ferry bench`, no Python) and
   through its Python module (`ferry-py`), like the others.
4. Python's cost per call, apart: each runtime's passthrough program (three
   [1, 1, 16] tensors in and out, one add each), timed in the same rounds.
5. The memory floor of a streaming step (W1, W4): the time one core takes
   to read the step's weight bytes once (ferry's file's weights; a numpy
   max over a buffer of that size, pinned to the same CPU, best of 30),
   which no runtime that reads every weight once per step can beat.
6. Memory: per runtime and case, a fresh process imports the runtime, loads
   the file and runs it three times: its resident memory after the import
   and at its peak. For ferry also the exact arena its session needs.

Writes one JSON (OUT) with the machine, CPU model, date, versions, every
trial and every figure; report.py turns it into docs/performance.md's table
and plot.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

from workloads import PASSTHROUGH, all_workloads, inputs, reference

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable

# Python runtimes, in the order of the first round; "ferry" (the C API, timed
# by `ferry bench`) joins them in the rotation.
PY_RUNTIMES = ["ferry-py", "ort", "et-xnnpack", "et-portable", "litert", "litert-int8"]
EXPORTS = ["ferry", "ort", "et-xnnpack", "et-portable", "litert", "litert-int8"]
LABELS = {
    "ferry": "ferry (C API)", "ferry-py": "ferry (Python)", "ort": "ONNX Runtime",
    "et-xnnpack": "ExecuTorch XNNPACK", "et-portable": "ExecuTorch portable", "litert": "LiteRT",
    "litert-int8": "LiteRT full int8",
}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions(ferry):
    out = {}
    for pkg in ("torch", "executorch", "onnxruntime", "onnx", "ai-edge-litert", "litert-torch",
                "ai-edge-quantizer", "torchao", "numpy"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    r = subprocess.run([ferry, "--version"], stdout=subprocess.PIPE, text=True)
    out["ferry"] = r.stdout.strip().splitlines()[0] if r.stdout else None
    out["python"] = platform.python_version()
    return out


def errors(y, ref):
    if y.shape != ref.shape:
        return {"error": f"output shape {list(y.shape)}, PyTorch's {list(ref.shape)}"}
    d = y.astype(np.float64) - ref.astype(np.float64)
    return {"max_abs": float(np.abs(d).max()), "rms": float(np.sqrt((d ** 2).mean()))}


class Worker:
    def __init__(self, runtime, work, cpu):
        cmd = [PY, os.path.join(HERE, "worker.py"), runtime, "--work", work]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        self.runtime = runtime
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE)

    def ask(self, **req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            return {"error": f"the {self.runtime} worker exited (status {self.p.wait()})"}
        return json.loads(line)

    def close(self):
        try:
            self.ask(op="quit")
        except (BrokenPipeError, OSError):
            pass
        self.p.wait()


def pin(cpu):
    return (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None


def ferry_bench(ferry, w, fb, cpu):
    cmd = [ferry, "bench", fb, "--json", "--threads", "1", "--batch", str(w.B)]
    cmd += ["--stream"] if w.stream else ["--seq", str(w.T)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pin(cpu))
    if r.returncode != 0:
        return None, r.stderr.strip()
    j = json.loads(r.stdout)
    return (j["per_step_us"] if w.stream else j["median_us"]), j


def ferry_check(ferry, w, fb, x, y):
    cmd = [ferry, "run", fb, "--input", x, "--output", y, "--quiet"] + (["--stream"] if w.stream else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return None if r.returncode == 0 else r.stderr.strip()


def read_floor_us(nbytes, cpu, tries=30):
    """Microseconds one core takes to read nbytes once: numpy's max over a
    float32 buffer of that size (a reduction at the memory's speed), the
    best of `tries`, on the CPU the runtimes run on."""
    old = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        buf = np.ones(max(nbytes // 4, 16), np.float32)
        buf.max()
        best = float("inf")
        for _ in range(tries):
            t0 = time.perf_counter()
            buf.max()
            best = min(best, time.perf_counter() - t0)
        return best * 1e6
    finally:
        os.sched_setaffinity(0, old)


def summary(trials):
    return {"median_us": statistics.median(trials), "min_us": min(trials), "max_us": max(trials),
            "trials_us": trials}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.4, help="seconds of calls per trial")
    ap.add_argument("--only", default="", help="only cases whose name contains this text")
    ap.add_argument("--cpu", type=int, default=os.cpu_count() - 1, help="the CPU every runtime is pinned to")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 0.15 s: a try of the harness, not figures")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.budget = 2, 0.15
    work = os.path.abspath(a.work)
    os.makedirs(os.path.join(work, "check"), exist_ok=True)
    ferry = os.path.abspath(a.ferry)
    started = time.time()

    # 1. The files.
    for rt in EXPORTS:
        cmd = [PY, os.path.join(HERE, "export_models.py"), rt, "--work", work, "--ferry", ferry]
        log = os.path.join(work, f"export-{rt}.log")
        print(f"peers: exporting for {LABELS[rt]} (log: {log})", flush=True)
        with open(log, "a") as f:
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=HERE, check=True)
    exports = {}
    for rt in EXPORTS:
        with open(os.path.join(work, f"exports-{rt}.json")) as f:
            exports[rt] = json.load(f)

    cases = [w for w in all_workloads() if a.only in w.name]
    result = {
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "kernel": platform.release(),
                    "pinned_cpu": a.cpu},
        "date": datetime.date.today().isoformat(),
        "versions": versions(ferry),
        "settings": {"rounds": a.rounds, "budget_s": a.budget, "threads": 1, "quick": a.quick},
        "labels": LABELS,
        "unit": "us per call: a step (W1, W4) or a whole sequence or batch (W2, W3)",
        "cases": [],
        "passthrough": {},
    }
    # Which runtime runs which case, and the record of its file.
    plan = {}
    for w in cases:
        rts = {}
        for rt in ["ferry"] + PY_RUNTIMES:
            src = "ferry" if rt == "ferry-py" else rt
            if (rt == "litert-int8" and not w.int8) or (rt == "et-portable" and w.int8):
                continue
            rec = exports[src].get(w.name, {"error": "not exported"})
            rts[rt] = {"export": rec}
        plan[w.name] = rts

    # 2. Workers, loads and checks.
    workers = {rt: Worker(rt, work, a.cpu) for rt in PY_RUNTIMES}
    for w in cases:
        x = inputs(w)
        xp = os.path.join(work, "check", w.stem + ".x.npy")
        np.save(xp, x)
        ref = reference(w, x)
        for rt, entry in plan[w.name].items():
            if "error" in entry["export"]:
                continue
            yp = os.path.join(work, "check", f"{w.stem}.{rt}.y.npy")
            if rt == "ferry":
                err = ferry_check(ferry, w, os.path.join(work, entry["export"]["file"]), xp, yp)
            else:
                r = workers[rt].ask(op="load", case=w.name)
                err = r.get("error")
                if err is None and "arena_bytes" in r:
                    entry["arena_bytes"] = r["arena_bytes"]
                if err is None:
                    err = workers[rt].ask(op="check", case=w.name, x=xp, y=yp).get("error")
            if err is None:
                entry["check"] = errors(np.load(yp), ref)
                if "error" in entry["check"]:
                    err = entry["check"]["error"]
            if err is not None:
                entry["run_error"] = err
            print(f"peers: {w.name}: {LABELS[rt]}: "
                  f"{err or 'max abs error %.2e' % entry['check']['max_abs']}", flush=True)
    passthrough = [rt for rt in PY_RUNTIMES if PASSTHROUGH in exports.get(rt, {})
                   and "error" not in exports[rt][PASSTHROUGH]]
    for rt in list(passthrough):
        r = workers[rt].ask(op="load", case=PASSTHROUGH)
        if "error" in r:
            result["passthrough"][rt] = {"error": r["error"]}
            passthrough.remove(rt)

    # 3. Rounds.
    timed = {name: {rt: [] for rt, e in rts.items() if "export" in e and "error" not in e["export"]
                    and "run_error" not in e} for name, rts in plan.items()}
    pt_trials = {rt: [] for rt in passthrough}
    order = ["ferry"] + PY_RUNTIMES
    for r in range(a.rounds):
        rot = order[r % len(order):] + order[: r % len(order)]
        for w in cases:
            line = []
            for rt in rot:
                if rt not in timed[w.name]:
                    continue
                if rt == "ferry":
                    us, info = ferry_bench(ferry, w, os.path.join(work, plan[w.name]["ferry"]["export"]["file"]), a.cpu)
                    if us is None:
                        plan[w.name]["ferry"]["run_error"] = info
                        del timed[w.name]["ferry"]
                        continue
                    plan[w.name]["ferry"]["arena_bytes"] = info.get("arena_bytes")
                    plan[w.name]["ferry"]["weight_bytes"] = info.get("weight_bytes")
                else:
                    rep = workers[rt].ask(op="time", case=w.name, budget=a.budget)
                    if "error" in rep:
                        plan[w.name][rt]["run_error"] = rep["error"]
                        del timed[w.name][rt]
                        continue
                    us = rep["median_us"]
                timed[w.name][rt].append(us)
                line.append(f"{rt} {us:.4g}")
            print(f"peers: round {r + 1}/{a.rounds} {w.name} (us): {', '.join(line)}", flush=True)
        for rt in passthrough:
            rep = workers[rt].ask(op="time", case=PASSTHROUGH, budget=a.budget)
            if "median_us" in rep:
                pt_trials[rt].append(rep["median_us"])
    for wk in workers.values():
        wk.close()

    # 5. The read floor of a streaming step.
    for w in cases:
        wb = plan[w.name]["ferry"].get("weight_bytes")
        if w.stream and wb:
            plan[w.name]["floor"] = {"read_us": read_floor_us(wb, a.cpu), "weight_bytes": wb}

    # 6. Memory, a fresh process per runtime and case.
    for w in cases:
        for rt, entry in plan[w.name].items():
            if rt not in timed[w.name] or rt == "floor":
                continue
            who = "ferry-py" if rt == "ferry" else rt
            r = subprocess.run([PY, os.path.join(HERE, "worker.py"), who, "--work", work, "--rss", w.name],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)
            try:
                entry["rss_kb"] = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                entry["rss_kb"] = {"error": f"status {r.returncode}"}

    for w in cases:
        c = {"workload": w.to_dict(), "runtimes": {}}
        if "floor" in plan[w.name]:
            c["floor"] = plan[w.name].pop("floor")
        for rt, entry in plan[w.name].items():
            e = dict(entry)
            if timed[w.name].get(rt):
                e.update(summary(timed[w.name][rt]))
            c["runtimes"][rt] = e
        result["cases"].append(c)
    for rt, t in pt_trials.items():
        if t:
            result["passthrough"][rt] = summary(t)
    result["seconds"] = round(time.time() - started)
    result["load_at_end"] = os.getloadavg()[0]
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"peers: wrote {a.json} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
