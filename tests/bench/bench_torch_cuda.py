#!/usr/bin/env python3
"""PyTorch's cuDNN LSTM and onnxruntime's CUDA provider, timed the way
ferry_bench_cuda times ferry's CUDA backend (tests/bench/ferry_bench_cuda.cpp
drives this script; it is not meant to be run by hand).

Reads from --dir the LSTM's parameters in PyTorch's names (weight_ih_l0.npy,
weight_hh_l0.npy, bias_ih_l0.npy, bias_hh_l0.npy, ...) and the input x.npy
[T, B, I] (time-major). Writes y_torch.npy and y_ort.npy (the output on x,
[T, B, H]; step by step when --streaming; y_torch_graph.npy likewise) and
prints one JSON object:

  {"torch": {"us": median, "note": "..."}, "torch_graph": {...}, "ort": {...}}

"torch" is eager PyTorch; "torch_graph" the same nn.LSTM captured with its
copies in one CUDA Graph over pinned host buffers (the strongest PyTorch
on a GPU), replayed and synchronised per call.

with "us" null and the reason in "note" where a side is not available
(no torch, no CUDA, no onnxruntime, no CUDAExecutionProvider).

Timing, host to host, synchronised every call: --streaming times one step
(x_t copied to the GPU, lstm(x_t, (h, c)), y_t copied back, the state kept on
the GPU); otherwise one whole sequence from the zero state. Median over
--calls calls after a warm-up.
"""
import argparse
import json
import os
import sys
import time


