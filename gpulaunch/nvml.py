"""One way to open NVML (nvidia-ml-py), shared by topology, profiles and host checks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

SYSFS_ROOT_ENV = "GPULAUNCH_SYSFS_ROOT"


@contextlib.contextmanager
def session(env: Mapping[str, str]) -> Iterator[Any]:
    """The initialized pynvml module, shut down afterwards; None when it is not installed,
    no driver answers, or a sysfs fixture (GPULAUNCH_SYSFS_ROOT) replaces the machine."""
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
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
