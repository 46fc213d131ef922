#!/usr/bin/python3
"""Seed inputs committed for the fuzz targets whose inputs are not files of
their own elsewhere in the tree (tests/fuzz/run.sh takes the others straight
from tests/fixtures and tests/bad):

  seeds/pickle/   data.pkl of a few fixtures (every checkpoint form, numpy
                  arrays and scalars in numpy 1 and numpy 2 spellings), and
                  the legacy stream
  seeds/inputs/   input values for fuzz_inputs: byte 0 model, byte 1 batch,
                  byte 2 backend, then float32 values
  seeds/safetensors/  for fuzz_safetensors: header JSON, NUL, data (the
                  fixture, and the catalogue's safetensors files)
  seeds/pt2/      for fuzz_pt2: graph JSON, NUL, weights config, NUL, then
                  (u32 length, bytes) per raw storage weight_0, weight_1, ...
                  (the real torch 2.11 exports of fixtures/torch2_forms, those
                  of fixtures/pt2, and the catalogue's .pt2 files in the 2.9+
                  layout)

    /usr/bin/python3 tests/fuzz/make_seeds.py
"""

import os
import struct
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "fixtures", "models")
OPS = os.path.join(HERE, "..", "fixtures", "ops")


def write(sub, name, data):
    d = os.path.join(HERE, "seeds", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    fixtures = [(MODELS, f) for f in ["lstm_1l_tm", "gru_bi", "mlp", "ckpt_adam", "lstm_proto4",
                                      "lstm_noncontig", "lstm_fp16", "lstm_whole_module",
                                      "rnn_relu_whole_module", "lstm_torchscript", "prefix_module"]]
    fixtures += [(OPS, f) for f in ["numpy_state_dict", "numpy_checkpoint", "numpy2_state_dict",
                                    "numpy2_checkpoint"]]
    for folder, fixture in fixtures:
        with zipfile.ZipFile(os.path.join(folder, fixture + ".pt")) as z:
            for info in z.infolist():
                if info.filename.endswith(".pkl") and "/code/" not in info.filename:
                    tag = info.filename.split("/")[-1].replace(".", "_")
                    write("pickle", fixture + "_" + tag, z.read(info))
    # The catalogue's numpy controls: a big-endian array, a numpy._core scalar.
    for name in ["control_numpy", "control_numpy_scalar"]:
        with zipfile.ZipFile(os.path.join(HERE, "..", "bad", "checkpoints", name + ".pt")) as z:
            write("pickle", "bad_" + name + "_data_pkl", z.read("archive/data.pkl"))
    with open(os.path.join(MODELS, "lstm_legacy.pt"), "rb") as f:
        write("pickle", "lstm_legacy_stream", f.read())

    st = [os.path.join(MODELS, "lstm_safetensors.safetensors")]
    bad = os.path.join(HERE, "..", "bad", "checkpoints")
    st += sorted(os.path.join(bad, f) for f in os.listdir(bad) if f.endswith(".safetensors"))
    for path in st:
        with open(path, "rb") as f:
            raw = f.read()
        n = struct.unpack_from("<Q", raw, 0)[0]
        if n > len(raw) - 8:
            continue  # the framing itself is what is wrong: not expressible here
        write("safetensors", os.path.basename(path), raw[8:8 + n] + b"\0" + raw[8 + n:])

    forms = os.path.join(HERE, "..", "fixtures", "torch2_forms")
    pt2 = sorted(os.path.join(forms, f) for f in os.listdir(forms) if f.endswith(".pt2"))
    made = os.path.join(HERE, "..", "fixtures", "pt2")
    pt2 += sorted(os.path.join(made, f) for f in os.listdir(made) if f.endswith(".pt2"))
    pt2 += sorted(os.path.join(bad, f) for f in os.listdir(bad) if f.endswith(".pt2"))
    for path in pt2:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            root = names[0].split("/")[0] + "/"
            if root + "models/model.json" not in names or root + "data/weights/model_weights_config.json" not in names:
                continue  # the <= 2.7 layout: not this framing
            seed = z.read(root + "models/model.json") + b"\0"
            seed += z.read(root + "data/weights/model_weights_config.json") + b"\0"
            i = 0
            while root + "data/weights/weight_%d" % i in names:
                data = z.read(root + "data/weights/weight_%d" % i)
                seed += struct.pack("<I", len(data)) + data
                i += 1
        write("pt2", os.path.basename(path)[:-4], seed)

    specials = [float("nan"), float("inf"), -float("inf"), 3.4028234663852886e38, -3.4028234663852886e38,
                1e4, -1e4, 89.0, -89.0, 1e-40, -1e-40, 1.1754943508222875e-38, 0.0, -0.0, 1.0, -1.0]
    for model in range(7):
        for batch in range(3):
            values = [specials[(model + batch + i) % len(specials)] for i in range(4 * 4 * 3 * 6)]
            floats = struct.pack("<%df" % len(values), *values)
            write("inputs", "model%d_batch%d" % (model, batch + 1), bytes([model, batch, 0]) + floats)
            if batch > 0 and model < 5:
                # The same values through xnnpack, which turns NaN into -inf
                # (documented in ferry.h); the other invariants still hold.
                write("inputs", "xnnpack_specials_model%d_batch%d" % (model, batch + 1),
                      bytes([model, batch, 3]) + floats)
        ordinary = [((i * 37) % 19 - 9) / 8.0 for i in range(4 * 3 * 6)]
        for batch in range(3):
            for backend, name in ((1, "auto"), (2, "simd"), (3, "xnnpack")):
                write("inputs", "model%d_ordinary_batch%d_%s" % (model, batch + 1, name),
                      bytes([model, batch, backend]) + struct.pack("<%df" % len(ordinary), *ordinary))


if __name__ == "__main__":
    main()
