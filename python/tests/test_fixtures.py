"""Every fixture of tests/fixtures/models and tests/fixtures/ops converted and
run from Python, against PyTorch's committed outputs: the whole sequence, and
step by step with the state carried where the model streams."""

import json

import numpy as np
import pytest

import ferry
from conftest import FIXTURES, quiet_convert


def _entries(folder):
    return json.loads((FIXTURES / folder / "manifest.json").read_text())


# A state dict does not record the groups of a first-layer conv: given here,
# as the CLI's fixture test gives them (tests/e2e/test_op_fixtures.cpp).
GROUPS = {"conv_groups2": "conv(padding=1,groups=2)", "conv_depthwise_nobias": "conv(padding=2,groups=8)",
          "conv_depthwise_mult2": "conv(padding=1,groups=4)"}
LAYOUT = {"batch_first": "btf", "channels_first": "bft", "time_major": "tbf"}


def model_options(e):
    recorded = e.get("form") in ("whole_module", "torchscript")
    graph = e["graph"]
    if e.get("nonlinearity") == "relu" and not recorded:
        graph = graph.replace("rnn", "rnn(relu)", 1)  # a state dict does not record it
    return {"graph": graph, "batch_first": bool(e.get("batch_first")) and not recorded, "key": e.get("key")}


def op_options(e):
    if e["graph"] is None:
        return {}
    return {"graph": GROUPS.get(e["name"], e["graph"]), "layout": LAYOUT[e["layout"]],
            "output_layout": LAYOUT[e["output_layout"]] if e.get("output_layout") else None, "key": e.get("key")}


def sequence_axes(layout):
    """(batch axis, time axis) of an input layout."""
    return {"tbf": (1, 0), "tb": (1, 0), "btf": (0, 1), "bt": (0, 1), "bft": (0, 2), "bf": (0, None)}[layout]


def run_whole_and_stream(m, x, want, tol, lengths):
    b_axis, t_axis = sequence_axes(m.layout)
    batch = x.shape[b_axis]
    steps = x.shape[t_axis] if t_axis is not None else 1
    s = m.session(batch=batch, max_seq=max(steps, m.min_seq))
    run = s.run_tokens if m.input_is_tokens else s.run
    got = run(x, lengths=lengths)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    if lengths is not None or t_axis is None or not m.streamable:
        return
    # Stepped with the state carried: the same outputs as the whole run.
    s.reset()
    step = s.step_tokens if m.input_is_tokens else s.step
    index = lambda t: tuple([slice(None)] * t_axis + [t])  # noqa: E731
    outs = [step(np.ascontiguousarray(x[index(t)])) for t in range(steps)]
    if m.output_is_sequence:
        _, out_t = sequence_axes(m.output_layout)
        streamed = np.stack(outs, axis=out_t if m.output_layout != "bft" else 2)
        np.testing.assert_allclose(streamed, got, rtol=0, atol=1e-5)
    else:
        np.testing.assert_allclose(outs[-1], got, rtol=0, atol=1e-5)


@pytest.mark.parametrize("e", _entries("models"), ids=lambda e: e["name"])
def test_model_fixture(e):
    d = FIXTURES / "models"
    m = ferry.Model(quiet_convert(d / e["pt"], **model_options(e)).model)
    x = np.load(d / e["input"])
    run_whole_and_stream(m, x, np.load(d / e["output"]), e.get("tolerance", 1e-5), e.get("lengths"))


@pytest.mark.parametrize("e", _entries("ops"), ids=lambda e: e["name"])
def test_op_fixture(e):
    d = FIXTURES / "ops"
    if e["graph"] is None and not isinstance(e.get("expect_chain"), str):
        # Not a straight line: the converter refuses to guess and asks for --graph.
        with pytest.raises(ferry.ConvertError, match="--graph"):
            quiet_convert(d / e["pt"])
        return
    r = quiet_convert(d / e["pt"], **op_options(e))
    if e["graph"] is None:
        assert r.graph == e["expect_chain"] and r.graph_inferred
    m = ferry.Model(r.model)
    x = np.load(d / e["input"])
    if e.get("input_dtype"):
        assert m.input_is_tokens
    run_whole_and_stream(m, x, np.load(d / e["output"]), e["tolerance"], e.get("lengths"))
