"""Shared paths and helpers of the Python package's tests (pytest)."""

import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def quiet_convert(*args, **kwargs):
    """ferry.convert without its ConvertWarnings (assumed layouts)."""
    import ferry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ferry.ConvertWarning)
        return ferry.convert(*args, **kwargs)


@pytest.fixture
def lstm_model():
    """The 2-layer LSTM -> last -> Linear fixture, converted: (Model, x, y)."""
    import numpy as np

    import ferry

    d = FIXTURES / "models"
    r = quiet_convert(d / "lstm_2l_tm.pt", graph="lstm > last > fc")
    return ferry.Model(r.model), np.load(d / "lstm_2l_tm.in.npy"), np.load(d / "lstm_2l_tm.out.npy")
