"""One way to open NVML (nvidia-ml-py) and one listing of the host's GPUs (`listing`),
shared by topology, profiles, host checks, doctor and run records.

The one policy: a session lends the bindings behind a guard (`Nvml`), so every NVML failure
a caller can meet is NvmlError."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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


Field = Literal["driver", "name", "uuid", "brand", "cc", "memory"]


@dataclass(frozen=True)
class Device:
    """One GPU as `listing` read it: a field not asked for, or optional and unanswered, is None."""

    index: int
    handle: Any  # for the caller's own queries (topology's bus id and NUMA node)
    name: str | None
    uuid: str | None
    brand: int | None  # nvmlDeviceGetBrand's enum: the catalog names it (driver_rule)
    cc: str | None  # compute capability, "9.0"
    memory: int | None  # total bytes


@dataclass(frozen=True)
class Listing:
    driver: str | None
    count: int  # GPUs on the host; `devices` holds those of the `indices` asked for
    devices: tuple[Device, ...]


def listing(
    lib: Nvml,
    required: Collection[Field] = (),
    optional: Collection[Field] = (),
    indices: Iterable[int] | None = None,
) -> Listing:
    """The driver and the host's GPUs (those of `indices` that exist; all by default), with
    the fields named. A `required` field NVML cannot give is NvmlError, for the caller's
    policy (refuse, or nothing known); an `optional` one reads as None (`query`). The GPU
    count and handles are always required."""

    def read(field: Field, function: str, convert: Callable[[Any], Any], *args: Any) -> Any:
        if field in required:
            value = getattr(lib, function)(*args)
        else:
            value = query(lib, function, *args) if field in optional else None
        return None if value is None else convert(value)

    driver = read("driver", "nvmlSystemGetDriverVersion", text)
    count = int(lib.nvmlDeviceGetCount())
    devices = []
    for index in range(count) if indices is None else [i for i in indices if 0 <= i < count]:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        devices.append(
            Device(
                index,
                handle,
                name=read("name", "nvmlDeviceGetName", text, handle),
                uuid=read("uuid", "nvmlDeviceGetUUID", text, handle),
                brand=read("brand", "nvmlDeviceGetBrand", lambda brand: brand, handle),
                cc=read("cc", "nvmlDeviceGetCudaComputeCapability", "{0[0]}.{0[1]}".format, handle),
                memory=read("memory", "nvmlDeviceGetMemoryInfo", lambda m: int(m.total), handle),
            )
        )
    return Listing(driver, count, tuple(devices))


def text(value: object) -> str:
    """An NVML string: bytes from older bindings, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


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
