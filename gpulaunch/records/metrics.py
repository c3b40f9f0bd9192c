"""Live GPU metrics of an attached run, from NVML, in a background thread.

Every `interval` seconds the sampler reads, per GPU of the job, utilisation, memory used /
total and power; it keeps the peak memory, the mean utilisation and the energy (power
integrated over time, trapezoids) for the run record, and hands each sample to `on_sample`
(the CLI's status line). A query the driver does not support (power on some boards) leaves that
metric out; no NVML means no sampler at all. The thread measures its own CPU time, so the cost
of sampling is shown, not assumed (bench/sampler_bench.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulaunch.engine.nvml import NvmlError, query, session

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuSample:
    index: int
    utilization: int | None  # percent
    memory_used: int | None  # bytes
    memory_total: int | None
    power_w: float | None


@dataclass
class _Stats:
    samples: int = 0
    util_sum: int = 0
    util_n: int = 0
    peak_memory: int | None = None
    memory_total: int | None = None
    peak_power: float | None = None
    energy_j: float = 0.0
    last: tuple[float, float] | None = None  # (time, power) of the previous sample

    def add(self, sample: GpuSample, now: float) -> None:
        self.samples += 1
        if sample.utilization is not None:
            self.util_sum += sample.utilization
            self.util_n += 1
        if sample.memory_used is not None:
            self.peak_memory = max(self.peak_memory or 0, sample.memory_used)
        if sample.memory_total is not None:
            self.memory_total = sample.memory_total
        if sample.power_w is not None:
            self.peak_power = max(self.peak_power or 0.0, sample.power_w)
            if self.last is not None:
                then, power = self.last
                self.energy_j += (now - then) * (power + sample.power_w) / 2
            self.last = (now, sample.power_w)


def _query(nvml: Any, index: int) -> GpuSample:
    """One GPU's numbers; a query the board refuses is None, not an error."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    util, memory, power = (
        query(nvml, "nvmlDeviceGetUtilizationRates", handle),
        query(nvml, "nvmlDeviceGetMemoryInfo", handle),
        query(nvml, "nvmlDeviceGetPowerUsage", handle),
    )
    return GpuSample(
        index=index,
        utilization=None if util is None else int(util.gpu),
        memory_used=None if memory is None else int(memory.used),
        memory_total=None if memory is None else int(memory.total),
        power_w=None if power is None else int(power) / 1000.0,  # milliwatts
    )


@dataclass
class Sampler:
    """Samples `indices` every `interval` s in a daemon thread between start() and stop()."""

    env: Mapping[str, str]
    indices: list[int]
    interval: float = 2.0
    on_sample: Callable[[list[GpuSample]], None] | None = None
    clock: Callable[[], float] = time.monotonic
    stats: dict[int, _Stats] = field(default_factory=dict)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self, nvml: Any) -> list[GpuSample]:
        """One round over the GPUs, added to the statistics (the thread calls this)."""
        now = self.clock()
        samples = [_query(nvml, index) for index in self.indices]
        for sample in samples:
            self.stats.setdefault(sample.index, _Stats()).add(sample, now)
        return samples

    def _run(self) -> None:
        started_cpu, started = time.thread_time(), time.monotonic()
        try:
            with session(self.env) as nvml:
                if nvml is None:
                    return
                while True:
                    samples = self.sample(nvml)
                    if self.on_sample is not None:
                        self.on_sample(samples)
                    if self._stop.wait(self.interval):
                        break
        except NvmlError:
            return  # metrics are a convenience: a failing driver never fails the job
        finally:
            self.cpu_s = time.thread_time() - started_cpu
            self.wall_s = time.monotonic() - started

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpulaunch-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling; the record's summary, or None when nothing was sampled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)
        return self.summary()

    def summary(self) -> dict[str, Any] | None:
        if not self.stats:
            return None
        gpus = [
            {
                "index": index,
                "samples": stats.samples,
                "mean_utilization_pct": (
                    round(stats.util_sum / stats.util_n, 1) if stats.util_n else None
                ),
                "peak_memory_mib": _mib(stats.peak_memory),
                "memory_total_mib": _mib(stats.memory_total),
                "peak_power_w": stats.peak_power,
                "energy_wh": None if stats.last is None else round(stats.energy_j / 3600, 4),
            }
            for index, stats in sorted(self.stats.items())
        ]
        return {
            "interval_s": self.interval,
            "sampler_cpu_s": round(self.cpu_s, 4),
            "sampler_wall_s": round(self.wall_s, 2),
            "gpus": gpus,
        }


def _mib(size: int | None) -> int | None:
    return None if size is None else round(size / MIB)


def status_text(samples: list[GpuSample]) -> str:
    """`GPU0 87% 40.1/80.0 GiB 310 W | GPU1 …` for the status line."""
    parts = []
    for s in samples:
        util = "-" if s.utilization is None else f"{s.utilization}%"
        if s.memory_used is None or s.memory_total is None:
            memory = "-"
        else:
            memory = f"{s.memory_used / 1024**3:.1f}/{s.memory_total / 1024**3:.1f} GiB"
        power = "" if s.power_w is None else f" {s.power_w:.0f} W"
        parts.append(f"GPU{s.index} {util} {memory}{power}")
    return " | ".join(parts)
