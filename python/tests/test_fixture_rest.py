"""The fixture folders with no manifest, from Python: assumptions/ (a
hyper-parameter the state dict cannot record: assumed, said, and matched once
given), export_targets/ (real torch.export archives: symbolic and
higher-order nodes read; polyglot archives refused) and bad/ (malicious
pickles refused, nothing run)."""

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import ferry
from conftest import FIXTURES, quiet_convert

ASSUME = FIXTURES / "assumptions"
TARGETS = FIXTURES / "export_targets"


def error_of(path, **options):
    m = ferry.Model(quiet_convert(path, **options).model)
    x = np.load(str(path).rsplit(".", 1)[0] + ".x.npy")
    s = m.session(batch=x.shape[0], max_seq=x.shape[1 if m.layout == "btf" else 2 if m.layout == "bft" else 0])
    return float(np.abs(s.run(x) - np.load(str(path).rsplit(".", 1)[0] + ".y.npy")).max())


def test_an_assumed_padding_is_said_and_the_given_one_matches():
    pt = ASSUME / "conv_pad1_mean.pt"
    with pytest.warns(ferry.ConvertWarning, match=r"Conv1d 'conv': assumed.*padding 0"):
        r = ferry.convert(pt, graph="conv > relu > mean > fc", layout="bft")
    assert any(a["parameter"] == "padding" and a["value"] == "0" for a in r.assumptions)
    assert any(a["parameter"] == "padding" for a in ferry.Model(r.model).assumptions)
    assert error_of(pt, graph="conv > relu > mean > fc", layout="bft") > 1e-2  # the silent mismatch
    assert error_of(pt, graph="conv(padding=1) > relu > mean > fc", layout="bft") < 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every option given: nothing assumed, nothing said
        ferry.convert(pt, graph="conv(padding=1, stride=1, dilation=1, padding_mode=zeros, groups=1) > relu > mean > fc",
                      layout="bft")
    plan = ferry.inspect(pt, graph="conv > relu > mean > fc", layout="bft")["plan"]
    assert plan["graph"] == "conv > relu > mean > fc" and plan["layout"] == "bft"


def test_a_layer_outside_the_module_matches_once_the_chain_is_given():
    assert error_of(ASSUME / "outside_module.pt", graph="lstm > last > fc", batch_first=True) < 1e-5


@pytest.mark.parametrize("name, options", [("sym_reshape", {"graph": "fc", "layout": "btf"}),
                                           ("no_grad", {"graph": "fc > relu"})])
def test_real_exports(name, options):
    assert error_of(TARGETS / f"{name}.pt2", **options) <= 1e-5


def test_an_export_with_a_cond_is_read():
    assert ferry.inspect(TARGETS / "cond.pt2")["form"].startswith("torch.export archive (.pt2")


@pytest.mark.parametrize("name", ["polyglot_save", "polyglot_script"])
def test_polyglot_archives_are_refused(name, tmp_path):
    renamed = tmp_path / f"{name}.pt"
    shutil.copy(TARGETS / f"{name}.pt2", renamed)
    for path in (TARGETS / f"{name}.pt2", renamed):
        for options in ({}, {"graph": "fc > relu"}):
            with pytest.raises(ferry.ConvertError, match="ambiguous: a torch.export archive"):
                ferry.convert(path, tmp_path / "m.fb", **options)
            assert not (tmp_path / "m.fb").exists()


@pytest.mark.parametrize("e", json.loads((FIXTURES / "bad" / "manifest.json").read_text()), ids=lambda e: e["file"])
def test_malicious_files_are_refused(e, tmp_path):
    if os.path.exists("/tmp/ferry_pwned"):
        os.remove("/tmp/ferry_pwned")
    with pytest.raises(ferry.ConvertError):
        ferry.convert(FIXTURES / "bad" / e["file"], tmp_path / "m.fb", graph="fc")
    assert not os.path.exists("/tmp/ferry_pwned"), "the file ran code"
    assert os.listdir(tmp_path) == []
