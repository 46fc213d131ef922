#!/usr/bin/python3
"""The catalogue of malformed inputs: every file here must be refused.

    /usr/bin/python3 tests/bad/make_catalogue.py        # rewrites tests/bad/

Writes, next to this script:

  checkpoints/<name>   inputs for `ferry convert` (zip archives, pickles,
                       tensors, other containers)
  models/<name>.fb     inputs for `ferry run` and ferry_model_load()
  manifest.json        one entry per file (schema below)

Manifest entry (a JSON list of these):

  file      path relative to this folder
  tool      "convert" (a checkpoint), "model" (a ferry model file refused at
            load) or "selftest" (a model that loads, whose golden vectors
            ferry_selftest() refuses)
  expect    exact substring of the error: the CLI's `ferry: error:` line, and
            for models also ferry_last_error() after ferry_model_load()
  status    models only: the status ferry_model_load() (or, for "selftest",
            ferry_selftest_arena_size()) returns
  args      convert only, optional: the arguments after `ferry convert IN OUT`
            (a list, e.g. ["--graph", "fc"])
  ok        true for the control files (valid inputs built by the same code,
            so a refusal is known to come from the one defect, not the builder)
  why       what the file does

Everything is crafted byte by byte here, without torch or flatbuffers: a zip
writer laid out like torch.save (64-byte aligned STORED records, zip64 end
records), a pickle opcode writer, and a small forward FlatBuffers writer for
schema/ferry.fbs. Deterministic: reruns give identical bytes.
tests/e2e/test_bad_catalogue.cpp feeds every entry to the CLI and the C API.
"""

import json
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# Pickle writer (protocol 2 opcodes, as torch.save emits them).


class P:
    def __init__(self):
        self.b = bytearray()

    def op(self, *codes):
        for c in codes:
            self.b += bytes([c]) if isinstance(c, int) else c
        return self

    def proto(self, v=2):
        return self.op(0x80, v)

    def stop(self):
        return self.op(b".")

    def mark(self):
        return self.op(b"(")

    def glob(self, module, name):
        return self.op(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def int(self, v):
        if 0 <= v < 256:
            return self.op(b"K", v)
        if 0 <= v < 65536:
            return self.op(b"M" + struct.pack("<H", v))
        if -2**31 <= v < 2**31:
            return self.op(b"J" + struct.pack("<i", v))
        n = (v.bit_length() + 8) // 8
        return self.op(b"\x8a", n, v.to_bytes(n, "little", signed=True))

    def str(self, s):
        data = s.encode() if isinstance(s, str) else s
        return self.op(b"X" + struct.pack("<I", len(data)) + data)

    def short_str(self, s):
        data = s.encode()
        return self.op(0x8C, len(data), data)

    def false(self):
        return self.op(0x89)

    def ordered_dict(self):
        return self.glob("collections", "OrderedDict").op(b")R")

    def tensor(self, storage_cls, key, numel, offset, size, stride=None, location="cpu",
               v3_dtype=None, storage_module="torch"):
        if stride is None:
            stride, acc = [], 1
            for d in reversed(size):
                stride.insert(0, acc)
                acc *= d
        self.glob("torch._utils", "_rebuild_tensor_v3" if v3_dtype else "_rebuild_tensor_v2")
        self.mark()
        self.mark().str("storage").glob(storage_module, storage_cls).str(key).str(location)
        self.int(numel).op(b"t").op(b"Q")
        self.int(offset)
        self.mark()
        for d in size:
            self.int(d)
        self.op(b"t").mark()
        for d in stride:
            self.int(d)
        self.op(b"t").false().ordered_dict()
        if v3_dtype:
            self.glob("torch", v3_dtype)
        return self.op(b"t").op(b"R")


def state_dict_pickle(tensors):
    """tensors: list of (name, kwargs for P.tensor)."""
    p = P().proto(2).ordered_dict().op(b"q\x00").mark()
    for name, spec in tensors:
        p.str(name)
        p.tensor(**spec)
    p.op(b"u").op(b"}").str("_metadata").op(b"}").op(b"s").op(b"b").stop()
    return bytes(p.b)


# ---------------------------------------------------------------------------
# Zip writer (torch.save layout). Returns the bytes and the positions of the
# structures a test may want to corrupt afterwards.


class Zip:
    def __init__(self):
        self.out = bytearray()
        self.central = []  # dicts: name, method, crc, csize, usize, offset, flags

    def add(self, name, data, method=0, usize=None, align=True, local_name=None):
        name_b = name.encode()
        local_name_b = (local_name if local_name is not None else name).encode()
        offset = len(self.out)
        extra = b""
        if align:
            before = offset + 30 + len(local_name_b) + 4
            pad = (64 - before % 64) % 64
            extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        crc = zlib.crc32(data) if method == 0 else 0
        self.out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x0808, method, 0, 0, 0, 0, 0,
                                len(local_name_b), len(extra))
        self.out += local_name_b + extra + data
        self.out += struct.pack("<IIQQ", 0x08074B50, crc, len(data),
                                len(data) if usize is None else usize)
        self.central.append(dict(name=name_b, method=method, crc=crc, csize=len(data),
                                 usize=len(data) if usize is None else usize, offset=offset,
                                 flags=0x0808, extra=None, zip64=False))
        return self

    def finish(self, zip64_end=True, entry_count=None):
        out = bytearray(self.out)
        cd_offset = len(out)
        pos = {"cd": cd_offset, "entries": []}
        for c in self.central:
            pos["entries"].append(len(out))
            extra = c["extra"]
            csize, usize, offset = c["csize"], c["usize"], c["offset"]
            if c["zip64"]:
                extra = struct.pack("<HHQQQ", 1, 24, usize, csize, offset)
                csize = usize = offset = 0xFFFFFFFF
            extra = extra or b""
            out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, c["flags"],
                               c["method"], 0, 0, c["crc"], csize, usize, len(c["name"]),
                               len(extra), 0, 0, 0, 0, offset)
            out += c["name"] + extra
        cd_size = len(out) - cd_offset
        n = len(self.central) if entry_count is None else entry_count
        if zip64_end:
            pos["eocd64"] = len(out)
            out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, cd_size,
                               cd_offset)
            pos["locator"] = len(out)
            out += struct.pack("<IIQI", 0x07064B50, 0, pos["eocd64"], 1)
        pos["eocd"] = len(out)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                           min(cd_size, 0xFFFFFFFF), min(cd_offset, 0xFFFFFFFF), 0)
        return out, pos


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


# The control checkpoint: a Linear(3 -> 2) state dict, which converts.
FC_W = f32(0.5, -0.25, 0.125, 1.0, 0.75, -0.5)
FC_B = f32(0.1, -0.2)


def linear_tensors(w=None, b=None):
    w = dict(dict(storage_cls="FloatStorage", key="0", numel=6, offset=0, size=[2, 3]), **(w or {}))
    b = dict(dict(storage_cls="FloatStorage", key="1", numel=2, offset=0, size=[2]), **(b or {}))
    return [("fc.weight", w), ("fc.bias", b)]


def checkpoint(pkl=None, storages=None, prefix="archive", extra=(), version=b"3\n"):
    z = Zip()
    z.add(prefix + "/data.pkl", pkl if pkl is not None else state_dict_pickle(linear_tensors()))
    for name, data in extra:
        z.add(prefix + "/" + name, data)
    for key, data in (storages if storages is not None else [("0", FC_W), ("1", FC_B)]):
        z.add(prefix + "/data/" + key, data)
    if version is not None:
        z.add(prefix + "/version", version)
    return z


def with_pickle(pkl_body):
    """A valid archive whose data.pkl is PROTO 2 + `pkl_body`."""
    return bytes(checkpoint(pkl=b"\x80\x02" + pkl_body).finish()[0])


def patch(buf, offset, fmt, *values):
    buf = bytearray(buf)
    struct.pack_into(fmt, buf, offset, *values)
    return bytes(buf)


# ---------------------------------------------------------------------------
# A forward FlatBuffers writer, enough for schema/ferry.fbs: tables of
# scalars and offsets, strings, scalar vectors (with a forced alignment for
# the weight blob) and vectors of tables. Every object is written after the
# one that refers to it, so all uoffsets are positive, as the format needs.


class Table:
    def __init__(self, fields):
        self.fields = fields  # {slot: (fmt, value)}; fmt "off" for a child object


class Vec:
    def __init__(self, fmt, items, align=4):
        self.fmt, self.items, self.align = fmt, items, align


class TVec:
    def __init__(self, tables):
        self.tables = tables


class Str:
    def __init__(self, s):
        self.s = s.encode()


class RawStr(Str):
    """A string of given bytes (not necessarily UTF-8)."""
    def __init__(self, b):
        self.s = bytes(b)


class FB:
    def __init__(self):
        self.buf = bytearray()

    def pad_to(self, cond):
        while not cond(len(self.buf)):
            self.buf += b"\0"

    def emit(self, obj):
        if isinstance(obj, Str):
            self.pad_to(lambda p: p % 4 == 0)
            at = len(self.buf)
            self.buf += struct.pack("<I", len(obj.s)) + obj.s + b"\0"
            return at
        if isinstance(obj, Vec):
            size = struct.calcsize("<" + obj.fmt)
            align = max(obj.align, size)
            self.pad_to(lambda p: p % 4 == 0 and (p + 4) % align == 0)
            at = len(self.buf)
            self.buf += struct.pack("<I", len(obj.items))
            if obj.fmt == "B":
                self.buf += bytes(obj.items)
            else:
                self.buf += struct.pack("<%d%s" % (len(obj.items), obj.fmt), *obj.items)
            return at
        if isinstance(obj, TVec):
            self.pad_to(lambda p: p % 4 == 0)
            at = len(self.buf)
            self.buf += struct.pack("<I", len(obj.tables))
            slots = []
            for _ in obj.tables:
                slots.append(len(self.buf))
                self.buf += b"\0\0\0\0"
            for slot, t in zip(slots, obj.tables):
                child = self.emit(t)
                struct.pack_into("<I", self.buf, slot, child - slot)
            return at
        assert isinstance(obj, Table)
        # Inline layout: soffset first, then fields by size (largest first),
        # each aligned to its size; the table starts 8-aligned.
        nslots = max(obj.fields) + 1 if obj.fields else 0
        items = sorted(obj.fields.items(),
                       key=lambda kv: -(4 if kv[1][0] == "off" else struct.calcsize("<" + kv[1][0])))
        layout, size = {}, 4
        for slot, (fmt, _) in items:
            n = 4 if fmt == "off" else struct.calcsize("<" + fmt)
            size = (size + n - 1) // n * n
            layout[slot] = size
            size += n
        size = (size + 3) // 4 * 4
        self.pad_to(lambda p: p % 2 == 0)
        vt = len(self.buf)
        self.buf += struct.pack("<HH", 4 + 2 * nslots, size)
        for s in range(nslots):
            self.buf += struct.pack("<H", layout.get(s, 0))
        self.pad_to(lambda p: p % 8 == 0)
        at = len(self.buf)
        self.buf += b"\0" * size
        struct.pack_into("<i", self.buf, at, at - vt)
        children = []
        for slot, (fmt, value) in obj.fields.items():
            if fmt == "off":
                children.append((at + layout[slot], value))
            else:
                struct.pack_into("<" + fmt, self.buf, at + layout[slot], value)
        for field, child in children:
            pos = self.emit(child)
            struct.pack_into("<I", self.buf, field, pos - field)
        return at

    def finish(self, root, ident=b"FRRY"):
        self.buf = bytearray(8)
        self.buf[4:8] = ident
        at = self.emit(root)
        struct.pack_into("<I", self.buf, 0, at)
        self.pad_to(lambda p: p % 8 == 0)
        return bytes(self.buf)


# Layer kinds and slots of schema/ferry.fbs.
LSTM, GRU, RNN_TANH, RNN_RELU, LINEAR, LAST = 0, 1, 2, 3, 4, 5


def tensor_table(name, shape, offset, size, dtype=None, layout=None, scales=None):
    f = {0: ("off", Str(name)), 3: ("off", Vec("I", shape)), 4: ("Q", offset), 5: ("Q", size)}
    if dtype is not None:
        f[1] = ("B", dtype)
    if layout is not None:
        f[2] = ("B", layout)
    if scales is not None:
        f[6] = ("i", scales)
    return f


def cell_table(w_ih, w_hh, bias=-1, b_hn=-1, w_hr=-1):
    f = {0: ("i", w_ih), 1: ("i", w_hh)}
    if bias != -1:
        f[2] = ("i", bias)
    if b_hn != -1:
        f[3] = ("i", b_hn)
    if w_hr != -1:
        f[4] = ("i", w_hr)
    return f


def layer_table(kind, name, input_size, output_size, hidden=0, proj=0, num_layers=0,
                bidirectional=False, cells=None, weight=-1, bias=-1):
    f = {0: ("B", kind), 1: ("off", Str(name)), 2: ("I", input_size), 3: ("I", output_size)}
    if hidden:
        f[4] = ("I", hidden)
    if proj:
        f[5] = ("I", proj)
    if num_layers:
        f[6] = ("I", num_layers)
    if bidirectional:
        f[7] = ("B", 1)
    if cells is not None:
        f[8] = ("off", TVec([Table(c) for c in cells]))
    if weight != -1:
        f[9] = ("i", weight)
    if bias != -1:
        f[10] = ("i", bias)
    return f


def weights_blob(tensors):
    """tensors: list of (name, shape). Deterministic values, each tensor at a
    64-byte-aligned offset. Returns (blob bytes, tensor field dicts)."""
    blob, fields = bytearray(), []
    for i, (name, shape) in enumerate(tensors):
        n = 1
        for d in shape:
            n *= d
        offset = len(blob)
        vals = [((k * 37 + i * 11) % 17 - 8) / 32.0 for k in range(n)]
        blob += f32(*vals)
        blob += b"\0" * ((64 - len(blob) % 64) % 64)
        fields.append(tensor_table(name, shape, offset, 4 * n))
    return blob, fields


def lstm_model(mutate=None, ident=b"FRRY"):
    """The control model: LSTM(3, 4) > last > Linear(4, 2), RowMajor f32,
    format 1.1. `mutate(parts)` edits the tables before writing."""
    I, H, O = 3, 4, 2
    blob, tensors = weights_blob([("lstm.l0.w_ih", [4 * H, I]), ("lstm.l0.w_hh", [4 * H, H]),
                                  ("lstm.l0.bias", [4 * H]), ("fc.weight", [O, H]),
                                  ("fc.bias", [O])])
    cells = [cell_table(0, 1, bias=2)]
    layers = [layer_table(LSTM, "lstm", I, H, hidden=H, num_layers=1, cells=cells),
              layer_table(LAST, "last", H, H),
              layer_table(LINEAR, "fc", H, O, weight=3, bias=4)]
    model = {0: ("H", 1), 1: ("H", 1), 5: ("B", 0), 6: ("I", I), 7: ("I", O), 8: ("B", 0),
             9: ("Q", 4096)}
    parts = dict(blob=blob, tensors=tensors, cells=cells, layers=layers, model=model,
                 blob_align=64)
    if mutate:
        mutate(parts)
    m = dict(parts["model"])
    m[2] = ("off", TVec([Table(l) for l in parts["layers"]]))
    m[3] = ("off", TVec([Table(t) for t in parts["tensors"]]))
    if parts["blob"] is not None:
        m[4] = ("off", Vec("B", parts["blob"], align=parts["blob_align"]))
    if parts.get("selftest"):
        m[11] = ("off", Table(parts["selftest"]))
    return FB().finish(Table(m), ident)


def selftest_table(batch=1, seq=2, inputs=6, outputs=2, tolerance=1.0):
    """Golden vectors for the control LSTM model (input 3, output 2, `last`)."""
    return {0: ("I", batch), 1: ("I", seq), 2: ("off", Vec("f", [0.25] * inputs)),
            3: ("off", Vec("f", [0.0] * outputs)), 4: ("f", tolerance)}


def gru_model(mutate=None):
    """GRU(3, 4) > last > Linear(4, 2), for the b_hn fields."""
    I, H, O = 3, 4, 2
    blob, tensors = weights_blob([("gru.l0.w_ih", [3 * H, I]), ("gru.l0.w_hh", [3 * H, H]),
                                  ("gru.l0.bias", [3 * H]), ("gru.l0.b_hn", [H]),
                                  ("fc.weight", [O, H]), ("fc.bias", [O])])
    cells = [cell_table(0, 1, bias=2, b_hn=3)]
    layers = [layer_table(GRU, "gru", I, H, hidden=H, num_layers=1, cells=cells),
              layer_table(LAST, "last", H, H),
              layer_table(LINEAR, "fc", H, O, weight=4, bias=5)]
    model = {0: ("H", 1), 1: ("H", 1), 6: ("I", I), 7: ("I", O), 9: ("Q", 4096)}
    parts = dict(tensors=tensors, cells=cells, layers=layers, model=model)
    if mutate:
        mutate(parts)
    m = dict(parts["model"])
    m[2] = ("off", TVec([Table(l) for l in parts["layers"]]))
    m[3] = ("off", TVec([Table(t) for t in parts["tensors"]]))
    m[4] = ("off", Vec("B", blob, align=64))
    return FB().finish(Table(m))


# ---------------------------------------------------------------------------
# The catalogue.

ENTRIES = []


def add(path, data, tool, expect, why, status=None, ok=False, args=None):
    full = os.path.join(HERE, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data)
    e = {"file": path, "tool": tool}
    if args:
        e["args"] = list(args)
    if ok:
        e["ok"] = True
    else:
        e["expect"] = expect
        if tool != "convert":
            e["status"] = status or "FERRY_INVALID_MODEL"
    e["why"] = why
    ENTRIES.append(e)


def ckpt(name, data, expect, why):
    add("checkpoints/" + name, data, "convert", expect, why)


def model(name, data, expect, why, status=None):
    add("models/" + name, data, "model", expect, why, status)


def selftest(name, data, expect, why, status=None):
    add("models/" + name, data, "selftest", expect, why, status)


