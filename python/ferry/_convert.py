"""ferry.convert and ferry.inspect: the converter, with the CLI's own options.

The keyword arguments are the options `ferry convert` / `ferry inspect`
declare, read from those declarations when the package is imported
(`--max-error E` is max_error=E, `--code` may be a list), parsed and checked
by the same parser: the Python and the command-line spellings cannot drift.
"""

import inspect as _pyinspect
import json
import os
import tempfile
import time
import warnings

from . import _ferry


class ConvertWarning(UserWarning):
    """What the converter wants the user to know: a hyper-parameter it had to
    assume (and how to set it), a class it picked among several, a layer it
    kept in f32. Also in ConvertReport.notes / .assumption_lines."""


def _declared(command):
    return {o["name"].replace("-", "_"): o for o in _ferry._command_options(command)}


_CONVERT = _declared("convert")
_INSPECT = {k: v for k, v in _declared("inspect").items() if k != "json"}


def convert_options():
    """The options ferry.convert takes, as `ferry convert` declares them:
    [{'name': 'max_error', 'flag': False, 'multiple': False, 'type_name': 'E',
    'description': ..., 'default': ''}, ...]."""
    return [dict(o, name=k) for k, o in _CONVERT.items()]


def _text(key, value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        raise TypeError(f"{key}: pass a str path, not bytes")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"{key}: expected a str, a path or a number, got {type(value).__name__}")
    return str(value)


def _positional(path):
    """A path as a positional word: one that starts with '-' gets './' so
    the parser does not take it for an option."""
    p = os.fspath(path)
    if isinstance(p, bytes):
        raise TypeError("pass a str path, not bytes")
    return os.path.join(".", p) if p.startswith("-") else p


def _words(command, options, given):
    words = []
    for key, value in given.items():
        o = options.get(key)
        if o is None:
            raise TypeError(f"{command}() got an unexpected keyword argument '{key}' "
                            f"(its options: {', '.join(options)})")
        flag = "--" + o["name"]
        if value is None:
            continue
        if o["flag"]:
            if not isinstance(value, bool):
                raise TypeError(f"{key}: expected True or False, got {value!r}")
            if value:
                words.append(flag)
            continue
        values = list(value) if o["multiple"] and isinstance(value, (list, tuple)) else [value]
        words += [f"{flag}={_text(key, v)}" for v in values]
    return words


def _arrays_to_files(options, folder):
    """A numpy array given for an option that takes a .npy file (calibration)
    is written to one."""
    out = dict(options)
    for key, value in options.items():
        if hasattr(value, "__array__") and not isinstance(value, (str, bytes, os.PathLike)):
            import numpy as np

            path = os.path.join(folder, f"{key}.npy")
            np.save(path, np.asarray(value, dtype=np.float32))
            out[key] = path
    return out


class ConvertReport:
    """What ferry.convert read, planned and wrote: the data `ferry convert` prints.

    Attributes (from the converter): form, tensor_count, storage_locations,
    graph (the chain, in --graph syntax), graph_inferred, layout ('tbf',
    'btf', 'bft', 'tb', 'bt'), layout_source, output_is_sequence,
    output_layout, layers ([{'name', 'description', 'in', 'out'}]), folded,
    ignored ([{'key', 'reason'}]), notes, assumptions, assumption_lines, code
    (what --code read: the class, each layer's constructor and line, the
    chain's source lines; None without --code), weight_bytes, quantization
    (None, or the accuracy report: per-layer dtype and rounding, error against
    fp32 per layer and for the model, the drift), file_bytes,
    stored_weight_bytes, arena_bytes (streaming at batch 1), c_array_name.
    And: path (the file written, None when converting to bytes), model (the
    file's bytes), seconds.
    """

    def __init__(self, data, path, model, seconds):
        self._data = data
        self.path = path
        self.model = model
        self.seconds = seconds

    def __getattr__(self, name):
        try:
            return self.__dict__["_data"][name]
        except KeyError:
            raise AttributeError(f"ConvertReport has no attribute '{name}'") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._data))

    def to_dict(self):
        """Everything, as plain data (the model's bytes left out)."""
        return dict(self._data, path=self.path, seconds=self.seconds)

    def __str__(self):
        d = self._data
        lines = [f"read     {d['form']}, {d['tensor_count']} tensors, storages on "
                 f"{', '.join(d['storage_locations']) or 'none'}",
                 f"graph    {d['graph']}", f"layout   {d['layout']} ({d['layout_source']})"]
        lines += [f"layer {i}  {l['name']:<10} {l['description']}  {l['in']} -> {l['out']}"
                  for i, l in enumerate(d["layers"])]
        q = d.get("quantization")
        if q:
            lines += [f"quantize {p['layer']:<10} {p['dtype']}" for p in q["precisions"]]
            m = q["model"]
            lines.append(f"accuracy model      max abs {m['max_abs']:.3g}  rms {m['rms']:.3g}  cosine {m['cosine']:.6f}")
        where = self.path if self.path else "bytes"
        lines.append(f"wrote    {where}: {d['file_bytes']} bytes (weights {d['stored_weight_bytes']} bytes), "
                     f"streaming arena (batch 1): {d['arena_bytes']} bytes")
        return "\n".join(lines)

    def __repr__(self):
        d = self._data
        return (f"<ferry.ConvertReport {d['graph']!r}: {len(d['layers'])} layers, {d['file_bytes']} bytes, "
                f"arena {d['arena_bytes']} bytes>")


