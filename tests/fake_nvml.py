"""One fake pynvml for every test: the functions gpulaunch calls, over a list of GPUs.

Install it with the `fake_nvml` fixture (tests/conftest.py), or `install(monkeypatch, fake)`.
Partial failures are scripted: `missing` names functions the bindings lack (AttributeError,
as an old nvidia-ml-py would), `failing` names functions that raise `NVMLError` (as a
driver that does not support a query would).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

H100 = "NVIDIA H100 80GB HBM3"
B200 = "NVIDIA B200"  # compute capability 10.0: not in older CUDA builds
A100 = "NVIDIA A100-SXM4-40GB"


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str
    numa_node: int = 0
    cpu_mask: int = 0b1
    name: str = H100
    nvlinks: list[int] = field(default_factory=list)  # state per link; past the end: error
    brand: int = 2  # nvmlDeviceGetBrand: NVML_BRAND_TESLA (datacenter); 5 GeForce, 14 NVIDIA
    # nvmlDeviceGetCudaComputeCapability, e.g. "12.0"; while no GPU sets one, the fake
    # lacks that function (as older bindings do) and gpulaunch reads the name table
    cc: str | None = None
    # live metrics, one row per `FakeNvml.tick`: (utilisation %, memory used B, total B, mW)
    series: list[tuple[int, int, int, int]] = field(
        default_factory=lambda: [(0, 0, 80 * 1024**3, 70_000)]
    )


def gpus(*names: str) -> list[FakeGpu]:
    """GPUs with the given names on distinct buses not present in this host's sysfs."""
    return [
        FakeGpu(
            f"GPU-{i:08x}-0000-0000-0000-000000000000", f"0000AB01:{0x3B + i:02X}:00.0", 0, 1, n
        )
        for i, n in enumerate(names)
    ]


class NVMLError(Exception):
    """What pynvml raises (its subclasses are named NVMLError_<Reason>)."""


class FakeNvml(types.ModuleType):
    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 4
    NVML_FEATURE_ENABLED = 1

    def __init__(
        self,
        devices: Iterable[FakeGpu] | None = None,
        *,
        driver: str = "550.54.15",
        fail_init: bool = False,
        as_bytes: bool = False,
        missing: Iterable[str] = (),
        failing: Iterable[str] = (),
    ) -> None:
        super().__init__("pynvml")
        self.devices: list[FakeGpu] = list(devices) if devices is not None else two_h100()
        self.driver = driver
        self.fail_init = fail_init
        self.as_bytes = as_bytes
        self.missing = set(missing)
        self.failing = set(failing)
        self.calls: list[str] = []
        self.tick = 0  # which row of each GPU's `series` the metric queries answer

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        if name == "nvmlDeviceGetCudaComputeCapability" and not any(
            gpu.cc for gpu in object.__getattribute__(self, "devices")
        ):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        value = object.__getattribute__(self, name)
        if name.startswith("nvml") and name in object.__getattribute__(self, "failing"):

            def fail(*_args: Any) -> Any:
                raise NVMLError(f"Not Supported ({name})")

            return fail
        return value

    @property
    def shut(self) -> bool:
        return "shutdown" in self.calls

    def _s(self, value: str) -> Any:
        return value.encode() if self.as_bytes else value

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self._s(self.driver)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.devices):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return self._s(self.devices[handle].uuid)

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self._s(self.devices[handle].name)

    def nvmlDeviceGetBrand(self, handle: int) -> int:
        return self.devices[handle].brand

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        cc = self.devices[handle].cc
        if cc is None:
            raise NVMLError("Not Supported")
        major, minor = cc.split(".")
        return int(major), int(minor)

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(busId=self._s(self.devices[handle].bus_id))

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        return self.devices[handle].numa_node

    def nvmlDeviceGetCpuAffinity(self, handle: int, words: int) -> list[int]:
        return [self.devices[handle].cpu_mask] + [0] * (words - 1)

    def _row(self, handle: int) -> tuple[int, int, int, int]:
        series = self.devices[handle].series
        return series[min(self.tick, len(series) - 1)]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return types.SimpleNamespace(gpu=self._row(handle)[0], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        _, used, total, _ = self._row(handle)
        return types.SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._row(handle)[3]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        states = self.devices[handle].nvlinks
        if link >= len(states):
            raise NVMLError("Not Supported")
        return states[link]


def two_h100() -> list[FakeGpu]:
    """Two GPUs whose bus ids are not on this host, one per NUMA node."""
    return [
        FakeGpu("GPU-aaaaaaaa-0000-0000-0000-000000000000", "0000AB01:3B:00.0", 0, 0b0011),
        FakeGpu("GPU-bbbbbbbb-1111-1111-1111-111111111111", "0000AB01:AF:00.0", 1, 0b1100),
    ]


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake
