"""The other fixture sets of tests/fixtures (torch2, trained, code, norm,
old_torch, pt2, script_branches, torch2_forms, dcp_values) converted and run
from Python against PyTorch's committed outputs, with the options the C++
end-to-end tests give each entry (tests/e2e/test_fixtures.cpp, test_code.cpp,
test_dcp_norm.cpp, test_pt2.cpp, test_torch2_forms.cpp, ...): the whole
sequence within the manifest's tolerance, step by step with the state carried
where the model streams, and the refusals the C++ tests expect, with the words
they check. models/ and ops/ are test_fixtures.py's."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import ferry

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"


def cases(folder, list_name="cases"):
    """A manifest's entries: a list, or the list under `list_name` of a dict."""
    m = json.loads((FIX / folder / "manifest.json").read_text())
    return m if isinstance(m, list) else m[list_name]


def params(folder, list_name="cases"):
    return pytest.mark.parametrize("e", cases(folder, list_name), ids=lambda e: e["name"])


def convert(src, dst=None, **options):
    """ferry.convert (to bytes unless dst), its ConvertWarnings (assumptions) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ferry.ConvertWarning)
        return ferry.convert(src, dst, **options)


def refusal(src, tmp_path, **options):
    """The ConvertError's message of a conversion that must be refused; it
    must be one line and must write nothing."""
    dst = tmp_path / "m.fb"
    with pytest.raises(ferry.ConvertError) as info:
        convert(src, dst, **options)
    msg = str(info.value)
    assert "\n" not in msg.strip(), msg
    assert not dst.exists(), "a refused conversion left an output file"
    return msg


def axes(layout):
    """(batch axis, time axis) of a layout; time None without one."""
    return {"tbf": (1, 0), "tb": (1, 0), "btf": (0, 1), "bt": (0, 1), "bft": (0, 2), "bf": (0, None)}[layout]


def run_and_compare(m, x, want, tol, lengths=None):
    """Runs x whole and compares it with PyTorch's output; where the model
    streams, steps through it (after reset) and compares each step's output
    with the whole run; where it cannot, checks that step() says why.
    Returns (whole output, per-step outputs or None)."""
    b_axis, t_axis = axes(m.layout)
    steps = x.shape[t_axis] if t_axis is not None else 1
    s = m.session(batch=x.shape[b_axis], max_seq=max(steps, m.min_seq))
    got = (s.run_tokens if m.input_is_tokens else s.run)(x, lengths=lengths)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    if lengths is not None or not m.has_time_axis or t_axis is None:
        return got, None
    s.reset()
    step = s.step_tokens if m.input_is_tokens else s.step
    if not m.streamable:
        # A model that needs the whole sequence: step() is refused, saying why.
        with pytest.raises(ferry.UnsupportedError, match="bidirectional|only a causal conv streams"):
            step(np.ascontiguousarray(np.take(x, 0, axis=t_axis)))
        return got, None
    outs = [step(np.ascontiguousarray(np.take(x, t, axis=t_axis))) for t in range(steps)]
    if m.output_is_sequence:
        stacked = np.stack(outs, axis={"tbf": 0, "btf": 1, "bft": 2}[m.output_layout])
        np.testing.assert_allclose(stacked, got, rtol=0, atol=1e-5)
    else:
        np.testing.assert_allclose(outs[-1], got, rtol=0, atol=1e-5)
    return got, outs


def load_input(path):
    x = np.load(path)
    return x.astype(np.int32) if np.issubdtype(x.dtype, np.integer) else x


# --- torch2/: state dicts, checkpoints, whole modules, TorchScript saved by torch 2.x on a GPU
# (test_fixtures.cpp: --graph, --batch-first unless the form records it, rnn(relu) for a state dict).

def torch2_options(e):
    recorded = e.get("form") in ("whole_module", "torchscript")
    graph = e["graph"]
    if e.get("nonlinearity") == "relu" and not recorded:
        graph = graph.replace("rnn", "rnn(relu)", 1)
    return {"graph": graph, "batch_first": e["batch_first"] and not recorded}


@params("torch2")
def test_torch2(e):
    d = FIX / "torch2"
    m = ferry.Model(convert(d / e["pt"], **torch2_options(e)).model)
    _, stepped = run_and_compare(m, load_input(d / e["input"]), np.load(d / e["output"]), e["tolerance"],
                                 e.get("lengths"))
    assert stepped is not None, "a one-direction RNN streams"


# --- trained/: models trained on real data (test_quantized_trained.cpp's fp32 conversion: --graph,
# --batch-first), and the fp32 metric the manifest records.

@params("trained")
def test_trained(e):
    d = FIX / "trained"
    m = ferry.Model(convert(d / e["pt"], graph=e["graph"], batch_first=e["batch_first"]).model)
    y, _ = run_and_compare(m, load_input(d / e["input"]), np.load(d / e["torch_output"]), e["tolerance"])
    if e["name"] == "sunspots_lstm":
        target = np.load(d / e["target"])
        rmse = float(np.sqrt(np.mean(((y.astype(np.float64) - target) * e["data"]["std"]) ** 2)))
        assert rmse == pytest.approx(e["metrics"]["rmse"], rel=1e-4)
    if "labels" in e:
        assert int((y.argmax(axis=1) == np.load(d / e["labels"])).sum()) == e["metrics"]["correct"]


# --- code/: checkpoints converted with --code alone (test_code.cpp), whole and step by step
# against PyTorch's output on every prefix; refused sources name their file and line.

def code_files(e):
    return [str(FIX / "code" / f) for f in e["code"]]


@params("code")
def test_code(e):
    d = FIX / "code"
    r = convert(d / e["checkpoint"], code=code_files(e))
    assert r.code is not None and r.graph_inferred, "the chain is read from the forward"
    m = ferry.Model(r.model)
    x = load_input(d / e["input"])
    want = np.load(d / e["output"])
    if want.ndim == 1 and not m.output_is_sequence and m.output_size == 1:
        # A forward that squeezes away its one output feature returns [B]: ferry keeps [B, 1], and says so.
        assert any("squeezes away its one output feature" in n for n in r.notes), r.notes
        want = want[:, None]
    _, stepped = run_and_compare(m, x, want, e["tolerance"])
    if e["steps"] is None or stepped is None:
        return  # bidirectional, or a conv that looks ahead: refused by run_and_compare's step check
    prefixes = np.load(d / e["steps"])
    assert prefixes.shape[0] == len(stepped)
    for t, out in enumerate(stepped):
        np.testing.assert_allclose(out.ravel(), prefixes[t].ravel(), rtol=0, atol=e["tolerance"],
                                   err_msg=f"step {t} against PyTorch on the prefix")


@params("code", "refusals")
def test_code_refusal(e, tmp_path):
    d = FIX / "code"
    msg = refusal(d / e["checkpoint"], tmp_path, code=code_files(e))
    assert msg.startswith(f"{Path(e['file']).name}:{e['line']}: "), msg
    if e["asks"] is None:
        assert "pass --graph" in msg, msg
        return
    assert f"'{e['asks']}'" in msg and "--layout" in msg, msg
    # The question answered (test_code.cpp AnAskedOptionGivenConverts): converts and matches PyTorch.
    m = ferry.Model(convert(d / e["checkpoint"], code=code_files(e), layout=e["input_layout"]).model)
    run_and_compare(m, load_input(d / e["input"]), np.load(d / e["output"]), e["tolerance"])


# --- norm/: folded weight / spectral norm (test_dcp_norm.cpp: --graph and --layout), and a
# parametrization ferry refuses.

@params("norm")
def test_norm(e, tmp_path):
    d = FIX / "norm"
    opts = {"graph": e["graph"], "layout": e["layout"]}
    if e.get("expect_refusal"):
        assert e["expect_refusal"] in refusal(d / e["pt"], tmp_path, **opts)
        return
    r = convert(d / e["pt"], **opts)
    for f in e["folds"]:
        assert any(line.startswith(f"{f['weight']} = {f['rule']}(") for line in r.folded), r.folded
    m = ferry.Model(r.model)
    _, stepped = run_and_compare(m, load_input(d / e["input"]), np.load(d / e["output"]), e["tolerance"])
    assert stepped is not None, "causal convs and RNNs stream"


# --- old_torch/: whole modules as torch 0.2-0.4 saved them (legacy stream and tar).

@params("old_torch")
def test_old_torch(e):
    d = FIX / "old_torch"
    r = convert(d / e["file"], graph=e["graph"], layout=e["layout"])
    assert "legacy" in r.form, r.form
    m = ferry.Model(r.model)
    _, stepped = run_and_compare(m, load_input(d / f"{e['name']}.x.npy"), np.load(d / f"{e['name']}.y.npy"),
                                 e["tol"])
    assert stepped is not None


# --- pt2/: torch.export archives made by make_pt2_fixtures.py, converted with no flag (test_pt2.cpp):
# the chain and layouts read from the graph, whole and streamed.

@params("pt2")
def test_pt2(e):
    d = FIX / "pt2"
    r = convert(d / e["file"])
    assert r.graph == e["chain"] and r.graph_inferred
    # A model on token ids reads them as [B, T] ('bt') where the manifest says 'btf'.
    assert r.layout == e["layout"] or (r.input_is_tokens and r.layout + "f" == e["layout"]), r.layout
    if e.get("output_layout"):
        assert r.output_layout == e["output_layout"]
    m = ferry.Model(r.model)
    _, stepped = run_and_compare(m, load_input(d / f"{e['name']}.x.npy"), np.load(d / f"{e['name']}.y.npy"),
                                 e["tol"])
    assert stepped is not None, "every pt2/ model streams"


# --- torch2_forms/ and script_branches/ (test_torch2_forms.cpp): no flag where the file records the
# chain, else --graph, --layout, --key; refusals name the file and what is wrong.

# The folds test_dcp_norm.cpp expects convert to report.
FOLDS = {
    "wn_legacy": ["lstm.weight_hh_l0 = weight_norm(", "head.weight = weight_norm("],
    "wn_param_conv": ["conv.weight = weight_norm(conv.parametrizations.weight.original0"],
    "sn_param": ["head.weight = spectral_norm(head.parametrizations.weight.original"],
    "sn_legacy": ["head.weight = spectral_norm(head.weight_orig"],
}


def form_options(e, with_key=True):
    if e["records_chain"]:
        return {}
    opts = {"graph": e["graph"]}
    if e["layout"] in ("btf", "tbf", "bft"):
        opts["layout"] = e["layout"]
    if with_key and e.get("key"):
        opts["key"] = e["key"]
    return opts


def check_form(folder, e, tmp_path):
    d = FIX / folder
    x, want = load_input(d / f"{e['name']}.x.npy"), np.load(d / f"{e['name']}.y.npy")
    if e.get("expect_refusal"):
        msg = refusal(d / e["file"], tmp_path, **form_options(e))
        assert e["file"] in msg, msg
        said = msg.replace(e["file"], "").lower()
        if e.get("refusal_says"):
            assert e["refusal_says"].lower() in said, msg
        else:
            assert any(w in said for w in ("core-aten", "unrolled", "decomposed")), msg
        if e["records_chain"] and e["graph"]:
            # Refused reading the chain, its weights still convert with --graph (test_pt2.cpp).
            m = ferry.Model(convert(d / e["file"], graph=e["graph"], layout=e["layout"]).model)
            run_and_compare(m, x, want, e["tol"])
        return
    r = convert(d / e["file"], **form_options(e))
    if e["records_chain"]:
        assert r.graph_inferred, r.graph
    for f in FOLDS.get(e["name"], []):
        assert any(line.startswith(f) for line in r.folded), (f, r.folded)
    m = ferry.Model(r.model)
    run_and_compare(m, x, want, e["tol"])
    if e.get("key"):
        # The model's key found without --key: the only dict of tensors.
        m = ferry.Model(convert(d / e["file"], **form_options(e, with_key=False)).model)
        run_and_compare(m, x, want, e["tol"])


@params("torch2_forms")
def test_torch2_forms(e, tmp_path):
    check_form("torch2_forms", e, tmp_path)


@params("script_branches")
def test_script_branches(e, tmp_path):
    check_form("script_branches", e, tmp_path)


# --- dcp_values/: DCP directories with non-tensor values beside and inside the model
# (test_dcp.cpp): each listed as ignored, the model converted and run.

@params("dcp_values")
def test_dcp_values(e):
    d = FIX / "dcp_values"
    r = convert(d / e["dir"], graph=e["graph"], layout=e["layout"], key=e["key"])
    assert sorted(i["key"] for i in r.ignored) == sorted(e["ignored"])
    m = ferry.Model(r.model)
    _, stepped = run_and_compare(m, load_input(d / f"{e['name']}.x.npy"), np.load(d / f"{e['name']}.y.npy"),
                                 e["tol"])
    assert stepped is not None