def zip_entries():
    good, pos = checkpoint().finish()
    good = bytes(good)
    add("checkpoints/control_linear.pt", good, "convert", None,
        "control: a valid Linear(3, 2) state dict built by this script", ok=True)

    ckpt("zip_truncated_half.pt", good[:len(good) // 2],
         "no end-of-central-directory record", "first half of the control archive")
    ckpt("zip_tiny.pt", good[:12], "zip archive: truncated (12 bytes)",
         "a local header signature and nothing else")
    ckpt("zip_multi_disk.pt", patch(good, pos["eocd"] + 4, "<H", 1),
         "multi-disk archives are not supported", "EOCD disk number 1")
    ckpt("zip64_locator_offset_wrap.pt",
         patch(good, pos["locator"] + 8, "<Q", 0xFFFFFFFFFFFFFFF0),
         "zip64 end-of-central-directory offset 18446744073709551600 is outside the archive",
         "zip64 locator points 16 bytes below 2^64")
    ckpt("zip64_eocd_bad_signature.pt", patch(good, pos["eocd64"], "<I", 0x06064B51),
         "bad zip64 end-of-central-directory signature", "zip64 EOCD signature corrupted")
    z = checkpoint()
    no64, p2 = z.finish(zip64_end=False)
    ckpt("zip64_without_locator.pt", patch(no64, p2["eocd"] + 16, "<I", 0xFFFFFFFF),
         "zip64 archive without a zip64 locator", "classic EOCD saturated, no zip64 records")
    ckpt("zip_cd_past_end.pt", patch(good, pos["eocd64"] + 48, "<Q", len(good) + 4096),
         "is outside the archive", "central directory offset 4 KiB past the end of the file")
    ckpt("zip64_cd_offset_wrap.pt",
         patch(patch(good, pos["eocd64"] + 48, "<Q", 0xFFFFFFFFFFFFFF00), pos["eocd64"] + 40,
               "<Q", 0x200),
         "central directory (offset 18446744073709551360, size 512) is outside the archive",
         "zip64 central directory offset + size wraps past 2^64")
    ckpt("zip64_cd_size_wrap.pt", patch(good, pos["eocd64"] + 40, "<Q", 0xFFFFFFFFFFFFFFFF),
         "size 18446744073709551615) is outside the archive", "central directory size 2^64 - 1")
    ckpt("zip64_entry_count_huge.pt",
         patch(patch(good, pos["eocd64"] + 24, "<Q", 1 << 40), pos["eocd64"] + 32, "<Q", 1 << 40),
         "too many entries (1099511627776", "zip64 EOCD claims 2^40 entries")
    ckpt("zip_entry_count_exceeds_cd.pt",
         patch(patch(good, pos["eocd64"] + 24, "<Q", 500), pos["eocd64"] + 32, "<Q", 500),
         "central directory too small for 500 entries", "500 entries in a 4-entry directory")
    ckpt("zip_central_bad_signature.pt", patch(good, pos["entries"][1], "<I", 0x02014B51),
         "central directory entry 1", "second central header signature corrupted")
    ckpt("zip_central_name_past_cd.pt", patch(good, pos["entries"][3] + 28, "<H", 0xFFFF),
         "name or extra field runs past the central directory", "last entry's name is 64 KiB")

    z = checkpoint()
    z.central[1]["zip64"] = True
    z64, p64 = z.finish()
    ckpt("zip64_extra_offset_wrap.pt",
         patch(z64, p64["entries"][1] + 46 + len(z.central[1]["name"]) + 4 + 16, "<Q",
               0xFFFFFFFFFFFFFFC0),
         "local header of 'archive/data/0' at byte 18446744073709551552 is outside the archive",
         "zip64 extra field: local header offset wraps")
    ckpt("zip64_extra_size_huge.pt",
         patch(z64, p64["entries"][1] + 46 + len(z.central[1]["name"]) + 4, "<QQ",
               1 << 62, 1 << 62),
         "runs past the end of the entries",
         "zip64 extra field: a STORED record of 2^62 bytes")
    z = checkpoint()
    z.central[1]["extra"] = struct.pack("<HHQ", 1, 8, 0)
    z.central[1]["csize"] = 0xFFFFFFFF
    z.central[1]["usize"] = 0xFFFFFFFF
    z.central[1]["offset"] = 0xFFFFFFFF
    ckpt("zip64_extra_too_short.pt", bytes(z.finish()[0]), "zip64 extra field too short",
         "three saturated fields, an 8-byte zip64 extra")
    z = checkpoint()
    z.central[1]["usize"] = 0xFFFFFFFF
    z.central[1]["csize"] = 0xFFFFFFFF
    ckpt("zip64_extra_missing.pt", bytes(z.finish()[0]), "missing zip64 extra field",
         "saturated sizes without a zip64 extra field")
    z = checkpoint()
    z.central[1]["extra"] = struct.pack("<HH", 0x7777, 200) + b"x" * 8
    ckpt("zip_extra_field_overrun.pt", bytes(z.finish()[0]), "extra field runs past its end",
         "an extra field whose length is past the field's end")

    z = Zip()
    z.add("archive/data.pkl", state_dict_pickle(linear_tensors()))
    z.add("archive/../../etc/cron.d/x", b"* * * * * root touch /tmp/ferry_pwned\n")
    z.add("archive/data/0", FC_W).add("archive/data/1", FC_B)
    ckpt("zip_dotdot_name.pt", bytes(z.finish()[0]),
         "unsafe or empty name 'archive/../../etc/cron.d/x'", "a `../` path in an entry name")
    z = Zip()
    z.add("/etc/passwd", b"root:x:0:0::/root:/bin/sh\n")
    ckpt("zip_absolute_name.pt", bytes(z.finish()[0]), "unsafe or empty name '/etc/passwd'",
         "an absolute entry name")
    z = checkpoint()
    z.central[1]["flags"] |= 1
    ckpt("zip_encrypted.pt", bytes(z.finish()[0]), "is encrypted", "encryption flag set")
    z = checkpoint()
    z.central[1]["usize"] = 7
    ckpt("zip_stored_size_mismatch.pt", bytes(z.finish()[0]), "is stored but its sizes differ",
         "STORED record whose sizes differ")
    z = checkpoint()
    z.central[2]["offset"] = 1
    ckpt("zip_local_header_bad_signature.pt", bytes(z.finish()[0]),
         "bad local header signature for 'archive/data/1' at byte 1",
         "central entry points one byte into a local header")
    z = checkpoint()
    z.central[1]["csize"] = z.central[1]["usize"] = len(z.out)
    ckpt("zip_truncated_entry.pt", bytes(z.finish()[0]),
         "runs past the end of the entries", "a record longer than the archive body")
    z = Zip()
    z.add("archive/data.pkl", state_dict_pickle(linear_tensors()))
    z.add("archive/data/0", FC_W, local_name="archive/data/9")
    z.add("archive/data/1", FC_B)
    ckpt("zip_local_name_differs.pt", bytes(z.finish()[0]),
         "local header name differs from central directory name 'archive/data/0'",
         "the local header names another record than the central directory")
    z = Zip()
    z.add("data.pkl", state_dict_pickle(linear_tensors()))
    ckpt("zip_no_prefix_folder.pt", bytes(z.finish()[0]),
         "entry 'data.pkl' is not inside a top-level folder", "records without the folder")
    z = checkpoint()
    z.add("other/data/2", FC_B)
    ckpt("zip_two_prefixes.pt", bytes(z.finish()[0]),
         "entry 'other/data/2' is not under the folder 'archive/'", "two top-level folders")
    z = checkpoint()
    z.add("archive/data/0", f32(9, 9, 9, 9, 9, 9))
    ckpt("zip_duplicate_name.pt", bytes(z.finish()[0]), "duplicate entry 'archive/data/0'",
         "the same record twice, with different bytes")
    # Overlap: record 'data/1' lies inside the data of 'data/0'.
    inner = Zip()
    inner.add("archive/data/1", FC_B, align=False)
    z = Zip()
    z.add("archive/data.pkl", state_dict_pickle(linear_tensors()))
    z.add("archive/data/0", FC_W + bytes(inner.out))
    # The inner local header sits 24 bytes into data/0's data.
    data0 = z.central[1]["offset"] + 30 + len("archive/data/0")
    data0 += (64 - (data0 + 4) % 64) % 64 + 4
    z.central.append(dict(name=b"archive/data/1", method=0, crc=zlib.crc32(FC_B), csize=8,
                          usize=8, offset=data0 + 24, flags=0x0808, extra=None, zip64=False))
    ckpt("zip_overlapping_entries.pt", bytes(z.finish()[0]),
         "entries 'archive/data/0' and 'archive/data/1' overlap",
         "one record's local header and data lie inside another record's data")

    # A Deflate bomb under code/: 1 MiB of zeros compressed to ~1 KiB, with
    # the central directory claiming 16 bytes (the inflater must stop at the
    # declared size), and a second one claiming 2^40 bytes.
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb_data = bomb.compress(b"\0" * (1 << 20)) + bomb.flush()
    z = checkpoint()
    z.add("archive/code/__torch__/model.py", bomb_data, method=8, usize=16)
    z.add("archive/constants.pkl", b"\x80\x02).")
    ckpt("zip_code_deflate_bomb.pt", bytes(z.finish()[0]), TORCHSCRIPT_BOMB_SMALL,
         "TorchScript-shaped archive; code/ record inflates to 1 MiB, declares 16 bytes")
    z = checkpoint()
    z.add("archive/code/__torch__/model.py", bomb_data, method=8, usize=1 << 40)
    z.central[-1]["zip64"] = True
    z.add("archive/constants.pkl", b"\x80\x02).")
    ckpt("zip_code_declared_huge.pt", bytes(z.finish()[0]), TORCHSCRIPT_BOMB_HUGE,
         "TorchScript-shaped archive; code/ record declares 2^40 uncompressed bytes")

    z = Zip()
    z.add("archive/version", b"3\n")
    ckpt("zip_no_data_pkl.pt", bytes(z.finish()[0]), "without a data.pkl record",
         "a zip archive that is not a checkpoint")
    ckpt("zip_version_not_number.pt", bytes(checkpoint(version=b"3; rm -rf /\n").finish()[0]),
         "record 'archive/version': not a version number", "version record with text")
    ckpt("zip_byteorder_unknown.pt",
         bytes(checkpoint(extra=[("byteorder", b"middle")]).finish()[0]),
         "unknown byte order 'middle'", "byteorder record 'middle'")
    z = Zip()
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    pkl = state_dict_pickle(linear_tensors())
    z.add("archive/data.pkl", comp.compress(pkl) + comp.flush(), method=8, usize=len(pkl))
    z.add("archive/data/0", FC_W).add("archive/data/1", FC_B)
    ckpt("zip_data_pkl_deflated.pt", bytes(z.finish()[0]),
         "compression method 8 where an uncompressed (stored) record is required",
         "data.pkl compressed")


# The TorchScript reader inflates code/ records with a cap (ZipReader::extract).
TORCHSCRIPT_BOMB_SMALL = "record 'archive/code/__torch__/model.py': inflated data is larger than the declared 16 bytes"
TORCHSCRIPT_BOMB_HUGE = "record 'archive/code/__torch__/model.py': 1099511627776 bytes exceeds the limit of"


def pickle_entries():
    refused = [("os", "system"), ("builtins", "eval"), ("subprocess", "Popen"),
               ("posix", "system")]
    for module, name in refused:
        tag = module + "_" + name.lower()
        body = P().glob(module, name).str("touch /tmp/ferry_pwned").op(0x85, b"R").stop().b
        ckpt("pickle_global_%s.pt" % tag, with_pickle(bytes(body)),
             "refused global '%s.%s'" % (module, name),
             "GLOBAL %s.%s + REDUCE" % (module, name))
        body = (P().short_str(module).short_str(name).op(0x93).str("touch /tmp/ferry_pwned")
                .op(0x85, b"R").stop().b)
        ckpt("pickle_stack_global_%s.pt" % tag, with_pickle(bytes(body)),
             "refused global '%s.%s'" % (module, name),
             "STACK_GLOBAL %s.%s + REDUCE" % (module, name))
    body = P().glob("__main__", "Exploit").op(b")R").stop().b
    ckpt("pickle_reduce_unknown_class.pt", with_pickle(bytes(body)),
         "refused REDUCE of '__main__.Exploit'", "REDUCE of a class that is not allowlisted")
    ckpt("pickle_stack_underflow.pt", with_pickle(b"K\x01\x86."),
         "stack underflow at byte 4 (opcode 0x86 TUPLE2)", "TUPLE2 with one item on the stack")
    ckpt("pickle_mark_underflow.pt", with_pickle(b"K\x01t."),
         "MARK underflow (no MARK on the stack) at byte 4 (opcode 0x74 TUPLE)", "TUPLE without MARK")
    ckpt("pickle_bad_memo_index.pt", with_pickle(b"]q\x00h\x07."),
         "memo index 7 was never stored", "BINGET of an index never stored")
    ckpt("pickle_memo_bomb_index.pt", with_pickle(b"]r\xff\xff\xff\xffj\xfe\xff\xff\xff."),
         "memo index 4294967294 was never stored",
         "LONG_BINPUT 2^32-1 (CPython grows its memo array to that size), then a missing index")
    ckpt("pickle_memo_bomb_count.pt", with_pickle(b"]" + b"\x94" * ((1 << 22) + 1) + b"."),
         "memo exceeds the limit of 4194304 entries", "4M+1 MEMOIZE opcodes")
    ckpt("pickle_deep_nesting_lists.pt", with_pickle(b"]" * 200000 + b"a" * 199999 + b"."),
         "containers nested deeper than the limit of 1000",
         "200,000 nested lists (EMPTY_LIST x 200k, APPEND x 200k)")
    ckpt("pickle_deep_nesting_marks.pt", with_pickle(b"(" * 200000 + b"t" * 200000 + b"."),
         "MARK depth exceeds the limit of 4096", "200,000 nested MARKs")
    ckpt("pickle_unknown_opcode.pt", with_pickle(b"\xff."), "unknown opcode 0xff",
         "opcode 0xff")
    ckpt("pickle_setitem_on_list.pt", with_pickle(b"]K\x01K\x02s."),
         "SETITEM on a list, not a dict", "SETITEM applied to a list")
    ckpt("pickle_append_on_dict.pt", with_pickle(b"}K\x01a."), "APPEND to a dict, not a list",
         "APPEND applied to a dict")
    ckpt("pickle_binunicode_huge_length.pt", with_pickle(b"X\xff\xff\xff\xffabc."),
         "truncated: needs 4294967295 bytes", "BINUNICODE claiming 4 GiB")
    ckpt("pickle_binbytes8_huge_length.pt",
         with_pickle(b"\x8e" + struct.pack("<Q", 1 << 62) + b"abc."),
         "truncated: needs 4611686018427387904 bytes", "BINBYTES8 claiming 2^62 bytes")
    ckpt("pickle_long4_huge_length.pt", with_pickle(b"\x8b\xff\xff\xff\x7f."),
         "LONG4 of 2147483647 bytes is too long", "LONG4 claiming 2 GiB")
    ckpt("pickle_frame_huge_length.pt", with_pickle(b"\x95" + struct.pack("<Q", 1 << 63) + b"N."),
         "frame of 9223372036854775808 bytes runs past the end", "FRAME claiming 2^63 bytes")
    ckpt("pickle_no_stop.pt", with_pickle(b"]]]"), "truncated: no STOP opcode",
         "a pickle that never ends")
    ckpt("pickle_protocol_6.pt", bytes(checkpoint(pkl=b"\x80\x06N.").finish()[0]),
         "unsupported pickle protocol 6", "PROTO 6")
    ckpt("pickle_text_protocol.pt", with_pickle(b"I1\n."), "text-protocol (0/1) opcode not supported",
         "INT (protocol 0)")
    ckpt("pickle_invalid_utf8.pt", with_pickle(b"X\x02\x00\x00\x00\xc3\x28."),
         "string is not valid UTF-8", "BINUNICODE with an invalid UTF-8 sequence")
    body = P().mark().str("module").glob("__main__", "Net").str("x.py").str("src").op(b"t", b"Q.").b
    ckpt("pickle_persid_not_storage.pt", with_pickle(bytes(body)),
         "persistent id is not a ('storage', type, key, location, numel) tuple",
         "BINPERSID of a ('module', ...) id")


def tensor_entries():
    def sd(w=None, b=None, storages=None):
        return bytes(checkpoint(pkl=state_dict_pickle(linear_tensors(w, b)),
                                storages=storages).finish()[0])

    ckpt("tensor_negative_size.pt", sd(w=dict(size=[-1, 3], stride=[3, 1])),
         "negative tensor size -1", "size (-1, 3)")
    ckpt("tensor_negative_stride.pt", sd(w=dict(size=[2, 3], stride=[3, -1])),
         "negative tensor stride -1", "stride (3, -1)")
    ckpt("tensor_size_overflow.pt", sd(w=dict(size=[1 << 40, 1 << 40], stride=[1, 1])),
         "tensor 'fc.weight': too many elements (size [1099511627776, 1099511627776])",
         "size 2^40 x 2^40: the element count overflows")
    ckpt("tensor_view_past_storage.pt", sd(w=dict(offset=1)),
         "tensor 'fc.weight': view (offset 1, size [2, 3], stride [3, 1]) reaches past the end "
         "of its storage of 6 elements", "storage offset 1 + 6 elements in a 6-element storage")
    ckpt("tensor_stride_overflow.pt", sd(w=dict(size=[2, 3], stride=[1 << 62, 1])),
         "reaches past the end of its storage", "stride 2^62: the extent overflows int64")
    ckpt("tensor_negative_offset.pt", sd(w=dict(offset=-4)),
         "negative tensor storage offset -4", "storage offset -4")
    ckpt("tensor_rank_mismatch.pt", sd(w=dict(size=[2, 3], stride=[3])),
         "tensor size has 2 dimensions but stride has 1", "size and stride of different ranks")
    ckpt("tensor_record_short.pt", sd(storages=[("0", FC_W[:20]), ("1", FC_B)]),
         "record 'archive/data/0' has 20 bytes, but its storage declares 6 x 4 = 24 bytes",
         "a storage record shorter than numel x element size")
    ckpt("tensor_record_long.pt", sd(storages=[("0", FC_W + b"\0" * 4), ("1", FC_B)]),
         "record 'archive/data/0' has 28 bytes, but its storage declares 6 x 4 = 24 bytes",
         "a storage record longer than declared")
    # torch.serialization.skip_data() (torch 2.5+): headers and sizes, zeros, no CRC, beside records with one.
    zeros = [("0", b"\0" * 24), ("1", b"\0" * 8)]
    add("checkpoints/control_zero_weights.pt", sd(storages=zeros), "convert", None,
        "control: every weight 0, each record with its real CRC-32: converts", ok=True)
    skipped = checkpoint(storages=zeros)
    for c in skipped.central:
        if b"/data/" in c["name"]:
            c["crc"] = 0
    ckpt("tensor_skip_data.pt", bytes(skipped.finish()[0]),
         "record 'archive/data/0' holds no weights: the file was saved under torch.serialization.skip_data()",
         "storages written by torch.serialization.skip_data(): zeros with CRC-32 0 beside records with CRCs")
    ckpt("tensor_unknown_storage_type.pt", sd(w=dict(storage_cls="Float8Storage")),
         "unknown storage type 'torch.Float8Storage'", "a storage class ferry does not know")
    ckpt("tensor_unknown_dtype_v3.pt",
         sd(w=dict(storage_cls="UntypedStorage", storage_module="torch.storage", numel=24,
                   v3_dtype="float4_e2m1")),
         "_rebuild_tensor_v3 dtype is not a torch dtype", "_rebuild_tensor_v3 with torch.float4_e2m1")
    ckpt("tensor_storage_key_traversal.pt", sd(w=dict(key="../../etc/passwd")),
         "invalid storage key '../../etc/passwd'", "a storage key with ../")
    ckpt("tensor_storage_missing.pt", sd(w=dict(key="9")),
         "storage record 'archive/data/9' not found", "a storage key without a record")
    ckpt("tensor_storage_negative_numel.pt", sd(w=dict(numel=-6)),
         "storage '0' has negative numel", "numel -6")
    ckpt("tensor_storage_numel_overflow.pt", sd(w=dict(numel=1 << 62)),
         "storage '0' size overflows", "numel 2^62 float32: the byte count overflows")
    ckpt("tensor_storage_redeclared.pt", sd(b=dict(key="0", numel=2)),
         "storage '0' is declared twice with different types or sizes",
         "two tensors declare the same storage with different numel")
    # Layer mapping: a Linear whose bias does not fit its weight.
    ckpt("layer_bias_shape.pt", sd(b=dict(numel=2, size=[1], offset=0)),
         "tensor 'fc.bias' has shape [1]", "Linear(3, 2) with a bias of 1 element")


def numpy_array(p, shape, code, data, fortran=False, order="<", state=None, cls=("numpy", "ndarray"),
                multiarray="numpy.core.multiarray"):
    """Pushes a numpy array as numpy's pickle writes it under protocol 2:
    _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype(code), fortran,
    data); bytes as _codecs.encode(str, 'latin1'), a list for data = [...].
    `state`, when given, replaces the whole BUILD state (a callable on p)."""
    p.glob(multiarray, "_reconstruct").glob(*cls).int(0).op(0x85)
    latin1(p, b"b").op(0x87, b"R")
    if state is not None:
        state(p)
        return p.op(b"b")
    p.mark().int(1).mark()
    for d in shape:
        p.int(d)
    p.op(b"t")
    numpy_dtype(p, code, order)
    p.op(0x88 if fortran else 0x89)
    if isinstance(data, list):
        p.op(b"]").mark()
        for v in data:
            p.op(b"N") if v is None else p.int(v)
        p.op(b"e")
    else:
        latin1(p, data)
    return p.op(b"t", b"b")


def latin1(p, raw):
    """Bytes as protocol 2 pickles them: _codecs.encode(str, 'latin1')."""
    return p.glob("_codecs", "encode").str(raw.decode("latin1")).str("latin1").op(0x86, b"R")


def numpy_dtype(p, code, order="<"):
    """numpy.dtype(code, False, True) with its BUILD state (3, order, ...)."""
    p.glob("numpy", "dtype").str(code).op(0x89, 0x88, 0x87, b"R")
    p.mark().int(3).str(order).op(b"NNN").int(-1).int(-1).int(63 if code[0] == "O" else 0)
    return p.op(b"t", b"b")


def numpy_state_dict(w=None, b=None, scalar=None):
    """The Linear(3 -> 2) state dict with numpy arrays for tensors (no storage
    records), as torch.save({'fc.weight': np.array(...), ...}) writes it.
    w, b: keyword overrides for numpy_array; scalar: a callable pushing one
    more value, stored under 'epoch'."""
    p = P().proto(2).ordered_dict().mark()
    p.str("fc.weight")
    numpy_array(p, **dict(dict(shape=[2, 3], code="f4", data=FC_W), **(w or {})))
    p.str("fc.bias")
    numpy_array(p, **dict(dict(shape=[2], code="f4", data=FC_B), **(b or {})))
    if scalar:
        p.str("epoch")
        scalar(p)
    p.op(b"u").stop()
    return bytes(checkpoint(pkl=bytes(p.b), storages=[]).finish()[0])


def numpy_entries():
    add("checkpoints/control_numpy.pt", numpy_state_dict(), "convert", None,
        "control: the Linear(3, 2) state dict with numpy float32 arrays for tensors", ok=True)
    add("checkpoints/control_numpy_scalar.pt",
        numpy_state_dict(b=dict(data=struct.pack(">2f", 0.1, -0.2), order=">"),
                         scalar=lambda p: latin1(numpy_dtype(p.glob("numpy._core.multiarray", "scalar"), "i8"),
                                                       struct.pack("<q", 7)).op(0x86, b"R")),
        "convert", None, "control: a big-endian numpy bias and a numpy._core int64 scalar beside the tensors",
        ok=True)

    def np_ckpt(name, expect, why, **kw):
        ckpt("numpy_" + name + ".pt", numpy_state_dict(**kw), expect, why)

    np_ckpt("state_three_items",
            "numpy array state is a tuple, not (version, shape, dtype, is_fortran, data)",
            "ndarray BUILD state (1, shape, dtype): three items",
            w=dict(state=lambda p: numpy_dtype(p.mark().int(1).mark().int(2).int(3).op(b"t"), "f4").op(b"t")))
    np_ckpt("state_not_tuple", "numpy array state is a list, not (version, shape, dtype, is_fortran, data)",
            "ndarray BUILD state is an empty list", w=dict(state=lambda p: p.op(b"]")))
    np_ckpt("shape_not_tuple", "numpy array shape is a int, not a tuple", "shape 6 instead of (2, 3)",
            w=dict(state=lambda p: numpy_dtype(p.mark().int(1).int(6), "f4").op(0x89).str("x" * 24).op(b"t")))
    np_ckpt("dtype_not_dtype", "numpy array dtype is a str, not a numpy.dtype", "dtype given as the string 'f4'",
            w=dict(state=lambda p: p.mark().int(1).int(2).int(3).op(0x86).str("f4").op(0x89).str("x" * 24)
                   .op(b"t")))
    np_ckpt("object_array", "numpy array of Python objects (dtype object): not data ferry reads",
            "an object array (dtype 'O8', its items a pickled list)", w=dict(code="O8", data=[1, None, 2, 3, 4, 5]))
    np_ckpt("unknown_dtype_complex", "numpy array of dtype 'c8': only float16/32/64 and integer arrays are read",
            "a complex64 array", w=dict(code="c8", data=FC_W + FC_W))
    np_ckpt("unknown_dtype_unicode", "numpy array of dtype 'U3': only float16/32/64 and integer arrays are read",
            "a unicode string array", w=dict(code="U3", data=b"\0" * 72))
    np_ckpt("bad_byte_order", "numpy.dtype byte order '?'", "dtype byte order '?'", w=dict(order="?"))
    np_ckpt("data_short", "numpy array data holds 20 bytes, shape of 6 x 'f4' needs 6 x 4",
            "shape (2, 3) float32 with 20 bytes of data", w=dict(data=FC_W[:20]))
    np_ckpt("data_long", "numpy array data holds 32 bytes, shape of 6 x 'f4' needs 6 x 4",
            "shape (2, 3) float32 with 32 bytes of data", w=dict(data=FC_W + FC_B))
    np_ckpt("shape_negative", "numpy array shape holds a negative size -2", "shape (-2, 3)", w=dict(shape=[-2, 3]))
    np_ckpt("shape_overflow", "numpy array shape overflows", "shape (2^40, 2^40): the element count overflows",
            w=dict(shape=[1 << 40, 1 << 40]))
    np_ckpt("reconstruct_not_ndarray",
            "'numpy.core.multiarray._reconstruct' of a global, not numpy.ndarray",
            "_reconstruct of numpy.matrix (a subclass whose methods would run)", w=dict(cls=("numpy", "matrix")))
    np_ckpt("scalar_object_dtype",
            "refused REDUCE of 'numpy.core.multiarray.scalar' of dtype 'O8' (object scalars are not allowlisted)",
            "multiarray.scalar(dtype('O'), <an object>): numpy hands the object back",
            scalar=lambda p: numpy_dtype(p.glob("numpy.core.multiarray", "scalar"), "O8")
            .str("touch /tmp/ferry_pwned").op(0x86, b"R"))
    np_ckpt("scalar_data_not_bytes",
            "refused REDUCE of 'numpy.core.multiarray.scalar' of a list (not (numpy.dtype, bytes))",
            "multiarray.scalar(dtype('i8'), [])",
            scalar=lambda p: numpy_dtype(p.glob("numpy.core.multiarray", "scalar"), "i8").op(b"]", 0x86, b"R"))
    # numpy globals that are code, never data: refused whatever their arguments.
    for module, name, arg in (("numpy", "load", "/tmp/ferry_pwned.npy"),
                              ("numpy.testing._private.utils", "runstring", "import os"),
                              ("numpy.lib.npyio", "load", "/tmp/ferry_pwned.npy"),
                              ("numpy.core.multiarray", "fromfile", "/etc/passwd"),
                              ("numpy", "fromfunction", "x")):
        np_ckpt("global_%s_%s" % (module.split(".")[-1].lstrip("_"), name),
                "refused REDUCE of '%s.%s' (not an allowlisted callable)" % (module, name),
                "%s.%s as a value in the state dict" % (module, name),
                scalar=lambda p, m=module, n=name, a=arg: p.glob(m, n).str(a).op(0x85, b"R"))


def other_format_entries():
    ckpt("empty.pt", b"", "empty file", "zero bytes")
    ckpt("tar_format.pt", b"\0" * 257 + b"ustar" + b"\0" * 250,
         "tar header at byte 0: bad header checksum (not a PyTorch 0.1-0.2 tar archive",
         "the ancient tar container, its header all zeros but the magic")
    ckpt("preview_2018.pt", b"PYTORCH1" + b"\0" * 32, "'PYTORCH1' preview format",
         "the 2018 preview magic")
    ckpt("plain_pickle.pt", b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00ls\x85R.",
         "a Python pickle without the PyTorch magic number",
         "a bare pickle (GLOBAL posix.system + REDUCE), not a torch.save file")
    ckpt("unrecognized_header.pt", bytes(range(64)),
         "not a PyTorch checkpoint (unrecognized header 00 01 02 03 04 05 06 07)",
         "bytes 0..63")


def safetensors(header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_entries():
    w = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    b = {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]}
    good = safetensors({"fc.weight": w, "fc.bias": b}, FC_W + FC_B)
    add("checkpoints/control_linear.safetensors", good, "convert", None,
        "control: the Linear(3, 2) state dict as safetensors", ok=True)

    def st(name, header, data, expect, why, raw_header=None):
        ckpt(name + ".safetensors", safetensors(header, data, raw_header), expect, why)

    st("st_overlapping_offsets", {"fc.weight": w, "fc.bias": dict(b, data_offsets=[16, 24])}, FC_W,
       "safetensors tensors 'fc.weight' [0, 24) and 'fc.bias' [16, 24) overlap", "fc.bias inside fc.weight")
    st("st_gapped_offsets", {"fc.weight": w, "fc.bias": dict(b, data_offsets=[28, 36])}, FC_W + b"\0" * 4 + FC_B,
       "safetensors data has a gap of 4 bytes before tensor 'fc.bias' [28, 36)", "4 unused bytes between tensors")
    st("st_first_not_at_zero", {"fc.weight": dict(w, data_offsets=[8, 32]), "fc.bias": dict(b, data_offsets=[32, 40])},
       b"\0" * 8 + FC_W + FC_B, "safetensors data has a gap of 8 bytes before tensor 'fc.weight' [8, 32) (the first tensor)",
       "data starts 8 bytes in")
    ckpt("st_oversized_header.safetensors", struct.pack("<Q", 1 << 40) + b"{}",
         "safetensors header of 1099511627776 bytes exceeds the limit of 100000000", "header length 2^40")
    ckpt("st_header_past_end.safetensors", struct.pack("<Q", 5000) + b'{"a":1}',
         "safetensors header of 5000 bytes runs past the end of the file (15 bytes)", "header length past the end")
    st("st_size_mismatch", {"fc.weight": w, "fc.bias": dict(b, shape=[3])}, FC_W + FC_B,
       "safetensors tensor 'fc.bias': data_offsets [24, 32) hold 8 bytes, but dtype F32 and shape [3] need 12",
       "shape [3] for 8 bytes")
    st("st_offsets_past_end", {"fc.weight": w, "fc.bias": dict(b, data_offsets=[24, 32])}, FC_W,
       "safetensors tensor 'fc.bias': data_offsets [24, 32) reach past the end of the data section",
       "the last tensor's data is missing")
    st("st_end_before_begin", {"fc.weight": w, "fc.bias": dict(b, data_offsets=[32, 24])}, FC_W + FC_B,
       "data_offsets [32, 24) end before they begin", "end < begin")
    st("st_trailing_data", {"fc.weight": w, "fc.bias": b}, FC_W + FC_B + b"\0" * 16,
       "safetensors data section is 48 bytes, but its tensors cover 32", "16 bytes no tensor owns")
    st("st_too_many_elements", {"fc.weight": dict(w, shape=[1 << 40, 1 << 40]), "fc.bias": b}, FC_W + FC_B,
       "safetensors tensor 'fc.weight': too many elements (shape [1099511627776, 1099511627776])",
       "shape 2^40 x 2^40")
    st("st_duplicate_key", None, FC_W + FC_B, "duplicate key 'fc.weight'", "the same tensor twice",
       raw_header=('{"fc.weight":%s,"fc.weight":%s}' % (json.dumps(w), json.dumps(b))).encode())
    st("st_deep_json", None, FC_W + FC_B, "safetensors header: values nested deeper than 64", "an unknown field nested 10,000 deep",
       raw_header=('{"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"x":' + "[" * 10000 +
                   "]" * 10000 + '},"fc.bias":%s}' % json.dumps(b)).encode())
    st("st_unterminated_json", None, FC_W, "safetensors header: unterminated string", "a header that stops mid-string",
       raw_header=b'{"fc.weight":{"dtype":"F3')
    st("st_nan_offset", None, FC_W, "data_offsets end is not a non-negative integer", "NaN where an offset belongs",
       raw_header=b'{"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,NaN]}}')


def legacy_stream(main_pickle=None, keys=("0", "1"), storages=None, protocol=1001, trailing=b""):
    """A torch.save(_use_new_zipfile_serialization=False) file: magic, protocol,
    sys_info, the main pickle, the key list, then each storage as int64 count +
    raw bytes."""
    out = bytearray(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.")
    out += bytes(P().proto(2).int(protocol).stop().b)
    sysinfo = (P().proto(2).op(b"}").mark().str("protocol_version").int(1001).str("little_endian").op(0x88)
               .str("type_sizes").op(b"}").mark().str("short").int(2).str("int").int(4).str("long").int(4)
               .op(b"u").op(b"u").stop())
    out += bytes(sysinfo.b)
    if main_pickle is None:
        p = P().proto(2).ordered_dict().mark()
        for name, key, numel, size in (("fc.weight", "0", 6, [2, 3]), ("fc.bias", "1", 2, [2])):
            legacy_tensor(p.str(name), key, numel, size)
        main_pickle = bytes(p.op(b"u").stop().b)
    out += main_pickle
    kl = P().proto(2).op(b"]").mark()
    for k in keys:
        kl.str(k)
    out += bytes(kl.op(b"e").stop().b)
    for key, data in (storages if storages is not None else [("0", FC_W), ("1", FC_B)]):
        out += struct.pack("<q", len(data) // 4) + data
    return bytes(out + trailing)


def legacy_entries():
    add("checkpoints/control_legacy.pt", legacy_stream(), "convert", None,
        "control: the Linear(3, 2) state dict in the legacy (pre-1.6) stream format", ok=True)
    ckpt("legacy_wrong_protocol.pt", legacy_stream(protocol=1002),
         "legacy stream: unsupported protocol version", "protocol version 1002")
    ckpt("legacy_storage_truncated.pt", legacy_stream()[:-4], "truncated: needs 8 bytes of data, 4 left",
         "the last storage cut short")
    ckpt("legacy_storage_count_mismatch.pt",
         legacy_stream(storages=[("0", FC_W), ("1", FC_B + FC_B)]), "holds 4", "fc.bias storage holds 4 floats, declared 2")
    ckpt("legacy_trailing_bytes.pt", legacy_stream(trailing=b"junk"),
         "legacy stream: 4 unexpected bytes after the last storage", "4 bytes after the storages")
    ckpt("legacy_key_listed_twice.pt", legacy_stream(keys=("0", "0")),
         "legacy stream: storage '0' is listed twice", "key list ['0', '0']")
    body = P().proto(2).glob("posix", "system").str("touch /tmp/ferry_pwned").op(0x85, b"R").stop().b
    ckpt("legacy_posix_system.pt", legacy_stream(main_pickle=bytes(body)), "refused global 'posix.system'",
         "the main pickle of a legacy file calls posix.system")


def thnn_module(p, backend=None, children=(), params=(), memo_backend=True):
    """A torch 0.3/0.4 module (NEWOBJ __main__.Net + BUILD) whose _backend is
    REDUCE(torch.nn.backends.thnn._get_thnn_function_backend, ()) (memo 50),
    or `backend(p)`; params: [(name, tensor writer)], children: [(name,
    writer)]."""
    p.glob("__main__", "Net").op(b")", 0x81).op(b"}").mark()
    p.str("_backend")
    if backend:
        backend(p)
    elif memo_backend:
        p.glob("torch.nn.backends.thnn", "_get_thnn_function_backend").op(b")R", b"q\x32")
    p.str("_parameters").ordered_dict().mark()
    for name, w in params:
        p.str(name)
        w(p)
    p.op(b"u").str("_buffers").ordered_dict().str("_modules").ordered_dict().mark()
    for name, w in children:
        p.str(name)
        w(p)
    p.op(b"u").str("training").false().op(b"u", b"b")
    return p


def legacy_tensor(p, key, numel, size):
    """_rebuild_tensor_v2 over a legacy-stream storage id (with view_metadata None)."""
    p.glob("torch._utils", "_rebuild_tensor_v2").mark()
    p.mark().str("storage").glob("torch", "FloatStorage").str(key).str("cpu").int(numel).op(b"N", b"t", b"Q")
    p.int(0).mark()
    for d in size:
        p.int(d)
    p.op(b"t").mark()
    acc, strides = 1, []
    for d in reversed(size):
        strides.insert(0, acc)
        acc *= d
    for d in strides:
        p.int(d)
    return p.op(b"t").false().ordered_dict().op(b"t", b"R")


def fc_params(w_key="0", b_key="1"):
    return [("weight", lambda q: q.tensor("FloatStorage", w_key, 6, 0, [2, 3])),
            ("bias", lambda q: q.tensor("FloatStorage", b_key, 2, 0, [2]))]


def placeholder_entries():
    """Calls of class references that are not allowlisted (a torch 0.3/0.4
    module's _backend): kept inert as a module's plain attribute, refused
    anywhere else."""
    legacy_fc = [("weight", lambda q: legacy_tensor(q, "0", 6, [2, 3])), ("bias", lambda q: legacy_tensor(q, "1", 2, [2]))]
    control = thnn_module(P().proto(2), children=[("fc", lambda q: thnn_module(q, params=legacy_fc,
                                                                                 memo_backend=False,
                                                                                 backend=lambda r: r.op(b"h\x32")))])
    add("checkpoints/control_legacy_thnn_module.pt", legacy_stream(main_pickle=bytes(control.stop().b)), "convert",
        None, "control: a torch 0.4 whole module (legacy stream) whose modules' _backend is REDUCE(torch.nn.backends."
        "thnn._get_thnn_function_backend, ()), shared through the memo", ok=True)
    add("checkpoints/control_zip_thnn_module.pt", with_pickle_and_fc(bytes(thnn_module(P().proto(2),
                                                                                        params=fc_params()).stop().b)),
        "convert", None, "control: the same call as a zip whole module's attribute", ok=True)
    sd = P().proto(2).ordered_dict().mark().str("fc.weight").tensor("FloatStorage", "0", 6, 0, [2, 3])
    sd.str("fc.bias").glob("__main__", "make_bias").op(b")R").op(b"u").stop()
    ckpt("placeholder_in_state_dict.pt", with_pickle_and_fc(bytes(sd.b)),
         "refused REDUCE of '__main__.make_bias' (not an allowlisted callable) at byte 206 (opcode 0x52 REDUCE): its "
         "result is the root['fc.bias']; a call ferry never makes is kept only as a plain attribute of a pickled "
         "nn.Module", "a call of an unknown function as a state dict's value")
    param = thnn_module(P().proto(2), params=[("weight", lambda q: q.glob("__main__", "init_weight").op(b")R"))])
    ckpt("placeholder_as_parameter.pt", with_pickle_and_fc(bytes(param.stop().b)),
         "refused REDUCE of '__main__.init_weight' (not an allowlisted callable) at byte",
         "a module parameter that is a call of an unknown function")
    storage = thnn_module(P().proto(2), params=[("weight", lambda q: q.glob("torch._utils", "_rebuild_tensor_v2").mark()
                                                 .glob("__main__", "open_storage").op(b")R").int(0).mark().int(6).op(b"t")
                                                 .mark().int(1).op(b"t").false().ordered_dict().op(b"tR"))])
    ckpt("placeholder_as_storage.pt", with_pickle_and_fc(bytes(storage.stop().b)),
         "refused REDUCE of '__main__.open_storage' (not an allowlisted callable) at byte",
         "a tensor whose storage is a call of an unknown function")
    shared = P().proto(2).op(b"}").mark().str("model")
    thnn_module(shared, params=fc_params())
    shared.str("backend").op(b"h\x32").op(b"u").stop()
    ckpt("placeholder_shared_outside.pt", with_pickle_and_fc(bytes(shared.b)),
         "its result is the root['backend']", "a module's _backend call, memoized, also stored as a top-level entry")
    for module, name in (("posix", "system"), ("builtins", "eval"), ("subprocess", "Popen")):
        evil = thnn_module(P().proto(2), params=legacy_fc,
                           backend=lambda q, m=module, n=name: q.glob(m, n).str("touch /tmp/ferry_pwned").op(0x85, b"R"))
        add("checkpoints/placeholder_attribute_%s_%s.pt" % (module, name.lower()),
            legacy_stream(main_pickle=bytes(evil.stop().b)), "convert", "refused global '%s.%s'" % (module, name),
            "%s.%s called as a module attribute: refused outright, never a placeholder" % (module, name))
    dtype = thnn_module(P().proto(2), params=fc_params(),
                        backend=lambda q: q.glob("torch", "FloatStorage").op(b")R"))
    ckpt("placeholder_storage_class_call.pt", with_pickle_and_fc(bytes(dtype.stop().b)),
         "refused REDUCE of 'torch.FloatStorage' (not an allowlisted callable)",
         "a storage class called as a module attribute: never a placeholder")
    twice = thnn_module(P().proto(2), params=fc_params(),
                        backend=lambda q: q.glob("__main__", "factory").op(b")R)R"))
    ckpt("placeholder_called.pt", with_pickle_and_fc(bytes(twice.stop().b)),
         "REDUCE of a call never made, not a global", "the result of an unknown call, called in turn")


def with_pickle_and_fc(pkl):
    """A torch.save zip of `pkl` with fc.weight ('0') and fc.bias ('1')."""
    return bytes(checkpoint(pkl=pkl, storages=[("0", FC_W), ("1", FC_B)]).finish()[0])


# ---------------------------------------------------------------------------
# The pre-0.3 tar format (checkpoint/legacy_tar.h): a ustar archive of
# sys_info, pickle, tensors and storages, written header by header.


def tar_header(name, size, typeflag=b"0", checksum=None, size_field=None):
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000600\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field if size_field is not None else b"%011o\0" % size
    h[136:148] = b"13234567123\0"
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[257:265] = b"ustar\x0000"
    total = sum(h) if checksum is None else checksum
    h[148:156] = b"%06o\0 " % total
    return bytes(h)


def tar_archive(members, end=True):
    """members: [(name, data)] or [(name, data, header kwargs)]."""
    out = bytearray()
    for m in members:
        name, data = m[0], m[1]
        kw = m[2] if len(m) > 2 else {}
        out += tar_header(name, len(data), **kw) + data + b"\0" * ((512 - len(data) % 512) % 512)
    if end:
        out += b"\0" * 1024
    return bytes(out)


def pax(records):
    body = b""
    for k, v in records:
        rec = b" %s=%s\n" % (k.encode(), v.encode())
        n = len(rec) + 1
        while len(str(n)) + len(rec) != n:
            n += 1
        body += str(n).encode() + rec
    return body


def tar_storages(storages, views=(), count=None):
    """storages: [(key, data, numel or None)]: pickled count, then per storage
    (key, location, FloatStorage) and int64 numel + bytes; then the views."""
    out = bytes(P().proto(2).int(len(storages) if count is None else count).stop().b)
    for key, data, numel in storages:
        out += bytes(P().proto(2).int(key).str("cpu").glob("torch", "FloatStorage").op(0x87).stop().b)
        out += struct.pack("<q", len(data) // 4 if numel is None else numel) + data
    v = P().proto(2).op(b"]").mark()
    for target, root, off, size in views:
        v.mark().int(target).int(root).int(off).int(size).op(b"t")
    return out + bytes(v.op(b"e").stop().b)


def tar_tensors(tensors):
    """tensors: [(key, storage key, size, stride, offset[, ndim])]."""
    out = bytes(P().proto(2).int(len(tensors)).stop().b)
    for t in tensors:
        key, skey, size, stride, off = t[:5]
        ndim = t[5] if len(t) > 5 else len(size)
        out += bytes(P().proto(2).int(key).int(skey).glob("torch", "FloatTensor").op(0x87).stop().b)
        out += struct.pack("<q", ndim) + struct.pack("<%dq" % len(size), *size)
        out += struct.pack("<%dq" % len(stride), *stride) + struct.pack("<q", off)
    return out


def tar_state_dict(entries=(("fc.weight", "101"), ("fc.bias", "102"))):
    p = P().proto(2).ordered_dict().mark()
    for name, pid in entries:
        p.str(name).str(pid).op(b"Q")
    return bytes(p.op(b"u").stop().b)


TAR_SYS_INFO = bytes(P().proto(2).op(b"}").mark().str("protocol_version").int(1000).str("little_endian").op(0x88)
                     .op(b"u").stop().b)


def tar_file(sys_info=TAR_SYS_INFO, pickle=None, tensors=None, storages=None, extra=(), end=True, order=None):
    members = {"sys_info": sys_info, "pickle": tar_state_dict() if pickle is None else pickle,
               "tensors": tar_tensors([(101, 11, [2, 3], [3, 1], 0), (102, 12, [2], [1], 0)]) if tensors is None
               else tensors,
               "storages": tar_storages([(11, FC_W, None), (12, FC_B, None)]) if storages is None else storages}
    names = order or ["sys_info", "pickle", "tensors", "storages"]
    return tar_archive([(n, members[n]) for n in names if members.get(n) is not None] + list(extra), end=end)


def tar_entries():
    add("checkpoints/control_tar.pt", tar_file(), "convert", None,
        "control: the Linear(3, 2) state dict in the pre-0.3 tar format (torch 0.1-0.2)", ok=True)
    pax_head = pax([("mtime", "1500000000.25"), ("path", "storages")])
    add("checkpoints/control_tar_pax.pt",
        tar_archive([("sys_info", TAR_SYS_INFO), ("pickle", tar_state_dict()),
                     ("tensors", tar_tensors([(101, 11, [2, 3], [3, 1], 0), (102, 12, [2], [1], 0)])),
                     ("././@PaxHeader", pax_head, {"typeflag": b"x"}),
                     ("st", tar_storages([(11, FC_W, None), (12, FC_B, None)]))]), "convert", None,
        "control: as tarfile.PAX_FORMAT writes it, a pax header (mtime, path) before a member", ok=True)
    add("checkpoints/control_tar_view.pt",
        tar_file(storages=tar_storages([(11, FC_W + FC_B, None)], views=[(12, 11, 6, 2)]),
                 tensors=tar_tensors([(101, 11, [2, 3], [3, 1], 0), (102, 12, [2], [1], 0)])), "convert", None,
        "control: fc.bias over a storage view (key 12: elements 6..7 of storage 11)", ok=True)
    ckpt("tar_missing_storages.pt", tar_file(order=["sys_info", "pickle", "tensors"]),
         "a tar archive without a 'storages' member", "no storages member")
    ckpt("tar_missing_pickle.pt", tar_file(order=["sys_info", "tensors", "storages"]),
         "a tar archive without a 'pickle' member", "no pickle member")
    ckpt("tar_member_twice.pt", tar_file(order=["sys_info", "pickle", "tensors", "storages", "pickle"]),
         "tar member 'pickle' appears twice", "two pickle members (tarfile would take the last)")
    whole = tar_file()
    at = whole.index(b"storages\0") + 512 + 10
    ckpt("tar_truncated_member.pt", whole[:at],
         "member 'storages' needs %d bytes, 10 left (a truncated archive)" % len(tar_storages([(11, FC_W, None),
                                                                                             (12, FC_B, None)])),
         "the archive cut inside its last member")
    ckpt("tar_truncated_header.pt", whole[:512 + 512 + 200],
         "tar archive: 200 bytes at byte 1024 are not a whole header", "the archive cut inside a header")
    ckpt("tar_bad_checksum.pt", tar_archive([("sys_info", TAR_SYS_INFO, {"checksum": 1})]),
         "tar header at byte 0: bad header checksum", "a header whose checksum is wrong")
    ckpt("tar_size_not_octal.pt", tar_archive([("sys_info", TAR_SYS_INFO, {"size_field": b"99999999999\0"})]),
         "member 'sys_info': malformed size field", "a size field with digits 8 and 9")
    ckpt("tar_size_base256.pt", tar_archive([("sys_info", TAR_SYS_INFO,
                                               {"size_field": b"\x80" + b"\0" * 3 + struct.pack(">Q", 2**40)})]),
         "a base-256 size (a member over 8 GiB)", "a base-256 size of 2^40")
    ckpt("tar_size_past_end.pt", tar_archive([("sys_info", TAR_SYS_INFO, {"size_field": b"%011o\0" % (2**33 - 1)})]),
         "member 'sys_info' needs 8589934591 bytes", "a member declaring 8 GiB in a 2 KiB file")
    ckpt("tar_pax_malformed.pt", tar_archive([("././@PaxHeader", b"99 path=storages\n", {"typeflag": b"x"}),
                                              ("sys_info", TAR_SYS_INFO)]),
         "malformed pax record", "a pax record longer than its header")
    ckpt("tar_pax_size_past_end.pt",
         tar_archive([("././@PaxHeader", pax([("size", "99999999")]), {"typeflag": b"x"}),
                      ("sys_info", TAR_SYS_INFO)]),
         "member 'sys_info' needs 99999999 bytes", "a pax size record larger than the file")
    ckpt("tar_pickle_symlink.pt", tar_file(extra=[]).replace(b"", b"") if False else
         tar_archive([("sys_info", TAR_SYS_INFO), ("pickle", b"", {"typeflag": b"2"}),
                      ("tensors", tar_tensors([])), ("storages", tar_storages([]))]),
         "tar member 'pickle' is not a regular file (type '2')", "the pickle member is a symlink")
    ckpt("tar_big_endian.pt", tar_file(sys_info=bytes(P().proto(2).op(b"}").str("little_endian").false().op(b"s")
                                                      .stop().b)),
         "written on a big-endian machine (little_endian is False): not supported", "sys_info says big-endian")
    ckpt("tar_storage_count_huge.pt", tar_file(storages=tar_storages([], count=2**40)),
         "1099511627776 storages (at most 1048576)", "a storage count of 2^40")
    ckpt("tar_storage_past_member.pt", tar_file(storages=tar_storages([(11, FC_W, 2**20), (12, FC_B, None)])),
         "truncated: storage 11 (1048576 x 4 bytes) needs 4194304 bytes", "a storage's element count past its member")
    ckpt("tar_storage_negative.pt", tar_file(storages=tar_storages([(11, FC_W, -1), (12, FC_B, None)])),
         "storage 11 has an element count of -1", "a negative element count")
    ckpt("tar_storage_numel_overflow.pt", tar_file(storages=tar_storages([(11, FC_W, 2**62), (12, FC_B, None)])),
         "storage 11 has an element count of 4611686018427387904", "numel x 4 overflows 64 bits")
    ckpt("tar_storage_twice.pt", tar_file(storages=tar_storages([(11, FC_W, None), (11, FC_B, None)])),
         "storage 11 is stored twice", "two storages with one key")
    ckpt("tar_view_past_root.pt", tar_file(storages=tar_storages([(11, FC_W, None), (12, FC_B, None)],
                                                                 views=[(13, 11, 4, 10)])),
         "storage view 0 (offset 4, size 10) reaches past the end of storage 11 of 6 elements",
         "a storage view past its root")
    ckpt("tar_view_unknown_root.pt", tar_file(storages=tar_storages([(11, FC_W, None), (12, FC_B, None)],
                                                                    views=[(13, 99, 0, 1)])),
         "storage view 0: root storage 99 is not in the archive", "a view of a storage the archive lacks")
    ckpt("tar_tensor_past_storage.pt",
         tar_file(tensors=tar_tensors([(101, 11, [4, 3], [3, 1], 0), (102, 12, [2], [1], 0)])),
         "tensor 101", "a 4x3 tensor over a storage of 6 elements")
    ckpt("tar_tensor_offset_past_storage.pt",
         tar_file(tensors=tar_tensors([(101, 11, [2, 3], [3, 1], 0), (102, 12, [2], [1], 1)])),
         "tensor 102", "a tensor at storage offset 1 of a 2-element storage")
    ckpt("tar_tensor_ndim_huge.pt", tar_file(tensors=tar_tensors([(101, 11, [2, 3], [3, 1], 0, 1000)])),
         "tensor 101 has 1000 dimensions", "ndim 1000")
    ckpt("tar_tensor_metadata_truncated.pt",
         tar_file(tensors=tar_tensors([(101, 11, [2, 3], [3, 1], 0), (102, 12, [2], [1], 0)])[:-4]),
         "truncated: the storage offset of tensor 102 needs 8 bytes, 4 left", "the last tensor's metadata cut short")
    ckpt("tar_tensor_unknown_storage.pt", tar_file(tensors=tar_tensors([(101, 99, [2, 3], [3, 1], 0)])),
         "tensor 101 names storage 99, which the archive does not hold", "a tensor of a storage the archive lacks")
    ckpt("tar_pid_unknown.pt", tar_file(pickle=tar_state_dict([("fc.weight", "101"), ("fc.bias", "777")])),
         "persistent id '777' names no tensor or storage of the archive", "a persistent id no member defines")
    ckpt("tar_pid_path.pt", tar_file(pickle=tar_state_dict([("fc.weight", "../../etc/passwd")])),
         "persistent id '../../etc/passwd' is not a tensor or storage key", "a persistent id that is a path")
    ckpt("tar_pid_overflow.pt", tar_file(pickle=tar_state_dict([("fc.weight", "99999999999999999999")])),
         "is not a tensor or storage key", "a 20-digit persistent id")
    ckpt("tar_pickle_trailing.pt", tar_file(pickle=tar_state_dict() + b"junk"),
         "4 bytes after the pickle's STOP", "4 bytes after the main pickle")
    body = P().proto(2).glob("posix", "system").str("touch /tmp/ferry_pwned").op(0x85, b"R").stop().b
    ckpt("tar_posix_system.pt", tar_file(pickle=bytes(body)), "refused global 'posix.system'",
         "the main pickle of a tar file calls posix.system")
    module = thnn_module(P().proto(2), params=[("weight", lambda q: q.str("101").op(b"Q")),
                                               ("bias", lambda q: q.str("102").op(b"Q"))]).stop()
    add("checkpoints/control_tar_thnn_module.pt", tar_file(pickle=bytes(module.b)), "convert", None,
        "control: a torch 0.2 whole module in the tar format, its _backend the thnn REDUCE", ok=True)


def module_entries():
    # torch.save(model) of a module whose child is itself: NEWOBJ, memoized,
    # then BUILD with _modules = {'child': <the same object>}.
    p = P().proto(2).glob("__main__", "Net").op(b")").op(0x81).op(b"q\x00")
    p.op(b"}").mark().str("training").op(0x88).str("_parameters").ordered_dict()
    p.str("_buffers").ordered_dict().str("_modules").ordered_dict().mark().str("child").op(b"h\x00").op(b"u")
    p.op(b"u").op(b"b").stop()
    ckpt("module_cycle.pt", bytes(checkpoint(pkl=bytes(p.b), storages=[]).finish()[0]), "module cycle",
         "a pickled nn.Module that is its own submodule")
    p = P().proto(2).glob("__main__", "Net").op(b")").op(0x81).op(b"}").mark().str("training").op(0x88).op(b"u")
    p.op(b"b").stop()
    ckpt("module_not_a_module.pt", bytes(checkpoint(pkl=bytes(p.b), storages=[]).finish()[0]),
         "not an nn.Module (its state has neither _parameters nor _modules)",
         "a pickled object with a state that is not a module's")


# ---------------------------------------------------------------------------
# The layer chain a file records: TorchScript code read as text (a loop, a
# branch, an unknown call, nesting, self-reference, huge lines, modules that
# call themselves or nest too deep) and whole pickled nn.Sequentials (an LSTM
# inside, an unknown child, a cycle, absurd nesting). Converted with no
# --graph, as a user would: every refusal names the file, the code record
# and the line.

TS_LINEAR_CODE = """class Linear(Module):
  __parameters__ = ["weight", "bias", ]
  __buffers__ = []
  weight : Tensor
  bias : Tensor
  training : bool
  def forward(self: __torch__.torch.nn.modules.linear.Linear,
    input: Tensor) -> Tensor:
    bias = self.bias
    weight = self.weight
    return torch.linear(input, weight, bias)
"""


def ts_net_code(body, members="  fc : __torch__.torch.nn.modules.linear.Linear\n",
                signature="  def forward(self: __torch__.Net,\n    x: Tensor) -> Tensor:\n"):
    return ("class Net(Module):\n  __parameters__ = []\n  __buffers__ = []\n  training : bool\n" +
            members + signature + "".join("    " + line + "\n" for line in body))


def ts_object(p, module, cls, attrs):
    """A TorchScript object: GLOBAL, EMPTY_TUPLE NEWOBJ, BUILD({attr: value})."""
    p.glob(module, cls).op(b")").op(0x81).op(b"}").mark()
    p.str("training").op(0x89)
    for name, write in attrs:
        p.str(name)
        write(p)
    return p.op(b"u").op(b"b")


def ts_linear(p):
    w, b = linear_tensors()
    return ts_object(p, "__torch__.torch.nn.modules.linear", "Linear",
                     [("weight", lambda q: q.tensor(**w[1])), ("bias", lambda q: q.tensor(**b[1]))])


def torchscript_archive(net_code, root=None, constants=True):
    """Net (Linear(3 -> 2) `fc`, or `root` writing the objects) with `net_code` as code/__torch__.py
    (and constants.pkl unless `constants` is False)."""
    p = P().proto(2)
    if root:
        root(p)
    else:
        ts_object(p, "__torch__", "Net", [("fc", ts_linear)])
    p.stop()
    z = checkpoint(pkl=bytes(p.b))
    for name, text in [("__torch__.py", net_code), ("__torch__/torch/nn/modules/linear.py", TS_LINEAR_CODE)]:
        raw = text.encode()
        comp = zlib.compressobj(9, zlib.DEFLATED, -15)
        z.add("archive/code/" + name, comp.compress(raw) + comp.flush(), method=8, usize=len(raw))
    if constants:
        z.add("archive/constants.pkl", b"\x80\x02).")
    return bytes(z.finish()[0])


TS_CHAIN = "cannot read the layer chain from the TorchScript forward code (record 'code/__torch__.py', "


def pickled_module(p, module, cls, params=(), children=()):
    """torch.save(model) of one module: NEWOBJ, BUILD({training, _parameters,
    _buffers, _modules}); `children` write their own objects."""
    p.glob(module, cls).op(b")").op(0x81).op(b"}").mark()
    p.str("training").op(0x89)
    p.str("_parameters").ordered_dict()
    if params:
        p.mark()
        for name, spec in params:
            p.str(name)
            p.tensor(**spec)
        p.op(b"u")
    p.str("_buffers").ordered_dict()
    p.str("_modules").ordered_dict()
    if children:
        p.mark()
        for name, write in children:
            p.str(name)
            write(p)
        p.op(b"u")
    return p.op(b"u").op(b"b")


def pickled_linear(p, first_key="0", out=2, inp=3):
    return pickled_module(p, "torch.nn.modules.linear", "Linear", [
        ("weight", dict(storage_cls="FloatStorage", key=first_key, numel=out * inp, offset=0, size=[out, inp])),
        ("bias", dict(storage_cls="FloatStorage", key=str(int(first_key) + 1), numel=out, offset=0, size=[out]))])


def whole_module(write, storages=None):
    p = P().proto(2)
    write(p)
    p.stop()
    return bytes(checkpoint(pkl=bytes(p.b), storages=storages).finish()[0])


TS_HEAD_CODE = """class Head(Module):
  __parameters__ = ["weight", "bias", ]
  __buffers__ = []
  weight : Tensor
  bias : Tensor
  training : bool
  def forward(self: __torch__.Head,
    input: Tensor) -> Tensor:
    bias = self.bias
    weight = self.weight
    return torch.linear(input, weight, bias)
  def __getstate__(self: __torch__.Head) -> Tuple[Tensor, Tensor, bool]:
    return (self.weight, self.bias, self.training)
"""


def ts_setstate_archive(setstate, dict_state=False):
    """Net whose `fc` is a Head: its class defines __getstate__ and
    __setstate__ (lines `setstate`, the def included), so torch.jit.save
    pickled a tuple (weight, bias, False), or with `dict_state` a dict
    {weight, bias}, and torch.jit.load passes it to __setstate__."""
    w, b = linear_tensors()

    def root(p):
        p.glob("__torch__", "Net").op(b")").op(0x81).op(b"}").mark()
        p.str("training").op(0x89)
        p.str("fc").glob("__torch__", "Head").op(b")").op(0x81)
        if dict_state:
            p.op(b"}").mark().str("weight")
            p.tensor(**w[1])
            p.str("bias")
            p.tensor(**b[1])
            p.op(b"u")
        else:
            p.mark()
            p.tensor(**w[1])
            p.tensor(**b[1])
            p.op(0x89).op(b"t")
        p.op(b"b")
        p.op(b"u").op(b"b")
    code = ts_net_code(["fc = self.fc", "return (fc).forward(x, )"], members="  fc : __torch__.Head\n")
    return torchscript_archive(code + TS_HEAD_CODE + "".join("  " + line + "\n" for line in setstate), root=root)


def script_branch_entries():
    """TorchScript forwards that branch (if / else blocks, folded where the
    file fixes the condition) and classes with __setstate__."""
    setstate = ["def __setstate__(self: __torch__.Head,", "  state: Tuple[Tensor, Tensor, bool]) -> NoneType:"]
    restore = ["  self.weight = (state)[0]", "  self.bias = (state)[1]", "  self.training = (state)[2]",
               "  return None"]
    add("checkpoints/control_ts_branches.pt",
        torchscript_archive(ts_net_code(["fc = self.fc", "training = self.training", "if training:",
                                         "  y = torch.dropout((fc).forward(x, ), 0.5, True)", "else:",
                                         "  if torch.eq(torch.size((fc).forward(x, ), -1), 2):",
                                         "    y = torch.relu((fc).forward(x, ))", "  else:", "    pass", "return y"])),
        "convert", None, "TorchScript Net whose forward branches on self.training and on the Linear's width: "
        "converts with no --graph as 'fc > relu'", ok=True)
    add("checkpoints/control_ts_setstate_restore.pt", ts_setstate_archive(setstate + restore), "convert", None,
        "TorchScript: a class whose __setstate__ only puts back the stored (weight, bias, training): followed, "
        "converts", ok=True)
    many = []
    for _ in range(40):
        many += ["if torch.eq(torch.dim(x), 2):", "  x = torch.relu(x)", "else:", "  x = torch.tanh(x)"]
    deep = ["fc = self.fc"] + [" " * (2 * i) + "if torch.eq(1, 1):" for i in range(100)] + [" " * 200 + "pass"]
    cases = [
        ("ts_branch_batch_size.pt",
         ["fc = self.fc", "y = (fc).forward(x, )", "if torch.gt(torch.size(x, 0), 1):", "  y = torch.relu(y)",
          "else:", "  pass", "return y"],
         "line 'if torch.gt(torch.size(x, 0), 1):': a branch on the batch size, not known when the file is read",
         "a branch on the batch size"),
        ("ts_branch_else_alone.pt", ["fc = self.fc", "else:", "  pass", "return (fc).forward(x, )"],
         "line 'else:': an else without its if", "an else with no if before it"),
        ("ts_branch_stray_indent.pt",
         ["fc = self.fc", "if torch.eq(1, 1):", "    y = (fc).forward(x, )", "  y = x", "return y"],
         "an indentation that matches no block", "a line indented between two blocks"),
        ("ts_branch_nested_100.pt", deep + ["return (fc).forward(x, )"],
         "branches nested deeper than 64 levels", "100 nested ifs"),
        ("ts_branch_either_way_40.pt", many + ["return torch.cumsum((self.fc).forward(x, ), 1)"],
         "a call to 'torch.cumsum', which ferry does not read as a chain element",
         "40 branches on the input's rank (each could go either way), then a line ferry cannot read: a bounded "
         "number of readings, the first one's error"),
        ("ts_branch_raises.pt",
         ["fc = self.fc", "if torch.eq(torch.size((fc).forward(x, ), -1), 2):",
          "  ops.prim.RaiseException(\"width 2 is not supported\", \"builtins.ValueError\")", "else:", "  pass",
          "return (fc).forward(x, )"],
         "the forward raises an exception here ('width 2 is not supported')",
         "an assert that fails on the path the file fixes"),
        ("ts_branch_unknown_attribute.pt",
         ["fc = self.fc", "if self.nowhere:", "  pass", "else:", "  pass", "return (fc).forward(x, )"],
         "line 'if self.nowhere:': a branch on 'root.nowhere', not known when the file is read",
         "a branch on an attribute the archive does not hold"),
    ]
    for name, body, expect, why in cases:
        ckpt(name, torchscript_archive(ts_net_code(body)), expect, "TorchScript: " + why)
    who = "module 'fc' (class __torch__.Head): its __setstate__ (record 'code/__torch__.py', line '"
    ckpt("ts_setstate_scales.pt",
         ts_setstate_archive(setstate + ["  self.weight = torch.mul((state)[0], 2.)"] + restore[1:]),
         who + "self.weight = torch.mul((state)[0], 2.)') computes the value of 'weight': torch.jit.load runs it",
         "TorchScript: __setstate__ doubles the stored weight, so torch's weight is not the stored one")
    ckpt("ts_setstate_dict_scales.pt",
         ts_setstate_archive(["def __setstate__(self: __torch__.Head,",
                              "  state: Dict[str, Tensor]) -> NoneType:",
                              "  self.weight = torch.mul(state[\"weight\"], 2.)", "  self.bias = state[\"bias\"]",
                              "  return None"], dict_state=True),
         who + "self.weight = torch.mul(state[\"weight\"], 2.)') computes the value of 'weight'",
         "TorchScript: the pickled state is a dict like an attribute dict, but __setstate__ changes the weight")
    ckpt("ts_setstate_missing_part.pt", ts_setstate_archive(setstate + ["  self.weight = (state)[7]"] + restore[1:]),
         who + "self.weight = (state)[7]') reads a part the stored state (tuple) does not have",
         "TorchScript: __setstate__ indexes past the stored tuple")
    ckpt("ts_setstate_bad_signature.pt",
         ts_setstate_archive(["def __setstate__(self: __torch__.Head, state: Tuple[Tensor, a, b, c) -> None:"]
                             + restore),
         "its __setstate__ (record 'code/__torch__.py', line 'def __setstate__(", 
         "TorchScript: a __setstate__ whose signature never closes its bracket")


def recorded_chain_entries():
    # TorchScript: a control, then one defect each.
    ok_body = ["fc = self.fc", "return (fc).forward(x, )"]
    add("checkpoints/control_ts_chain.pt", torchscript_archive(ts_net_code(ok_body)), "convert", None,
        "TorchScript Net -> Linear(3, 2), traced-style code: converts with no --graph", ok=True)
    cases = [
        ("ts_chain_loop.pt",
         ["fc = self.fc", "y = (fc).forward(x, )", "for _0 in range(2):", "  y = torch.relu(y)", "return y"],
         TS_CHAIN + "line 'for _0 in range(2):': a loop (for): the forward is not straight-line code); "
         "pass --graph, for example --graph \"fc\"", "a for loop in forward"),
        ("ts_chain_branch.pt",
         ["fc = self.fc", "y = (fc).forward(x, )", "if bool(torch.gt(torch.sum(y), 0)):", "  y0 = torch.relu(y)",
          "else:", "  y0 = y", "return y0"],
         "line 'if bool(torch.gt(torch.sum(y), 0)):': a branch on the values of a tensor (torch.sum), which depends "
         "on the data", "a data-dependent branch in forward"),
        ("ts_chain_unknown_call.pt", ["fc = self.fc", "return torch.cumsum((fc).forward(x, ), 1)"],
         "a call to 'torch.cumsum', which ferry does not read as a chain element",
         "an op ferry does not run, applied to the chain"),
        ("ts_chain_deep_expression.pt",
         ["return " + "torch.relu(" * 100 + "(self.fc).forward(x, )" + ")" * 100],
         "cannot be read (expressions nested deeper than 64 levels)", "100 nested calls in one expression"),
        ("ts_chain_self_binding.pt", ["_0 = _0", "return (self.fc).forward(_0, )"],
         "module 'fc' (Linear), line 'return torch.linear(input, weight, bias)': torch.linear of the function _0, "
         "not of a tensor made from the input", "a name bound to itself, then fed to the chain"),
        ("ts_chain_self_call.pt", ["return (self).forward(x, )"], "module 'root' calls itself",
         "forward calls its own module's forward"),
        ("ts_chain_huge_line.pt", ["_1 = [" + "0, " * 6000 + "]", "return (self.fc).forward(x, )"],
         "a line longer than 16384 characters", "an 18,000-character line in forward"),
        ("ts_chain_returns_tuple.pt", ["y = (self.fc).forward(x, )", "return (y, y)"],
         "forward returns a tuple of 2, not one tensor", "forward returns a tuple"),
    ]
    for name, body, expect, why in cases:
        ckpt(name, torchscript_archive(ts_net_code(body)), expect, "TorchScript: " + why)
    ckpt("ts_chain_bad_signature.pt",
         torchscript_archive(ts_net_code(ok_body, signature="  def forward(self: __torch__.Net, x: Tensor -> Tensor:\n")),
         "the signature of forward cannot be read", "TorchScript: a def whose parenthesis never closes")

    # 40 modules each calling the next: refused at 32.
    def nested(p, depth=40):
        for _ in range(depth):
            p.glob("__torch__", "Net").op(b")").op(0x81).op(b"}").mark().str("training").op(0x89).str("fc")
        ts_linear(p)
        for _ in range(depth):
            p.op(b"u").op(b"b")
    code = ts_net_code(["return (self.fc).forward(x, )"], members="  fc : __torch__.Net\n")
    ckpt("ts_chain_modules_too_deep.pt", torchscript_archive(code, root=nested),
         "modules call each other more than 32 deep", "TorchScript: 40 modules, each calling the one inside it")

    # Whole pickled nn.Sequentials.
    seq = ("torch.nn.modules.container", "Sequential")
    tanh = lambda p: pickled_module(p, "torch.nn.modules.activation", "Tanh")
    add("checkpoints/control_seq_whole.pt",
        whole_module(lambda p: pickled_module(p, *seq, children=[("0", pickled_linear), ("1", tanh)])),
        "convert", None, "torch.save of nn.Sequential(Linear(3, 2), Tanh()): converts with no --graph as '0 > tanh'",
        ok=True)

    def lstm(p):
        def spec(key, size):
            numel = size[0] * (size[1] if len(size) > 1 else 1)
            return dict(storage_cls="FloatStorage", key=key, numel=numel, offset=0, size=size)
        return pickled_module(p, "torch.nn.modules.rnn", "LSTM", [
            ("weight_ih_l0", spec("2", [8, 3])), ("weight_hh_l0", spec("3", [8, 2])),
            ("bias_ih_l0", spec("4", [8])), ("bias_hh_l0", spec("5", [8]))])
    lstm_storages = [("2", f32(*[0.1] * 24)), ("3", f32(*[0.1] * 16)), ("4", f32(*[0.0] * 8)),
                     ("5", f32(*[0.0] * 8)), ("6", f32(0.5, -0.5, 0.25, 1.0)), ("7", FC_B)]
    ckpt("seq_lstm_inside.pt",
         whole_module(lambda p: pickled_module(p, *seq, children=[("0", lstm), ("1", lambda q: pickled_linear(q, "6", 2, 2))]),
                      storages=lstm_storages),
         "nn.Sequential child '0' (LSTM): it returns a tuple (output, state), which the next child cannot take",
         "nn.Sequential(LSTM, Linear): the LSTM's tuple cannot feed the Linear; what the real model does in between "
         "is a forward the file does not hold")
    ckpt("seq_user_child.pt",
         whole_module(lambda p: pickled_module(p, *seq, children=[
             ("0", pickled_linear), ("1", lambda q: pickled_module(q, "__main__", "TakeLast"))])),
         "nn.Sequential child '1' (TakeLast): neither a layer ferry runs nor an activation it knows",
         "a user's weightless module inside a Sequential: its forward is not in the file")

    def cycle(p):
        p.glob(*seq).op(b")").op(0x81).op(b"q\x00").op(b"}").mark().str("training").op(0x89)
        p.str("_parameters").ordered_dict().str("_buffers").ordered_dict()
        p.str("_modules").ordered_dict().mark().str("0").op(b"h\x00").op(b"u")
        p.op(b"u").op(b"b")
    ckpt("seq_cycle.pt", whole_module(cycle, storages=[]), "module cycle: submodule '0' (class torch.nn.modules.container.Sequential)",
         "an nn.Sequential that is its own child")

    def absurd(p, depth=400):
        for _ in range(depth):
            p.glob(*seq).op(b")").op(0x81).op(b"}").mark().str("training").op(0x89)
            p.str("_parameters").ordered_dict().str("_buffers").ordered_dict()
            p.str("_modules").ordered_dict().mark().str("0")
        pickled_linear(p)
        for _ in range(depth):
            p.op(b"u").op(b"u").op(b"b")
    ckpt("seq_nested_absurd.pt", whole_module(absurd), "containers nested deeper than the limit of 1000",
         "400 nn.Sequentials, each the only child of the one around it")

    ckpt("seq_in_user_module.pt",
         whole_module(lambda p: pickled_module(p, "__main__", "Net", children=[
             ("seq", lambda q: pickled_module(q, *seq, children=[
                 ("0", lambda r: pickled_linear(r, "0", 3, 3)), ("1", tanh),
                 ("2", lambda r: pickled_linear(r, "2", 2, 3))]))]),
             storages=[("0", f32(*[0.5] * 9)), ("1", f32(0.1, 0.2, 0.3)), ("2", FC_W), ("3", FC_B)]),
         "pass --graph, for example --graph \"seq.0 > tanh > seq.2\"",
         "a user module around a Sequential: its forward is not in the file, the suggestion keeps the "
         "Sequential's own order (Tanh, not a guessed relu)")


def model_entries():
    add("models/control_lstm.fb", lstm_model(), "model", None,
        "control: LSTM(3, 4) > last > Linear(4, 2) written by this script", ok=True)
    add("models/control_gru.fb", gru_model(), "model", None,
        "control: GRU(3, 4) > last > Linear(4, 2) written by this script", ok=True)

    def m(**changes):
        def mutate(parts):
            for key, fn in changes.items():
                fn(parts)
        return mutate

    model("wrong_identifier.fb", lstm_model(ident=b"TFL3"),
          "file identifier is not \"FRRY\": not a ferry model file", "identifier TFL3")
    model("too_small.fb", b"\x08\0\0\0FRR", "too small for a model", "7 bytes")
    good = lstm_model()
    model("root_offset_past_end.fb", patch(good, 0, "<I", len(good) + 64),
          "FlatBuffers verification failed", "root table offset past the end")
    model("truncated.fb", good[:len(good) // 2], "FlatBuffers verification failed",
          "the first half of the control model")

    def set_cell(field, value):
        return lambda parts: parts["cells"][0].__setitem__(field, ("i", value))

    model("tensor_index_out_of_range.fb", lstm_model(set_cell(0, 99)),
          "layers[0] w_ih: tensor index 99 out of range (model has 5 tensors)",
          "cell w_ih = 99 of 5 tensors")
    model("tensor_index_negative.fb", lstm_model(set_cell(1, -7)),
          "layers[0] w_hh: tensor index -7 out of range", "cell w_hh = -7")
    model("linear_weight_index_huge.fb",
          lstm_model(lambda p: p["layers"][2].__setitem__(9, ("i", 0x7FFFFFFF))),
          "layers[2] weight: tensor index 2147483647 out of range", "Linear weight = 2^31-1")

    def layer_field(li, slot, fmt, value):
        return lambda p: p["layers"][li].__setitem__(slot, (fmt, value))

    model("layer_kind_unknown.fb", lstm_model(layer_field(1, 0, "B", 200)),
          "layers[1].kind: unknown value 200", "layer kind 200", "FERRY_UNSUPPORTED")
    model("layer_count_too_many.fb",
          lstm_model(lambda p: p["layers"].extend(
              [layer_table(10, "id%d" % i, 2, 2) for i in range(70)])),
          "layers: 73 elements, at most 64", "73 layers in the chain", "FERRY_UNSUPPORTED")
    model("no_layers.fb", lstm_model(lambda p: p["layers"].clear()),
          "layers: the model has no layers", "an empty chain")

    def tensor_field(ti, slot, fmt, value):
        return lambda p: p["tensors"][ti].__setitem__(slot, (fmt, value))

    model("tensor_past_blob.fb", lstm_model(tensor_field(1, 4, "Q", 1 << 30)),
          "tensors[1] (w_hh): bytes [1073741824, +256) lie outside the", "offset 1 GiB")
    model("tensor_offset_wrap.fb", lstm_model(tensor_field(1, 4, "Q", 0xFFFFFFFFFFFFFFC0)),
          "tensors[1] (w_hh): bytes [18446744073709551552, +256) lie outside the",
          "offset + size wraps past 2^64")
    model("tensor_misaligned.fb", lstm_model(tensor_field(1, 4, "Q", 4)),
          "tensors[1] (w_hh): offset 4 is not 64-byte aligned", "tensor offset 4")
    model("tensor_size_mismatch.fb", lstm_model(tensor_field(1, 5, "Q", 64)),
          "tensors[1] (w_hh): size 64 bytes, shape needs 256", "size field 64 for 64 floats")
    model("tensor_shape_differs.fb",
          lstm_model(tensor_field(0, 3, "off", Vec("I", [16, 5]))),
          "tensors[0] (w_ih): shape[1] is 5, layer needs 3", "w_ih [16, 5] for input 3")
    model("tensor_rank_differs.fb",
          lstm_model(tensor_field(2, 3, "off", Vec("I", [16, 1]))),
          "tensors[2] (bias): rank 2, layer needs 1", "bias of rank 2")
    model("shape_product_huge.fb",
          lstm_model(lambda p: (
              p["tensors"][3].__setitem__(3, ("off", Vec("I", [0xFFFFFFFF, 0xFFFFFFFF]))),
              p["layers"][2].__setitem__(3, ("I", 0xFFFFFFFF)),
              p["model"].__setitem__(7, ("I", 0xFFFFFFFF)))),
          "layers[2] (Linear): 4 -> 4294967295",
          "Linear weight [2^32-1, 2^32-1] (product 2^64 - 2^33 + 1 elements): the out_features "
          "bound refuses it before any product is formed")
    model("shape_product_max_features.fb",
          lstm_model(lambda p: (
              p["tensors"][3].__setitem__(3, ("off", Vec("I", [1 << 20, 4]))),
              p["tensors"][4].__setitem__(3, ("off", Vec("I", [1 << 20]))),
              p["layers"][2].__setitem__(3, ("I", 1 << 20)),
              p["model"].__setitem__(7, ("I", 1 << 20)))),
          "tensors[3] (weight): size 32 bytes, shape needs 16777216",
          "Linear(4, 2^20) whose tensor claims 32 bytes")
    model("tensor_dtype_unknown.fb", lstm_model(tensor_field(0, 1, "B", 9)),
          "tensors[0].dtype: unknown value 9 (a newer format?)", "dtype 9", "FERRY_UNSUPPORTED")
    model("tensor_dtype_int8.fb",
          lstm_model(lambda p: (p["tensors"][0].__setitem__(1, ("B", 2)),
                                p["tensors"][0].__setitem__(6, ("i", 0)))),
          "tensors[0] (layers[0] w_ih): layout RowMajor does not hold dtype I8",
          "an int8 tensor stored RowMajor (int8 exists only in Panel8x4), its scales the tensor itself")
    model("tensor_layout_unknown.fb", lstm_model(tensor_field(0, 2, "B", 7)),
          "tensors[0] (w_ih): layout 7 is not supported", "layout 7", "FERRY_UNSUPPORTED")
    model("weights_missing.fb", lstm_model(lambda p: p.__setitem__("blob", None)),
          "lie outside the 0-byte weight blob", "no weight blob at all")
    model("weights_misaligned.fb", lstm_model(lambda p: p.__setitem__("blob_align", 8)),
          "is not 64-byte aligned", "weight blob 8-byte aligned only")
    model("weights_short.fb", lstm_model(lambda p: p.__setitem__("blob", p["blob"][:256])),
          "lie outside the 256-byte weight blob", "the blob cut to 256 bytes")
    model("hidden_size_zero.fb", lstm_model(layer_field(0, 4, "I", 0)),
          "layers[0] (LSTM): hidden_size 0 out of range", "hidden_size 0")
    model("num_layers_huge.fb", lstm_model(layer_field(0, 6, "I", 0xFFFFFFFF)),
          "layers[0] (LSTM): num_layers 4294967295 out of range", "num_layers 2^32-1")
    model("cells_count_mismatch.fb", lstm_model(layer_field(0, 6, "I", 3)),
          "layers[0] (LSTM).cells: 1 entries, num_layers x directions = 3",
          "num_layers 3 with one cell")
    model("proj_size_too_large.fb", lstm_model(layer_field(0, 5, "I", 9)),
          "proj_size 9 invalid", "proj_size above hidden_size")
    model("b_hn_on_lstm.fb", lstm_model(set_cell(3, 2)),
          "layers[0] (LSTM).cells[0].b_hn: set on a non-GRU layer", "b_hn on an LSTM cell")
    model("gru_b_hn_out_of_range.fb",
          gru_model(lambda p: p["cells"][0].__setitem__(3, ("i", 6))),
          "layers[0] b_hn: tensor index 6 out of range", "GRU b_hn = 6 of 6 tensors")
    model("input_size_zero.fb", lstm_model(lambda p: p["model"].__setitem__(6, ("I", 0))),
          "input_size 0 out of range", "model input_size 0")
    model("chain_width_mismatch.fb", lstm_model(layer_field(0, 2, "I", 5)),
          "layers[0].input_size: 5, the chain gives 3", "LSTM input_size 5, model input 3")
    model("output_size_mismatch.fb", lstm_model(lambda p: p["model"].__setitem__(7, ("I", 3))),
          "output_size 3, the chain gives 2", "model output_size 3 for a chain ending in 2")
    model("last_without_time_axis.fb",
          lstm_model(lambda p: p["layers"].__setitem__(0, layer_table(10, "id", 3, 3))),
          "layers[1]: `last` needs a time axis", "`last` after an identity")
    model("recurrent_after_last.fb",
          lstm_model(lambda p: p["layers"].insert(2, dict(p["layers"][0]))),
          "layers[2]: a recurrent layer after `last`", "LSTM after `last`")
    model("format_major_3.fb", lstm_model(lambda p: p["model"].__setitem__(0, ("H", 3))),
          "format_major 3: this runtime reads formats 1.x to 2.x", "format 3.0", "FERRY_UNSUPPORTED")
    # Self-test vectors: the model loads; `ferry selftest` refuses them.
    def with_selftest(**kw):
        return lambda p: p.__setitem__("selftest", selftest_table(**kw))

    add("models/control_lstm_selftest.fb", lstm_model(with_selftest()), "selftest", None,
        "control: the control LSTM model with golden vectors (it runs; made-up outputs, "
        "tolerance 1)", ok=True)
    selftest("selftest_input_short.fb", lstm_model(with_selftest(inputs=5)),
             "selftest.input: 5 floats, batch 1 x seq 2 x 3 needs 6", "5 input floats for 6")
    selftest("selftest_output_long.fb", lstm_model(with_selftest(outputs=9)),
             "selftest.output: 9 floats, the model gives 2", "9 output floats for 2")
    selftest("selftest_batch_huge.fb", lstm_model(with_selftest(batch=0xFFFFFFFF)),
             "selftest: batch 4294967295, seq 2 out of range", "batch 2^32-1")
    selftest("selftest_tolerance_nan.fb", lstm_model(with_selftest(tolerance=float("nan"))),
             "is not a finite value >= 0", "tolerance NaN")

    # Raw byte edits the writer cannot express.
    bad_vt = bytearray(good)
    root = struct.unpack_from("<I", bad_vt, 0)[0]
    struct.pack_into("<i", bad_vt, root, -0x7FFFFFF0)
    model("vtable_offset_wild.fb", bytes(bad_vt), "FlatBuffers verification failed",
          "root table's vtable offset points 2 GiB away")
    unterminated = bytearray(good)
    name_at = bytes(unterminated).find(b"lstm.l0.w_ih\0")
    unterminated[name_at + len("lstm.l0.w_ih")] = ord("X")
    model("string_unterminated.fb", bytes(unterminated), "FlatBuffers verification failed",
          "a tensor name without its NUL terminator")


# Format 1.2 layer kinds and Layer / Model slots.
CONV1D, BATCHNORM, LAYERNORM, HARDTANH, MEANPOOL, EMBEDDING, SAVE, ADD = 11, 12, 13, 19, 21, 23, 24, 25
L_KERNEL, L_STRIDE, L_DILATION, L_GROUPS, L_PAD_LEFT, L_PAD_RIGHT, L_PAD_MODE = 11, 12, 13, 14, 15, 16, 17
L_EPS, L_ALPHA, L_BETA, L_SLOT = 18, 19, 20, 22
M_TIME_AXIS, M_INPUT_IS_TOKENS = 13, 14


def ops_model(layers, tensors, input_size, output_size, sequence=True, tokens=False, mutate=None):
    """A format 1.2 model: `layers` (layer_table dicts) over `tensors`
    ((name, shape) pairs, RowMajor f32), with a time axis."""
    blob, fields = weights_blob(tensors)
    model = {0: ("H", 1), 1: ("H", 2), 6: ("I", input_size), 7: ("I", output_size), 8: ("B", 1 if sequence else 0),
             9: ("Q", 4096), M_TIME_AXIS: ("B", 1)}
    if tokens:
        model[M_INPUT_IS_TOKENS] = ("B", 1)
    parts = dict(tensors=fields, layers=layers, model=model)
    if mutate:
        mutate(parts)
    m = dict(parts["model"])
    m[2] = ("off", TVec([Table(l) for l in parts["layers"]]))
    m[3] = ("off", TVec([Table(t) for t in parts["tensors"]]))
    m[4] = ("off", Vec("B", blob, align=64))
    return FB().finish(Table(m))


def conv_layer(stride=1, dilation=1, groups=2, pad=(1, 1), mode=None, kernel=3):
    """Conv1d(4 -> 6, kernel 3, groups 2): weight tensor 0 [6, 2, 3], bias tensor 1 [6]."""
    f = layer_table(CONV1D, "conv", 4, 6, weight=0, bias=1)
    f[L_KERNEL] = ("I", kernel)
    f[L_STRIDE] = ("I", stride)
    f[L_DILATION] = ("I", dilation)
    f[L_GROUPS] = ("I", groups)
    f[L_PAD_LEFT] = ("I", pad[0])
    f[L_PAD_RIGHT] = ("I", pad[1])
    if mode is not None:
        f[L_PAD_MODE] = ("B", mode)
    return f


CONV_TENSORS = [("conv.weight", [6, 2, 3]), ("conv.bias", [6])]


# Quantized models (format 1.3): LSTM(3, 4) > last > Linear(4, 2) whose LSTM
# matrices are f16 (Panel8), int8 (Panel8x4 + F32 row scales) or int4
# (Panel8x8q4 + F16 group scales), every other tensor F32 Panel8, the layout
# runtime/src/shared/weight_layout.h defines.
F32, F16, I8, I4 = 0, 1, 2, 3
ROW_MAJOR, PANEL8, PANEL8X4, PANEL8X8Q4 = 0, 1, 2, 3


def padded(units):
    return (units + 7) // 8 * 8


def quant_lstm_model(dtype, mutate=None):
    I, H, O = 3, 4, 2
    blob = bytearray()
    tensors = []

    def put(name, shape, data, dt, lay, scales=None):
        offset = len(blob)
        blob.extend(data)
        blob.extend(b"\0" * ((64 - len(blob) % 64) % 64))
        tensors.append(tensor_table(name, shape, offset, len(data), dtype=dt, layout=lay, scales=scales))

    def matrix(name, cols, index):
        G, units = 4, H
        rows = padded(units) * G
        if dtype == F16:
            vals = [((k * 37 + index) % 17 - 8) / 32.0 for k in range(rows * cols)]
            put(name, [G * H, cols], struct.pack("<%de" % len(vals), *vals), F16, PANEL8)
        elif dtype == I8:
            k4 = (cols + 3) // 4 * 4
            q = bytes(((k * 7 + index) % 15 - 7) & 0xFF for k in range(rows * k4))
            put(name, [G * H, cols], q, I8, PANEL8X4, scales=5 + index)
        else:
            k32 = (cols + 31) // 32 * 32
            q = bytes(((k * 5 + index) % 256) for k in range(rows * k32 // 2))
            put(name, [G * H, cols], q, I4, PANEL8X8Q4, scales=5 + index)

    matrix("lstm.l0.w_ih", I, 0)
    matrix("lstm.l0.w_hh", H, 1)
    put("lstm.l0.bias", [4 * H], f32(*[0.125 * (k % 5 - 2) for k in range(padded(H) * 4)]), None, PANEL8)
    put("fc.weight", [O, H], f32(*[0.25 * (k % 3 - 1) for k in range(padded(O) * H)]), None, PANEL8)
    put("fc.bias", [O], f32(*([0.5] * padded(O))), None, PANEL8)
    if dtype == I8:
        for index in range(2):
            n = padded(H) * 4
            put("lstm.l0.%s.scales" % ("w_ih", "w_hh")[index], [n], f32(*[0.01 * (1 + k % 5) for k in range(n)]),
                None, None)
    elif dtype == I4:
        for index, cols in enumerate((I, H)):
            n = padded(H) * 4 * ((cols + 31) // 32)
            vals = [0.02 * (1 + k % 3) * (-1 if k % 4 == 3 else 1) for k in range(n)]  # signed, as Q4_0
            put("lstm.l0.%s.scales" % ("w_ih", "w_hh")[index], [n], struct.pack("<%de" % n, *vals), F16, None)
    cells = [cell_table(0, 1, bias=2)]
    layers = [layer_table(LSTM, "lstm", I, H, hidden=H, num_layers=1, cells=cells),
              layer_table(LAST, "last", H, H),
              layer_table(LINEAR, "fc", H, O, weight=3, bias=4)]
    model = {0: ("H", 1), 1: ("H", 3), 5: ("B", 0), 6: ("I", I), 7: ("I", O), 8: ("B", 0),
             9: ("Q", 4096)}
    parts = dict(blob=blob, tensors=tensors, cells=cells, layers=layers, model=model)
    if mutate:
        mutate(parts)
    m = dict(parts["model"])
    m[2] = ("off", TVec([Table(l) for l in parts["layers"]]))
    m[3] = ("off", TVec([Table(t) for t in parts["tensors"]]))
    m[4] = ("off", Vec("B", bytes(parts["blob"]), align=64))
    return FB().finish(Table(m))


def quant_entries():
    for dt, name in ((F16, "f16"), (I8, "int8"), (I4, "int4")):
        add("models/control_lstm_%s.fb" % name, quant_lstm_model(dt), "model", None,
            "control: LSTM(3, 4) > last > Linear(4, 2) with %s LSTM matrices (format 1.3), written by this "
            "script" % name, ok=True)

    def tensor_field(ti, slot, fmt, value):
        return lambda p: p["tensors"][ti].__setitem__(slot, (fmt, value))

    def scale_value(ti, index, fmt, value):
        def mutate(p):
            t = p["tensors"][ti]
            offset = t[4][1] + index * struct.calcsize(fmt)
            p["blob"][offset:offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
        return mutate

    for label, value in (("zero", 0.0), ("negative", -0.5), ("nan", float("nan")), ("inf", float("inf"))):
        model("int8_scale_%s.fb" % label, quant_lstm_model(I8, scale_value(6, 9, "<f", value)),
              "tensors[6] (layers[0] w_hh scales): scale 9 is zero, negative, NaN or Inf",
              "an int8 row scale that is %s (w_hh, row slot 9)" % label)
    for label, value in (("zero", 0.0), ("negzero", -0.0), ("nan", float("nan")), ("inf", float("inf"))):
        model("int4_scale_%s.fb" % label, quant_lstm_model(I4, scale_value(5, 3, "<e", value)),
              "tensors[5] (layers[0] w_ih scales): scale 3 is zero, negative, NaN or Inf",
              "an int4 group scale that is %s (w_ih, slot 3); negative int4 scales are valid (Q4_0's "
              "sign convention)" % label)
    model("int8_scales_count_short.fb",
          quant_lstm_model(I8, lambda p: (p["tensors"][5].__setitem__(3, ("off", Vec("I", [31]))),
                                          p["tensors"][5].__setitem__(5, ("Q", 124)))),
          "tensors[5] (layers[0] w_ih scales): 31 elements in 124 bytes, the weight needs 32 scales",
          "31 row scales for 16 rows padded to 32")
    model("int4_scales_count_long.fb",
          quant_lstm_model(I4, lambda p: (p["tensors"][6].__setitem__(3, ("off", Vec("I", [64]))),
                                          p["tensors"][6].__setitem__(5, ("Q", 128)))),
          "tensors[6] (layers[0] w_hh scales): 64 elements in 128 bytes, the weight needs 32 scales",
          "64 group scales where K = 4 is one group of 32")
    model("int8_scales_missing.fb", quant_lstm_model(I8, tensor_field(0, 6, "i", -1)),
          "tensors[0] (layers[0] w_ih): scales index -1 out of range (I8 needs a scale tensor)",
          "an int8 weight without scales")
    model("int8_scales_self.fb", quant_lstm_model(I8, tensor_field(0, 6, "i", 0)),
          "tensors[0] (layers[0] w_ih): scales index 0 out of range", "an int8 weight that is its own scales")
    model("int8_scales_f16.fb", quant_lstm_model(I8, tensor_field(5, 1, "B", F16)),
          "an I8 weight needs F32 scales", "int8 row scales stored as f16")
    model("int4_k_not_whole_groups.fb", quant_lstm_model(I4, tensor_field(1, 5, "Q", 64)),
          "tensors[1] (w_hh): size 64 bytes, shape needs 512",
          "an int4 w_hh whose size counts K = 4 unpadded (8 x 4 x 4 / 2 bytes) instead of whole groups of 32")
    model("int8_bias_role.fb", quant_lstm_model(I8, tensor_field(2, 1, "B", I8)),
          "tensors[2] (layers[0] bias): dtype I8 is not allowed for this role",
          "an int8 bias (only weight matrices are quantized)")
    model("int4_linear_bias_role.fb", quant_lstm_model(I4, tensor_field(4, 1, "B", I4)),
          "tensors[4] (layers[2] bias): dtype I4 is not allowed for this role", "an int4 Linear bias")
    model("int8_layout_panel8.fb", quant_lstm_model(I8, tensor_field(1, 2, "B", PANEL8)),
          "tensors[1] (layers[0] w_hh): layout Panel8 does not hold dtype I8", "int8 weights in the float layout")
    model("int4_layout_panel8x4.fb", quant_lstm_model(I4, tensor_field(0, 2, "B", PANEL8X4)),
          "tensors[0] (layers[0] w_ih): layout Panel8x4 does not hold dtype I4", "int4 weights in int8's layout")
    model("mixed_dtypes_in_layer.fb",
          quant_lstm_model(I8, lambda p: (p["tensors"][1].__setitem__(1, ("B", F16)),
                                          p["tensors"][1].__setitem__(2, ("B", PANEL8)),
                                          p["tensors"][1].__setitem__(5, ("Q", 256)),
                                          p["tensors"][1].pop(6))),
          "layers[0] (LSTM).cells[0].w_hh: dtype F16, the layer's first w_ih is I8 (one dtype per layer)",
          "an f16 w_hh beside an int8 w_ih: a layer runs on one kernel set")
    model("f16_bias_rowmajor.fb", quant_lstm_model(F16, lambda p: (tensor_field(2, 2, "B", ROW_MAJOR)(p), tensor_field(2, 5, "Q", 64)(p))),
          "layers[0] (LSTM): F16 weights need every tensor of the layer in a panel layout",
          "f16 matrices beside a RowMajor bias (the quantized kernels read Panel8 biases)")
    model("f32_with_scales.fb", quant_lstm_model(F16, tensor_field(3, 6, "i", 2)),
          "tensors[3] (layers[2] weight): scales set on a F32 tensor", "an fp32 Linear weight that names scales")

    def wide_input(p):
        cols = 133145
        p["model"][6] = ("I", cols)
        p["layers"][0][2] = ("I", cols)
        p["tensors"][0][3] = ("off", Vec("I", [16, cols]))
    model("int8_too_wide.fb", quant_lstm_model(I8, wide_input),
          "tensors[0] (layers[0] w_ih): I8 with 133145 columns, at most 133144",
          "an int8 LSTM w_ih over 133,145 inputs: K * 127^2 would overflow the int32 sums")


def op_entries():
    """Bad parameters of the format 1.2 ops (convolutions, normalisations,
    embeddings, residual slots), each beside a control built the same way."""
    add("models/control_conv.fb", ops_model([conv_layer()], CONV_TENSORS, 4, 6), "model", None,
        "control: Conv1d(4, 6, kernel 3, padding 1, groups 2), RowMajor, format 1.2", ok=True)
    model("conv_stride_zero.fb", ops_model([conv_layer(stride=0)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): kernel_size 3, stride 0, dilation 1 must be in 1..", "stride 0")
    model("conv_dilation_zero.fb", ops_model([conv_layer(dilation=0)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): kernel_size 3, stride 1, dilation 0 must be in 1..", "dilation 0")
    model("conv_stride_huge.fb", ops_model([conv_layer(stride=0xFFFFFFFF)], CONV_TENSORS, 4, 6),
          "stride 4294967295, dilation 1 must be in 1..", "stride 2^32-1 (negative as int32)")
    model("conv_groups_not_dividing.fb", ops_model([conv_layer(groups=3)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): groups 3 must divide the 4 input and 6 output channels", "groups 3 of 4 inputs")
    model("conv_groups_zero.fb", ops_model([conv_layer(groups=0)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): groups 0 must divide", "groups 0")
    model("conv_weight_shape.fb", ops_model([conv_layer(groups=1)], CONV_TENSORS, 4, 6),
          "tensors[0] (weight): shape[1] is 2, layer needs 4", "a groups-2 weight for a groups-1 conv")
    model("conv_padding_huge.fb", ops_model([conv_layer(pad=(1 << 21, 0))], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): padding 2097152 + 0 out of range", "left padding 2^21")
    model("conv_padding_mode_unknown.fb", ops_model([conv_layer(mode=9)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d).padding_mode: unknown value 9", "padding_mode 9", "FERRY_UNSUPPORTED")
    model("conv_kernel_zero.fb", ops_model([conv_layer(kernel=0)], CONV_TENSORS, 4, 6),
          "layers[0] (Conv1d): kernel_size 0, stride 1, dilation 1 must be in 1..", "kernel_size 0")
    norm_tensors = [("bn.weight", [4]), ("bn.bias", [4])]
    add("models/control_batchnorm.fb",
        ops_model([layer_table(BATCHNORM, "bn", 4, 4, weight=0, bias=1)], norm_tensors, 4, 4), "model", None,
        "control: BatchNorm over 4 features (scale and shift)", ok=True)
    model("batchnorm_shape.fb",
          ops_model([layer_table(BATCHNORM, "bn", 5, 5, weight=0, bias=1)], norm_tensors, 5, 5),
          "tensors[0] (weight): shape[0] is 4, layer needs 5", "a 4-feature scale in a 5-feature chain")
    model("batchnorm_shift_missing.fb",
          ops_model([layer_table(BATCHNORM, "bn", 4, 4, weight=0)], norm_tensors, 4, 4),
          "layers[0] bias: tensor index -1 out of range", "BatchNorm without its shift")
    ln = layer_table(LAYERNORM, "ln", 4, 4, weight=0, bias=1)
    ln[L_EPS] = ("f", -1e-5)
    model("layernorm_eps_negative.fb", ops_model([ln], norm_tensors, 4, 4),
          "layers[0] (LayerNorm): eps must be finite and >= 0", "eps -1e-5")
    ln_nan = dict(ln)
    ln_nan[L_EPS] = ("f", float("nan"))
    model("layernorm_eps_nan.fb", ops_model([ln_nan], norm_tensors, 4, 4),
          "layers[0] (LayerNorm): eps must be finite and >= 0", "eps NaN")
    ht = layer_table(HARDTANH, "hardtanh", 4, 4)
    ht[L_ALPHA] = ("f", 2.0)
    ht[L_BETA] = ("f", -2.0)
    model("hardtanh_min_above_max.fb", ops_model([ht], [], 4, 4),
          "layers[0] (Hardtanh): parameters must be finite (and min <= max)", "min 2 > max -2")
    model("add_without_save.fb", ops_model([layer_table(ADD, "add", 4, 4)], [], 4, 4),
          "layers[0] (Add): slot 0 must hold a saved input of the same shape", "Add with nothing saved")
    save = layer_table(SAVE, "save", 4, 4)
    save_huge = dict(save)
    save_huge[L_SLOT] = ("I", 9)
    model("save_slot_huge.fb", ops_model([save_huge], [], 4, 4),
          "layers[0]: residual slot 9, at most 4 slots", "slot 9")
    model("add_after_pooling.fb",
          ops_model([save, layer_table(MEANPOOL, "mean", 4, 4), layer_table(ADD, "add", 4, 4)], [], 4, 4,
                    sequence=False),
          "layers[2] (Add): slot 0 must hold a saved input of the same shape",
          "a saved sequence added to a pooled [B,F]")
    emb_tensors = [("emb.weight", [10, 4])]
    add("models/control_embedding.fb",
        ops_model([layer_table(EMBEDDING, "emb", 10, 4, weight=0)], emb_tensors, 1, 4, tokens=True), "model",
        None, "control: Embedding(10, 4) over token ids", ok=True)
    model("embedding_without_tokens.fb",
          ops_model([layer_table(EMBEDDING, "emb", 10, 4, weight=0)], emb_tensors, 1, 4),
          "layers[0] (Embedding): only as the first layer of a model taking tokens", "floats into an Embedding")
    model("embedding_shape.fb",
          ops_model([layer_table(EMBEDDING, "emb", 12, 4, weight=0)], emb_tensors, 1, 4, tokens=True),
          "tensors[0] (weight): shape[0] is 10, layer needs 12", "12 embeddings, a [10, 4] table")
    model("tokens_without_embedding.fb",
          ops_model([layer_table(BATCHNORM, "bn", 1, 1, weight=0, bias=1)], [("w", [1]), ("b", [1])], 1, 1,
                    tokens=True),
          "input_is_tokens: the first layer must be an Embedding", "token ids into a BatchNorm")


# ---------------------------------------------------------------------------
# Distributed checkpoints (DCP, PYTORCH_FORMAT.md §9): each entry is a
# directory (checkpoints/dcp_<name>/), a .metadata pickle written opcode by
# opcode as torch 2.x writes it (NEWOBJ + BUILD dataclasses, torch.Size and
# the layout / memory-format values REDUCE'd) and __<rank>_0.distcp data
# files whose byte ranges are torch.save zips of one tensor. The control
# holds fc (Linear(3, 2)) under the key "model", its weight sharded by rows
# over two ranks' files, as FSDP saves it.

DCP_MD = "torch.distributed.checkpoint.metadata"
DCP_FS = "torch.distributed.checkpoint.filesystem"


def dcp_obj(p, module, name, state):
    """NEWOBJ(cls, ()) then BUILD(state); `state(p)` pushes the state."""
    p.glob(module, name).op(b")", 0x81)
    state(p)
    return p.op(b"b")


def dcp_dict(p, items):
    """A dict of (key writer, value writer) pairs."""
    p.op(b"}").mark()
    for k, v in items:
        k(p)
        v(p)
    return p.op(b"u")


def dcp_size(p, dims):
    p.glob("torch", "Size").mark()
    for d in dims:
        p.int(d)
    return p.op(b"t", 0x85, b"R")


def s_(text):
    return lambda p: p.str(text)


def i_(v):
    return lambda p: p.int(v)


def dcp_properties(dtype):
    def write(p):
        def state(q):
            q.mark().glob("torch", dtype)
            q.glob("torch.serialization", "_get_layout").str("torch.strided").op(0x85, b"R")
            q.false().glob(DCP_MD, "_MEM_FORMAT_ENCODING").int(0).op(0x85, b"R").false().op(b"t")
        return dcp_obj(p, DCP_MD, "TensorProperties", state)
    return write


def dcp_tensor_md(size, chunks, dtype="float32"):
    def write(p):
        def chunk(offsets, sizes):
            return lambda q: dcp_obj(q, DCP_MD, "ChunkStorageMetadata",
                                     lambda r: dcp_dict(r, [(s_("offsets"), lambda t: dcp_size(t, offsets)),
                                                            (s_("sizes"), lambda t: dcp_size(t, sizes))]))

        def chunk_list(q):
            q.op(b"]").mark()
            for o, z in chunks:
                chunk(o, z)(q)
            return q.op(b"e")
        return dcp_obj(p, DCP_MD, "TensorStorageMetadata",
                       lambda q: dcp_dict(q, [(s_("properties"), dcp_properties(dtype)),
                                              (s_("size"), lambda t: dcp_size(t, size)),
                                              (s_("chunks"), chunk_list)]))
    return write


def dcp_bytes_md(p):
    """BytesStorageMetadata as torch writes it: NEWOBJ(cls, ()), no BUILD."""
    return p.glob(DCP_MD, "BytesStorageMetadata").op(b")", 0x81)


def dcp_metadata(tensors, storage, planner=None, prefix_globals=None, values=()):
    """tensors: [(fqn, size, [(offsets, sizes)], dtype)]; storage: [(fqn,
    offsets, relative_path, offset, length, transforms)] (offsets None: a
    non-tensor value's entry); planner: {fqn: path tuple} (default:
    ("model", rest)); values: [(fqn, writer)], non-tensor entries after the
    tensors (writer: dcp_bytes_md or a variant)."""
    p = P().proto(4)
    if prefix_globals:
        prefix_globals(p)

    def sdm(q):
        return dcp_dict(q, [(s_(f), dcp_tensor_md(size, chunks, dtype)) for f, size, chunks, dtype in tensors] +
                        [(s_(f), w) for f, w in values])

    def storage_info(rel, off, length, transforms):
        items = [(s_("relative_path"), s_(rel)), (s_("offset"), i_(off)), (s_("length"), i_(length))]
        if transforms is not None:
            def tlist(q):
                q.op(b"]").mark()
                for t in transforms:
                    q.str(t)
                return q.op(b"e")
            items.append((s_("transform_descriptors"), tlist))
        return lambda q: dcp_obj(q, DCP_FS, "_StorageInfo", lambda r: dcp_dict(r, items))

    def index(fqn, offsets, i):
        return lambda q: dcp_obj(q, DCP_MD, "MetadataIndex",
                                 lambda r: dcp_dict(r, [(s_("fqn"), s_(fqn)),
                                                        (s_("offset"), (lambda t: t.op(b"N")) if offsets is None
                                                         else lambda t: dcp_size(t, offsets)),
                                                        (s_("index"), (lambda t: t.op(b"N")) if offsets is None
                                                         else i_(i))]))

    def sd(q):
        return dcp_dict(q, [(index(f, o, n), storage_info(rel, off, ln, tr))
                            for n, (f, o, rel, off, ln, tr) in enumerate(storage)])

    if planner is None:
        planner = {f: ("model", f[len("model."):]) for f, _, _, _ in tensors}
        for f, _ in values:
            planner[f] = ("model", f[len("model."):]) if f.startswith("model.") else tuple(f.split("."))

    def pd(q):
        def path(t):
            def w(r):
                r.mark()
                for e in t:
                    r.str(e)
                return r.op(b"t")
            return w
        return dcp_dict(q, [(s_(f), path(t)) for f, t in planner.items()])

    def meta_state(q):
        return dcp_dict(q, [(s_("state_dict_metadata"), sdm), (s_("planner_data"), pd), (s_("storage_data"), sd),
                            (s_("storage_meta"), lambda r: r.op(b"N")), (s_("version"), s_("1.0.0"))])
    dcp_obj(p, DCP_MD, "Metadata", meta_state)
    return bytes(p.stop().b)


def dcp_slice(shape, values, dtype_cls="FloatStorage", fmt="f", stride=None, numel=None):
    """A torch.save zip of one tensor, as DCP writes each chunk."""
    n = 1
    for d in shape:
        n *= d
    data = struct.pack("<%d%s" % (len(values), fmt), *values)
    pkl = P().proto(2)
    pkl.tensor(dtype_cls, "0", len(values) if numel is None else numel, 0, shape, stride=stride)
    return bytes(checkpoint(pkl=bytes(pkl.stop().b), storages=[("0", data)]).finish()[0])


def dcp_dir(name, metadata, files, expect, why, ok=False):
    """Writes checkpoints/<name>/ (a directory entry for `ferry convert`)."""
    rel = "checkpoints/" + name
    full = os.path.join(HERE, rel)
    os.makedirs(full, exist_ok=True)
    if metadata is not None:
        with open(os.path.join(full, ".metadata"), "wb") as f:
            f.write(metadata)
    for fname, data in files.items():
        with open(os.path.join(full, fname), "wb") as f:
            f.write(data)
    e = {"file": rel, "tool": "convert"}
    if ok:
        e["ok"] = True
    else:
        e["expect"] = expect
    e["why"] = why
    ENTRIES.append(e)


M_OUTPUT_LAYOUT = 16
IO_TIME_MAJOR, IO_BATCH_FIRST, IO_CHANNELS_FIRST = 1, 2, 3


def output_layout_entries():
    """Model.output_layout (format 2.0): a known value, only on a sequence
    output, only in a format 2 file."""
    def layout(value, major=2):
        def mutate(p):
            p["model"][0] = ("H", major)
            p["model"][1] = ("H", 0)
            p["model"][M_OUTPUT_LAYOUT] = ("B", value)
        return mutate
    add("models/control_output_layout.fb",
        ops_model([conv_layer()], CONV_TENSORS, 4, 6, mutate=layout(IO_BATCH_FIRST)), "model", None,
        "control: format 2.0, a time-major Conv1d model whose sequence output is batch-first", ok=True)
    model("output_layout_unknown.fb", ops_model([conv_layer()], CONV_TENSORS, 4, 6, mutate=layout(9)),
          "output_layout: unknown value 9", "output_layout 9 (a newer format's)", "FERRY_UNSUPPORTED")
    model("output_layout_without_time_axis.fb", lstm_model(layout(IO_CHANNELS_FIRST)),
          "output_layout ChannelsFirst: the output has no time axis",
          "a channels-first output after `last` ([B,F])")
    model("output_layout_pooled.fb",
          ops_model([layer_table(MEANPOOL, "mean", 4, 4)], [], 4, 4, sequence=False, mutate=layout(IO_BATCH_FIRST)),
          "output_layout BatchFirst: the output has no time axis", "a batch-first output after mean pooling")
    model("output_layout_in_format_1.fb",
          ops_model([conv_layer()], CONV_TENSORS, 4, 6, mutate=layout(IO_BATCH_FIRST, major=1)),
          "output_layout BatchFirst in a format 1.x file", "a 1.x file a 1.x runtime would misread")


# User metadata (Model.metadata, `ferry convert --meta`): MetaEntry slots.
M_METADATA = 17
META_KEY, META_TYPE, META_TEXT, META_NUMBERS, META_SHAPE = 0, 1, 2, 3, 4
META_TEXT_TYPE, META_NUMBERS_TYPE = 0, 1


def meta_text(key, text):
    t = {META_TEXT: ("off", Str(text) if isinstance(text, str) else RawStr(text))}
    if key is not None:
        t[META_KEY] = ("off", Str(key))
    return Table(t)


def meta_numbers(key, values, shape=None, type_=META_NUMBERS_TYPE):
    t = {META_KEY: ("off", Str(key)), META_TYPE: ("B", type_), META_NUMBERS: ("off", Vec("d", values, align=8))}
    if shape is not None:
        t[META_SHAPE] = ("off", Vec("I", shape))
    return Table(t)


def with_metadata(entries):
    def mutate(p):
        p["model"][M_METADATA] = ("off", TVec(entries))
    return mutate


def metadata_entries():
    add("models/control_metadata.fb",
        lstm_model(with_metadata([meta_text("labels", "yes\nno\n"), meta_numbers("sample_rate", [16000.0]),
                                  meta_numbers("mean", [0.5, -0.5, 1.0, 2.0], [2, 2])])),
        "model", None, "control: the control LSTM with three metadata entries (text, a number, a 2x2 array)", ok=True)
    model("metadata_key_twice.fb", lstm_model(with_metadata([meta_text("a", "1"), meta_text("a", "2")])),
          "metadata[1] ('a'): the key is also metadata[0]'s", "two entries with one key")
    model("metadata_key_bad.fb", lstm_model(with_metadata([meta_text("a/../b", "1")])),
          "metadata[0]: the key is absent or not 1 to 64 characters", "a key with '/'")
    model("metadata_key_missing.fb", lstm_model(with_metadata([meta_text(None, "1")])),
          "metadata[0]: the key is absent", "an entry without a key")
    model("metadata_text_not_utf8.fb", lstm_model(with_metadata([meta_text("t", b"ok\xff")])),
          "metadata[0] ('t'): the text is not UTF-8 (byte 2)", "a 0xFF byte in text")
    model("metadata_shape_mismatch.fb", lstm_model(with_metadata([meta_numbers("n", [1.0, 2.0, 3.0], [2])])),
          "metadata[0] ('n'): the shape holds 2 numbers, the entry 3", "shape [2] over 3 numbers")
    model("metadata_shape_overflow.fb",
          lstm_model(with_metadata([meta_numbers("n", [1.0], [65536, 65536, 65536, 65536])])),
          "metadata[0] ('n'): the shape holds", "a shape whose product overflows 64 bits")
    model("metadata_rank_5.fb", lstm_model(with_metadata([meta_numbers("n", [1.0], [1, 1, 1, 1, 1])])),
          "metadata[0] ('n'): rank 5, at most 4", "a rank-5 array")
    model("metadata_numbers_empty.fb", lstm_model(with_metadata([meta_numbers("n", [])])),
          "metadata[0] ('n'): 0 numbers", "a numbers entry with none")
    mixed = meta_numbers("n", [1.0])
    mixed.fields[META_TEXT] = ("off", Str("and text"))
    model("metadata_text_and_numbers.fb", lstm_model(with_metadata([mixed])),
          "metadata[0] ('n'): a numbers entry holds numbers and nothing else", "numbers and text in one entry")
    model("metadata_text_missing.fb", lstm_model(with_metadata([Table({META_KEY: ("off", Str("t"))})])),
          "metadata[0] ('t'): a text entry holds text and nothing else", "a text entry without text")
    model("metadata_type_unknown.fb", lstm_model(with_metadata([meta_numbers("n", [1.0], type_=9)])),
          "metadata[0] ('n'): unknown type 9", "MetaType 9 (a newer format's)", "FERRY_UNSUPPORTED")
    model("metadata_text_too_long.fb", lstm_model(with_metadata([meta_text("t", "a" * (64 * 1024 + 1))])),
          "metadata[0] ('t'): 65537 bytes of text, at most 65536", "text one byte over 64 KiB")
    model("metadata_too_many.fb", lstm_model(with_metadata([meta_text("k%d" % i, "") for i in range(65)])),
          "metadata: 65 entries, at most 64", "65 entries")


def dcp_entries():
    w0 = dcp_slice([1, 3], [0.5, -0.25, 0.125])
    w1 = dcp_slice([1, 3], [1.0, 0.75, -0.5])
    b = dcp_slice([2], [0.1, -0.2])
    f0 = b + w0  # rank 0: fc.bias, then its rows of fc.weight
    f1 = w1
    files = {"__0_0.distcp": f0, "__1_0.distcp": f1}
    W = ("model.fc.weight", [2, 3], [([0, 0], [1, 3]), ([1, 0], [1, 3])], "float32")
    B = ("model.fc.bias", [2], [([0], [2])], "float32")
    S = [("model.fc.bias", [0], "__0_0.distcp", 0, len(b), None),
         ("model.fc.weight", [0, 0], "__0_0.distcp", len(b), len(w0), None),
         ("model.fc.weight", [1, 0], "__1_0.distcp", 0, len(w1), None)]

    def md(tensors=(W, B), storage=S, **kw):
        return dcp_metadata(list(tensors), list(storage), **kw)

    dcp_dir("dcp_control", md(), files, None,
            "control: Linear(3, 2) under 'model', weight sharded by rows over two ranks' files", ok=True)
    where = "state_dict_metadata['model.fc.weight'].chunks"
    dcp_dir("dcp_chunks_overlap", md(tensors=[("model.fc.weight", [2, 3], [([0, 0], [2, 3]), ([1, 0], [1, 3])],
                                               "float32"), B],
                                     storage=[S[0], ("model.fc.weight", [0, 0], "__0_0.distcp", len(b), len(w0), None),
                                              S[2]]), files,
            where + ": chunks[0] (offsets [0, 0], sizes [2, 3]) and chunks[1] (offsets [1, 0], sizes [1, 3]) overlap",
            "two chunks both hold row 1")
    dcp_dir("dcp_chunks_gap", md(tensors=[("model.fc.weight", [2, 3], [([0, 0], [1, 3])], "float32"), B]), files,
            where + ": cover 3 of the 6 elements of size [2, 3]: a gap no chunk fills", "row 1 is in no chunk")
    dcp_dir("dcp_chunk_past_tensor",
            md(tensors=[("model.fc.weight", [2, 3], [([0, 0], [1, 3]), ([1, 0], [2, 3])], "float32"), B]), files,
            where + "[1]: offsets [1, 0] + sizes [2, 3] reach past the tensor's size [2, 3] (dimension 0)",
            "a chunk of rows 1..2 of a 2-row tensor")
    dcp_dir("dcp_chunk_negative_offset",
            md(tensors=[("model.fc.weight", [2, 3], [([0, 0], [1, 3]), ([-1, 0], [1, 3])], "float32"), B]), files,
            where + "[1].offsets: holds a negative size -1", "chunk offset -1")
    dcp_dir("dcp_slice_past_file", md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "__1_0.distcp", 0,
                                                             len(w1) + 4096, None)]), files,
            ".metadata: storage_data['model.fc.weight'] (chunk at [1, 0]): bytes [0, +" + str(len(w1) + 4096) +
            ") reach past the end of __1_0.distcp (" + str(len(w1)) + " bytes)", "a chunk's length 4096 past its file")
    dcp_dir("dcp_offset_wrap", md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "__1_0.distcp", 2**63 - 8,
                                                         len(w1), None)]), files,
            "reach past the end of __1_0.distcp", "offset 2^63 - 8: offset + length near overflow")
    dcp_dir("dcp_relative_path_dotdot",
            md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "../dcp_control/__1_0.distcp", 0, len(w1), None)]),
            files, "relative_path: '../dcp_control/__1_0.distcp' is not a plain file name of the checkpoint directory",
            "relative_path climbs out of the directory with ..")
    dcp_dir("dcp_relative_path_absolute",
            md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "/etc/passwd", 0, 16, None)]), files,
            "relative_path: '/etc/passwd' is not a plain file name of the checkpoint directory",
            "an absolute relative_path")
    dcp_dir("dcp_relative_path_dotdot_alone",
            md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "..", 0, 16, None)]), files,
            "relative_path: '..' is not a plain file name", "relative_path '..'")
    dcp_dir("dcp_slice_not_zip", md(storage=[S[0], ("model.fc.weight", [0, 0], "__0_0.distcp", len(b) + 7,
                                                     len(w0) - 7, None), S[2]]), files,
            "(tensor 'model.fc.weight' chunk 0 at [0, 0]): not a torch.save zip (no zip signature)",
            "a chunk's range starts 7 bytes into its zip")
    dcp_dir("dcp_slice_truncated_zip", md(storage=[S[0], ("model.fc.weight", [0, 0], "__0_0.distcp", len(b),
                                                           len(w0) - 30, None), S[2]]), files,
            "(tensor 'model.fc.weight' chunk 0 at [0, 0]): zip archive",
            "a chunk's range cut 30 bytes short of its zip's end")
    st = struct.pack("<Q", 2) + b"{}" + b"\0" * 8
    dcp_dir("dcp_safetensors_chunk", md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "__1_0.distcp",
                                                               len(w1), len(st), None)]),
            {"__0_0.distcp": f0, "__1_0.distcp": f1 + st},
            "a safetensors-format chunk (a DCP saved with the safetensors serialization format)",
            "a chunk's bytes are a safetensors file")
    dcp_dir("dcp_missing_distcp", md(), {"__0_0.distcp": f0},
            "__1_0.distcp: cannot open: No such file or directory (the data file",
            "rank 1's data file is missing")
    dcp_dir("dcp_no_storage_entry", md(storage=[S[0], S[1]]), files,
            where + "[1]: no storage_data entry for the chunk at offsets [1, 0]",
            "a chunk whose bytes are recorded nowhere")
    dcp_dir("dcp_transform_zstd", md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "__1_0.distcp", 0, len(w1),
                                                            ["stream_zstd"])]), files,
            "transform_descriptors: ['stream_zstd']: the chunk is stored transformed",
            "a zstd-compressed chunk (transform_descriptors)")
    body = P().glob("__main__", "Payload").op(b")", 0x81, b"0")
    dcp_dir("dcp_offlist_global", md(prefix_globals=lambda p: p.op(body.b)), files,
            "refused global '__main__.Payload' (not one this stream may name)",
            "a class the DCP metadata never names, pickled before the Metadata")
    dcp_dir("dcp_offlist_rebuild_tensor",
            md(prefix_globals=lambda p: p.glob("torch._utils", "_rebuild_tensor_v2").op(b"0")), files,
            "refused global 'torch._utils._rebuild_tensor_v2' (not one this stream may name)",
            "a tensor rebuild (allowed in data.pkl) inside .metadata")
    dcp_dir("dcp_posix_system",
            md(prefix_globals=lambda p: p.glob("posix", "system").str("touch /tmp/ferry_pwned").op(0x85, b"R0")),
            files, "refused global 'posix.system'", "posix.system called from .metadata")
    dcp_dir("dcp_shape_mismatch", md(), {"__0_0.distcp": b + dcp_slice([1, 2], [0.5, -0.25]) + b"\0" * 0,
                                         "__1_0.distcp": f1},
            "holds a tensor of shape [1, 2], but the metadata gives the chunk sizes [1, 3]",
            "a chunk's zip holds a tensor of another shape")
    w0d = dcp_slice([1, 3], [0.5, -0.25, 0.125], dtype_cls="DoubleStorage", fmt="d")
    dcp_dir("dcp_dtype_mismatch", md(storage=[S[0], ("model.fc.weight", [0, 0], "__0_0.distcp", len(b), len(w0d),
                                                      None), S[2]]),
            {"__0_0.distcp": b + w0d, "__1_0.distcp": f1},
            "holds a float64 tensor, but the metadata gives dtype float32", "a float64 chunk of a float32 tensor")
    wz = dcp_slice([1, 3], [0.5], stride=[0, 0], numel=1)
    dcp_dir("dcp_zero_stride_shard", md(storage=[S[0], S[1], ("model.fc.weight", [1, 0], "__1_0.distcp", 0, len(wz),
                                                              None)]),
            {"__0_0.distcp": f0, "__1_0.distcp": wz},
            "a view of 3 elements over a storage of 1: a sharded chunk must store every element it holds",
            "a zero-stride chunk: reassembly would allocate what no file holds")
    dcp_dir("dcp_no_metadata", None, files, "a directory without a .metadata file: not a distributed checkpoint",
            "data files without their .metadata")
    dcp_dir("dcp_metadata_not_metadata", bytes(P().proto(4).op(b"}").stop().b), files,
            ".metadata: the root: is a dict, not a Metadata", "a .metadata holding a plain dict")
    dcp_dir("dcp_metadata_truncated", md()[:-3], files, ".metadata: truncated", "a .metadata missing its last 3 bytes")
    dcp_value_entries(md, files, S)


