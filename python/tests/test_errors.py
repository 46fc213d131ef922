"""Bad input from Python: every file of the malformed-input catalogue
(tests/bad) raises the right exception with the catalogue's message and
leaves nothing behind; wrong shapes, dtypes, lengths and token ids, a too
long sequence, closed models and sessions, a session shared by two threads:
each a clear exception, never a crash of the interpreter."""

import json
import os
import threading
import time

import numpy as np
import pytest

import ferry
from conftest import FIXTURES, REPO, quiet_convert

CATALOGUE = REPO / "tests" / "bad"
ENTRIES = json.loads((CATALOGUE / "manifest.json").read_text())
FLAGS = {o["name"] for o in ferry.convert_options() if o["flag"]}
# The exception each C API status raises.
RAISES = {"FERRY_INVALID_MODEL": ferry.ModelError, "FERRY_UNSUPPORTED": ferry.UnsupportedError,
          "FERRY_INVALID_ARGUMENT": ferry.InputError, "FERRY_INVALID_STATE": ferry.SessionError,
          "FERRY_ARENA_TOO_SMALL": ferry.SessionError}


def kwargs_of(args):
    """A catalogue entry's CLI arguments (after IN OUT) as ferry.convert's keywords."""
    out, i = {}, 0
    while i < len(args):
        key = args[i].lstrip("-").replace("-", "_")
        if key in FLAGS:
            out[key], i = True, i + 1
            continue
        value = args[i + 1].replace("{catalogue}/", str(CATALOGUE) + "/")
        out[key] = out[key] + [value] if key == "code" and key in out else ([value] if key == "code" else value)
        i += 2
    return out


@pytest.mark.parametrize("e", ENTRIES, ids=lambda e: e["file"])
def test_catalogue(e, tmp_path):
    path = CATALOGUE / e["file"]
    if e["tool"] == "convert":
        if os.path.exists("/tmp/ferry_pwned"):
            os.remove("/tmp/ferry_pwned")
        out = tmp_path / "out.fb"
        if e.get("ok"):
            quiet_convert(path, out, **kwargs_of(e.get("args", [])))
            assert out.exists()
        else:
            with pytest.raises(ferry.ConvertError) as info:
                quiet_convert(path, out, **kwargs_of(e.get("args", [])))
            assert e["expect"] in str(info.value)
            assert "\n" not in str(info.value)
            assert os.listdir(tmp_path) == [], "nothing written, no temporary file"
        assert not os.path.exists("/tmp/ferry_pwned"), "the file ran code"
        return
    data = path.read_bytes()
    if e["tool"] == "model" and not e.get("ok"):
        with pytest.raises(RAISES[e["status"]]) as info:
            ferry.Model(data)
        assert e["expect"] in str(info.value)
        assert info.value.status == e["status"]
        return
    m = ferry.Model(data)
    if e["tool"] == "selftest" and not e.get("ok"):
        with pytest.raises(RAISES[e["status"]]) as info:
            m.selftest()
        assert e["expect"] in str(info.value) and info.value.status == e["status"]
        return
    # Controls: they load and run.
    s = m.session(max_seq=4)
    b_t = {"tbf": (4, 1, m.input_size), "btf": (1, 4, m.input_size), "bft": (1, m.input_size, 4),
           "bf": (1, m.input_size), "tb": (4, 1), "bt": (1, 4)}[m.layout]
    x = np.zeros(b_t, np.int32 if m.input_is_tokens else np.float32)
    y = s.run_tokens(x) if m.input_is_tokens else s.run(x)
    assert np.isfinite(y).all()


@pytest.mark.parametrize("cut", [0, 1, 7, 8, 64, 200, 1000, -200, -1])
def test_truncated_models_are_refused(lstm_model, cut):
    m, _, _ = lstm_model
    data = quiet_convert(FIXTURES / "models" / "lstm_2l_tm.pt", graph="lstm > last > fc").model
    with pytest.raises(ferry.ModelError):
        ferry.Model(data[:cut] if cut >= 0 else data[:len(data) + cut])


