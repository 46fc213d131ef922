"""Write every workload's model file for one runtime (run by bench.py, one
process per runtime, in the peers' virtual environment):

    python export_models.py RUNTIME --work DIR [--ferry PATH] [--only TEXT]

RUNTIME is one of ferry, ort, et-xnnpack, et-portable, litert. Files go to
DIR/models/<case>/<runtime>.<ext>; DIR/exports-<runtime>.json records, per
case, the file, its size, how long the export took, how the runtime is fed
(`feed`: one call per step or per sequence, state carried inside or passed
in and out, steps fixed at export) and, where the tool could not make it,
the error it gave. A file already there is kept (delete DIR/models to
re-export): the unrolled ExecuTorch and LiteRT exports take minutes.

How each runtime gets the model (the same weights everywhere):
  ferry        torch.save of the state dict, `ferry convert --graph lstm|gru`;
               int8: `--quantize int8 --calibration C.npy` (GPTQ)
  ort          torch.onnx.export (the TorchScript exporter, which writes
               ONNX's LSTM/GRU op with a dynamic time axis), h/c as inputs
               and outputs; int8: onnxruntime.quantization.quantize_dynamic
               (per-channel int8 weights)
  et-xnnpack   torch.export + to_edge_transform_and_lower(XnnpackPartitioner);
               the LSTM is unrolled at export, so the steps per call are
               fixed: 1 for W1/W4, 16 for W2/W3 (run as T/16 calls with the
               state passed in and out); int8: XNNPACKQuantizer, dynamic
               per-channel int8 (prepare_pt2e / convert_pt2e)
  et-portable  the same program with no delegate: ExecuTorch's portable
               kernels (fp32 only)
  litert       litert_torch.convert (unrolled, steps fixed as above);
               int8: ai_edge_quantizer's dynamic-range recipe (int8
               weights, float activations) and its full-int8 recipe
               (int8 weights and activations, calibrated) where it can
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn as nn

from workloads import PASSTHROUGH, all_workloads, calibration


class Carry(nn.Module):
    """The module with its state as explicit inputs and outputs, what a
    runtime whose exported program keeps no state between calls needs:
    (x [T, B, I], h [L, B, H] (, c)) -> (y [T, B, H], h' (, c'))."""

    def __init__(self, rnn, kind):
        super().__init__()
        self.rnn, self.kind = rnn, kind

    def forward(self, x, h, c=None):
        if self.kind == "lstm":
            y, (h2, c2) = self.rnn(x, (h, c))
            return y, h2, c2
        y, h2 = self.rnn(x, h)
        return y, h2


class Passthrough(nn.Module):
    """Python's per-call cost: W1 LSTM H16's signature (three [1, 1, 16]
    tensors in, three out) and one trivial op per output."""

    def forward(self, x, h, c):
        return x + 1.0, h + 1.0, c + 1.0


def args_for(w, steps):
    x = torch.zeros(steps, w.B, w.I)
    return (x,) + tuple(torch.zeros(*s) for s in w.state_shapes)


def passthrough_args():
    return tuple(torch.zeros(1, 1, 16) for _ in range(3))


def feed_of(runtime, w):
    if runtime == "ferry":
        return {"steps_per_call": 1 if w.stream else w.T, "state": "inside", "fixed_steps": False}
    if runtime == "ort":
        return {"steps_per_call": 1 if w.stream else w.T, "state": "passed in and out", "fixed_steps": False}
    return {"steps_per_call": w.chunk(), "state": "passed in and out", "fixed_steps": True}


# --- ferry ---------------------------------------------------------------

def export_ferry(w, path, work, ferry):
    folder = os.path.dirname(path)
    pt = os.path.join(folder, "weights.pt")
    torch.save({f"{w.kind}.{k}": v for k, v in w.module().state_dict().items()}, pt)
    cmd = [ferry, "convert", pt, path, "--graph", w.kind, "--layout", "tbf"]
    if w.int8:
        c = os.path.join(folder, "calibration.npy")
        np.save(c, calibration(w))
        cmd += ["--quantize", "int8", "--calibration", c]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or r.stdout.strip())
    os.remove(pt)


# --- ONNX Runtime --------------------------------------------------------

def onnx_names(w):
    ins = ["x", "h"] + (["c"] if w.kind == "lstm" else [])
    outs = ["y", "h_out"] + (["c_out"] if w.kind == "lstm" else [])
    return ins, outs


def export_ort(w, path, work, ferry):
    import onnx  # noqa: F401  (the exporter needs it)
    ins, outs = onnx_names(w)
    fp32 = path if not w.int8 else path + ".fp32.onnx"
    torch.onnx.export(Carry(w.module(), w.kind), args_for(w, 1 if w.stream else w.T), fp32,
                      input_names=ins, output_names=outs, dynamic_axes={"x": {0: "T"}, "y": {0: "T"}},
                      dynamo=False, opset_version=17)
    if w.int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(fp32, path, weight_type=QuantType.QInt8, per_channel=True)
        os.remove(fp32)


def export_ort_passthrough(path):
    torch.onnx.export(Passthrough(), passthrough_args(), path, input_names=["x", "h", "c"],
                      output_names=["y", "h_out", "c_out"], dynamo=False, opset_version=17)


# --- ExecuTorch ----------------------------------------------------------

def et_program(module, example, delegate, quantize=False):
    from executorch.exir import to_edge_transform_and_lower
    if quantize:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer, get_symmetric_quantization_config)
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
        # The quantizer annotates linear ops: the recurrent op is decomposed
        # first, into per-step cells whose matrix products stay aten.linear.
        table = torch.export.default_decompositions()
        table.pop(torch.ops.aten.linear.default, None)
        gm = torch.export.export(module, example).run_decompositions(table).module()
        prepared = prepare_pt2e(gm, q)
        prepared(*example)
        module = convert_pt2e(prepared)
    ep = torch.export.export(module, example)
    partitioners = []
    if delegate:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        partitioners = [XnnpackPartitioner()]
    return to_edge_transform_and_lower(ep, partitioner=partitioners).to_executorch().buffer


def export_et(delegate):
    def export(w, path, work, ferry):
        buf = et_program(Carry(w.module(), w.kind), args_for(w, w.chunk()), delegate, quantize=w.int8)
        with open(path, "wb") as f:
            f.write(buf)
    return export


def export_et_passthrough(delegate):
    def export(path):
        with open(path, "wb") as f:
            f.write(et_program(Passthrough(), passthrough_args(), delegate))
    return export


# --- LiteRT --------------------------------------------------------------

def litert_convert(module, example, path):
    import litert_torch
    litert_torch.convert(module, example).export(path)


def export_litert(w, path, work, ferry):
    if not w.int8:
        litert_convert(Carry(w.module(), w.kind), args_for(w, w.chunk()), path)
        return
    fp32 = os.path.join(os.path.dirname(path), "litert.fp32.tflite")
    if not os.path.exists(fp32):
        litert_convert(Carry(w.module(), w.kind), args_for(w, w.chunk()), fp32)
    from ai_edge_quantizer import quantizer, recipe
    qt = quantizer.Quantizer(fp32)
    qt.load_quantization_recipe(recipe.dynamic_wi8_afp32())
    qt.quantize().export_model(path, overwrite=True)


def export_litert_full_int8(w, path, work, ferry):
    """int8 weights and activations (the recipe that runs on int8-only
    accelerators), calibrated on the calibration draw."""
    fp32 = os.path.join(os.path.dirname(path), "litert.fp32.tflite")
    if not os.path.exists(fp32):
        litert_convert(Carry(w.module(), w.kind), args_for(w, w.chunk()), fp32)
    from ai_edge_quantizer import quantizer, recipe
    qt = quantizer.Quantizer(fp32)
    qt.load_quantization_recipe(recipe.static_wi8_ai8())
    # Samples as the program meets them: each chunk of the calibration draw
    # with the state the chunks before it left (the fp32 module's), so that
    # the state inputs get their real ranges.
    cal = calibration(w)
    samples = []
    steps = w.chunk()
    carry = Carry(w.module(), w.kind)
    state = [torch.zeros(*s) for s in w.state_shapes]
    with torch.no_grad():
        for i in range(0, cal.shape[0] - steps + 1, steps):
            x = np.ascontiguousarray(cal[i:i + steps, : w.B])
            samples.append({f"args_{j}": np.array(a) for j, a in enumerate([x] + [s.numpy() for s in state])})
            state = list(carry(torch.from_numpy(x), *state)[1:])
    result = qt.calibrate({"serving_default": samples})
    qt.quantize(result).export_model(path, overwrite=True)


def export_litert_passthrough(path):
    litert_convert(Passthrough(), passthrough_args(), path)


EXPORTERS = {
    # runtime: (extension, exporter, passthrough exporter)
    "ferry": ("fb", export_ferry, None),
    "ort": ("onnx", export_ort, export_ort_passthrough),
    "et-xnnpack": ("pte", export_et(True), export_et_passthrough(True)),
    "et-portable": ("pte", export_et(False), export_et_passthrough(False)),
    "litert": ("tflite", export_litert, export_litert_passthrough),
    "litert-int8": ("tflite", export_litert_full_int8, None),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runtime", choices=sorted(EXPORTERS))
    ap.add_argument("--work", required=True)
    ap.add_argument("--ferry", default="ferry")
    ap.add_argument("--only", default="", help="only cases whose name contains this text")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ext, exporter, passthrough = EXPORTERS[a.runtime]
    record_path = os.path.join(a.work, f"exports-{a.runtime}.json")
    records = {}
    if os.path.exists(record_path):
        with open(record_path) as f:
            records = json.load(f)
    todo = [w for w in all_workloads() if a.only in w.name]
    if a.runtime == "litert-int8":
        todo = [w for w in todo if w.int8]   # the full-int8 recipe: only the int8 cases
    if a.runtime == "et-portable":
        todo = [w for w in todo if not w.int8]   # int8 is timed with its delegate only
    for w in todo:
        folder = os.path.join(a.work, "models", w.stem)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{a.runtime}.{ext}")
        old = records.get(w.name)
        if old and os.path.exists(path) and "error" not in old:
            continue
        rec = {"file": os.path.relpath(path, a.work), "feed": feed_of(a.runtime, w)}
        t0 = time.time()
        print(f"export {a.runtime}: {w.name} ...", flush=True)
        try:
            exporter(w, path, a.work, a.ferry)
            rec["bytes"] = os.path.getsize(path)
        except Exception as e:  # the tool could not make it: recorded, not fatal
            msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
            rec["error"] = f"{type(e).__name__}: {msg}"[:300]
            traceback.print_exc(limit=3)
            if os.path.exists(path):
                os.remove(path)
        rec["seconds"] = round(time.time() - t0, 1)
        records[w.name] = rec
        print(f"export {a.runtime}: {w.name}: {rec.get('bytes', rec.get('error'))} ({rec['seconds']} s)", flush=True)
        with open(record_path, "w") as f:
            json.dump(records, f, indent=1)
    if passthrough and not a.only:
        folder = os.path.join(a.work, "models", PASSTHROUGH)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{a.runtime}.{ext}")
        if not os.path.exists(path):
            try:
                passthrough(path)
                records[PASSTHROUGH] = {"file": os.path.relpath(path, a.work), "bytes": os.path.getsize(path)}
            except Exception as e:
                records[PASSTHROUGH] = {"error": f"{type(e).__name__}: {str(e).strip()[:200]}"}
        with open(record_path, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
