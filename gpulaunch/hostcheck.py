"""Refuse a CUDA/driver or GPU-architecture mismatch before building or starting anything.

Uses NVML (nvidia-ml-py) when it is installed and a driver answers; otherwise nothing is
known about the host and nothing is refused. The answer names both sides and what would fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpulaunch import nvml
from gpulaunch.catalog import ResolvedImage, driver_satisfies, gpu_compute_capability, matrix
from gpulaunch.catalog import supports_arch as _supports_arch
from gpulaunch.errors import ConfigError


@dataclass(frozen=True)
class HostGpus:
    driver: str | None
    names: tuple[str, ...]


def probe(env: Mapping[str, str]) -> HostGpus | None:
    """Driver version and GPU names from NVML; None when NVML is absent, refuses a query, or
    a fixture is used. Bindings that lack a function raise (AttributeError), never pass."""
    try:
        with nvml.session(env) as lib:
            if lib is None:
                return None
            driver = _text(lib.nvmlSystemGetDriverVersion())
            count = lib.nvmlDeviceGetCount()
            handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            return HostGpus(driver, tuple(_text(lib.nvmlDeviceGetName(h)) for h in handles))
    except nvml.NvmlError:
        # the driver refused a query: nothing is known; the dry-run's `gpus:` line says the
        # GPUs were not validated (topology discovery meets the same refusal)
        return None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check(resolved: ResolvedImage, host: HostGpus, selected: Sequence[int] | None = None) -> None:
    """ConfigError when the host's driver or GPUs cannot run the resolved image."""
    if resolved.cuda and host.driver and not driver_satisfies(host.driver, resolved.cuda):
        fits = _variants_for_driver(resolved, host.driver)
        alternatives = f"; with this driver use: {', '.join(fits)}" if fits else ""
        raise ConfigError(
            f"image.cuda: CUDA {resolved.cuda} needs driver >= {resolved.min_driver}; "
            f"this host has {host.driver}{alternatives}"
        )
    names = host.names if selected is None else [host.names[i] for i in selected]
    for name in dict.fromkeys(names):
        cc = gpu_compute_capability(name)
        if cc and not _supports_arch(resolved, cc):
            archs = " ".join(resolved.cuda_archs) or "its toolkit"
            raise ConfigError(
                f"image.cuda: {name} (compute capability {cc}) is not supported by the "
                f"{resolved.torch_variant or resolved.cuda} build (archs: {archs})"
            )


def _variants_for_driver(resolved: ResolvedImage, driver: str) -> list[str]:
    if not resolved.torch:
        return []
    rows = matrix(resolved.torch)
    return [
        f"cuda {row.cuda} ({row.variant})"
        for row in rows
        if row.cuda and driver_satisfies(driver, row.cuda)
    ]
