#!/usr/bin/python3
"""ferry int8 beside PyTorch's dynamic int8 (quantize_dynamic, fbgemm) on the
peer workloads (../shared/peers/README.md): speed and error against fp32,
in one run, interleaved.

Workloads (fp32 weights from PyTorch's default init, seeded; time-major;
one thread everywhere):
  W1  LSTM(H, H), H in {64, 256, 1024}, batch 1: one step, state carried
      (ferry: `ferry bench --stream`, ferry_step; PyTorch: the quantized
      nn.LSTM called on one step with the state passed back in)
  W2  LSTM(32, 256, num_layers=2), batch 1, T 512: the whole sequence
  W3  LSTM(64, 256), batch 64, T 128: the whole batch
ferry: `ferry convert --quantize int8 --calibration C.npy` (GPTQ, the default
with calibration; C is another seeded draw than the measured input), run by
the CLI (`ferry bench`, backend auto). PyTorch: Debian's torch 1.13,
torch.ao.quantization.quantize_dynamic(model, {nn.LSTM}, dtype=torch.qint8)
with torch.backends.quantized.engine = "fbgemm" where the build has it;
Debian's torch 1.13 has not (its engines: qnnpack, onednn), so there the
x86 engine onednn, its default, runs it (the engine is recorded in the
JSON).

Error against fp32: both quantized models and PyTorch's fp32 nn.LSTM on the
same input (N(0, 1), seeded): max abs and RMS of the outputs (every step's
h). Speed: `--rounds` rounds; in each, every case runs ferry then PyTorch
(about half a second of samples each); per case the median of the rounds'
medians. Writes JSON (--json, default quant_peers.json) that
scripts/quant_peers_table.py renders as a table.

usage: /usr/bin/python3 tests/bench/quant_peers.py FERRY_BINARY [--rounds N] [--json OUT] [--workdir DIR] [--quick]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def cpu_model():
    """The CPU's name as /proc/cpuinfo gives it, else the architecture."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def workloads(quick):
    hs = [64, 256] if quick else [64, 256, 1024]
    out = [dict(name=f"W1 H{h}", I=h, H=h, layers=1, B=1, T=1, stream=True) for h in hs]
    out.append(dict(name="W2", I=32, H=256, layers=2, B=1, T=512, stream=False))
    out.append(dict(name="W3", I=64, H=256, layers=1, B=64, T=128, stream=False))
    return out


def torch_median_us(fn, budget=0.5, at_least=5, at_most=2000):
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    n = max(at_least, min(at_most, int(budget / max(one, 1e-9))))
    us = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        us.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(us)


def errors(y, ref):
    d = y.astype(np.float64) - ref.astype(np.float64)
    return {"max_abs": float(np.abs(d).max()), "rms": float(np.sqrt((d ** 2).mean()))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="quant_peers.json")
    ap.add_argument("--workdir", default="/tmp/ferry-quant-peers")
    ap.add_argument("--quick", action="store_true", help="W1 H64/H256, W2, W3; 2 rounds")
    ap.add_argument("--engine", help="quantized engine (default fbgemm where torch has it, else onednn: Debian's "
                                     "torch 1.13 is built without FBGEMM)")
    args = ap.parse_args()
    rounds = 2 if args.quick else args.rounds
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(1)
    engines = torch.backends.quantized.supported_engines
    torch.backends.quantized.engine = args.engine or ("fbgemm" if "fbgemm" in engines else "onednn")
    cases = []
    for w in workloads(args.quick):
        torch.manual_seed(len(cases) + 1)
        lstm = nn.LSTM(w["I"], w["H"], num_layers=w["layers"]).eval()
        q = torch.ao.quantization.quantize_dynamic(nn.Sequential(lstm), {nn.LSTM}, dtype=torch.qint8)[0]
        stem = os.path.join(args.workdir, w["name"].replace(" ", "_"))
        torch.save({"lstm." + k: v for k, v in lstm.state_dict().items()}, stem + ".pt")
        rng = np.random.default_rng(len(cases) + 100)
        T_err = 64 if w["stream"] else w["T"]        # the error is measured over a sequence
        x = rng.standard_normal((T_err, w["B"], w["I"])).astype(np.float32)
        calib = rng.standard_normal((64, max(w["B"], 8), w["I"])).astype(np.float32)
        np.save(stem + ".x.npy", x)
        np.save(stem + ".calib.npy", calib)
        subprocess.run([args.ferry, "convert", stem + ".pt", stem + ".fb", "--graph", "lstm", "--quantize", "int8",
                        "--calibration", stem + ".calib.npy"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([args.ferry, "run", stem + ".fb", "--input", stem + ".x.npy", "--output", stem + ".y.npy"],
                       check=True, stdout=subprocess.DEVNULL)
        with torch.no_grad():
            ref = lstm(torch.from_numpy(x))[0].numpy()
            yq = q(torch.from_numpy(x))[0].numpy()
        cases.append(dict(w, stem=stem, lstm=lstm, q=q, err_ferry=errors(np.load(stem + ".y.npy"), ref),
                          err_torch=errors(yq, ref), ferry_us=[], torch_us=[]))
        print(f"{w['name']}: error vs fp32 ferry int8 {cases[-1]['err_ferry']}, torch dynamic int8 "
              f"{cases[-1]['err_torch']}", flush=True)
    for r in range(rounds):
        for c in cases:
            cmd = [args.ferry, "bench", c["stem"] + ".fb", "--json", "--batch", str(c["B"])]
            cmd += ["--stream", "--seq", "256"] if c["stream"] else ["--seq", str(c["T"])]
            out = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
            c["ferry_us"].append(out["per_step_us"] if c["stream"] else out["median_us"])
            x = torch.randn(c["T"], c["B"], c["I"])
            with torch.no_grad():
                if c["stream"]:
                    state = [None]

                    def step(c=c, x=x, state=state):
                        _, state[0] = c["q"](x, state[0])
                    c["torch_us"].append(torch_median_us(step))
                else:
                    c["torch_us"].append(torch_median_us(lambda c=c, x=x: c["q"](x)))
            print(f"round {r + 1} {c['name']}: ferry {c['ferry_us'][-1]:.2f} us, torch {c['torch_us'][-1]:.2f} us",
                  flush=True)
    result = {
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, load "
                   f"{os.getloadavg()[0]:.1f} at the end",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__, "engine": torch.backends.quantized.engine, "rounds": rounds,
        "unit": "us per step (W1), per sequence or batch (W2, W3)",
        "cases": [{k: c[k] for k in ("name", "I", "H", "layers", "B", "T", "err_ferry", "err_torch",
                                      "ferry_us", "torch_us")} for c in cases],
    }
    for c in result["cases"]:
        c["ferry_median_us"] = statistics.median(c["ferry_us"])
        c["torch_median_us"] = statistics.median(c["torch_us"])
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
