"""One runtime's side of the peer benchmark: a process that imports only
that runtime, loads the files export_models.py wrote and, on bench.py's
requests (one JSON object per line on stdin, one reply per line on stdout),
runs them:

  {"op": "load", "case": NAME}                      -> {"ok": true} or {"error": ...}
  {"op": "check", "case": NAME, "x": IN, "y": OUT}  -> runs the input .npy the way
      the case is timed (a stream case step by step with the state carried,
      a sequence whole or in its export's fixed chunks) and saves every
      step's output to OUT
  {"op": "time", "case": NAME, "budget": SECONDS}   -> {"median_us", "n"}: the
      median of single calls (a step, or a whole sequence) over the budget
  {"op": "quit"}

    python worker.py RUNTIME --work DIR [--cpu N]
    python worker.py RUNTIME --work DIR --rss CASE   (prints the resident
        memory after the import and the peak after loading the case and
        running it: {"import_kb", "peak_kb"})

Every runtime runs on one thread (and the process is pinned to one CPU with
--cpu). Runtimes whose exported program keeps no state get h (and c) as
inputs and pass the outputs back in on the next call, as their users must.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from workloads import PASSTHROUGH, by_name


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_kb():
    """The process's own high-water mark (VmHWM). Not getrusage's ru_maxrss,
    which Linux carries across exec from the parent that forked it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Case:
    """A loaded model and how to call it: `call()` is one timed call (a
    step, or a whole sequence), `run(x)` every step's output for x."""

    def __init__(self, w):
        self.w = w
        if w is not None:
            self.x_step = np.ascontiguousarray(np.random.default_rng(w.seed).standard_normal(
                (1 if w.stream else w.T, w.B, w.I)).astype(np.float32))


# --- a program with explicit state, fed chunk by chunk ------------------

class Carried(Case):
    """For runtimes whose program maps (x, h[, c]) -> (y, h'[, c']): the
    subclass gives `invoke(x, states) -> (y, states)` and `steps`, the steps
    one call takes (fixed at export, or None: any)."""

    steps = None

    def zero_state(self):
        return [np.zeros(s, np.float32) for s in self.w.state_shapes]

    def start(self):
        self.state = self.zero_state()

    def call(self):
        if self.w.stream:
            _, self.state = self.invoke(self.x_step, self.state)
        else:
            self.sequence(self.x_step)

    def sequence(self, x):
        state = self.zero_state()
        n = self.steps or x.shape[0]
        ys = []
        for t in range(0, x.shape[0], n):
            y, state = self.invoke(np.ascontiguousarray(x[t:t + n]), state)
            ys.append(y)
        return np.concatenate(ys, axis=0)

    def run(self, x):
        if not self.w.stream:
            return self.sequence(x)
        state = self.zero_state()
        ys = []
        for t in range(x.shape[0]):
            y, state = self.invoke(np.ascontiguousarray(x[t:t + 1]), state)
            ys.append(np.array(y))
        return np.concatenate(ys, axis=0)


class Ort(Carried):
    def __init__(self, w, path):
        super().__init__(w)
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.sess.get_inputs()]
        self.start()

    def invoke(self, x, state):
        out = self.sess.run(None, dict(zip(self.names, [x] + state)))
        return out[0], out[1:]


class Et(Carried):
    def __init__(self, w, path):
        super().__init__(w)
        import torch
        from executorch.runtime import Runtime
        self.torch = torch
        self.method = Runtime.get().load_program(path).load_method("forward")
        self.steps = w.chunk() if w is not None else 1
        self.start()

    def zero_state(self):
        return [self.torch.zeros(*s) for s in self.w.state_shapes]

    def invoke(self, x, state):
        out = self.method.execute([self.torch.from_numpy(x)] + list(state))
        # The outputs are views of the program's buffers: the next call's
        # inputs are copies.
        return out[0].numpy(), [o.clone() for o in out[1:]]


class LiteRt(Carried):
    def __init__(self, w, path):
        super().__init__(w)
        from ai_edge_litert.interpreter import Interpreter
        self.it = Interpreter(model_path=path, num_threads=1)
        self.it.allocate_tensors()
        sig = self.it.get_signature_runner("serving_default")
        ins, outs = sig.get_input_details(), sig.get_output_details()
        # args_0 (x), args_1 (h), args_2 (c); output_0 (y), output_1, ...
        self.ins = [ins[k] for k in sorted(ins, key=lambda k: int(k.rsplit("_", 1)[1]))]
        self.outs = [outs[k] for k in sorted(outs, key=lambda k: int(k.rsplit("_", 1)[1]))]
        self.steps = w.chunk() if w is not None else 1
        self.start()

    @staticmethod
    def to_tensor(detail, a):
        if detail["dtype"] == np.float32:
            return a
        scale, zero = detail["quantization"]   # full int8: the caller quantizes
        info = np.iinfo(detail["dtype"])
        return np.clip(np.round(a / scale) + zero, info.min, info.max).astype(detail["dtype"])

    @staticmethod
    def from_tensor(detail, a):
        if detail["dtype"] == np.float32:
            return a
        scale, zero = detail["quantization"]
        return (a.astype(np.float32) - zero) * scale

    def invoke(self, x, state):
        it = self.it
        for d, a in zip(self.ins, [x] + state):
            it.set_tensor(d["index"], self.to_tensor(d, a))
        it.invoke()
        out = [self.from_tensor(d, it.get_tensor(d["index"])) for d in self.outs]
        return out[0], out[1:]