def convert(src, dst=None, **options):
    t0 = time.perf_counter()
    quiet = bool(options.get("quiet"))
    with tempfile.TemporaryDirectory(prefix="ferry-") as tmp:
        words = _words("convert", _CONVERT, _arrays_to_files(options, tmp))
        out = os.fspath(dst) if dst is not None else os.path.join(tmp, "model.fb")
        data = _ferry._convert([_positional(src), _positional(out)] + words)
        with open(out, "rb") as f:
            model = f.read()
    report = ConvertReport(json.loads(data), os.fspath(dst) if dst is not None else None, model,
                           time.perf_counter() - t0)
    if not quiet:
        for line in report.assumption_lines + report.notes:
            warnings.warn(line, ConvertWarning, stacklevel=2)
    return report


def inspect(path, **options):
    """What `ferry inspect PATH --json` prints, as Python data: for a
    checkpoint its form, tensors, attributes, modules, what is ignored, the
    chain it records and the plan convert would make (with code=, graph=,
    layout=... as convert takes them); for a model file its layers, sizes,
    backends, assumptions and provenance."""
    words = _words("inspect", _INSPECT, options)
    return json.loads(_ferry._inspect_json([_positional(path)] + words))


def _signature(options, leading):
    params = list(leading)
    for key, o in options.items():
        params.append(_pyinspect.Parameter(key, _pyinspect.Parameter.KEYWORD_ONLY,
                                           default=False if o["flag"] else None))
    return _pyinspect.Signature(params)


def _option_doc(options):
    lines = []
    for key, o in options.items():
        kind = "bool" if o["flag"] else (f"{o['type_name']} (or a list)" if o["multiple"] else o["type_name"])
        default = f" Default {o['default']}." if o["default"] else ""
        lines.append(f"    {key}: {kind}. {o['description']}.{default}")
    return "\n".join(lines)


_P = _pyinspect.Parameter
convert.__signature__ = _signature(_CONVERT, [_P("src", _P.POSITIONAL_OR_KEYWORD),
                                              _P("dst", _P.POSITIONAL_OR_KEYWORD, default=None)])
convert.__doc__ = f"""Converts a PyTorch checkpoint into a ferry model file: `ferry convert` as a call.

    src: the checkpoint (any form `ferry convert` reads: a torch.save file,
        TorchScript, .pt2, safetensors, a DCP directory). Never executed.
    dst: the model file to write (whole or not at all), or None to get the
        bytes only (report.model).

Options (exactly `ferry convert`'s, `--max-error` spelled max_error; a
numpy array may be given where a .npy file is asked for):
{_option_doc(_CONVERT)}

Returns a ConvertReport. Raises ConvertError with the CLI's one-line message
(nothing is written then), TypeError for an option it does not declare.
Notes and assumed hyper-parameters are issued as ConvertWarning (quiet=True:
not).
"""
inspect.__signature__ = _signature(_INSPECT, [_P("path", _P.POSITIONAL_OR_KEYWORD)])
inspect.__doc__ += "\n\n    Options (`ferry inspect`'s):\n" + _option_doc(_INSPECT) + "\n"
