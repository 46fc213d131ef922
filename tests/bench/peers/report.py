"""docs/performance.md's peer tables and docs/peers.svg from the JSON that
bench.py writes (tests/bench/peers/run.sh runs both):

    python report.py PEERS.json [--doc docs/performance.md] [--svg docs/peers.svg]

Prints the markdown; with --doc replaces the text between
`<!-- peers-table:begin -->` and `<!-- peers-table:end -->` in that file;
with --svg writes the plot (per workload, every runtime's median on a log
time axis). Standard library only.

Ratios: "fastest peer / ferry" divides the fastest other runtime's median by
ferry's (above 1: ferry is faster). The other runtimes are called from
Python; so is `ferry (Python)`, which makes that column the like-for-like
one. The C column is what a C or C++ application (or firmware) gets.
"""

import argparse
import html
import json
import math
import os
import sys

# The markers' block replacement, shared with the libtorch table's script.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts"))
from bench_report import replace_block  # noqa: E402

PEERS = ["ort", "et-xnnpack", "et-portable", "litert", "litert-int8"]
COLUMNS = ["ferry", "ferry-py"] + PEERS


def fmt_time(us):
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1000:
        return f"{us / 1000:.3g} ms" if us < 100000 else f"{us / 1000:.0f} ms"
    if us >= 1:
        return f"{us:.3g} us"
    return f"{us * 1000:.0f} ns"


def fmt_bytes(n):
    if n is None:
        return "-"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def fmt_err(e):
    return "-" if e is None else f"{e:.1e}"


def median(entry):
    return entry.get("median_us") if entry else None


def fastest_peer(case):
    best = None
    for rt in PEERS:
        us = median(case["runtimes"].get(rt))
        if us is not None and (best is None or us < best[1]):
            best = (rt, us)
    return best