class FerryPy(Case):
    def __init__(self, w, path):
        super().__init__(w)
        import ferry
        self.model = ferry.Model(path)
        self.session = self.model.session(batch=w.B, backend="auto", threads=1, max_seq=1 if w.stream else w.T)
        self.arena = self.model.arena_bytes(batch=w.B, max_seq=1 if w.stream else w.T)
        self.out = np.zeros((w.B, w.H) if w.stream else (w.T, w.B, w.H), np.float32)
        self.x_t = np.ascontiguousarray(self.x_step[0])

    def call(self):
        if self.w.stream:
            self.session.step(self.x_t, out=self.out)
        else:
            self.session.reset()
            self.session.run(self.x_step, out=self.out)

    def run(self, x):
        self.session.reset()
        if not self.w.stream:
            return self.session.run(x)
        ys = [np.array(self.session.step(np.ascontiguousarray(x[t]))) for t in range(x.shape[0])]
        self.session.reset()
        return np.stack(ys, axis=0)


class Passthrough(Carried):
    """Python's per-call cost: the runtime's passthrough program, three
    [1, 1, 16] tensors in and out."""

    def __init__(self, runtime_cls, path):
        class W:
            stream, B, T, I = True, 1, 1, 16
            state_shapes = [(1, 1, 16), (1, 1, 16)]
            seed = 0

            @staticmethod
            def chunk():
                return 1
        self.inner = runtime_cls(W, path)
        self.w = W

    def call(self):
        self.inner.call()


RUNTIMES = {
    "ort": (Ort, "ort.onnx"),
    "et-xnnpack": (Et, "et-xnnpack.pte"),
    "et-portable": (Et, "et-portable.pte"),
    "litert": (LiteRt, "litert.tflite"),
    "litert-int8": (LiteRt, "litert-int8.tflite"),
    "ferry-py": (FerryPy, "ferry.fb"),
}


def load(runtime, work, name):
    cls, file = RUNTIMES[runtime]
    if name == PASSTHROUGH:
        path = os.path.join(work, "models", PASSTHROUGH, file)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no passthrough program for {runtime}")
        return Passthrough(cls, path)
    w = by_name(name)
    path = os.path.join(work, "models", w.stem, file)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: not exported")
    return cls(w, path)


def time_calls(call, budget, at_least=3, at_most=200000):
    call()
    samples = []
    end = time.perf_counter() + budget
    clock = time.perf_counter_ns
    while len(samples) < at_least or (len(samples) < at_most and time.perf_counter() < end):
        t0 = clock()
        call()
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3, len(samples)


def serve(runtime, work):
    cases = {}
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "quit":
                break
            if op == "load":
                t0 = time.perf_counter()
                cases[req["case"]] = load(runtime, work, req["case"])
                reply = {"ok": True, "load_s": time.perf_counter() - t0}
                arena = getattr(cases[req["case"]], "arena", None)
                if arena is not None:
                    reply["arena_bytes"] = arena
            elif op == "check":
                c = cases[req["case"]]
                np.save(req["y"], np.asarray(c.run(np.load(req["x"]))))
                reply = {"ok": True}
            elif op == "time":
                med, n = time_calls(cases[req["case"]].call, req["budget"])
                reply = {"median_us": med, "n": n}
            else:
                reply = {"error": f"unknown op {op}"}
        except Exception as e:  # reported to bench.py, which records it
            msg = (str(e).strip().splitlines() or [""])[0]
            reply = {"error": f"{type(e).__name__}: {msg}"[:300]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def import_runtime(runtime):
    if runtime == "ort":
        import onnxruntime  # noqa: F401
    elif runtime.startswith("et-"):
        import executorch.runtime  # noqa: F401
    elif runtime.startswith("litert"):
        import ai_edge_litert.interpreter  # noqa: F401
    elif runtime == "ferry-py":
        import ferry  # noqa: F401


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runtime", choices=sorted(RUNTIMES))
    ap.add_argument("--work", required=True)
    ap.add_argument("--cpu", type=int)
    ap.add_argument("--rss")
    a = ap.parse_args()
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    import_runtime(a.runtime)
    if a.runtime.startswith("et-"):
        import torch
        torch.set_num_threads(1)
    if a.rss:
        after_import = rss_kb()
        c = load(a.runtime, a.work, a.rss)
        for _ in range(3):
            c.call()
        print(json.dumps({"import_kb": after_import, "peak_kb": peak_kb()}))
        return 0
    serve(a.runtime, a.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
