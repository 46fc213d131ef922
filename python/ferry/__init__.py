"""ferry: convert a PyTorch recurrent network and run it, whole or step by step.

    import ferry
    report = ferry.convert("model.pt", "model.fb", code="model.py")
    m = ferry.Model("model.fb")
    s = m.session(batch=1, max_seq=100)
    y = s.run(x)                 # x in m.layout, float32
    s.reset(); y_t = s.step(x_t) # streaming, the state carried
    ferry.check(m, torch_module, x)

The converter never runs Python code from a checkpoint or a source file; the
runtime is the same C library firmware links. See docs/python.md.
"""

from ._ferry import (  # noqa: F401  (the public names)
    ConvertError,
    Error,
    InputError,
    Model,
    ModelError,
    Session,
    SessionError,
    UnsupportedError,
    backend_names,
)
from ._ferry import version as _runtime_version
from ._convert import ConvertReport, ConvertWarning, convert, convert_options, inspect
from ._check import CheckResult, check

__version__ = _runtime_version()

__all__ = [
    "convert", "convert_options", "inspect", "check", "Model", "Session", "ConvertReport", "CheckResult",
    "Error", "ConvertError", "ModelError", "InputError", "SessionError", "UnsupportedError", "ConvertWarning",
    "backend_names",
]
