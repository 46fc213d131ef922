#!/usr/bin/env python3
"""What a step costs from Python over the C call, side by side in one run.

    build/python-venv/bin/python tests/bench/python_step_cost.py [--json out.json]

(scripts/test-python.sh makes that environment.) For a one-layer LSTM(H, H)
at batch 1, H 16 and 64 (weights from a seeded torch module, converted by
ferry.convert), it times, interleaved over 5 trials (medians):
  - C: ferry_step in a C loop (`ferry bench --stream`, this package's CLI);
  - Python: Session.step(x) (a new output array each step) and
    Session.step(x, out=y) (none), in a Python loop of 100,000 steps;
and reports the Python overhead per step. Where onnxruntime is installed
(pip install onnxruntime; the project's scripts do not install it), the same
LSTM step (the same weights, exported by torch.onnx with h and c as inputs
and outputs: how a stateless runtime streams) is timed beside it through
onnxruntime's Python API, one thread, its output checked against ferry's.
TFLite's interpreter is reported when installed, not measured (exporting
needs TensorFlow). Prints a Markdown table (with the machine and the date)
and writes JSON.
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
from quant_peers import cpu_model  # the machine, as the other benchmark names it

STEPS = 100_000
TRIALS = 5


def lstm_model(h, folder):
    """The seeded LSTM(h, h) as a module, and converted: (module, model path)."""
    import torch

    torch.manual_seed(h)
    lstm = torch.nn.LSTM(h, h).eval()
    path = os.path.join(folder, f"lstm{h}.pt")
    torch.save(torch.nn.Sequential(lstm).state_dict(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lstm, ferry.convert(path, os.path.join(folder, f"lstm{h}.fb"), graph="0", quiet=True).path


class OrtStep:
    """onnxruntime running the same LSTM one step at a time, h and c fed back."""

    def __init__(self, lstm, h, folder):
        import onnxruntime as ort
        import torch

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = lstm

            def forward(self, x, h0, c0):
                y, (h1, c1) = self.lstm(x, (h0, c0))
                return y, h1, c1

        path = os.path.join(folder, f"lstm{h}.onnx")
        z = torch.zeros(1, 1, h)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Step().eval(), (z, z, z), path, input_names=["x", "h", "c"],
                              output_names=["y", "h1", "c1"], opset_version=14)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.h = h
        self.version = ort.__version__

    def reset(self):
        self.feeds = {k: np.zeros((1, 1, self.h), np.float32) for k in ("x", "h", "c")}

    def step(self, x):
        self.feeds["x"] = x.reshape(1, 1, self.h)
        y, self.feeds["h"], self.feeds["c"] = self.session.run(None, self.feeds)
        return y.reshape(1, self.h)

    def time_us(self, x):
        self.reset()
        t0 = time.perf_counter()
        for _ in range(STEPS // 10):
            self.step(x)
        return (time.perf_counter() - t0) / (STEPS // 10) * 1e6


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


def installed(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for h in (16, 64):
            lstm, fb = lstm_model(h, tmp)
            s = ferry.Model(fb).session()
            x = np.random.default_rng(0).standard_normal((1, h)).astype(np.float32)
            out = np.empty((1, h), np.float32)
            peer = OrtStep(lstm, h, tmp) if installed("onnxruntime") else None
            if peer:  # the same model: the first steps agree
                s.reset()
                peer.reset()
                for _ in range(3):
                    assert np.abs(s.step(x) - peer.step(x)).max() <= 1e-5
            py_step_us(s, x)  # warm
            c, new, inplace, ort = [], [], [], []
            for _ in range(TRIALS):
                c.append(c_step_us(fb))
                new.append(py_step_us(s, x))
                inplace.append(py_step_us(s, x, out))
                if peer:
                    ort.append(peer.time_us(x))
            row = {"hidden": h, "c_us": statistics.median(c), "python_us": statistics.median(new),
                   "python_out_us": statistics.median(inplace),
                   "spread": {"c": [min(c), max(c)], "python": [min(new), max(new)],
                              "python_out": [min(inplace), max(inplace)]}}
            if peer:
                row["onnxruntime_us"] = statistics.median(ort)
                row["spread"]["onnxruntime"] = [min(ort), max(ort)]
            rows.append(row)
    result = {"machine": cpu_model(), "cores": os.cpu_count(), "date": datetime.date.today().isoformat(),
              "python": platform.python_version(), "numpy": np.__version__, "ferry": ferry.__version__,
              "steps": STEPS, "trials": TRIALS, "rows": rows,
              "onnxruntime": __import__("onnxruntime").__version__ if installed("onnxruntime") else None,
              "tflite": "installed, not measured" if installed("tflite_runtime") or installed("ai_edge_litert")
              else "not installed"}
    print(f"{result['machine']}, {result['cores']} cores, {result['date']}, Python {result['python']}, "
          f"{STEPS} steps x {TRIALS} trials (medians)\n")
    ort = result["onnxruntime"]
    print("| LSTM(H, H), batch 1, one step | C `ferry_step` | `s.step(x)` | `s.step(x, out=y)` | Python's cost "
          "per step |" + (f" onnxruntime {ort} from Python (h, c fed back) |" if ort else ""))
    print("|---|---|---|---|---|" + ("---|" if ort else ""))
    for r in rows:
        line = (f"| H {r['hidden']} | {r['c_us']:.3f} us | {r['python_us']:.3f} us | {r['python_out_us']:.3f} us | "
                f"+{r['python_us'] - r['c_us']:.3f} us (+{r['python_out_us'] - r['c_us']:.3f} us with out=) |")
        if ort:
            line += f" {r['onnxruntime_us']:.2f} us ({r['onnxruntime_us'] / r['python_us']:.1f}x ferry's `s.step`) |"
        print(line)
    print(f"\nTFLite: {result['tflite']}.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