def dcp_value_entries(md, files, S):
    """Non-tensor values (BytesStorageMetadata: a field-less record whose bytes,
    a torch.save of the object, are never unpickled) beside the model."""
    step = bytes(checkpoint(pkl=bytes(P().proto(2).int(1234).stop().b), storages=[]).finish()[0])
    name = bytes(checkpoint(pkl=bytes(P().proto(2).str("run-7").stop().b), storages=[]).finish()[0])
    f2 = files["__1_0.distcp"] + step + name
    vfiles = {"__0_0.distcp": files["__0_0.distcp"], "__1_0.distcp": f2}
    at = len(files["__1_0.distcp"])
    VS = [("step", None, "__1_0.distcp", at, len(step), None),
          ("config.run_name", None, "__1_0.distcp", at + len(step), len(name), None),
          ("model.fc._extra_state", None, "__1_0.distcp", at, len(step), None)]
    V = [("step", dcp_bytes_md), ("config.run_name", dcp_bytes_md), ("model.fc._extra_state", dcp_bytes_md)]

    def vmd(values=V, storage=VS, **kw):
        return md(storage=S + list(storage), values=list(values), **kw)

    dcp_dir("dcp_values_control", vmd(), vfiles, None,
            "control: a step counter, a nested run name and a module's _extra_state beside and inside the model "
            "(BytesStorageMetadata: NEWOBJ with no BUILD), listed as ignored", ok=True)
    where = ".metadata: state_dict_metadata['step']: "
    with_state = lambda p: dcp_bytes_md(p).op(b"}").str("size").int(3).op(b"sb")  # noqa: E731
    dcp_dir("dcp_value_with_state", vmd(values=[("step", with_state)] + V[1:]), vfiles,
            where + "BytesStorageMetadata has state (a dict of 1 fields): the class has no fields",
            "a BytesStorageMetadata carrying state its class has no field for")
    with_tuple_state = lambda p: dcp_bytes_md(p).glob("torch", "float32").op(0x85, b"b")  # noqa: E731
    dcp_dir("dcp_value_with_tuple_state", vmd(values=[("step", with_tuple_state)] + V[1:]), vfiles,
            where + "BytesStorageMetadata has state (a tuple): the class has no fields",
            "a BytesStorageMetadata whose BUILD state is a tuple")
    with_args = lambda p: p.glob(DCP_MD, "BytesStorageMetadata").int(7).op(0x85, 0x81)  # noqa: E731
    dcp_dir("dcp_value_with_args", vmd(values=[("step", with_args)] + V[1:]), vfiles,
            where + "BytesStorageMetadata made with arguments (a tuple of 1): the class takes none",
            "a BytesStorageMetadata made by NEWOBJ with an argument")
    reduced = lambda p: p.glob(DCP_MD, "BytesStorageMetadata").op(b")R")  # noqa: E731
    dcp_dir("dcp_value_reduce", vmd(values=[("step", reduced)] + V[1:]), vfiles,
            "refused REDUCE of 'torch.distributed.checkpoint.metadata.BytesStorageMetadata' (not an allowlisted "
            "callable)", "BytesStorageMetadata called (REDUCE) instead of made (NEWOBJ)")
    as_tensor_md = lambda p: dcp_obj(p, DCP_MD, "TensorStorageMetadata", lambda q: q.op(b"}"))  # noqa: E731
    dcp_dir("dcp_value_tensor_md_empty", vmd(values=[("step", as_tensor_md)] + V[1:]), vfiles,
            where + "has no field 'properties'", "a TensorStorageMetadata with no fields in a value's place")
    dcp_dir("dcp_value_no_storage_entry", vmd(storage=VS[1:]), vfiles,
            where + "no storage_data entry for the value (a key without offsets): its bytes are not in the checkpoint",
            "a non-tensor value whose bytes are recorded nowhere")
    dcp_dir("dcp_value_past_file", vmd(storage=[("step", None, "__1_0.distcp", len(f2) - 4, 64, None)] + VS[1:]),
            vfiles, ".metadata: storage_data['step'] (a non-tensor value): bytes [%d, +64) reach past the end of "
            "__1_0.distcp (%d bytes)" % (len(f2) - 4, len(f2)), "a non-tensor value's range runs 60 bytes past its file")
    dcp_dir("dcp_value_offset_wrap", vmd(storage=[("step", None, "__1_0.distcp", 2**63 - 8, 16, None)] + VS[1:]),
            vfiles, "(a non-tensor value): bytes [9223372036854775800, +16) reach past the end of __1_0.distcp",
            "a non-tensor value at offset 2^63 - 8")
    dcp_dir("dcp_value_missing_file", vmd(storage=[("step", None, "__7_0.distcp", 0, 16, None)] + VS[1:]), vfiles,
            "__7_0.distcp: cannot open: No such file or directory (the data file",
            "a non-tensor value in a data file the directory lacks")
    dcp_dir("dcp_value_relative_path_dotdot",
            vmd(storage=[("step", None, "../dcp_control/__1_0.distcp", 0, 16, None)] + VS[1:]), vfiles,
            "storage_data['step'] (chunk at []).relative_path: '../dcp_control/__1_0.distcp' is not a plain file name",
            "a non-tensor value's relative_path climbs out of the directory")


