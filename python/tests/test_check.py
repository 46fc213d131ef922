"""ferry.check against real torch modules (torch from Debian or PyPI): the
committed fixtures' weights loaded into the modules that made them."""

import numpy as np
import pytest

import ferry
from conftest import FIXTURES, quiet_convert

torch = pytest.importorskip("torch", reason="ferry.check needs torch (scripts/test.sh installs Debian's)")
nn = torch.nn


class SimpleLSTM(nn.Module):  # tests/fixtures/make_fixtures.py's
    def __init__(self, i, h, layers, o, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.lstm = nn.LSTM(i, h, layers, batch_first=batch_first)
        self.fc = nn.Linear(h, o)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1] if self.batch_first else out[-1])


class GruSeq(nn.Module):  # gru > tanh > fc > sigmoid, every step
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        out, _ = self.gru(x)
        return torch.sigmoid(self.fc(torch.tanh(out)))


class GruLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 10, 2)
        self.fc = nn.Linear(10, 4)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.fc(out[-1])


class KwsCRNN(nn.Module):  # tests/fixtures/make_op_fixtures.py's
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(10, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm1d(16)
        self.conv2 = nn.Conv1d(16, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm1d(16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.fc = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        out, _ = self.gru(h.transpose(1, 2))
        return self.fc(out[:, -1])


class EmbedLSTM(nn.Module):  # make_op_fixtures.py's EmbedRNN(20, 8, 16, 6, "lstm")
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 6)

    def forward(self, tokens):
        out, _ = self.lstm(self.emb(tokens))
        return self.fc(out)


def loaded(module, folder, name):
    sd = torch.load(FIXTURES / folder / f"{name}.pt", map_location="cpu")
    module.load_state_dict(sd)
    return module.eval()


CASES = {
    # name: (folder, module, convert options, streams)
    "lstm_2l_tm": ("models", lambda: SimpleLSTM(7, 9, 2, 2, False), {"graph": "lstm > last > fc"}, True),
    "lstm_1l_bf": ("models", lambda: SimpleLSTM(5, 10, 1, 3, True), {"graph": "lstm > last > fc", "batch_first": True}, True),
    "gru_2l": ("models", GruLast, {"graph": "gru > last > fc"}, True),
    "gru_seq_tanh_fc_sigmoid": ("models", GruSeq, {"graph": "gru > tanh > fc > sigmoid"}, True),
    "kws_crnn": ("ops", KwsCRNN, {"graph": "conv1(padding=1) > bn1 > relu > conv2(stride=2,padding=1) > bn2 > relu > "
                                           "gru > last > fc", "layout": "bft"}, False),
    "embed_lstm_fc": ("ops", EmbedLSTM, {"graph": "emb > lstm > fc", "layout": "btf"}, True),
}


@pytest.mark.parametrize("name", CASES)
def test_check_against_the_module(name):
    folder, make, options, streams = CASES[name]
    try:
        module = loaded(make(), folder, name)
    except RuntimeError as e:  # the fixture's shapes are not this module's: the test is wrong, say so
        pytest.fail(f"{name}: the test's module does not fit the fixture: {e}")
    m = ferry.Model(quiet_convert(FIXTURES / folder / f"{name}.pt", **options).model)
    x = np.load(FIXTURES / folder / f"{name}.in.npy")
    result = ferry.check(m, module, torch.from_numpy(x) if name == "lstm_2l_tm" else x)
    assert result, result
    assert result.whole_error <= 1e-5
    if streams:
        assert result.stream_error is not None and result.stream_error <= 1e-5
        steps = x.shape[0] if m.layout in ("tbf", "tb") else x.shape[1]
        assert result.per_step.shape == (steps,)
    else:
        assert result.stream_error is None and "does not stream" in result.note


def test_check_finds_a_difference():
    """A module whose weights differ from the model's fails the check, and
    the per-step errors show it from the first step."""
    module = loaded(SimpleLSTM(7, 9, 2, 2, False), "models", "lstm_2l_tm")
    m = ferry.Model(quiet_convert(FIXTURES / "models" / "lstm_2l_tm.pt", graph="lstm > last > fc").model)
    with torch.no_grad():
        module.fc.bias += 1e-3
    x = np.load(FIXTURES / "models" / "lstm_2l_tm.in.npy")
    result = ferry.check(m, module, x, atol=1e-5)
    assert not result
    assert 0.9e-3 < result.whole_error < 1.1e-3
    assert np.all(result.per_step > 0.9e-3)
    assert "FAILED" in repr(result)


def test_check_takes_a_path_and_the_whole_input_in_float64(tmp_path):
    module = loaded(GruSeq(), "models", "gru_seq_tanh_fc_sigmoid")
    path = tmp_path / "m.fb"
    quiet_convert(FIXTURES / "models" / "gru_seq_tanh_fc_sigmoid.pt", path, graph="gru > tanh > fc > sigmoid")
    x = np.load(FIXTURES / "models" / "gru_seq_tanh_fc_sigmoid.in.npy").astype(np.float64)
    assert ferry.check(str(path), module, x.astype(np.float32), atol=1e-5)