def test_flipped_bytes_load_or_are_refused():
    """A byte changed anywhere in a model: loaded (a weight changed) or
    refused with ModelError; never a crash."""
    data = bytearray(quiet_convert(FIXTURES / "models" / "gru_2l.pt", graph="gru > last > fc").model)
    rng = np.random.default_rng(0)
    refused = 0
    for pos in rng.integers(0, len(data), 300):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        try:
            m = ferry.Model(bytes(bad))
            s = m.session(batch=1, max_seq=3)
            s.run(np.zeros((3, 1, m.input_size), np.float32))
        except ferry.Error:
            refused += 1
    assert refused > 0


def test_model_sources():
    with pytest.raises(ferry.ModelError, match="/nonexistent.fb"):
        ferry.Model("/nonexistent.fb")
    with pytest.raises(TypeError, match="expected a path"):
        ferry.Model(12)
    with pytest.raises(ferry.ModelError, match="not a ferry model file"):
        ferry.Model(FIXTURES / "models" / "lstm_2l_tm.pt")


def test_wrong_shapes_dtypes_and_lengths(lstm_model):
    m, x, _ = lstm_model
    s = m.session(batch=3, max_seq=5)
    cases = [
        (x[0], ferry.InputError, r"takes \[T, B, 7\] \(layout tbf\), got shape \(3, 7\)"),
        (np.zeros((5, 3, 6)), ferry.InputError, r"got shape \(5, 3, 6\)"),
        (np.zeros((5, 4, 7)), ferry.InputError, "batch 4 .*batches of 1 to 3"),
        (np.zeros((6, 3, 7)), ferry.InputError, r"6 steps: this session runs at most 5 .*max_seq=6"),
        (np.zeros((0, 3, 7)), ferry.InputError, "0 steps"),
        (np.array([["a"]]), ferry.InputError, "expected float32 numbers"),
        ("text", ferry.InputError, "expected float32 numbers"),
        (None, ferry.InputError, "input"),
    ]
    for bad, exc, message in cases:
        with pytest.raises(exc, match=message):
            s.run(bad)
    with pytest.raises(ferry.InputError, match="lengths: expected 3 values"):
        s.run(x, lengths=[5, 5])
    with pytest.raises(ferry.InputError, match="lengths"):
        s.run(x, lengths=[5, 9, 1])
    with pytest.raises(ferry.InputError, match="expected integers"):
        s.run(x, lengths=[5.5, 5, 5])
    with pytest.raises(ferry.InputError, match=r"a step takes \[batch, 7\]"):
        s.step(np.zeros((4, 7)))
    with pytest.raises(ferry.InputError, match=r"out: expected shape \(3, 2\)"):
        s.run(x, out=np.zeros((2, 2), np.float32))
    with pytest.raises(ferry.InputError, match="out: expected a writable C-contiguous float32"):
        s.run(x, out=np.zeros((3, 2), np.float64))
    with pytest.raises(ferry.InputError, match="token ids"):
        s.run_tokens(np.zeros((5, 3), np.int32))
    # The session is unharmed by all of it.
    s.reset()
    assert s.run(x).shape == (3, 2)


def test_state_errors(lstm_model):
    m, _, _ = lstm_model
    s = m.session(batch=3)
    with pytest.raises(ferry.InputError, match="no part named 'lstm.x'.*'lstm.h', 'lstm.c'"):
        s.state = {"lstm.x": np.zeros((2, 3, 9))}
    with pytest.raises(ferry.InputError, match=r"state\['lstm.h'\]: expected shape \(2, 3, 9\), got \(2, 9\)"):
        s.state = {"lstm.h": np.zeros((2, 9))}
    with pytest.raises(ferry.InputError, match="expected a dict"):
        s.state = [1, 2]
    with pytest.raises(ferry.InputError, match="expected 108 floats"):
        s.state_vector = np.zeros(5)


def test_token_ids_out_of_range():
    ops = FIXTURES / "ops"
    m = ferry.Model(quiet_convert(ops / "embed_lstm_fc.pt", graph="emb > lstm > fc", layout="btf").model)
    s = m.session(batch=2, max_seq=9)
    with pytest.raises(ferry.InputError, match="20"):
        s.run_tokens(np.full((2, 9), 20))
    with pytest.raises(ferry.InputError):
        s.run_tokens(np.full((2, 9), -1))
    with pytest.raises(ferry.InputError, match="outside int32"):
        s.run_tokens(np.full((2, 9), 2**32 + 1, np.int64))
    with pytest.raises(ferry.InputError, match="expected integers"):
        s.run_tokens(np.zeros((2, 9), np.float32))
    with pytest.raises(ferry.InputError, match="use run_tokens"):
        s.run(np.zeros((2, 9, 8), np.float32))


