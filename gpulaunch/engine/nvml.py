"""One way to open NVML (nvidia-ml-py), shared by topology, profiles and host checks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from gpulaunch.errors import GpulaunchError

SYSFS_ROOT_ENV = "GPULAUNCH_SYSFS_ROOT"


class NvmlError(GpulaunchError):
    """The driver answered nvmlInit but refused a later query (NVMLError_NotSupported, ...).

    Callers decide whether that is advisory (say what could not be checked) or fatal. Any
    other exception from inside a session (an AttributeError from bindings that lack a
    function, a bug) is not this and propagates unchanged.
    """


def query(lib: Any, name: str, *args: Any) -> Any:
    """One NVML query that may be missing (older bindings) or refused for one GPU (Not
    Supported, e.g. memory on unified-memory parts): None then, so the caller's other queries
    still answer. Any other exception propagates."""
    fn = getattr(lib, name, None)
    if fn is None:
        return None
    refused = getattr(lib, "NVMLError", None)
    try:
        return fn(*args)
    except Exception as err:
        if isinstance(refused, type) and isinstance(err, refused):
            return None
        raise


@contextlib.contextmanager
def session(env: Mapping[str, str]) -> Iterator[Any]:
    """The initialized pynvml module, shut down afterwards; None when it is not installed,
    no driver answers, or a sysfs fixture (GPULAUNCH_SYSFS_ROOT) replaces the machine.

    An NVMLError raised by a query inside the block comes out as NvmlError."""
    if env.get(SYSFS_ROOT_ENV):
        yield None
        return
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        yield None
        return
    nvml_error = getattr(pynvml, "NVMLError", None)
    try:
        yield pynvml
    except Exception as err:
        if isinstance(nvml_error, type) and isinstance(err, nvml_error):
            raise NvmlError(f"NVML: {err}") from err
        raise
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
