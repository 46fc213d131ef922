"""Model and Session: loading, the model's description, exact arenas, the
state by name (against PyTorch's h_n / c_n), step against run, out=, and
the converter's options and report."""

import inspect as pyinspect
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ferry
from conftest import FIXTURES, quiet_convert

MODELS = FIXTURES / "models"


def test_model_from_a_path_bytes_and_buffers(tmp_path, lstm_model):
    m, _, _ = lstm_model
    path = tmp_path / "m.fb"
    data = quiet_convert(MODELS / "lstm_2l_tm.pt", path, graph="lstm > last > fc").model
    assert path.read_bytes() == data
    for source in (path, str(path), data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        other = ferry.Model(source)
        assert other.size == len(data)
        assert other.layers == m.layers
    assert ferry.Model(path).file == str(path)


def test_model_describes_itself_as_inspect_does(tmp_path):
    path = tmp_path / "m.fb"
    quiet_convert(MODELS / "lstm_2l_tm.pt", path, graph="lstm > last > fc")
    m = ferry.Model(path)
    summary = ferry.inspect(path)
    assert m.summary() == summary
    assert (m.input_size, m.output_size, m.layout, m.output_layout) == (7, 2, "tbf", "bf")
    assert [l["name"] for l in m.layers] == ["lstm", "last", "fc"]
    assert m.dtypes == {"lstm": "F32", "fc": "F32"}
    assert m.provenance["source_file"] == "lstm_2l_tm.pt"
    assert m.provenance["source_sha256"] and m.provenance["converter_version"].startswith("ferry ")
    assert m.backends[:2] == ["reference", "simd"]
    assert m.assumptions[0]["parameter"] == "layout"
    assert m.streamable and m.has_time_axis and not m.input_is_tokens
    assert m.state_floats == 2 * 9 * 2
    assert "lstm" in repr(m) or "3 layers" in repr(m)


def test_arena_is_exact_and_owned(lstm_model):
    m, x, _ = lstm_model
    s = m.session(batch=3, max_seq=5)
    assert s.arena_bytes == m.arena_bytes(batch=3, max_seq=5)
    assert m.session().arena_bytes == m.arena_bytes(1, 1) < s.arena_bytes
    report = quiet_convert(MODELS / "lstm_2l_tm.pt", graph="lstm > last > fc")
    assert report.arena_bytes == m.arena_bytes(1, 1, backend="reference")


def test_step_equals_run_bit_for_bit(lstm_model):
    m, x, y = lstm_model
    s = m.session(batch=3, max_seq=5)
    whole = s.run(x)
    np.testing.assert_allclose(whole, y, atol=1e-5, rtol=0)
    s.reset()
    for t in range(x.shape[0]):
        last = s.step(x[t])
    np.testing.assert_array_equal(last, whole)


def test_inputs_are_converted_once_and_float32_is_read_in_place(lstm_model):
    m, x, _ = lstm_model
    s = m.session(batch=3, max_seq=5)
    want = s.run(x)
    for other in (x.astype(np.float64), np.asfortranarray(x), x.tolist(),
                  np.ascontiguousarray(np.concatenate([x, x], axis=2)[:, :, :7])):
        s.reset()
        np.testing.assert_array_equal(s.run(other), want)


def test_out_is_written_in_place(lstm_model):
    m, x, _ = lstm_model
    s = m.session(batch=3, max_seq=5)
    want = s.run(x)
    s.reset()
    out = np.empty((3, 2), np.float32)
    assert s.run(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    s.reset()
    step_out = np.empty((3, 2), np.float32)
    for t in range(5):
        assert s.step(x[t], out=step_out) is step_out
    np.testing.assert_array_equal(step_out, want)


def test_one_sample_step_takes_a_vector(lstm_model):
    m, x, _ = lstm_model
    s = m.session()
    y = s.step(x[0, 0])
    assert y.shape == (2,)
    s.reset()
    np.testing.assert_array_equal(s.step(x[0, :1])[0], y)


def test_state_is_pytorchs_h_n_and_c_n():
    torch = pytest.importorskip("torch")
    sd = torch.load(MODELS / "lstm_2l_tm.pt", map_location="cpu")
    lstm = torch.nn.LSTM(7, 9, 2)
    lstm.load_state_dict({k[len("lstm."):]: v for k, v in sd.items() if k.startswith("lstm.")})
    m = ferry.Model(quiet_convert(MODELS / "lstm_2l_tm.pt", graph="lstm").model)
    x = np.load(MODELS / "lstm_2l_tm.in.npy")
    rng = np.random.default_rng(1)
    h0 = rng.standard_normal((2, 3, 9)).astype(np.float32)
    c0 = rng.standard_normal((2, 3, 9)).astype(np.float32)
    with torch.no_grad():
        out, (hn, cn) = lstm(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
    s = m.session(batch=3, max_seq=5)
    s.state = {"lstm.h": h0, "lstm.c": c0}
    np.testing.assert_array_equal(s.state["lstm.h"], h0)
    y = s.run(x)
    np.testing.assert_allclose(y, out.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(s.state["lstm.h"], hn.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(s.state["lstm.c"], cn.numpy(), atol=1e-5, rtol=0)


def test_state_round_trips_equal_the_c_apis(lstm_model):
    m, x, _ = lstm_model
    s = m.session(batch=3, max_seq=5)
    assert s.state_shapes == {"lstm.h": (2, 3, 9), "lstm.c": (2, 3, 9)}
    assert not s.state_vector.any()
    s.run(x)
    flat = s.state_vector
    named = s.state
    # The named parts are the C API's packed state (ferry_state_get), in order.
    np.testing.assert_array_equal(np.concatenate([named["lstm.h"].ravel(), named["lstm.c"].ravel()]), flat)
    after = s.run(x)
    s.state_vector = flat  # ferry_state_set: the same state, the same next output
    np.testing.assert_array_equal(s.run(x), after)
    s.state = named
    np.testing.assert_array_equal(s.run(x), after)
    # A dict with one part sets that part only.
    s.state = {"lstm.c": np.zeros((2, 3, 9))}
    assert not s.state["lstm.c"].any() and s.state["lstm.h"].any()
    s.reset()
    assert not s.state_vector.any()


@pytest.mark.parametrize("name, graph, parts", [
    ("conv_causal_lstm_seq", "conv(padding=causal) > lstm > fc", ["conv.history", "lstm.h", "lstm.c"]),
    ("pool_mean", "gru > mean > fc", ["gru.h", "mean.sum", "mean.count"]),
    ("pool_max", "gru > max > fc", ["gru.h", "max.max", "max.count"]),
])
def test_conv_and_pooling_state_parts(name, graph, parts):
    ops = FIXTURES / "ops"
    m = ferry.Model(quiet_convert(ops / f"{name}.pt", graph=graph, layout="btf").model)
    x = np.load(ops / f"{name}.in.npy")
    s = m.session(batch=x.shape[0], max_seq=x.shape[1])
    assert list(s.state_shapes) == parts
    assert sum(int(np.prod(v)) for v in s.state_shapes.values()) == x.shape[0] * m.state_floats
    half = x.shape[1] // 2
    s.run(np.ascontiguousarray(x[:, :half]))
    named, flat = s.state, s.state_vector
    if "count" in parts[-1]:
        assert (named[parts[-1]] == half).all()  # the steps seen so far
    # Carried through the dict: the second half continues where the first left off.
    rest = s.run(np.ascontiguousarray(x[:, half:]))
    s.reset()
    s.state = named
    np.testing.assert_array_equal(s.run(np.ascontiguousarray(x[:, half:])), rest)
    np.testing.assert_array_equal(s.state_vector.size, flat.size)


def test_sessions_run_in_threads_with_the_gil_released(lstm_model):
    m, x, y = lstm_model
    errors = []

    def work():
        s = m.session(batch=3, max_seq=5)
        for _ in range(200):
            s.reset()
            if np.abs(s.run(x) - y).max() > 1e-5:
                errors.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_token_model():
    ops = FIXTURES / "ops"
    m = ferry.Model(quiet_convert(ops / "embed_lstm_fc.pt", graph="emb > lstm > fc", layout="btf").model)
    assert m.input_is_tokens and m.layout == "bt"
    ids = np.load(ops / "embed_lstm_fc.in.npy")
    assert ids.dtype == np.int64
    s = m.session(batch=2, max_seq=9)
    np.testing.assert_allclose(s.run_tokens(ids), np.load(ops / "embed_lstm_fc.out.npy"), atol=1e-5, rtol=0)
    s.reset()
    whole = s.run_tokens(ids.astype(np.int32))
    s.reset()
    steps = [s.step_tokens(ids[:, t]) for t in range(9)]
    np.testing.assert_array_equal(np.stack(steps, axis=1), whole)


def test_selftest(lstm_model):
    m, _, _ = lstm_model
    r = m.selftest()
    assert r["passed"] and r["max_error"] <= 1e-5
    assert m.session(backend="reference").selftest()["backend"] == "reference"


def test_help_and_stubs_come_from_the_bindings():
    doc = pyinspect.getdoc(ferry.Model.session)
    assert "exactly" in doc
    text = subprocess.run([sys.executable, "-c", "import ferry; help(ferry.Session)"], capture_output=True,
                          text=True, check=True).stdout
    assert "step(self, x: numpy.typing.ArrayLike" in text and "state" in text
    stub = os.path.join(os.path.dirname(ferry.__file__), "_ferry.pyi")
    assert os.path.exists(stub), "the build writes _ferry.pyi beside the module"
    text = open(stub).read()
    assert "def step(self, x: numpy.typing.ArrayLike" in text
    assert "class InputError(Error, ValueError)" in text  # the exceptions too (python/stubs.pat)
    import ast

    ast.parse(text)


def test_convert_takes_exactly_the_clis_options():
    """Every option `ferry convert --help` lists is a keyword of ferry.convert,
    and nothing else is."""
    help_text = subprocess.run([sys.executable, "-m", "ferry", "convert", "--help"], capture_output=True, text=True,
                               check=True).stdout
    import re

    cli = {m.replace("-", "_") for m in re.findall(r"^\s+(?:-\w,\s*)?--([a-z][a-z-]*)", help_text, re.M)} - {"help"}
    params = set(pyinspect.signature(ferry.convert).parameters) - {"src", "dst"}
    assert params == cli
    assert {o["name"] for o in ferry.convert_options()} == cli
    assert "max_error: E." in ferry.convert.__doc__


def test_convert_report_and_quantization(tmp_path):
    calib = np.load(MODELS / "lstm_2l_tm.in.npy")
    r = quiet_convert(MODELS / "lstm_2l_tm.pt", tmp_path / "q.fb", graph="lstm > last > fc", quantize="int8",
                      calibration=calib, c_array=tmp_path / "q.h")
    assert r.path == str(tmp_path / "q.fb") and (tmp_path / "q.h").exists()
    q = r.quantization
    assert q["requested"] == "int8"
    assert [p["dtype"] for p in q["precisions"]][0] == "int8"
    assert q["model"]["max_abs"] < 0.05
    assert ferry.Model(r.model).dtypes["lstm"] == "I8"
    assert r.storage_locations == ["cuda:0"] and r.form
    assert r.to_dict()["graph"] == "lstm > last > fc"
    assert "wrote" in str(r)


def test_convert_warns_what_it_assumed():
    with pytest.warns(ferry.ConvertWarning, match="assumed layout"):
        ferry.convert(MODELS / "lstm_2l_tm.pt", graph="lstm > last > fc")


def test_convert_reads_the_models_source():
    code = FIXTURES / "code"
    import json

    cases = json.loads((code / "manifest.json").read_text())["cases"]
    case = next(c for c in cases if c.get("output") and not c.get("args"))
    r = quiet_convert(code / case["checkpoint"], code=[str(code / f) for f in case["code"]] if isinstance(
        case["code"], list) else str(code / case["code"]))
    assert r.code["class"]


def test_python_dash_m_ferry_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "ferry", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ferry " + ferry.__version__)
    r = subprocess.run([sys.executable, "-m", "ferry", "convert", "/nonexistent.pt", "/tmp/x.fb"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("ferry: error:")
    r = subprocess.run([sys.executable, "-m", "ferry", "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2


def test_the_cli_in_process_gives_back_pythons_signal_handlers(capfd):
    import signal

    from ferry.__main__ import main

    assert main(["--version"]) == 0
    assert capfd.readouterr().out.startswith("ferry ")
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)  # Python's handler again, not the CLI's


def test_memory_as_inspect_memory_and_the_c_array_macros(tmp_path):
    path = tmp_path / "m.fb"
    header = tmp_path / "model_data.h"
    quiet_convert(MODELS / "lstm_2l_tm.pt", path, graph="lstm > last > fc", c_array=header, max_batch=[4], max_seq=[6])
    m = ferry.Model(path)
    memory = ferry.inspect(path, memory=True, max_batch=4, max_seq=6)
    assert memory["arena"]["bytes"] == m.arena_bytes(4, 6, backend="reference")
    assert sum(r["bytes"] for r in memory["arena"]["regions"]) == memory["arena"]["bytes"]
    assert [l["name"] for l in memory["layers"]] == [l["name"] for l in m.layers]
    text = header.read_text()
    assert "#define MODEL_DATA_ARENA_BYTES_B4_T6 FERRY_ARENA_BYTES_CPU(" in text
    assert "#define MODEL_DATA_HANDLE_BYTES FERRY_MODEL_HANDLE_BYTES" in text
    with pytest.raises(ferry.ConvertError, match="--memory reads a model file"):
        ferry.inspect(MODELS / "lstm_2l_tm.pt", memory=True)
