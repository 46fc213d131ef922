#!/usr/bin/env python3
"""The README's benchmark table and plot, from ferry_bench_torch's JSON.

    build/tests/bench/ferry_bench_torch --json bench.json
    scripts/bench_report.py bench.json --readme README.md --svg docs/bench.svg

Reads the JSON that `ferry_bench_torch --json FILE` writes, prints the
markdown table (ferry, libtorch, their ratio, the floor and ferry's fraction
of it, for every workload), and with --readme replaces the table between the
markers `<!-- bench-table:begin -->` and `<!-- bench-table:end -->` of that
file; with --svg writes a plot: per workload, ferry, libtorch and the floor
on a log axis. Standard library only (no numpy, no matplotlib), so it runs
wherever the benchmark does.

The floor of a workload is the larger of two times the benchmark measures in
the same run: the time its multiply-adds take at the core's FMA peak, and the
time it takes to stream its weight bytes once per step. "Fraction of floor"
is floor / ferry (1.0: at the floor).
"""
import argparse
import html
import json
import math
import os
import re
import sys


def fmt_time(us):
    if us is None:
        return "-"
    if us < 1:
        return f"{us * 1000:.0f} ns"
    if us < 1000:
        return f"{us:.3g} us"
    return f"{us / 1000:.3g} ms"


def rows_of(data):
    rows = []
    for w in data["workloads"]:
        ferry = w.get("ferry_us")
        torch = w.get("torch_us")
        floor = max(w.get("fma_peak_us") or 0.0, w.get("stream_us") or 0.0) or None
        rows.append({
            "name": w["name"],
            "unit": "per step" if w.get("per_step") else "per run",
            "ferry": ferry,
            "torch": torch,
            "ratio": torch / ferry if ferry and torch else None,
            "floor": floor,
            "fraction": floor / ferry if floor and ferry else None,
            "diff": w.get("max_abs_diff"),
        })
    return rows


def table(data):
    lines = [
        f"Measured {data.get('date', '?')} with `ferry_bench_torch --json` on {data.get('machine', '?')}, backend {data.get('backend', 'auto')}, one thread (rows naming "
        f"threads: a pool of that many, timed by the wall clock, floors per core); "
        f"FMA peak {data.get('fma_peak_gflops', 0):.1f} GFLOP/s per core. Medians of thread CPU time.",
        "",
        "| workload | ferry | libtorch | libtorch / ferry | floor | fraction of floor | max abs diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows_of(data):
        lines.append(
            f"| {r['name']} ({r['unit']}) | {fmt_time(r['ferry'])} | {fmt_time(r['torch'])} | "
            f"{r['ratio']:.1f}x | {fmt_time(r['floor'])} | {r['fraction']:.2f} | {r['diff']:.1e} |"
            if r["ratio"] is not None and r["fraction"] is not None and r["diff"] is not None else
            f"| {r['name']} ({r['unit']}) | {fmt_time(r['ferry'])} | {fmt_time(r['torch'])} | - | "
            f"{fmt_time(r['floor'])} | - | - |")
    return "\n".join(lines)


def svg(data, width=820):
    """Horizontal dot plot on a log10 time axis: one row per workload."""
    rows = rows_of(data)
    series = [("ferry", "ferry", "#1f77b4"), ("libtorch", "torch", "#d62728"), ("floor", "floor", "#555555")]
    values = [r[key] for r in rows for _, key, _ in series if r[key]]
    lo = math.floor(math.log10(min(values)))
    hi = math.ceil(math.log10(max(values)))
    if hi == lo:
        hi += 1
    left, right, top, row_h = 260, 30, 40, 26
    height = top + row_h * len(rows) + 50
    plot_w = width - left - right

    def x_of(us):
        return left + (math.log10(us) - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="14">ferry vs libtorch vs the floor '
           f'({html.escape(str(data.get("machine", "")))}, {html.escape(str(data.get("date", "")))}; log scale)</text>']
    for e in range(lo, hi + 1):
        x = x_of(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{top + row_h * len(rows)}" '
                   f'stroke="#dddddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + row_h * len(rows) + 16}" text-anchor="middle">'
                   f'{html.escape(fmt_time(10 ** e))}</text>')
    for i, r in enumerate(rows):
        y = top + row_h * i + row_h / 2
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{html.escape(r["name"])}</text>')
        pts = [r[key] for _, key, _ in series if r[key]]
        if len(pts) > 1:
            out.append(f'<line x1="{x_of(min(pts)):.1f}" y1="{y:.1f}" x2="{x_of(max(pts)):.1f}" y2="{y:.1f}" '
                       f'stroke="#bbbbbb"/>')
        for label, key, color in series:
            if not r[key]:
                continue
            x = x_of(r[key])
            if key == "floor":
                out.append(f'<line x1="{x:.1f}" y1="{y - 8:.1f}" x2="{x:.1f}" y2="{y + 8:.1f}" stroke="{color}" '
                           f'stroke-width="2"><title>{label} {fmt_time(r[key])}</title></line>')
            else:
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{color}">'
                           f'<title>{label} {fmt_time(r[key])}</title></circle>')
    ly = top + row_h * len(rows) + 34
    lx = left
    for label, key, color in series:
        if key == "floor":
            out.append(f'<line x1="{lx}" y1="{ly - 8}" x2="{lx}" y2="{ly + 4}" stroke="{color}" stroke-width="2"/>')
        else:
            out.append(f'<circle cx="{lx}" cy="{ly - 2}" r="5" fill="{color}"/>')
        out.append(f'<text x="{lx + 10}" y="{ly + 2}">{label}</text>')
        lx += 110
    out.append("</svg>")
    return "\n".join(out) + "\n"


def replace_block(path, text, name="bench-table"):
    """Replaces the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->`
    in the file at path (tests/bench/peers/report.py uses it too)."""
    with open(path) as f:
        doc = f.read()
    # The block may be empty (markers on consecutive lines) or hold a table.
    begin, end = re.escape(f"<!-- {name}:begin -->"), re.escape(f"<!-- {name}:end -->")
    pattern = re.compile(f"({begin}\n)(?:.*?\n)?({end})", re.S)
    if not pattern.search(doc):
        sys.exit(f"{os.path.basename(sys.argv[0])}: {path} has no <!-- {name}:begin --> ... <!-- {name}:end --> block")
    doc = pattern.sub(lambda m: m.group(1) + text.rstrip("\n") + "\n" + m.group(2), doc, count=1)
    with open(path, "w") as f:
        f.write(doc)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", help="the file ferry_bench_torch --json wrote")
    p.add_argument("--readme", help="replace the table between the bench-table markers of this file")
    p.add_argument("--svg", help="write the plot here")
    a = p.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    if "date" not in data:  # JSON from a benchmark older than its date field: the file's own
        import datetime
        import os
        data["date"] = datetime.date.fromtimestamp(os.path.getmtime(a.json)).isoformat()
    text = table(data)
    print(text)
    if a.readme:
        replace_block(a.readme, text)
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(data))


if __name__ == "__main__":
    main()
