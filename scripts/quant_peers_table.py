#!/usr/bin/python3
"""Renders tests/bench/quant_peers.py's JSON as a Markdown table: ferry int8
beside PyTorch's dynamic int8, time (median of the rounds' medians) and error
against fp32 (max abs / RMS over the outputs).

usage: python3 scripts/quant_peers_table.py quant_peers.json
"""
import json
import sys


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.2f} us"


def main():
    r = json.load(open(sys.argv[1]))
    print(f"ferry int8 (GPTQ, --calibration) and PyTorch {r['torch']} dynamic int8 ({r['engine']}), one thread, "
          f"{r['rounds']} interleaved rounds; {r['machine']}.\n")
    print("| case | ferry int8 | torch dynamic int8 | torch / ferry | error vs fp32: ferry (max abs / RMS) "
          "| torch (max abs / RMS) |")
    print("|---|---|---|---|---|---|")
    for c in r["cases"]:
        f, t = c["ferry_median_us"], c["torch_median_us"]
        ef, et = c["err_ferry"], c["err_torch"]
        print(f"| {c['name']} | {fmt_us(f)} | {fmt_us(t)} | {t / f:.2f}x | {ef['max_abs']:.2e} / {ef['rms']:.2e} "
              f"| {et['max_abs']:.2e} / {et['rms']:.2e} |")


if __name__ == "__main__":
    sys.exit(main())
