"""ferry.check: the converted model against the PyTorch module, on the same input."""

import numpy as np

from ._ferry import Model


class CheckResult:
    """The outcome of ferry.check; truthy when every error is within atol.

    whole_error: max abs difference of Session.run against the module.
    stream_error: the same for the sequence stepped one step at a time with
        the state carried (None when not streamed).
    per_step: max abs error at each step of the streamed run (None when not
        streamed): where an error grows along the sequence.
    max_error: the larger of the two; atol: the tolerance; ok: max_error <= atol.
    note: why streaming was not checked, where it was not.
    """

    def __init__(self, whole_error, stream_error, per_step, atol, note=""):
        self.whole_error = float(whole_error)
        self.stream_error = None if stream_error is None else float(stream_error)
        self.per_step = per_step
        self.atol = float(atol)
        self.max_error = max(self.whole_error, self.stream_error or 0.0)
        self.ok = bool(np.isfinite(self.max_error) and self.max_error <= self.atol)
        self.note = note

    def __bool__(self):
        return self.ok

    def __repr__(self):
        stream = "not streamed" if self.stream_error is None else f"streamed {self.stream_error:.3g}"
        return (f"<ferry.CheckResult {'ok' if self.ok else 'FAILED'}: whole {self.whole_error:.3g}, {stream}, "
                f"atol {self.atol:g}{'; ' + self.note if self.note else ''}>")


def _torch_output(module, x, lengths):
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x))
    with torch.no_grad():
        y = module(t) if lengths is None else module(t, torch.as_tensor(np.asarray(lengths)))
    while isinstance(y, (tuple, list)):  # nn.LSTM and friends: (output, state)
        y = y[0]
    return y.detach().cpu().float().numpy()


def _time_index(layout, t):
    """The index selecting step t of a sequence in `layout`."""
    return {"tbf": (t,), "tb": (t,), "btf": (slice(None), t), "bt": (slice(None), t),
            "bft": (slice(None), slice(None), t)}[layout]


def check(model, torch_module, x, *, stream=True, atol=1e-5, lengths=None, backend="auto"):
    """Runs `model` (a Model, a path or bytes) and `torch_module` on the same
    input `x` (numpy or a torch tensor, in the model's layout, Model.layout)
    and compares: the whole sequence (Session.run) and, with stream=True on a
    model that streams, the sequence stepped one step at a time with the
    state carried. The module is put in eval mode and run under no_grad; a
    tuple output (nn.LSTM's) is compared on its first element. torch is
    imported only here.

    Returns a CheckResult: truthy when within atol, with the whole, streamed
    and per-step errors."""
    import torch  # noqa: F401  (here only: the package itself never needs torch)

    m = model if isinstance(model, Model) else Model(model)
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.ascontiguousarray(x)
    x = x if m.input_is_tokens else x.astype(np.float32, copy=False)
    layout = m.layout
    if hasattr(torch_module, "eval"):
        torch_module.eval()
    expected = _torch_output(torch_module, x, lengths)

    if not m.has_time_axis:
        batch, steps = x.shape[0], 1
    else:
        batch = x.shape[0] if layout in ("btf", "bft", "bt") else x.shape[1]
        steps = x.shape[{"tbf": 0, "tb": 0, "btf": 1, "bt": 1, "bft": 2}[layout]]
    session = m.session(batch=batch, max_seq=max(steps, m.min_seq), backend=backend)
    run = session.run_tokens if m.input_is_tokens else session.run
    got = run(x, lengths=lengths)
    if got.shape != expected.shape:
        raise ValueError(f"ferry's output has shape {got.shape}, the module's {expected.shape}: "
                         f"is x in the model's layout ({layout})?")
    whole = float(np.max(np.abs(got - expected))) if got.size else 0.0

    note = ""
    if not stream:
        return CheckResult(whole, None, None, atol)
    if not m.has_time_axis or not m.streamable:
        note = "not streamed: " + ("no time axis" if not m.has_time_axis else "the model does not stream "
                                   "(a bidirectional layer or a conv that looks ahead)")
        return CheckResult(whole, None, None, atol, note)
    if lengths is not None:
        return CheckResult(whole, None, None, atol, "not streamed: lengths given")

    session.reset()
    step = session.step_tokens if m.input_is_tokens else session.step
    outputs = [step(np.ascontiguousarray(x[_time_index(layout, t)])) for t in range(steps)]
    per_step = np.zeros(steps, dtype=np.float64)
    if m.output_is_sequence:
        out_layout = m.output_layout
        for t, y in enumerate(outputs):
            per_step[t] = np.max(np.abs(y - expected[_time_index(out_layout, t)]))
    else:
        # last / pooling: step t's output is the model on the first t + 1
        # steps, which the module gives on that prefix.
        for t, y in enumerate(outputs):
            ref = expected if t == steps - 1 else _torch_output(torch_module, x[_prefix(layout, t + 1)], None)
            per_step[t] = np.max(np.abs(y - ref))
    return CheckResult(whole, float(per_step.max()) if steps else 0.0, per_step, atol, note)


def _prefix(layout, n):
    return {"tbf": (slice(0, n),), "tb": (slice(0, n),), "btf": (slice(None), slice(0, n)),
            "bt": (slice(None), slice(0, n)), "bft": (slice(None), slice(None), slice(0, n))}[layout]