# ---------------------------------------------------------------------------
# Names holding bytes a line cannot show: a NUL (which ended a C-string error
# message early), a newline (which split it), a terminal escape, UTF-8. The
# error must be whole and one line, the name spelled out: \0 \n \x1b.


def torchscript_detection_entries():
    # torch.load hands a zip to torch.jit.load only beside a constants.pkl
    # (serialization.py, _is_torchscript_zip); code/ alone is TorchScript
    # to none of torch's readers.
    # control_ts_chain.pt is the same archive with its constants.pkl.
    net = ts_net_code(["fc = self.fc", "return (fc).forward(x, )"])
    ckpt("ts_code_without_constants.pt", torchscript_archive(net, constants=False),
         "TorchScript code (archive/code/__torch__.py) without a constants.pkl record: torch.jit.load cannot read it "
         "and torch.load would read its data.pkl as a plain checkpoint",
         "code/ records and data.pkl, no constants.pkl: torch.load reads data.pkl, torch.jit.load fails")


def escaping_entries():
    w = dict(storage_cls="FloatStorage", key="0", numel=6, offset=0, size=[2, 3])
    hostile = "fc\x00\n\x1b[2J\u00e9"
    shown = "fc\\0\\n\\x1b[2J\u00e9"
    ckpt("escaped_key_twice.pt",
         checkpoint(pkl=state_dict_pickle([("module." + hostile + ".weight", w), (hostile + ".weight", w)]))
         .finish()[0],
         "tensor '%s.weight': key '%s.weight' appears twice once wrapper prefixes (module., _orig_mod.) "
         "are stripped" % (shown, shown),
         "two keys equal once module. is stripped, holding a NUL, a newline, a terminal escape and an e-acute")
    # A DCP relative_path with a NUL: the message went on past it.
    w0 = dcp_slice([1, 3], [0.5, -0.25, 0.125])
    w1 = dcp_slice([1, 3], [1.0, 0.75, -0.5])
    b = dcp_slice([2], [0.1, -0.2])
    files = {"__0_0.distcp": b + w0, "__1_0.distcp": w1}
    W = ("model.fc.weight", [2, 3], [([0, 0], [1, 3]), ([1, 0], [1, 3])], "float32")
    B = ("model.fc.bias", [2], [([0], [2])], "float32")
    storage = [("model.fc.bias", [0], "__0_0.distcp", 0, len(b), None),
               ("model.fc.weight", [0, 0], "__0_0.distcp", len(b), len(w0), None),
               ("model.fc.weight", [1, 0], "__1_0.distcp\x00/../../etc/passwd", 0, len(w1), None)]
    dcp_dir("dcp_relative_path_nul", dcp_metadata([W, B], storage), files,
            "relative_path: '__1_0.distcp\\0/../../etc/passwd' is not a plain file name of the checkpoint "
            "directory", "a relative_path with a NUL before a climb out of the directory: the whole line is printed")


# ---------------------------------------------------------------------------
# Weight norm and spectral norm parts (PYTORCH_FORMAT.md §10), folded at
# convert time: a Linear(3, 2) state dict whose weight is stored as parts.


def parts_checkpoint(named):
    """named: [(key, shape, values)] -> a torch.save zip state dict."""
    tensors, storages = [], []
    for i, (key, shape, values) in enumerate(named):
        tensors.append((key, dict(storage_cls="FloatStorage", key=str(i), numel=len(values), offset=0, size=shape)))
        storages.append((str(i), f32(*values)))
    return bytes(checkpoint(pkl=state_dict_pickle(tensors), storages=storages).finish()[0])


def norm_entries():
    V = [0.5, -0.25, 0.125, 1.0, 0.75, -0.5]
    bias = ("fc.bias", [2], [0.1, -0.2])
    add("checkpoints/control_weight_norm.pt",
        parts_checkpoint([("fc.weight_g", [2, 1], [2.0, -1.0]), ("fc.weight_v", [2, 3], V), bias]), "convert", None,
        "control: Linear(3, 2) with legacy weight norm (g [2, 1], v [2, 3]), folded", ok=True)
    add("checkpoints/control_spectral_norm.pt",
        parts_checkpoint([("fc.weight_orig", [2, 3], V), ("fc.weight_u", [2], [0.6, 0.8]),
                          ("fc.weight_v", [3], [0.0, 0.6, 0.8]), bias]), "convert", None,
        "control: Linear(3, 2) with legacy spectral norm, folded", ok=True)
    ckpt("wn_g_wrong_shape.pt",
         parts_checkpoint([("fc.weight_g", [3, 1], [1.0, 1.0, 1.0]), ("fc.weight_v", [2, 3], V), bias]),
         "weight norm of 'fc.weight' (g 'fc.weight_g' [3, 1], v 'fc.weight_v' [2, 3]): g must match v along one "
         "dimension and be 1 along the others", "g [3, 1] for a [2, 3] v")
    ckpt("wn_g_rank_mismatch.pt",
         parts_checkpoint([("fc.weight_g", [2], [1.0, 1.0]), ("fc.weight_v", [2, 3], V), bias]),
         "g must match v along one dimension", "g [2] without keepdim's trailing 1")
    ckpt("wn_zero_norm_v.pt",
         parts_checkpoint([("fc.weight_g", [2, 1], [2.0, 1.0]), ("fc.weight_v", [2, 3], V[:3] + [0.0] * 3), bias]),
         "weight norm of 'fc.weight' (g 'fc.weight_g' [2, 1], v 'fc.weight_v' [2, 3]): v has a zero norm at index 1 "
         "of dim 0", "row 1 of v is all zeros: 0 / 0")
    ckpt("wn_param_zero_norm_v.pt",
         parts_checkpoint([("fc.parametrizations.weight.original0", [2, 1], [2.0, 1.0]),
                           ("fc.parametrizations.weight.original1", [2, 3], [0.0] * 6), bias]),
         "v has a zero norm at index 0 of dim 0", "parametrizations weight norm with an all-zero v")
    ckpt("sn_u_wrong_size.pt",
         parts_checkpoint([("fc.weight_orig", [2, 3], V), ("fc.weight_u", [3], [0.6, 0.8, 0.0]),
                           ("fc.weight_v", [3], [0.0, 0.6, 0.8]), bias]),
         "spectral norm of 'fc.weight' (weight 'fc.weight_orig' [2, 3], u 'fc.weight_u' [3], v 'fc.weight_v' [3]): "
         "u has 3 and v 3 elements, but the weight [2, 3] as a matrix is 2 x 3 (u needs 2, v 3)",
         "u of 3 elements for a weight of 2 rows")
    ckpt("sn_v_wrong_size.pt",
         parts_checkpoint([("fc.parametrizations.weight.original", [2, 3], V),
                           ("fc.parametrizations.weight.0._u", [2], [0.6, 0.8]),
                           ("fc.parametrizations.weight.0._v", [2], [0.6, 0.8]), bias]),
         "u has 2 and v 2 elements, but the weight [2, 3] as a matrix is 2 x 3 (u needs 2, v 3)",
         "parametrizations spectral norm with a v of 2 elements for 3 columns")
    ckpt("sn_sigma_zero.pt",
         parts_checkpoint([("fc.weight_orig", [2, 3], V), ("fc.weight_u", [2], [0.0, 0.0]),
                           ("fc.weight_v", [3], [0.0, 0.6, 0.8]), bias]),
         "sigma = u^T W v is 0.000000: the weight / sigma is undefined", "u = 0: sigma 0")
    ckpt("param_orthogonal.pt",
         parts_checkpoint([("fc.parametrizations.weight.original", [2, 3], V),
                           ("fc.parametrizations.weight.0.base", [2, 3], V), bias]),
         "tensors 'fc.parametrizations.weight.{0.base, original}': the parametrization of 'fc.weight' is not "
         "weight_norm (original0, original1) or spectral_norm", "an orthogonal parametrization's parts")
    ckpt("param_stacked.pt",
         parts_checkpoint([("fc.parametrizations.weight.original0", [2, 1], [2.0, 1.0]),
                           ("fc.parametrizations.weight.original1", [2, 3], V),
                           ("fc.parametrizations.weight.1._u", [2], [0.6, 0.8]),
                           ("fc.parametrizations.weight.1._v", [3], [0.0, 0.6, 0.8]), bias]),
         "tensors 'fc.parametrizations.weight.{1._u, 1._v, original0, original1}'",
         "weight norm and spectral norm stacked on one weight")
    ckpt("wn_and_weight_both.pt",
         parts_checkpoint([("fc.weight", [2, 3], V), ("fc.weight_g", [2, 1], [2.0, -1.0]),
                           ("fc.weight_v", [2, 3], V), bias]),
         "tensor 'fc.weight' and the reparametrized parts of the same weight (fc.weight_g, ...) are both in the file",
         "a plain weight beside its own weight-norm parts")
    ckpt("wn_and_sn_share_v.pt",
         parts_checkpoint([("fc.weight_orig", [2, 3], V), ("fc.weight_u", [2], [0.6, 0.8]),
                           ("fc.weight_g", [2, 1], [2.0, -1.0]), ("fc.weight_v", [3], [0.0, 0.6, 0.8]), bias]),
         "tensor 'fc.weight_v' is a part of two reparametrizations of 'fc.weight'",
         "_orig/_u/_v and _g/_v claim one _v")
# torch.export archives (.pt2, PYTORCH_FORMAT.md §8): a Linear(3, 2) program
# in the 2.9+ layout (graph JSON, weights config, raw storages) and in the
# <= 2.7 layout (root records, nested torch.save), then one defect each.


def pt2_tensor(name):
    return {"as_tensor": {"name": name}}


def pt2_meta(sizes, strides=None, offset=0, dtype=7):
    if strides is None:
        strides, acc = [], 1
        for d in reversed(sizes):
            strides.insert(0, acc)
            acc *= d
    return {"dtype": dtype, "sizes": [{"as_int": d} for d in sizes], "requires_grad": False,
            "device": {"type": "cuda", "index": 0}, "strides": [{"as_int": d} for d in strides],
            "storage_offset": {"as_int": offset}, "layout": 7}


def pt2_node(target, outputs, args, module="", cls=""):
    stack = "L__self__,,__main__.Net" + (";L__self__%s,%s,%s" % (module, module, cls) if module else "")
    return {"target": "torch.ops." + target, "name": outputs[0],
            "inputs": [{"name": n, "arg": a, "kind": 1} for n, a in args],
            "outputs": [pt2_tensor(o) for o in outputs], "metadata": {"nn_module_stack": stack}}


def pt2_graph(nodes=None, output="linear", major=8):
    """The graph of fc = Linear(3, 2) on x [2, 3]."""
    if nodes is None:
        nodes = [pt2_node("aten.linear.default", ["linear"],
                          [("input", pt2_tensor("x")), ("weight", pt2_tensor("p_fc_weight")),
                           ("bias", pt2_tensor("p_fc_bias"))], "fc", "torch.nn.modules.linear.Linear")]
    inputs = ["p_fc_weight", "p_fc_bias", "x"]
    specs = [{"parameter": {"arg": {"name": "p_fc_weight"}, "parameter_name": "fc.weight"}},
             {"parameter": {"arg": {"name": "p_fc_bias"}, "parameter_name": "fc.bias"}},
             {"user_input": {"arg": pt2_tensor("x")}}]
    return {"graph_module": {
        "graph": {"inputs": [pt2_tensor(n) for n in inputs], "outputs": [pt2_tensor(output)], "nodes": nodes,
                  "tensor_values": {"x": pt2_meta([2, 3])}, "sym_int_values": {}, "sym_bool_values": {},
                  "sym_float_values": {}, "custom_obj_values": {}},
        "signature": {"input_specs": specs, "output_specs": [{"user_output": {"arg": pt2_tensor(output)}}]},
        "module_call_graph": []},
        "schema_version": {"major": major, "minor": 17}, "verifiers": ["TRAINING"], "torch_version": "2.11.0"}


def pt2_config(weight=None, bias=None):
    w = {"path_name": "weight_0", "is_param": True, "use_pickle": False, "tensor_meta": pt2_meta([2, 3])}
    b = {"path_name": "weight_1", "is_param": True, "use_pickle": False, "tensor_meta": pt2_meta([2])}
    w.update(weight or {})
    b.update(bias or {})
    return {"config": {"fc.weight": w, "fc.bias": b}}


def pt2_raw(graph=None, config=None, records=None, constants=None, raw_graph=None, raw_config=None):
    z = Zip()
    root = "model/"
    for name, data in (records if records is not None else [("weight_0", FC_W), ("weight_1", FC_B)]):
        z.add(root + "data/weights/" + name, data)
    cfg = raw_config if raw_config is not None else json.dumps(config or pt2_config()).encode()
    z.add(root + "data/weights/model_weights_config.json", cfg)
    z.add(root + "data/constants/model_constants_config.json", json.dumps(constants or {"config": {}}).encode())
    z.add(root + "models/model.json", raw_graph if raw_graph is not None else json.dumps(graph or pt2_graph()).encode())
    z.add(root + "archive_format", b"pt2")
    z.add(root + "archive_version", b"0")
    z.add(root + ".data/version", b"6\n")
    z.add(root + "byteorder", b"little")
    return bytes(z.finish()[0])


def pt2_legacy(state_dict_pkl):
    """torch <= 2.7: root-level records, the state dict a nested torch.save zip."""
    z = Zip()
    z.add("serialized_exported_program.json", json.dumps(pt2_graph()).encode(), align=False)
    z.add("serialized_state_dict.pt", bytes(checkpoint(pkl=state_dict_pkl).finish()[0]), align=False)
    empty = bytes(checkpoint(pkl=b"\x80\x02}.", storages=[]).finish()[0])
    z.add("serialized_constants.pt", empty, align=False)
    z.add("serialized_example_inputs.pt", b"never read", align=False)
    z.add("version", b"8.17", align=False)
    return bytes(z.finish()[0])


def pickled_payload(pkl):
    """What package_pt2 writes for a use_pickle tensor: a torch.save of it."""
    return bytes(checkpoint(pkl=pkl, storages=[("0", FC_W)]).finish()[0])


def subclass_tensor_pickle(size):
    """torch.save of a tensor subclass made by as_subclass, marked a
    Parameter: _rebuild_from_type_v2(_rebuild_tensor_v2, __main__.Tagged,
    (storage, 0, size, stride, False, OrderedDict()), {'_is_param': True})."""
    stride = [size[1], 1] if len(size) == 2 else [1]
    p = P().proto(2).glob("torch._tensor", "_rebuild_from_type_v2").mark()
    p.glob("torch._utils", "_rebuild_tensor_v2").glob("__main__", "Tagged")
    p.mark().mark().str("storage").glob("torch", "FloatStorage").str("0").str("cuda:0").int(6).op(b"t").op(b"Q")
    p.int(0).mark()
    for d in size:
        p.int(d)
    p.op(b"t").mark()
    for d in stride:
        p.int(d)
    p.op(b"t").false().ordered_dict().op(b"t")
    p.op(b"}").str("_is_param").op(0x88).op(b"s")
    return bytes(p.op(b"t").op(b"R").stop().b)


