#!/usr/bin/python3
"""Conversion time with calibration-aware quantization on a 10 M-parameter model.

Generates (not committed) LSTM(800, 800, num_layers=2) > Linear(800, 10) on
every step (10.25 M parameters, weights from PyTorch's default init, saved
as a GPU machine saves them: storages tagged cuda:0) and a calibration array
of 16 sequences x 64 steps of N(0, 1) input, then times

    ferry convert model.pt out.fb --graph 'lstm > fc' --batch-first
                  --quantize int4 --calibration calib.npy --stats

for int4 and int8 (GPTQ, the default with calibration) and int4 with
--rounding nearest, each once per repeat, interleaved. The wall time covers
the whole conversion (the CPU time is printed too: on a shared machine the
wall time is mostly other people's work): reading, the fp32 and quantized runs of the accuracy
report for both roundings (each layer alone, the model, the 10,000-step
drift of the fp32 model and of each rounding), the calibration moments,
GPTQ and writing.

usage: /usr/bin/python3 tests/bench/convert_gptq_bench.py FERRY_BINARY [--workdir DIR] [--repeat N]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch


class Model(torch.nn.Module):
    def __init__(self, n=800):
        super().__init__()
        self.lstm = torch.nn.LSTM(n, n, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(n, 10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("--workdir", default="/tmp/ferry-gptq-bench")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    src, calib = os.path.join(args.workdir, "lstm800x2.pt"), os.path.join(args.workdir, "calib.npy")
    if not os.path.exists(src):
        torch.manual_seed(0)
        torch.serialization.register_package(
            1, lambda s: "cuda:0", lambda s, loc: s if loc.startswith("cuda") else None)
        m = Model()
        torch.save(m.state_dict(), src)
        np.save(calib, np.random.default_rng(0).standard_normal((16, 64, 800)).astype(np.float32))
    params = sum(v.numel() for v in torch.load(src, map_location="cpu").values())
    cases = [("int4 gptq", ["--quantize", "int4"]), ("int8 gptq", ["--quantize", "int8"]),
             ("int4 nearest", ["--quantize", "int4", "--rounding", "nearest"])]
    times = {name: [] for name, _ in cases}
    for _ in range(args.repeat):
        for name, extra in cases:
            out = os.path.join(args.workdir, "out.fb")
            t0, c0 = time.perf_counter(), os.times()
            r = subprocess.run([args.ferry, "convert", src, out, "--graph", "lstm > fc", "--batch-first",
                                "--calibration", calib, "--stats"] + extra,
                               check=True, stdout=subprocess.PIPE, text=True)
            times[name].append(time.perf_counter() - t0)
            c1 = os.times()
            cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
            rss = re.search(r"peak RSS (\d+) MiB", r.stdout)
            model = re.search(r"accuracy model .*", r.stdout)
            print(f"{name}: {times[name][-1]:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss.group(1) if rss else '?'} MiB; "
                  f"{model.group(0) if model else ''}", flush=True)
    print(f"\n{params / 1e6:.2f} M parameters, calibration 16 x 64 steps, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}")
    for name, _ in cases:
        print(f"{name:14s} median {statistics.median(times[name]):.1f} s over {len(times[name])}")


if __name__ == "__main__":
    sys.exit(main())
