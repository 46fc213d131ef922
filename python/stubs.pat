# Added to the stub nanobind writes for ferry._ferry (python/CMakeLists.txt):
# the exception classes, which the module makes with PyErr_NewException.
^_ferry\.__suffix__$:
    class Error(Exception):
        """Every error ferry raises. .status is the C API's status name where one failed, else None."""
        status: str | None

    class ConvertError(Error):
        """The converter could not read, map or write the model; the message is the CLI's one line."""

    class ModelError(Error, ValueError):
        """The model bytes fail verification, or the Model was closed."""

    class InputError(Error, ValueError):
        """An input, state or option does not fit the model or the session."""

    class SessionError(Error):
        """The session is closed, busy in another thread, or failed on its device."""

    class UnsupportedError(Error):
        """Valid, but not supported here: a backend this build lacks, step() on a model that cannot stream."""