def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return None
    return values[n // 2] if n % 2 else 0.5 * (values[n // 2 - 1] + values[n // 2])


def load(args):
    import numpy as np
    params = {}
    for k in range(args.layers):
        for name in ("weight_ih_l%d", "weight_hh_l%d", "bias_ih_l%d", "bias_hh_l%d"):
            params[name % k] = np.load(os.path.join(args.dir, (name % k) + ".npy"))
    x = np.load(os.path.join(args.dir, "x.npy"))
    return params, x


def cuda_lstm(args, params):
    """(torch, device, nn.LSTM on it with the weights) or (None, the reason, None)."""
    try:
        import torch
    except ImportError as e:
        return None, "torch not installed (%s)" % e, None
    if not torch.cuda.is_available():
        return None, "torch %s without CUDA or no GPU" % torch.__version__, None
    dev = torch.device("cuda", args.device)
    # cuDNN's RNNs use TF32 tensor cores unless told not to (allow_tf32 is
    # True by default for cuDNN): 10-bit mantissas, about 1e-4 off. ferry
    # computes in float32, so the comparison is float32 against float32
    # unless FERRY_BENCH_TORCH_TF32=1.
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    lstm = torch.nn.LSTM(args.input, args.hidden, num_layers=args.layers)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(torch.from_numpy(params[name]))
    return torch, dev, lstm.to(dev).eval()


def bench_torch(args, params, x):
    torch, dev, lstm = cuda_lstm(args, params)
    if torch is None:
        return {"us": None, "note": dev}
    import numpy as np
    xs = torch.from_numpy(x)
    T, B = x.shape[0], x.shape[1]

    def zeros():
        return (torch.zeros(args.layers, B, args.hidden, device=dev),
                torch.zeros(args.layers, B, args.hidden, device=dev))

    with torch.no_grad():
        if args.streaming:
            hc = zeros()
            ys = []
            for t in range(T):
                y, hc = lstm(xs[t:t + 1].to(dev), hc)
                ys.append(y.cpu())
            y = torch.cat(ys, 0)
        else:
            y, _ = lstm(xs.to(dev), zeros())
            y = y.cpu()
        np.save(os.path.join(args.dir, "y_torch.npy"), y.numpy().astype(np.float32))
        times = []
        warm = 100 if args.streaming else 3
        hc = zeros()
        for i in range(-warm, args.calls):
            t0 = time.perf_counter()
            if args.streaming:
                t = (i + warm) % T
                y, hc = lstm(xs[t:t + 1].to(dev), hc)
                y.cpu()
            else:
                y, _ = lstm(xs.to(dev), zeros())
                y.cpu()
            t1 = time.perf_counter()
            if i >= 0:
                times.append((t1 - t0) * 1e6)
    note = "torch %s, cuDNN %s, %s, TF32 %s" % (torch.__version__, torch.backends.cudnn.version(),
                                                torch.cuda.get_device_name(args.device),
                                                "on" if args.tf32 else "off")
    return {"us": median(times), "note": note}


def bench_torch_graph(args, params, x):
    """The strongest PyTorch on a GPU: nn.LSTM (cuDNN) with the input copy,
    the call, the state update and the output copy captured in one CUDA
    Graph over pinned host buffers; each call writes the input into the
    pinned buffer, replays the graph and synchronises."""
    torch, dev, lstm = cuda_lstm(args, params)
    if torch is None:
        return {"us": None, "note": dev}
    import numpy as np
    T, B = x.shape[0], x.shape[1]
    steps = 1 if args.streaming else T
    x_host = torch.zeros((steps, B, args.input), dtype=torch.float32).pin_memory()
    y_host = torch.zeros((steps, B, args.hidden), dtype=torch.float32).pin_memory()
    x_dev = torch.zeros((steps, B, args.input), device=dev)
    h = torch.zeros(args.layers, B, args.hidden, device=dev)
    c = torch.zeros_like(h)

    def body():
        x_dev.copy_(x_host, non_blocking=True)
        if not args.streaming:  # a sequence starts from the zero state
            h.zero_()
            c.zero_()
        y, (h1, c1) = lstm(x_dev, (h, c))
        h.copy_(h1)
        c.copy_(c1)
        y_host.copy_(y, non_blocking=True)

    with torch.no_grad():
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # warm-up before capture (cuDNN's plans, workspace)
            for _ in range(3):
                body()
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        x_in = x_host.numpy()
        y_out = y_host.numpy()

        def call(chunk):
            x_in[...] = chunk
            graph.replay()
            torch.cuda.synchronize(dev)
            return y_out.copy()

        h.zero_()
        c.zero_()
        if args.streaming:
            y = np.concatenate([call(x[t:t + 1]) for t in range(T)], 0)
        else:
            y = call(x)
        np.save(os.path.join(args.dir, "y_torch_graph.npy"), y.astype(np.float32))
        h.zero_()
        c.zero_()
        times = []
        warm = 100 if args.streaming else 3
        for i in range(-warm, args.calls):
            t = (i + warm) % T
            chunk = x[t:t + 1] if args.streaming else x
            t0 = time.perf_counter()
            call(chunk)
            t1 = time.perf_counter()
            if i >= 0:
                times.append((t1 - t0) * 1e6)
    note = ("torch %s, cuDNN %s, %s, one CUDA Graph (pinned input copy, nn.LSTM, state, pinned output copy), "
            "TF32 %s" % (torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name(args.device),
                         "on" if args.tf32 else "off"))
    return {"us": median(times), "note": note}


def bench_ort(args, params, x):
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        return {"us": None, "note": "onnxruntime not installed (%s)" % e}
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return {"us": None, "note": "onnxruntime %s has no CUDAExecutionProvider" % ort.__version__}
    try:
        import torch
    except ImportError:
        return {"us": None, "note": "torch is needed to export the ONNX model"}
    lstm = torch.nn.LSTM(args.input, args.hidden, num_layers=args.layers)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(torch.from_numpy(params[name]))

    class WithState(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, h, c):
            y, (h, c) = self.inner(x, (h, c))
            return y, h, c

    T, B = x.shape[0], x.shape[1]
    path = os.path.join(args.dir, "lstm.onnx")
    steps = 1 if args.streaming else T
    sample = (torch.zeros(steps, B, args.input), torch.zeros(args.layers, B, args.hidden),
              torch.zeros(args.layers, B, args.hidden))
    torch.onnx.export(WithState(lstm), sample, path, input_names=["x", "h0", "c0"],
                      output_names=["y", "hn", "cn"], opset_version=14)
    options = ort.SessionOptions()
    session = ort.InferenceSession(path, options, providers=[("CUDAExecutionProvider", {"device_id": args.device})])
    if "CUDAExecutionProvider" not in session.get_providers():
        return {"us": None, "note": "onnxruntime fell back to %s" % session.get_providers()}
    h = np.zeros((args.layers, B, args.hidden), np.float32)
    c = np.zeros_like(h)
    if args.streaming:
        ys = []
        for t in range(T):
            y, h, c = session.run(None, {"x": x[t:t + 1], "h0": h, "c0": c})
            ys.append(y)
        y = np.concatenate(ys, 0)
    else:
        y, _, _ = session.run(None, {"x": x, "h0": h, "c0": c})
    np.save(os.path.join(args.dir, "y_ort.npy"), y.astype(np.float32))
    times = []
    warm = 100 if args.streaming else 3
    h = np.zeros((args.layers, B, args.hidden), np.float32)
    c = np.zeros_like(h)
    zero = np.zeros_like(h)
    for i in range(-warm, args.calls):
        t0 = time.perf_counter()
        if args.streaming:
            t = (i + warm) % T
            _, h, c = session.run(None, {"x": x[t:t + 1], "h0": h, "c0": c})
        else:
            session.run(None, {"x": x, "h0": zero, "c0": zero})
        t1 = time.perf_counter()
        if i >= 0:
            times.append((t1 - t0) * 1e6)
    return {"us": median(times), "note": "onnxruntime %s, CUDAExecutionProvider" % ort.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--input", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--calls", type=int, required=True)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--streaming", action="store_true")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--tf32", action="store_true",
                    default=os.environ.get("FERRY_BENCH_TORCH_TF32") == "1",
                    help="let cuDNN use TF32 (default: off, float32 like ferry; "
                         "or FERRY_BENCH_TORCH_TF32=1)")
    args = ap.parse_args()
    try:
        params, x = load(args)
    except ImportError as e:
        why = {"us": None, "note": "numpy not installed (%s)" % e}
        print(json.dumps({"torch": why, "torch_graph": why, "ort": why}))
        return 0
    result = {}
    for key, fn, skip in (("torch", bench_torch, args.no_torch), ("torch_graph", bench_torch_graph, args.no_torch),
                          ("ort", bench_ort, args.no_ort)):
        if skip:
            result[key] = {"us": None, "note": "--no-" + key}
            continue
        try:
            result[key] = fn(args, params, x)
        except Exception as e:  # report, never hide: the note carries it
            result[key] = {"us": None, "note": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.flush()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
