#!/usr/bin/python3
"""Renders tests/bench/quant_peers.py's JSON as a Markdown table: ferry int8
beside PyTorch's dynamic int8, time (median of the rounds' medians) and error
against fp32 (max abs / RMS over the outputs).

usage: python3 scripts/quant_peers_table.py quant_peers.json [--doc docs/quantization.md]

With --doc, the table replaces what lies between the quant-peers markers of
that Markdown file instead of being printed.
"""
import json
import sys


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.2f} us"


def main():
    if len(sys.argv) == 4 and sys.argv[2] == "--doc":
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            table(json.load(open(sys.argv[1])))
        doc = open(sys.argv[3]).read()
        begin, end = "<!-- quant-peers:begin -->\n", "<!-- quant-peers:end -->"
        if begin not in doc or end not in doc:
            sys.exit(f"{sys.argv[3]} has no quant-peers markers")
        head, rest = doc.split(begin, 1)
        open(sys.argv[3], "w").write(head + begin + out.getvalue().rstrip("\n") + "\n" + end + rest.split(end, 1)[1])
        return 0
    table(json.load(open(sys.argv[1])))
    return 0


def table(r):
    date = f" on {r['date']}" if "date" in r else ""
    print(f"ferry int8 (with --calibration: each layer rounded by GPTQ or to nearest, whichever measured better) "
          f"and PyTorch {r['torch']} dynamic int8 ({r['engine']} engine), one thread, {r['rounds']} interleaved "
          f"rounds; {r['machine']}{date}; `tests/bench/quant_peers.py build/converter/ferry --json quant_peers.json`.\n")
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
