"""The peer benchmark's workloads: the PyTorch modules, their seeded weights
and inputs, shared by export_models.py (which writes every runtime's file),
worker.py (which runs them) and bench.py (which times them).

Every workload is a stack of nn.LSTM or nn.GRU layers, time-major
([T, B, F]), zero initial state:

  W1  LSTM(H, H), batch 1, one step with the state carried, H 16/64/256/1024
  W4  GRU(H, H), the same
  W2  LSTM(32, 256, num_layers=2), batch 1, T 512, the whole sequence
  W3  LSTM(64, 256), batch 64, T 128, the whole batch

Each case also has an int8 variant (the same fp32 weights, quantized by each
runtime's own tool) for W1 LSTM H 64/256/1024, W2 and W3.

The weights are PyTorch's default initialisation under a per-workload seed,
so every runtime gets the same numbers (ferry from a torch.save state dict,
the others from their exporters of the same module).
"""

import numpy as np

# torch is imported where a module is made, not here: the workers import this
# file, and their resident memory must be their runtime's alone.

# Steps per call for runtimes whose export fixes the sequence length (the
# loop is unrolled at export): a whole sequence is run as T / CHUNK calls of
# a CHUNK-step module with the state passed from call to call.
CHUNK = 16

# The case that measures Python's cost per call (each runtime's passthrough
# program); also its folder name under models/.
PASSTHROUGH = "passthrough"

# Steps over which a streaming (W1/W4) case's error is measured: the state
# carried through 64 calls.
STREAM_CHECK_STEPS = 64


class Workload:
    def __init__(self, name, kind, I, H, layers, B, T, stream, seed, int8=False):
        self.name, self.kind, self.I, self.H, self.layers = name, kind, I, H, layers
        self.B, self.T, self.stream, self.seed, self.int8 = B, T, stream, seed, int8

    @property
    def base(self):
        """The fp32 case a quantized one shares its weights with."""
        return self.name[: -len(" int8")] if self.int8 else self.name

    @property
    def stem(self):
        return self.name.replace(" ", "_")

    @property
    def state_shapes(self):
        n = 2 if self.kind == "lstm" else 1
        return [(self.layers, self.B, self.H)] * n

    def chunk(self):
        """Steps per call of the state-carrying module: 1 for a stream case,
        CHUNK for a whole-sequence case (T must be a multiple)."""
        return 1 if self.stream else CHUNK

    def module(self):
        """The fp32 PyTorch module with this workload's weights."""
        import torch
        import torch.nn as nn
        torch.manual_seed(self.seed)
        cls = nn.LSTM if self.kind == "lstm" else nn.GRU
        return cls(self.I, self.H, num_layers=self.layers).eval()

    def to_dict(self):
        return {k: getattr(self, k) for k in ("name", "kind", "I", "H", "layers", "B", "T", "stream", "int8")}


def all_workloads():
    out = []
    for h in (16, 64, 256, 1024):
        out.append(Workload(f"W1 LSTM H{h}", "lstm", h, h, 1, 1, 1, True, 100 + h))
    for h in (16, 64, 256, 1024):
        out.append(Workload(f"W4 GRU H{h}", "gru", h, h, 1, 1, 1, True, 200 + h))
    out.append(Workload("W2 LSTM 2x256 T512", "lstm", 32, 256, 2, 1, 512, False, 302))
    out.append(Workload("W3 LSTM 256 B64 T128", "lstm", 64, 256, 1, 64, 128, False, 303))
    for w in list(out):
        if w.name in ("W1 LSTM H64", "W1 LSTM H256", "W1 LSTM H1024") or w.name.startswith(("W2", "W3")):
            out.append(Workload(w.name + " int8", w.kind, w.I, w.H, w.layers, w.B, w.T, w.stream, w.seed, True))
    return out


def by_name(name):
    for w in all_workloads():
        if w.name == name:
            return w
    raise KeyError(name)


def inputs(w, steps=None, seed_offset=0):
    """The seeded input [steps, B, I] (steps: T, or STREAM_CHECK_STEPS for a
    stream case)."""
    steps = steps or (STREAM_CHECK_STEPS if w.stream else w.T)
    rng = np.random.default_rng(w.seed + 1000 + seed_offset)
    return rng.standard_normal((steps, w.B, w.I)).astype(np.float32)


def calibration(w):
    """Another seeded draw, for the quantizers that calibrate (ferry's GPTQ,
    the static int8 recipes)."""
    rng = np.random.default_rng(w.seed + 5000)
    return rng.standard_normal((64, max(w.B, 8), w.I)).astype(np.float32)


def reference(w, x):
    """PyTorch's fp32 output for x, every step's top-layer h, zero state."""
    import torch
    with torch.no_grad():
        return w.module()(torch.from_numpy(x))[0].numpy()
