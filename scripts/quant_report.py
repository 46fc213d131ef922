#!/usr/bin/python3
"""Quantization on the trained fixtures: size, test metric and error per dtype
and rounding, as a table (Markdown) and a plot (SVG), from the ferry CLI.

    /usr/bin/python3 scripts/quant_report.py build/converter/ferry \
        --json quant_report.json --doc docs/quantization.md --svg docs/quantization.svg

For every model of tests/fixtures/trained/manifest.json (trained on real data
sets by tests/fixtures/make_trained_fixtures.py, saved as a GPU machine saves
them) it runs `ferry convert` at f32, f16, int8 and int4 (int8 / int4 rounded
to nearest, and GPTQ on the model's calibration file: its training inputs,
never the test set), then `ferry run` on the held-out test inputs, and
measures:
  - the file size (the .fb written),
  - the test metric the manifest names (RMSE against the targets, or argmax
    accuracy against the labels),
  - the RMS deviation from PyTorch's own fp32 output on the same inputs.
Needs numpy (Debian python3-numpy); nothing else. The SVG plots deviation
against size, one line per model, one point per dtype, on log axes.
"""
import argparse
import html
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINED = os.path.join(HERE, "..", "tests", "fixtures", "trained")

CONFIGS = [  # (label, convert flags, uses calibration)
    ("f32", [], False),
    ("f16", ["--quantize", "f16"], False),
    ("int8 nearest", ["--quantize", "int8", "--rounding", "nearest"], True),
    ("int8 gptq", ["--quantize", "int8", "--rounding", "gptq"], True),
    ("int4 nearest", ["--quantize", "int4", "--rounding", "nearest"], True),
    ("int4 gptq", ["--quantize", "int4", "--rounding", "gptq"], True),
]


def metric_of(entry, y):
    """(metric name, value, higher is better) for the model's test outputs."""
    name = entry["name"]
    if name == "sunspots_lstm":
        target = np.load(os.path.join(TRAINED, entry["target"])).astype(np.float64)
        d = (y.reshape(target.shape).astype(np.float64) - target) * entry["data"]["std"]
        return "RMSE (sunspots)", float(np.sqrt(np.mean(d * d))), False
    if "labels" in entry or name == "digits_gru":
        labels = np.load(os.path.join(TRAINED, entry.get("labels", "digits_gru.labels.npy")))
        return "accuracy", float(np.mean(np.argmax(y.reshape(len(labels), -1), axis=1) == labels)), True
    # digits_rows_lstm: step t predicts image row t + 1 (rows 1-7 scored).
    x = np.load(os.path.join(TRAINED, entry["input"])).astype(np.float64)
    p = y.reshape(x.shape[0], x.shape[1], -1).astype(np.float64)
    d = p[:, :-1, :] - x[:, 1:, :]
    return "RMSE (next row)", float(np.sqrt(np.mean(d * d))), False


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"quant_report: {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def measure(ferry, entry, work):
    pt = os.path.join(TRAINED, entry["pt"])
    x = os.path.join(TRAINED, entry["input"])
    ref = np.load(os.path.join(TRAINED, entry["torch_output"])).astype(np.float64)
    layout = ["--layout", "btf" if entry.get("batch_first") else "tbf"]
    rows = []
    for label, flags, calibrated in CONFIGS:
        out = os.path.join(work, f"{entry['name']}.{label.replace(' ', '_')}.fb")
        cal = ["--calibration", os.path.join(TRAINED, entry["calibration"])] if calibrated else []
        run([ferry, "convert", pt, out, "--graph", entry["graph"], *layout, *flags, *cal, "--quiet"])
        y_path = os.path.join(work, "y.npy")
        run([ferry, "run", out, "--input", x, "--output", y_path, "--quiet"])
        y = np.load(y_path).astype(np.float64)
        metric, value, higher_better = metric_of(entry, y)
        rows.append(dict(config=label, bytes=os.path.getsize(out), metric=metric, value=value,
                         higher_is_better=higher_better,
                         deviation=float(np.sqrt(np.mean((y.reshape(ref.shape) - ref) ** 2)))))
    return rows


