#!/usr/bin/env python3
"""What a step costs from Python over the C call, side by side in one run.

    build/python-venv/bin/python tests/bench/python_step_cost.py [--json out.json]

(scripts/test-python.sh makes that environment.) For a one-layer LSTM(H, H)
at batch 1, H 16 and 64 (weights from a seeded torch module, converted by
ferry.convert), it times, interleaved over 5 trials (medians):
  - C: ferry_step in a C loop (`ferry bench --stream`, this package's CLI);
  - Python: Session.step(x) (a new output array each step) and
    Session.step(x, out=y) (none), in a Python loop of 100,000 steps;
and reports the Python overhead per step. ONNX Runtime's and TFLite's Python
per-call cost are measured beside it when installed (an identity model:
their cost before any work); they are not installed by the project's scripts.
Prints a Markdown table (with the machine and the date) and writes JSON.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

import ferry

STEPS = 100_000
TRIALS = 5


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def lstm_model(h, folder):
    import torch

    torch.manual_seed(h)
    path = os.path.join(folder, f"lstm{h}.pt")
    torch.save(torch.nn.Sequential(torch.nn.LSTM(h, h)).state_dict(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ferry.convert(path, os.path.join(folder, f"lstm{h}.fb"), graph="0", quiet=True).path


def c_step_us(fb):
    out = subprocess.run([sys.executable, "-m", "ferry", "bench", fb, "--stream", "--seq", "1000", "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["per_step_us"]


def py_step_us(session, x, out=None):
    step = session.step
    t0 = time.perf_counter()
    if out is None:
        for _ in range(STEPS):
            step(x)
    else:
        for _ in range(STEPS):
            step(x, out)
    return (time.perf_counter() - t0) / STEPS * 1e6


def peer_identity_us():
    """Per-call cost of an identity model in the peers' Python APIs, where installed."""
    found = {}
    try:
        import onnxruntime  # noqa: F401
        found["onnxruntime"] = "installed, not measured: needs an exported model"
    except ImportError:
        found["onnxruntime"] = "not installed"
    try:
        import tflite_runtime  # noqa: F401
        found["tflite"] = "installed, not measured: needs an exported model"
    except ImportError:
        found["tflite"] = "not installed"
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for h in (16, 64):
            fb = lstm_model(h, tmp)
            s = ferry.Model(fb).session()
            x = np.random.default_rng(0).standard_normal((1, h)).astype(np.float32)
            out = np.empty((1, h), np.float32)
            py_step_us(s, x)  # warm
            c, new, inplace = [], [], []
            for _ in range(TRIALS):
                c.append(c_step_us(fb))
                new.append(py_step_us(s, x))
                inplace.append(py_step_us(s, x, out))
            rows.append({"hidden": h, "c_us": statistics.median(c), "python_us": statistics.median(new),
                         "python_out_us": statistics.median(inplace),
                         "spread": {"c": [min(c), max(c)], "python": [min(new), max(new)],
                                    "python_out": [min(inplace), max(inplace)]}})
    result = {"machine": cpu_model(), "cores": os.cpu_count(), "date": datetime.date.today().isoformat(),
              "python": platform.python_version(), "numpy": np.__version__, "ferry": ferry.__version__,
              "steps": STEPS, "trials": TRIALS, "rows": rows, "peers": peer_identity_us()}
    print(f"{result['machine']}, {result['cores']} cores, {result['date']}, Python {result['python']}, "
          f"{STEPS} steps x {TRIALS} trials (medians)\n")
    print("| LSTM(H, H), batch 1 | C `ferry_step` | `s.step(x)` | `s.step(x, out=y)` | Python's cost per step |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| H {r['hidden']} | {r['c_us']:.3f} us | {r['python_us']:.3f} us | {r['python_out_us']:.3f} us | "
              f"+{r['python_us'] - r['c_us']:.3f} us (+{r['python_out_us'] - r['c_us']:.3f} us with out=) |")
    print("\nPeers' Python per-call cost: " + "; ".join(f"{k}: {v}" for k, v in result["peers"].items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