def pt2_entries():
    add("checkpoints/control_pt2.pt2", pt2_raw(), "convert", None,
        "control: Linear(3, 2) exported by torch.export (2.9+ layout), converted with no flag", ok=True)
    add("checkpoints/control_pt2_legacy.pt2", pt2_legacy(state_dict_pickle(linear_tensors())), "convert", None,
        "control: the same program in the torch <= 2.7 layout (root records, nested torch.save)", ok=True)
    cfg = "record 'model/data/weights/model_weights_config.json': "
    graph = "record 'model/models/model.json': "

    def meta(**kw):
        return {"tensor_meta": dict(pt2_meta([2, 3]), **kw)}

    ckpt("pt2_size_wrong_type.pt2", pt2_raw(config=pt2_config(meta(sizes=[{"as_int": "2"}, {"as_int": 3}]))),
         cfg + "config['fc.weight'].tensor_meta.sizes[0].as_int: expected an integer, found a string",
         "a size written as a string")
    ckpt("pt2_size_float_huge.pt2", pt2_raw(config=pt2_config(meta(sizes=[{"as_int": 1e30}, {"as_int": 3}]))),
         "config['fc.weight'].tensor_meta.sizes[0].as_int: expected an integer, found the number 1e+30",
         "a size of 1e30")
    ckpt("pt2_size_beyond_int64.pt2",
         pt2_raw(config=pt2_config(meta(sizes=[{"as_int": 2 ** 64 - 1}, {"as_int": 3}]))),
         "sizes[0].as_int: integer 18446744073709551615 out of range", "a size of 2^64 - 1")
    ckpt("pt2_size_huge.pt2", pt2_raw(config=pt2_config(meta(sizes=[{"as_int": 2 ** 31}, {"as_int": 2 ** 31}],
                                                             strides=[{"as_int": 0}, {"as_int": 0}]))),
         cfg + "config['fc.weight'].tensor_meta: too many elements (size [2147483648, 2147483648])",
         "2^62 elements over zero strides")
    ckpt("pt2_size_negative.pt2", pt2_raw(config=pt2_config(meta(sizes=[{"as_int": -2}, {"as_int": 3}]))),
         "config['fc.weight'].tensor_meta: negative size or stride", "size -2")
    ckpt("pt2_offset_past_storage.pt2", pt2_raw(config=pt2_config(meta(storage_offset={"as_int": 100}))),
         "config['fc.weight'].tensor_meta: view (offset 100, size [2, 3], stride [3, 1]) reaches past the end of "
         "its storage of 6 elements", "storage offset 100 in a 6-element storage")
    shared = [("weight_0", FC_W + FC_B)]
    ckpt("pt2_shared_storage_overlap.pt2",
         pt2_raw(config=pt2_config(bias={"path_name": "weight_0", "tensor_meta": pt2_meta([2], offset=5)}),
                 records=shared),
         "config['fc.bias'] and config['fc.weight'] overlap in storage 'weight_0' (bytes [0, 24) and [20, 28)) "
         "without being the same view", "two FQNs of one storage whose views partly overlap")
    ckpt("pt2_shared_storage_out_of_bounds.pt2",
         pt2_raw(config=pt2_config(bias={"path_name": "weight_0", "tensor_meta": pt2_meta([2], offset=7)}),
                 records=shared),
         "config['fc.bias'].tensor_meta: view (offset 7, size [2], stride [1]) reaches past the end of its storage "
         "of 8 elements", "the second view of a shared storage runs one element past it")
    ckpt("pt2_missing_record.pt2", pt2_raw(config=pt2_config({"path_name": "weight_9"})),
         "config['fc.weight'].path_name: record 'model/data/weights/weight_9' not found",
         "the config names a record the archive lacks")
    ckpt("pt2_dotdot_path_name.pt2", pt2_raw(config=pt2_config({"path_name": "../weights/weight_0"})),
         "config['fc.weight'].path_name: '../weights/weight_0' is not a record name below data/weights/",
         "path_name climbing out of data/weights/")
    # use_pickle: torch 2.15 torch.saves a tensor subclass instead of writing its raw bytes.
    pickled = {"use_pickle": True}
    add("checkpoints/control_pt2_use_pickle.pt2",
        pt2_raw(config=pt2_config(pickled), records=[("weight_0", pickled_payload(subclass_tensor_pickle([2, 3]))),
                                                     ("weight_1", FC_B)]), "convert", None,
        "control: fc.weight a tensor subclass, packaged with use_pickle (a torch.save of it)", ok=True)
    ckpt("pt2_use_pickle.pt2", pt2_raw(config=pt2_config(pickled)),
         "config['fc.weight'].use_pickle: record 'model/data/weights/weight_0' is not a torch.save archive",
         "a use_pickle weight whose record holds raw bytes")
    ckpt("pt2_use_pickle_not_tensor.pt2",
         pt2_raw(config=pt2_config(pickled), records=[("weight_0", pickled_payload(b"\x80\x02K\x07.")),
                                                      ("weight_1", FC_B)]),
         "config['fc.weight'].use_pickle: record 'model/data/weights/weight_0' holds a int, not a tensor",
         "a use_pickle payload that unpickles to an int")
    ckpt("pt2_use_pickle_shape.pt2",
         pt2_raw(config=pt2_config(dict(pickled, tensor_meta=pt2_meta([3, 2]))),
                 records=[("weight_0", pickled_payload(subclass_tensor_pickle([2, 3]))), ("weight_1", FC_B)]),
         "config['fc.weight'].tensor_meta: says a [3, 2] float32 tensor; the pickled payload "
         "'model/data/weights/weight_0' holds a [2, 3] float32 one", "a use_pickle payload of another shape")
    ckpt("pt2_use_pickle_wrapper.pt2",
         pt2_raw(config=pt2_config(pickled),
                 records=[("weight_0", pickled_payload(b"\x80\x02c__main__\nQuantizedWeight\n)R.")),
                          ("weight_1", FC_B)]),
         "refused REDUCE of '__main__.QuantizedWeight'",
         "a use_pickle payload rebuilt by its own class (a wrapper subclass)")
    ckpt("pt2_custom_obj_constant.pt2",
         pt2_raw(constants={"config": {"obj": {"path_name": "custom_obj_0", "is_param": False, "use_pickle": True}}}),
         "record 'model/data/constants/model_constants_config.json': config['obj']: a custom object (TorchBind "
         "script object, 'custom_obj_0')", "a TorchBind object among the constants")
    ckpt("pt2_dtype_unknown.pt2", pt2_raw(config=pt2_config(meta(dtype=99))),
         "config['fc.weight'].tensor_meta.dtype: unknown dtype code 99", "ScalarType 99")
    ckpt("pt2_schema_version_7.pt2", pt2_raw(graph=pt2_graph(major=7)),
         graph + "schema_version: schema version 7.17: ferry reads the torch.export graph schema 8.x",
         "an older graph schema")
    relu = lambda out, src: pt2_node("aten.relu.default", [out], [("self", pt2_tensor(src))])
    linear = pt2_graph()["graph_module"]["graph"]["nodes"][0]
    ckpt("pt2_graph_cycle.pt2", pt2_raw(graph=pt2_graph([linear, relu("a", "b"), relu("b", "a")], output="b")),
         "node 'a' (aten.relu.default, in the top-level module) uses 'b' before node 'b' (aten.relu.default, in the "
         "top-level module) makes it: the graph has a cycle or is not in topological order",
         "two nodes that use each other")
    ckpt("pt2_unknown_input.pt2", pt2_raw(graph=pt2_graph([linear, relu("r", "ghost")], output="r")),
         "node 'r' (aten.relu.default, in the top-level module) names an unknown input 'ghost'",
         "a node reading a value nothing makes")
    ckpt("pt2_value_made_twice.pt2", pt2_raw(graph=pt2_graph([linear, relu("linear", "x")])),
         "value 'linear' is made twice", "two nodes writing one value")
    ckpt("pt2_nodes_wrong_type.pt2", pt2_raw(raw_graph=json.dumps(
        dict(pt2_graph(), graph_module=dict(pt2_graph()["graph_module"],
                                            graph=dict(pt2_graph()["graph_module"]["graph"], nodes="none")))).encode()),
         graph + "graph_module.graph.nodes: expected an array, found a string", "nodes is a string")
    ckpt("pt2_json_deep.pt2", pt2_raw(raw_graph=b"[" * 100000),
         graph + "JSON nested deeper than 128 levels at byte 128", "100000 nested arrays")
    ckpt("pt2_json_invalid.pt2", pt2_raw(raw_graph=b'{"schema_version": {"major": 8,'),
         graph + "not valid JSON", "a graph cut short")
    ckpt("pt2_config_not_json.pt2", pt2_raw(raw_config=b"config = {}"), cfg + "not valid JSON",
         "a weights config that is not JSON")
    ckpt("pt2_signature_param_missing.pt2", pt2_raw(config={"config": {"fc.weight": pt2_config()["config"]["fc.weight"]}},
                                                    records=[("weight_0", FC_W)]),
         graph + "graph_module.signature.input_specs[1]: parameter 'fc.bias' (graph input 'p_fc_bias') is not among "
         "the archive's weights or constants", "the graph's parameter has no weight")
    cumsum = pt2_node("aten.cumsum.default", ["cumsum"], [("self", pt2_tensor("linear")), ("dim", {"as_int": 1})])
    ckpt("pt2_op_ferry_does_not_run.pt2", pt2_raw(graph=pt2_graph([linear, cumsum], output="cumsum")),
         "node 'cumsum' (aten.cumsum.default, in the top-level module): ferry does not run aten.cumsum.default (its "
         "'self' is on the chain); the layer chain cannot be read from this graph: pass --graph",
         "an op on the chain that ferry has no layer for")
    fake = P().proto(2).ordered_dict().mark().str("fc.weight")
    fake.glob("torch._export.serde.serialize", "_reconstruct_fake_tensor").mark().str("meta").op(b"t").op(b"R")
    fake.op(b"u").stop()
    ckpt("pt2_legacy_fake_tensor.pt2", pt2_legacy(bytes(fake.b)),
         "record 'serialized_state_dict.pt': record 'archive/data.pkl': refused REDUCE of "
         "'torch._export.serde.serialize._reconstruct_fake_tensor'",
         "<= 2.7 layout whose nested state dict rebuilds a fake tensor (_reconstruct_fake_tensor)")


# Node targets of a .pt2 graph: torch.export.load walks a target's dotted
# path from torch / _operator / math, then admits only op overloads,
# higher-order ops and symbolic-shape builtins; ferry refuses the rest when
# it reads the archive, so --graph (no chain read from the graph) refuses too.
# tests/fixtures/make_export_target_fixtures.py checks torch refuses these.
PT2_TARGET = ("record 'model/models/model.json': graph_module.graph.nodes[1]: node 1 'system': target '%s' is not "
              "an ATen operator ferry knows")


def pt2_hop_graph(inner_target, operator=None):
    """fc, then wrap_with_set_grad_enabled (a no_grad block) over a subgraph
    of one node naming `inner_target`; or with an operator argument."""
    inner = {"target": inner_target, "name": "y", "outputs": [pt2_tensor("y")], "metadata": {},
             "inputs": [{"name": "self", "arg": pt2_tensor("a"), "kind": 1}]}
    sub = {"as_graph": {"name": "submod_1", "graph": {"inputs": [pt2_tensor("a")], "outputs": [pt2_tensor("y")],
                                                      "nodes": [inner]}}}
    hop = pt2_node("higher_order.wrap_with_set_grad_enabled", ["wrapped"],
                   [("", {"as_bool": False}), ("", {"as_operator": operator} if operator else sub),
                    ("", pt2_tensor("linear"))])
    hop["name"] = "system"
    return pt2_graph([pt2_graph()["graph_module"]["graph"]["nodes"][0], hop])


def pt2_target_entries():
    linear = pt2_graph()["graph_module"]["graph"]["nodes"][0]

    def with_target(target):
        node = pt2_node("aten.relu.default", ["system"], [("self", pt2_tensor("linear"))])
        node["target"] = target
        return pt2_raw(graph=pt2_graph([linear, node]))

    for name, target, why in [
            ("os_system", "torch.serialization.os.system", "a module path walked to os.system"),
            ("builtins_eval", "builtins.eval", "a builtin"),
            ("op_globals", "torch.ops.aten.lstm.input.__globals__", "an attribute of a real ATen op"),
            ("op_packet", "torch.ops.aten.relu", "an op packet, no overload"),
            ("unknown_aten", "torch.ops.aten.nonexistent.default", "an ATen op torch does not register"),
            ("torch_function", "torch.relu", "a torch function, not an op overload")]:
        add("checkpoints/pt2_target_%s.pt2" % name, with_target(target), "convert", PT2_TARGET % target,
            "a node whose target is %s ('%s'), converted with --graph: torch.export.load refuses it" % (why, target),
            args=["--graph", "fc"])
    add("checkpoints/pt2_target_in_subgraph.pt2", pt2_raw(graph=pt2_hop_graph("builtins.eval")), "convert",
        "graph_module.graph.nodes[1].inputs[1].arg.as_graph.graph.nodes[0]: node 0 'y': target 'builtins.eval' is "
        "not an ATen operator ferry knows",
        "a higher-order op's subgraph naming builtins.eval, converted with --graph", args=["--graph", "fc"])
    add("checkpoints/pt2_operator_argument.pt2", pt2_raw(graph=pt2_hop_graph(None, "torch.serialization.os.system")),
        "convert", "graph_module.graph.nodes[1].inputs[1].arg.as_operator: operator 'torch.serialization.os.system' is not an "
        "ATen operator ferry knows", "an operator argument naming os.system, converted with --graph",
        args=["--graph", "fc"])
    # Controls: what real exports hold beside plain ATen ops.
    sym = pt2_node("aten.sym_size.int", ["s0"], [("self", pt2_tensor("x")), ("dim", {"as_int": 0})])
    sym["outputs"] = [{"as_sym_int": {"as_name": "s0"}}]
    mul = {"target": "_operator.mul", "name": "mul", "metadata": {},
           "inputs": [{"name": "a", "arg": {"as_sym_int": {"as_name": "s0"}}, "kind": 1},
                      {"name": "b", "arg": {"as_sym_int": {"as_int": 3}}, "kind": 1}],
           "outputs": [{"as_sym_int": {"as_name": "mul"}}]}
    add("checkpoints/control_pt2_symbolic_ops.pt2", pt2_raw(graph=pt2_graph([sym, mul, linear])), "convert", None,
        "control: aten.sym_size.int and _operator.mul (a dynamic export's shape arithmetic), read with no flag",
        ok=True)
    add("checkpoints/control_pt2_higher_order_op.pt2", pt2_raw(graph=pt2_hop_graph("torch.ops.aten.relu.default")),
        "convert", None, "control: a higher-order op whose subgraph holds an ATen op, converted with --graph",
        ok=True, args=["--graph", "fc"])


# Polyglot zips: torch.load and torch.export.load both take the records below
# the folder of entry 0 (PyTorchStreamReader); torch.export.load reads a PT2
# archive there, torch.load the folder's data.pkl (or, beside constants.pkl,
# the archive as TorchScript): one file, two models. Refused, naming both.
AMBIGUOUS = ("ambiguous: a torch.export archive (model/models/model.json) and a torch.save checkpoint "
             "(model/data.pkl) in one zip; torch.load and torch.export.load would read different models")


def pt2_28(extra=()):
    """torch 2.8 layout: the weights a torch.save zip nested in data/weights/."""
    z = Zip()
    z.add("model/models/model.json", json.dumps(pt2_graph()).encode())
    z.add("model/data/weights/model.pt", bytes(checkpoint().finish()[0]))
    z.add("model/data/constants/model.pt", bytes(checkpoint(pkl=b"\x80\x02}.", storages=[]).finish()[0]))
    for name, data in extra:
        z.add("model/" + name, data)
    z.add("model/archive_format", b"pt2")
    z.add("model/archive_version", b"0")
    z.add("model/.data/version", b"6\n")
    z.add("model/byteorder", b"little")
    return bytes(z.finish()[0])


def polyglot_entries():
    other = [("data.pkl", state_dict_pickle(linear_tensors())), ("data/0", f32(*[9.0] * 6)),
             ("data/1", f32(9.0, 9.0)), ("version", b"3\n")]
    records = [("weight_0", FC_W), ("weight_1", FC_B)]
    z = Zip()
    for name, data in records:
        z.add("model/data/weights/" + name, data)
    z.add("model/data/weights/model_weights_config.json", json.dumps(pt2_config()).encode())
    z.add("model/models/model.json", json.dumps(pt2_graph()).encode())
    for name, data in other:
        z.add("model/" + name, data)
    for name, data in [("archive_format", b"pt2"), ("archive_version", b"0"), (".data/version", b"6\n"),
                       ("byteorder", b"little")]:
        z.add("model/" + name, data)
    both = bytes(z.finish()[0])
    ckpt("polyglot_pt2_torch_save.pt2", both, AMBIGUOUS,
         "a .pt2 (2.9+ layout) with a torch.save state dict (data.pkl, data/) beside it")
    ckpt("polyglot_pt2_torch_save.pt", both, AMBIGUOUS, "the same bytes named .pt: the name decides nothing")
    ckpt("polyglot_pt2_28_torch_save.pt2", pt2_28(other), AMBIGUOUS,
         "a 2.8-layout .pt2 (nested torch.save weights) with an outer data.pkl too")
    script = other + [("constants.pkl", b"\x80\x02)."), ("code/__torch__/model.py", b"class Net(Module):\n  pass\n")]
    ckpt("polyglot_pt2_torchscript.pt", pt2_28(script),
         "ambiguous: a torch.export archive (model/models/model.json) and a TorchScript archive (model/constants.pkl, "
         "model/data.pkl) in one zip; torch.load (which hands it to torch.jit.load) and torch.export.load would read "
         "different models", "a .pt2 that is also a TorchScript archive (constants.pkl, code/, data.pkl)")
    # torch <= 2.7 records at the root after a torch.save folder: torch.load
    # reads the folder, torch.export.load falls back to the root records.
    z = Zip()
    for name, data in other:
        z.add("archive/" + name, data)
    z.add("serialized_exported_program.json", json.dumps(pt2_graph()).encode(), align=False)
    z.add("serialized_state_dict.pt", bytes(checkpoint().finish()[0]), align=False)
    z.add("version", b"8.17", align=False)
    ckpt("polyglot_root_pt2_after_folder.pt", bytes(z.finish()[0]),
         "entry 'serialized_exported_program.json' is not under the folder 'archive/'",
         "a torch.save folder first, torch <= 2.7 export records at the root after it: the zip reader's one-folder "
         "rule refuses it")
    add("checkpoints/control_pt2_28_layout.pt2", pt2_28(), "convert", None,
        "control: the 2.8 layout, whose weights are a torch.save zip nested in data/weights/ (one reading)", ok=True)
    add("checkpoints/control_pt2_nested_data_pkl.pt2", pt2_28([("extra/data.pkl", other[0][1])]), "convert", None,
        "control: a data.pkl below a subfolder is no torch.save reading of the archive", ok=True)
    add("checkpoints/control_pt2_constants_pkl_only.pt2", pt2_28([("constants.pkl", b"\x80\x02).")]), "convert",
        None, "control: constants.pkl without data.pkl: torch.jit.load cannot read it, one reading", ok=True)


GOOD_SOURCE = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, n_in=3, n_out=2):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.fc(x)
"""


def source(name, text, expect, why, ok=False, code_suffix=""):
    """A --code source beside the control Linear(3, 2) state dict: the
    checkpoint is the control's bytes, the source the defect."""
    data = text if isinstance(text, bytes) else text.encode()
    path = os.path.join(HERE, "sources", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    good, _ = checkpoint().finish()
    add("checkpoints/code_" + name.replace(".", "_") + ".pt", bytes(good), "convert", expect, why, ok=ok,
        args=["--code", "{catalogue}/sources/" + name + code_suffix])


def forward_of(body, init="self.fc = nn.Linear(3, 2)"):
    return ("import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        %s\n\n    def forward(self, x):\n%s" % (init, body))


def source_entries():
    source("control.py", GOOD_SOURCE, None, "control: the source of a Linear(3, 2) model, read with --code", ok=True)
    huge = GOOD_SOURCE + "#" * (8 << 20) + "\n"
    source("huge.py", huge, "huge.py: %d bytes (a source file is read up to 8388608)" % len(huge),
           "a source of 8 MiB and more (a comment line): refused before it is read")
    source("deep_brackets.py", forward_of("        y = " + "(" * 100000 + "x" + ")" * 100000 + "\n        return self.fc(y)\n"),
           "deep_brackets.py:10: in Net.forward, cannot be read: brackets nested deeper than 64 (line 10)",
           "10^5 nested brackets in forward: the tokenizer counts them, the parser never recurses that deep")
    source("deep_blocks.py", forward_of("".join("        " + "    " * i + "if True:\n" for i in range(100)) +
                                         "        " + "    " * 100 + "x = x\n        return self.fc(x)\n"),
           "branches nested deeper than 64 levels",
           "100 nested if blocks in forward")
    source("unterminated_triple.py", GOOD_SOURCE + 'HELP = """never closed\n',
           "unterminated_triple.py:12: a string opened with \"\"\" is never closed (the rest of the file is inside it)",
           "a triple-quoted string that runs to the end of the file")
    source("unterminated_quote.py", forward_of("        y = 'open\n        return self.fc(x)\n"),
           "unterminated_quote.py:10: in Net.forward, cannot be read: a string without its closing quote (line 10)",
           "a one-line string without its closing quote, in forward")
    source("tokens_in_forward.py", forward_of("        y = x" + " + x" * 100000 + "\n        return self.fc(x)\n"),
           "tokens_in_forward.py:10: in Net.forward, cannot be read: a statement of more than 16384 tokens",
           "10^5 tokens on one line of forward")
    source("tokens_at_module_level.py", "TABLE = [" + "1, " * 100000 + "]\n" + GOOD_SOURCE, None,
           "control: 10^5 tokens on one module-level line, which is skipped (never needed, never run)", ok=True)
    source("self_base.py", GOOD_SOURCE.replace("class Net(nn.Module):", "class Net(Net, nn.Module):") +
           "\n\nclass A(B):\n    pass\n\n\nclass B(A):\n    pass\n", None,
           "control: a class that inherits from itself, and two that inherit from each other: each base read once",
           ok=True)
    source("forward_calls_itself.py", forward_of("        return self.forward(x)\n"),
           "forward_calls_itself.py:10: in Net.forward, 'return self.forward(x)': module 'root' calls itself",
           "a forward that calls itself: refused, not followed")
    source("init_builds_itself.py", GOOD_SOURCE.replace("self.fc = nn.Linear(n_in, n_out)",
                                                        "self.fc = nn.Linear(n_in, n_out)\n        self.inner = Net()"),
           "constructors call each other more than 32 deep (class Net constructs itself?)",
           "a constructor that builds its own class: refused at the depth limit")
    source("constant_loop.py", "N = N + 1\n" + GOOD_SOURCE.replace("n_out=2", "n_out=N"), None,
           "control: a module-level constant defined from itself is not followed (the weights give the size it "
           "stands for)", ok=True)
    source("nul_byte.py", GOOD_SOURCE.encode().replace(b"# x", b"") + b"\x00\n", "nul_byte.py:12: a NUL byte (not Python source text)",
           "a NUL byte in the source")
    source("latin1.py", GOOD_SOURCE.encode() + b"# caf\xe9\n", "latin1.py:12: bytes that are not UTF-8 (Python source is UTF-8)",
           "a Latin-1 byte in a comment: Python source is UTF-8")
    source("deep_json.ipynb", "{\"cells\": " + "[" * 10000 + "]" * 10000 + "}",
           "deep_json.ipynb: JSON nested deeper than 128 levels at byte 137",
           "a notebook whose JSON nests 10^4 deep: measured before it is parsed")
    source("code_execution.py", "__import__('os').system('touch /tmp/ferry_pwned')\n" +
           forward_of("        __import__('os').system('touch /tmp/ferry_pwned')\n        return self.fc(x)\n"),
           "code_execution.py:11: in Net.forward, '__import__(\"os\").system(\"touch /tmp/ferry_pwned\")': calls "
           "attribute 'system' of the result of __import__",
           "os.system at module level (skipped) and in forward (refused): nothing in a source is ever run")
    source("no_class.py", "print('hello')\n", "no nn.Module class in the files given",
           "a source that defines no model class")
    source("named.py", GOOD_SOURCE, "--code: no class 'Missing' in the files given (they define Net)",
           "a class named that the file does not define", code_suffix=":Missing")


def main():
    for sub in ("checkpoints", "models", "sources"):
        d = os.path.join(HERE, sub)
        if os.path.isdir(d):
            for f in os.listdir(d):
                path = os.path.join(d, f)
                if os.path.isdir(path):  # a DCP entry is a directory
                    shutil.rmtree(path)
                else:
                    os.remove(path)
    zip_entries()
    pickle_entries()
    tensor_entries()
    numpy_entries()
    other_format_entries()
    safetensors_entries()
    legacy_entries()
    placeholder_entries()
    tar_entries()
    module_entries()
    recorded_chain_entries()
    script_branch_entries()
    model_entries()
    quant_entries()
    op_entries()
    output_layout_entries()
    metadata_entries()
    dcp_entries()
    norm_entries()
    pt2_entries()
    pt2_target_entries()
    polyglot_entries()
    escaping_entries()
    torchscript_detection_entries()
    source_entries()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(ENTRIES, f, indent=1)
        f.write("\n")
    refused = sum(1 for e in ENTRIES if not e.get("ok"))
    print("tests/bad: %d files (%d refused, %d controls)" % (len(ENTRIES), refused,
                                                             len(ENTRIES) - refused))


if __name__ == "__main__":
    main()