def test_step_on_a_model_that_cannot_stream():
    m = ferry.Model(quiet_convert(FIXTURES / "models" / "gru_bi.pt", graph="gru > last > fc").model)
    s = m.session()
    with pytest.raises(ferry.UnsupportedError, match="bidirectional"):
        s.step(np.zeros(m.input_size, np.float32))


def test_backends():
    m = ferry.Model(quiet_convert(FIXTURES / "models" / "gru_2l.pt", graph="gru > last > fc").model)
    with pytest.raises(ferry.InputError, match="reference"):
        m.session(backend="fastest")
    if "cuda" not in [b for b in m.backends if b == "cuda"]:
        with pytest.raises(ferry.UnsupportedError):
            m.session(backend="cuda")


def test_closed_model_and_session(lstm_model):
    m, x, y = lstm_model
    s = m.session(batch=3, max_seq=5)
    m.close()
    assert m.closed
    with pytest.raises(ferry.ModelError, match="closed"):
        m.session()
    with pytest.raises(ferry.ModelError, match="closed"):
        m.layers
    # The session keeps the bytes: it goes on working.
    np.testing.assert_allclose(s.run(x), y, atol=1e-5, rtol=0)
    with s:
        pass
    assert s.closed
    with pytest.raises(ferry.SessionError, match="closed"):
        s.run(x)
    with pytest.raises(ferry.SessionError, match="closed"):
        s.state
    s.close()  # twice is harmless


def test_a_session_used_by_two_threads_says_so():
    """One thread runs long sequences; the other calls into the same session
    meanwhile and gets SessionError (the GIL is released inside run)."""
    m = ferry.Model(quiet_convert(FIXTURES / "models" / "lstm_2l_tm.pt", graph="lstm > last > fc").model)
    steps = 20000
    s = m.session(batch=3, max_seq=steps)
    x = np.random.default_rng(0).standard_normal((steps, 3, 7)).astype(np.float32)
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            s.run(x)

    worker = threading.Thread(target=busy)
    worker.start()
    seen = None
    deadline = time.monotonic() + 20
    try:
        while seen is None and time.monotonic() < deadline:
            try:
                s.step(x[0])
            except ferry.SessionError as e:
                seen = e
    finally:
        stop.set()
        worker.join()
    assert seen is not None and "one thread at a time" in str(seen)
    s.reset()
    assert s.step(x[0]).shape == (3, 2)


def test_convert_errors(tmp_path):
    pt = FIXTURES / "models" / "lstm_2l_tm.pt"
    out = tmp_path / "m.fb"
    with pytest.raises(ferry.ConvertError, match=r'--graph "lstm > last > fc"'):
        ferry.convert(pt, out)
    with pytest.raises(ferry.ConvertError, match="no such module"):
        ferry.convert(pt, out, graph="lstm > last > head")
    with pytest.raises(ferry.ConvertError, match="--max-error"):
        ferry.convert(pt, out, graph="lstm > last > fc", quantize="int8", fallback=True)
    with pytest.raises(ferry.ConvertError, match="need --quantize"):
        ferry.convert(pt, out, graph="lstm > last > fc", max_error=0.1)
    with pytest.raises(ferry.ConvertError, match="int9"):
        ferry.convert(pt, out, graph="lstm > last > fc", quantize="int9")
    with pytest.raises(ferry.ConvertError, match="/nonexistent/x.pt"):
        ferry.convert("/nonexistent/x.pt", out)
    with pytest.raises(TypeError, match="unexpected keyword argument 'grpah'"):
        ferry.convert(pt, out, grpah="lstm")
    with pytest.raises(TypeError, match="expected True or False"):
        ferry.convert(pt, out, graph="lstm > last > fc", batch_first="yes")
    with pytest.raises(TypeError, match="expected a str"):
        ferry.convert(pt, out, graph=["lstm"])
    assert os.listdir(tmp_path) == []
    with pytest.raises(ferry.ConvertError) as info:
        ferry.inspect("/nonexistent/x.pt")
    assert "/nonexistent/x.pt" in str(info.value)
