"""One way to open NVML (nvidia-ml-py), shared by topology, profiles and host checks.

The one policy: a session lends the bindings behind a guard, so every NVML failure a caller
can meet is NvmlError (a driver refusing a query, or bindings too old for the function)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from gpulaunch.errors import GpulaunchError

SYSFS_ROOT_ENV = "GPULAUNCH_SYSFS_ROOT"


class NvmlError(GpulaunchError):
    """NVML could not answer: the driver refused a query (NVMLError_NotSupported, ...), or
    the installed bindings lack the function (`outdated`: an older nvidia-ml-py)."""

    def __init__(self, message: str, *, outdated: bool = False) -> None:
        super().__init__(message)
        self.outdated = outdated


class Nvml:
    """pynvml as a session lends it: its `nvml*` functions raise NvmlError, never what the
    bindings raise; a function the bindings lack is NvmlError(outdated=True) on access."""

    def __init__(self, module: Any) -> None:
        self._module = module
        error = getattr(module, "NVMLError", None)
        self._error: type[BaseException] | tuple[()] = error if isinstance(error, type) else ()

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(self._module, name)
        except AttributeError:
            if not name.startswith("nvml"):
                raise  # constants: callers may fall back with getattr(lib, NAME, default)
            raise NvmlError(
                f"NVML: the installed nvidia-ml-py lacks {name} (an older version: "
                "pip install -U nvidia-ml-py)",
                outdated=True,
            ) from None
        if not name.startswith("nvml") or not callable(value):
            return value

        def call(*args: Any) -> Any:
            try:
                return value(*args)
            except self._error as err:
                raise NvmlError(f"NVML: {err}") from err

        return call


def query(lib: Nvml, name: str, *args: Any) -> Any:
    """One NVML query that may be missing (older bindings) or refused for one GPU (Not
    Supported, e.g. memory on unified-memory parts): None then, so the caller's other queries
    still answer."""
    try:
        return getattr(lib, name)(*args)
    except NvmlError:
        return None


@contextlib.contextmanager
def session(env: Mapping[str, str]) -> Iterator[Nvml | None]:
    """The initialized bindings (as Nvml), shut down afterwards; None when they are not
    installed, no driver answers, or a sysfs fixture (GPULAUNCH_SYSFS_ROOT) replaces the
    machine."""
    lib = None
    if not env.get(SYSFS_ROOT_ENV):
        try:
            import pynvml

            lib = Nvml(pynvml)
            lib.nvmlInit()
        except (ImportError, NvmlError):  # no bindings; NVMLError_LibraryNotFound, ...
            lib = None
    try:
        yield lib
    finally:
        if lib is not None:
            with contextlib.suppress(NvmlError):
                lib.nvmlShutdown()
