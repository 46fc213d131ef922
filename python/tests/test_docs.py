"""The examples of docs/python.md run, in order, as one program (from a
folder holding the repository's examples/), and do what their comments say."""

import os
import re

import pytest

from conftest import REPO

DOC = REPO / "docs" / "python.md"


def test_the_guide_runs(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="the guide's ferry.check example needs torch")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 4
    os.symlink(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__doc__"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{DOC}:block{i + 1}", "exec"), namespace)
    assert (tmp_path / "model.fb").exists()
    assert namespace["result"]  # ferry.check passed
    assert namespace["s"].state_shapes == {"lstm.h": (2, 2, 64), "lstm.c": (2, 2, 64)}
