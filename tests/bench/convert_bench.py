#!/usr/bin/python3
"""Conversion benchmark: ferry convert vs torch.load on the same ~1 GB checkpoint.

Generates (not committed) a 2-layer LSTM with hidden 4096 (about 1.07 GB of
float32), saved as a GPU machine saves it (storages tagged cuda:0), warms the
page cache, then in one run times

  * torch.load(path, map_location='cpu')            (Debian's torch, in process)
  * ferry convert path out.fb --graph lstm          (subprocess; peak RSS from
                                                     getrusage of the child)

and prints throughput (input bytes / wall time), peak RSS and the ratio.

usage: /usr/bin/python3 tests/bench/convert_bench.py FERRY_BINARY [--workdir DIR] [--hidden H] [--repeat N]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import torch


def make_checkpoint(path, hidden, inputs):
    torch.manual_seed(0)
    torch.serialization.register_package(
        1, lambda s: "cuda:0", lambda s, loc: s if loc.startswith("cuda") else None)
    with torch.no_grad():
        lstm = torch.nn.LSTM(inputs, hidden, num_layers=2)
    torch.save({"lstm." + k: v for k, v in lstm.state_dict().items()}, path)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("--workdir", default="/tmp/ferry-convert-bench")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inputs", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    src = os.path.join(args.workdir, f"lstm_h{args.hidden}.pt")
    out = os.path.join(args.workdir, "out.fb")
    if not os.path.exists(src):
        print(f"generating {src} ...", flush=True)
        make_checkpoint(src, args.hidden, args.inputs)
    size = os.path.getsize(src)
    warm(src)

    torch.set_num_threads(1)
    load_times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sd = torch.load(src, map_location="cpu")
        load_times.append(time.perf_counter() - t0)
        del sd

    ferry_times, ferry_rss = [], []
    for _ in range(args.repeat):
        # Each conversion writes a new file (deleting an old 1 GB output is the
        # file system's work, not the conversion's).
        if os.path.exists(out):
            os.remove(out)
        os.sync()
        t0 = time.perf_counter()
        r = subprocess.run([args.ferry, "convert", src, out, "--graph", "lstm", "--stats"], check=True,
                           stdout=subprocess.PIPE, text=True)
        ferry_times.append(time.perf_counter() - t0)
        # ferry's own VmHWM: getrusage(RUSAGE_CHILDREN) would count this
        # Python process's memory, inherited by the forked child before exec.
        m = re.search(r"peak RSS (\d+) MiB", r.stdout)
        ferry_rss.append(int(m.group(1)) << 20)
    out_size = os.path.getsize(out)

    lt, ft = statistics.median(load_times), statistics.median(ferry_times)
    mb = size / 1e6
    print(f"checkpoint      {src}: {size / 2**20:.0f} MiB (2-layer LSTM, hidden {args.hidden}, cuda:0 storages)")
    print(f"torch.load      median {lt * 1e3:8.1f} ms  {mb / lt:7.0f} MB/s   (torch {torch.__version__}, map_location='cpu')")
    print(f"ferry convert   median {ft * 1e3:8.1f} ms  {mb / ft:7.0f} MB/s   peak RSS {max(ferry_rss) / 2**20:.0f} MiB"
          f" (output {out_size / 2**20:.0f} MiB; budget output + 64 MiB = {out_size / 2**20 + 64:.0f} MiB)")
    print(f"ratio           ferry convert is {lt / ft:.2f}x the speed of torch.load")
    ok = mb / ft >= 500 and max(ferry_rss) <= out_size + (64 << 20) and ft < lt
    print("targets         " + ("met" if ok else "NOT met") + " (>= 500 MB/s, RSS <= output + 64 MiB, faster than torch.load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