def speed_table(data, int8):
    labels = data["labels"]
    cases = [c for c in data["cases"] if c["workload"]["int8"] == int8]
    cols = [rt for rt in COLUMNS if any(rt in c["runtimes"] for c in cases)]
    head = ["workload"] + [labels[rt] for rt in cols] + ["fastest peer", "fastest peer / ferry (C)",
                                                          "fastest peer / ferry (Python)", "read floor",
                                                          "could not"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        cells = [c["workload"]["name"]]
        for rt in cols:
            e = c["runtimes"].get(rt)
            if not e:
                cells.append("")
            elif median(e) is not None:
                cells.append(fmt_time(median(e)))
            else:
                cells.append("fails" if ("run_error" in e or "error" in e.get("export", {})) else "-")
        best = fastest_peer(c)
        f, fp = median(c["runtimes"].get("ferry")), median(c["runtimes"].get("ferry-py"))
        if best:
            cells.append(labels[best[0]])
            cells.append(f"{best[1] / f:.2f}x" if f else "-")
            cells.append(f"{best[1] / fp:.2f}x" if fp else "-")
        else:
            cells += ["-", "-", "-"]
        cells.append(fmt_time((c.get("floor") or {}).get("read_us")))
        cells.append(could_not(c, labels))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def could_not(case, labels):
    """The runtimes that could not make or run this case, and what they said
    (first line, shortened)."""
    out = []
    for rt in PEERS:
        e = case["runtimes"].get(rt)
        if not e:
            continue
        err = (e.get("export") or {}).get("error")
        where = "export"
        if not err:
            err, where = e.get("run_error"), "run"
        if err:
            msg = err.splitlines()[0]
            msg = msg if len(msg) <= 70 else msg[:67] + "..."
            out.append(f"{labels[rt]} ({where}: {html.escape(msg, quote=False)})")
    return "; ".join(out)


def passthrough_line(data):
    pt = data.get("passthrough", {})
    parts = [f"{data['labels'][rt]} {fmt_time(median(e))}" for rt, e in pt.items() if median(e) is not None]
    return ("Python's cost per call, apart (each runtime's passthrough program: three [1, 1, 16] tensors in "
            "and out, one add each): " + ", ".join(parts) + ". It is part of every W1/W4 figure called "
            "from Python (ferry's own Python per-call cost is the difference between its two columns).")


def error_table(data):
    labels = data["labels"]
    cases = [c for c in data["cases"] if c["workload"]["int8"]]
    cols = [rt for rt in COLUMNS if rt != "ferry-py" and any(rt in c["runtimes"] for c in cases)]
    head = ["int8 workload"] + [labels[rt] for rt in cols]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        cells = [c["workload"]["name"]]
        for rt in cols:
            e = c["runtimes"].get(rt) or {}
            chk = e.get("check") or {}
            cells.append(f"{fmt_err(chk.get('max_abs'))} / {fmt_err(chk.get('rms'))}" if "max_abs" in chk else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def memory_table(data):
    labels = data["labels"]
    cases = [c for c in data["cases"] if not c["workload"]["int8"]]
    cols = [rt for rt in COLUMNS if rt not in ("ferry-py", "litert-int8")]
    head = ["workload"] + [labels[rt] if rt != "ferry" else "ferry" for rt in cols] + ["ferry arena"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cases:
        cells = [c["workload"]["name"]]
        for rt in cols:
            e = c["runtimes"].get(rt) or {}
            size = (e.get("export") or {}).get("bytes")
            rss = e.get("rss_kb") or {}
            if size is None:
                cells.append("-")
                continue
            text = fmt_bytes(size)
            if "peak_kb" in rss:
                text += f" / {rss['peak_kb'] / 1024:.0f} MiB (+{(rss['peak_kb'] - rss['import_kb']) / 1024:.0f})"
            cells.append(text)
        cells.append(fmt_bytes((c["runtimes"].get("ferry") or {}).get("arena_bytes")))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def limits(data):
    """How each peer had to be fed, and what it could not do, from the
    export records and the runs."""
    labels = data["labels"]
    out = []
    for rt in PEERS:
        state, chunks, fails = False, set(), []
        for c in data["cases"]:
            e = c["runtimes"].get(rt)
            if not e:
                continue
            feed = (e.get("export") or {}).get("feed") or {}
            state = state or feed.get("state") == "passed in and out"
            if feed.get("fixed_steps") and not c["workload"]["stream"]:
                chunks.add(feed["steps_per_call"])
            err = (e.get("export") or {}).get("error") or e.get("run_error")
            if err:
                fails.append(f"{c['workload']['name']} ({err.splitlines()[0][:100]})")
        notes = []
        if state:
            notes.append("keeps no state between calls: h (and c) are inputs and outputs of the file, "
                         "passed back in on every call")
        if chunks:
            n = ", ".join(str(k) for k in sorted(chunks))
            notes.append(f"unrolls the loop at export, so a file runs exactly the steps it was exported with: "
                         f"1 for a streaming step, {n}-step chunks for W2/W3 (run as T/{n} calls with the "
                         f"state passed on); another length needs another export")
        if fails:
            notes.append("could not run " + "; ".join(fails))
        if notes:
            out.append(f"| {labels[rt]} | {html.escape('; '.join(notes), quote=False)} |")
    return "| runtime | how it had to be fed, and what it could not do |\n|---|---|\n" + "\n".join(out)


def markdown(data):
    v = data["versions"]
    m = data["machine"]
    s = data["settings"]
    ver = ", ".join(f"{k} {v[k]}" for k in ("onnxruntime", "executorch", "ai-edge-litert", "litert-torch",
                                             "ai-edge-quantizer", "torch") if v.get(k))
    intro = (f"Measured {data['date']} with `tests/bench/peers/run.sh` on {m['cpu']} ({m['cpus']} CPUs), "
             f"one thread, every runtime pinned to CPU {m['pinned_cpu']}, {s['rounds']} rounds interleaved; "
             f"medians of the rounds' medians (every trial and its spread: [peers.json](peers.json)). "
             f"{ver}; {v.get('ferry', 'ferry')}, backend auto. Times per call: a step (W1, W4) or the whole "
             f"sequence or batch (W2, W3).")
    floor = ("\"read floor\": the time one core takes to read the step's weights once (a plain read of "
             "that many bytes, measured in the same run); a step that reads every weight once cannot be faster.")
    parts = [intro, "", "fp32:", "", speed_table(data, False), "", passthrough_line(data) + " " + floor, "",
             "int8 (each runtime's own quantizer; ferry: GPTQ with calibration):", "", speed_table(data, True), "",
             "int8 error against PyTorch's fp32 output, max abs / RMS (W1 over 64 steps with the state carried; "
             "W2 and W3 every step of the sequence):", "", error_table(data), "",
             "File size / peak resident memory of a process that imports the runtime, loads the file and runs "
             "it (in parentheses: what the model added after the import), and ferry's exact arena:", "",
             memory_table(data), "", limits(data)]
    return "\n".join(parts)


def svg(data, width=900):
    labels = data["labels"]
    colors = {"ferry": "#1f77b4", "ferry-py": "#6baed6", "ort": "#d62728", "et-xnnpack": "#2ca02c",
              "et-portable": "#98df8a", "litert": "#ff7f0e", "litert-int8": "#ffbb78"}
    rows = [c for c in data["cases"]]
    vals = [median(e) for c in rows for e in c["runtimes"].values() if median(e)]
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    hi = hi + 1 if hi == lo else hi
    left, right, top, row_h = 230, 30, 40, 24
    height = top + row_h * len(rows) + 80
    plot_w = width - left - right

    def x_of(us):
        return left + (math.log10(us) - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="14">time per call, log scale '
           f'({html.escape(data["machine"]["cpu"])}, {data["date"]}, one thread)</text>']
    for e in range(lo, hi + 1):
        x = x_of(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{top + row_h * len(rows)}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + row_h * len(rows) + 16}" text-anchor="middle">'
                   f'{html.escape(fmt_time(10 ** e))}</text>')
    for i, c in enumerate(rows):
        y = top + row_h * i + row_h / 2
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{html.escape(c["workload"]["name"])}</text>')
        for rt in COLUMNS:
            us = median(c["runtimes"].get(rt))
            if us:
                shape = "rect" if rt.startswith("ferry") else "circle"
                if shape == "rect":
                    out.append(f'<rect x="{x_of(us) - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" '
                               f'fill="{colors[rt]}"><title>{labels[rt]} {fmt_time(us)}</title></rect>')
                else:
                    out.append(f'<circle cx="{x_of(us):.1f}" cy="{y:.1f}" r="5" fill="{colors[rt]}" '
                               f'fill-opacity="0.85"><title>{labels[rt]} {fmt_time(us)}</title></circle>')
    ly, lx = top + row_h * len(rows) + 36, 20
    for rt in COLUMNS:
        step = 14 + 7 * len(labels[rt]) + 16
        if lx + step > width:  # the legend wraps
            ly, lx = ly + 18, 20
        out.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colors[rt]}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly}">{html.escape(labels[rt])}</text>')
        lx += step
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--doc")
    ap.add_argument("--svg")
    a = ap.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    text = markdown(data)
    print(text)
    if a.doc:
        replace_block(a.doc, text, "peers-table")
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