def markdown(report):
    lines = [f"Measured {report['date']} on {report['machine']} with `{report['command']}`.", ""]
    for m in report["models"]:
        f32 = m["rows"][0]
        lines.append(f"**{m['name']}** ({m['description']}), test metric: {f32['metric']}")
        lines.append("")
        lines.append("| weights | file | test metric | change vs f32 | RMS deviation from PyTorch fp32 |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in m["rows"]:
            if r["metric"] == "accuracy":
                value, change = f"{100 * r['value']:.2f}%", f"{100 * (r['value'] - f32['value']):+.2f} points"
            else:
                value, change = f"{r['value']:.4g}", f"{100 * (r['value'] / f32['value'] - 1):+.2f}%"
            lines.append(f"| {r['config']} | {r['bytes'] / 1024:.1f} KiB | {value} | {change} | "
                         f"{r['deviation']:.2e} |")
        lines.append("")
    return "\n".join(lines)


def svg(report):
    w, h, left, right, top, bottom = 720, 420, 70, 190, 40, 50
    pts = [(r["bytes"], max(r["deviation"], 1e-9)) for m in report["models"] for r in m["rows"] if r["config"] != "f32"]
    x0, x1 = math.log10(min(p[0] for p in pts)) - 0.05, math.log10(max(p[0] for p in pts)) + 0.05
    y0, y1 = math.floor(math.log10(min(p[1] for p in pts))), math.ceil(math.log10(max(p[1] for p in pts)))
    sx = lambda b: left + (math.log10(b) - x0) / (x1 - x0) * (w - left - right)
    sy = lambda d: h - bottom - (math.log10(d) - y0) / (y1 - y0) * (h - top - bottom)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">Quantized weights: size and error '
           f'on the trained fixtures</text>']
    for e in range(y0, y1 + 1):
        y = sy(10 ** e)
        out.append(f'<line x1="{left}" y1="{y}" x2="{w - right}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="16" y="{h / 2}" transform="rotate(-90 16 {h / 2})" text-anchor="middle">'
               f'RMS deviation from PyTorch fp32</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">model file size '
               f'(log scale; labels in KiB)</text>')
    for i, m in enumerate(report["models"]):
        c = colors[i % len(colors)]
        rows = [r for r in m["rows"] if r["config"] != "f32"]
        for style, keep in (("", lambda r: "nearest" not in r["config"]), ("4 3", lambda r: "gptq" not in r["config"])):
            line = [r for r in rows if keep(r)]
            path = " ".join(f"{sx(r['bytes']):.1f},{sy(max(r['deviation'], 1e-9)):.1f}" for r in line)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="1.5" '
                       f'stroke-dasharray="{style}"/>')
        for r in rows:
            x, y = sx(r["bytes"]), sy(max(r["deviation"], 1e-9))
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{c}"><title>{html.escape(m["name"])} '
                       f'{r["config"]}: {r["bytes"]} bytes, {r["deviation"]:.2e}</title></circle>')
            if i == 0 or r["config"] in ("f16", "int4 gptq"):
                out.append(f'<text x="{x + 5:.1f}" y="{y - 5:.1f}" font-size="10" fill="{c}">{r["config"]}, '
                           f'{r["bytes"] / 1024:.0f}</text>')
        out.append(f'<rect x="{w - right + 15}" y="{top + 20 * i}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{w - right + 32}" y="{top + 20 * i + 10}">{html.escape(m["name"])}</text>')
    out.append(f'<text x="{w - right + 15}" y="{top + 20 * len(report["models"]) + 16}" font-size="10">'
               f'solid: GPTQ, dashed: nearest</text>')
    out.append(f'<text x="{w - right + 15}" y="{h - bottom}" font-size="9">{html.escape(report["date"])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def replace_block(path, name, text):
    """Replaces what lies between <!-- NAME:begin --> and <!-- NAME:end --> in `path`."""
    doc = open(path).read()
    begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
    if begin not in doc or end not in doc:
        sys.exit(f"{path} has no {begin.strip()} ... {end} block")
    head, rest = doc.split(begin, 1)
    open(path, "w").write(head + begin + text.rstrip("\n") + "\n" + end + rest.split(end, 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ferry", help="the ferry CLI (build/converter/ferry)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--markdown", help="write the tables here ('-': stdout)")
    ap.add_argument("--svg", help="write the plot here")
    ap.add_argument("--doc", help="replace the tables between the quant-report markers of this Markdown file")
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(TRAINED, "manifest.json")))
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    report = dict(date=time.strftime("%Y-%m-%d"), machine=f"{cpu}, {os.cpu_count()} cores, {platform.system()}",
                  command="scripts/quant_report.py build/converter/ferry", models=[])
    with tempfile.TemporaryDirectory() as work:
        for e in manifest:
            report["models"].append(dict(name=e["name"], description=e["training"]["model"],
                                         rows=measure(a.ferry, e, work)))
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)
    if a.markdown:
        text = markdown(report)
        if a.markdown == "-":
            print(text)
        else:
            open(a.markdown, "w").write(text + "\n")
    if a.svg:
        open(a.svg, "w").write(svg(report))
    if a.doc:
        replace_block(a.doc, "quant-report", markdown(report))


if __name__ == "__main__":
    main()
