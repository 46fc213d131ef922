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
                  of fixtures/pt2 and fixtures/export_targets, and the
                  catalogue's .pt2 files in the 2.9+ layout)
  seeds/script_chain/ for fuzz_script_chain: byte 0 the base archive (its
                  kBases index), then the root's forward as code/ holds it and,
                  per other module, "\n#--- PATH\n" and its forward: the code
                  torch wrote, and a few variations of it
  seeds/python_source/ for fuzz_python_source: byte 0 the checkpoint (its
                  kBases index), then a model source of tests/fixtures/code/src
                  (a notebook as its JSON): each source against one base in
                  turn, and each base with its own source

    /usr/bin/python3 tests/fuzz/make_seeds.py
"""

import os
import pickletools
import struct
import tarfile
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
    # torch 0.3 / 0.4 whole modules (a thnn _backend call in every module) and
    # the torch 0.2 tar file's main pickle member.
    old_torch = os.path.join(HERE, "..", "fixtures", "old_torch")
    for name in ["module_v04", "module_v03"]:
        with open(os.path.join(old_torch, name + ".pt"), "rb") as f:
            write("pickle", "old_torch_" + name + "_stream", f.read())
    with tarfile.open(os.path.join(old_torch, "module_v02_tar.pt")) as t:
        write("pickle", "old_torch_module_v02_tar_pickle", t.extractfile("pickle").read())

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
    t215 = os.path.join(HERE, "..", "fixtures", "torch215")
    pt2 += sorted(os.path.join(t215, f) for f in os.listdir(t215) if f.endswith(".pt2"))
    targets = os.path.join(HERE, "..", "fixtures", "export_targets")
    pt2 += sorted(os.path.join(targets, f) for f in os.listdir(targets) if f.endswith(".pt2"))
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
        prefix = "t215_" if os.path.basename(os.path.dirname(path)) == "torch215" else ""  # names shared with torch2_forms
        write("pt2", prefix + os.path.basename(path)[:-4], seed)

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
    script_chain_seeds()
    script_branch_seeds()
    python_source_seeds()


# fuzz_script_chain.cpp's kBases, in order.
SCRIPT_BASES = ["torch2_forms/traced_ts.pt", "torch2_forms/scripted_ts.pt", "ops/ts_traced_crnn.pt",
                "ops/ts_traced_inplace_residual.pt", "ops/ts_scripted_transposed_time_major.pt",
                "torch2_forms/seq_whole.pt", "script_branches/branch_attributes.pt",
                "script_branches/branch_optional.pt", "script_branches/branch_input_features.pt"]


def code_classes(z):
    """qualified class name -> (members {name: class}, forward lines) from code/."""
    classes = {}
    for name in z.namelist():
        parts = name.split("/", 1)[1]
        if not parts.startswith("code/") or not parts.endswith(".py"):
            continue
        module = parts[len("code/"):-len(".py")].replace("/", ".")
        current, forward = None, False
        for line in z.read(name).decode().split("\n"):
            if line.startswith("class "):
                current = module + "." + line[6:].split("(")[0].split(":")[0].strip()
                classes[current] = ({}, [])
                forward = False
            elif current and line.startswith("  ") and not line.startswith("   "):
                forward = line.startswith("  def forward(")
                if " : __torch__." in line:
                    member, cls = line.strip().split(" : ", 1)
                    classes[current][0][member] = cls
            if current and forward and line.startswith(" "):
                classes[current][1].append(line)
    return classes


def script_chain_seeds():
    fixtures = os.path.join(HERE, "..", "fixtures")
    for index, base in enumerate(SCRIPT_BASES):
        stem = os.path.basename(base)[:-3]
        with zipfile.ZipFile(os.path.join(fixtures, base)) as z:
            classes = code_classes(z)
            if not classes:  # a pickled module: its own objects, no code
                write("script_chain", stem, bytes([index]))
                continue
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            root = next(arg for op, arg, _ in pickletools.genops(z.read(pkl)) if op.name == "GLOBAL")
            root = root.replace(" ", ".")
        parts, todo = [], [("", root)]
        while todo:
            path, cls = todo.pop(0)
            members, forward = classes.get(cls, ({}, []))
            parts.append((path, "\n".join(forward)))
            todo += [((path + "." if path else "") + m, c) for m, c in members.items()]
        text = parts[0][1] + "".join("\n#--- " + p + "\n" + f for p, f in parts[1:] if f)
        write("script_chain", stem, bytes([index]) + text.encode())
        # Variations: the root's lines one at a time turned into a loop, a branch, an unknown call.
        root_lines = parts[0][1].split("\n")
        for k, line in enumerate(root_lines[2:], start=2):
            for tag, new in (("loop", "    for _9 in range(2):"), ("branch", "    if bool(_9):"),
                             ("call", line.replace("torch.", "torch.cumsum_", 1))):
                varied = root_lines[:k] + [new] + root_lines[k + (tag == "call"):]
                write("script_chain", "%s_%s_%d" % (stem, tag, k),
                      bytes([index]) + "\n".join(varied).encode())



def script_branch_seeds():
    """Variations of the branching bases' root forward: each `if` on the data
    (refused), on a constant either way, with its `else` dropped or its block
    indented wrongly, and an early return inside a branch."""
    fixtures = os.path.join(HERE, "..", "fixtures")
    for index, base in enumerate(SCRIPT_BASES):
        if not base.startswith("script_branches/"):
            continue
        stem = os.path.basename(base)[:-3]
        with zipfile.ZipFile(os.path.join(fixtures, base)) as z:
            classes = code_classes(z)
        root = [forward for cls, (members, forward) in classes.items() if cls.split(".")[-1] != "LSTM"
                and cls.split(".")[-1] != "GRU" and cls.split(".")[-1] != "Linear"][0]
        for k, line in enumerate(root):
            stripped = line.strip()
            if not stripped.startswith("if ") and stripped != "else:":
                continue
            indent = line[:len(line) - len(line.lstrip())]
            variants = {"else_dropped": root[:k] + root[k + 1:]} if stripped == "else:" else {
                "data": root[:k] + [indent + "if bool(torch.gt(torch.sum(x), 0)):"] + root[k + 1:],
                "true": root[:k] + [indent + "if True:"] + root[k + 1:],
                "false": root[:k] + [indent + "if torch.__not__(True):"] + root[k + 1:],
                "misindent": root[:k + 1] + [" " + root[k + 1]] + root[k + 2:],
                "return": root[:k + 1] + [indent + "  return x"] + root[k + 1:],
            }
            for tag, lines in variants.items():
                write("script_chain", "%s_%s_%d" % (stem, tag, k), bytes([index]) + "\n".join(lines).encode())


# fuzz_python_source.cpp's kBases, in order, and the sources that made them.
PYTHON_SOURCE_BASES = ["lstm_init_hidden.pt", "gru_zeros_whole.pt", "lit_split.ckpt", "char_gru.pt",
                       "crnn_mel.pt", "lstm_hidden_arg.pt"]


def python_source_seeds():
    import json
    code = os.path.join(HERE, "..", "fixtures", "code")
    with open(os.path.join(code, "manifest.json")) as f:
        cases = json.load(f)["cases"] + json.load(open(os.path.join(code, "manifest.json")))["refusals"]
    sources = sorted({c.split(":")[0] for case in cases for c in case["code"]})
    for k, src in enumerate(sources):
        index = k % len(PYTHON_SOURCE_BASES)
        with open(os.path.join(code, src), "rb") as f:
            text = f.read()
        stem = "%s_%s" % (PYTHON_SOURCE_BASES[index].split(".")[0], os.path.basename(src).replace(".", "_"))
        write("python_source", stem, bytes([index]) + text)
    # and each base with the source that made it
    for index, name in enumerate(PYTHON_SOURCE_BASES):
        case = next(c for c in cases if c["checkpoint"] == name)
        src = case["code"][-1].split(":")[0]
        with open(os.path.join(code, src), "rb") as f:
            write("python_source", "own_" + name.split(".")[0], bytes([index]) + f.read())



if __name__ == "__main__":
    main()
