"""CPU lists (`0-3,8-11`): parsing with a cap at the host's possible CPUs, formatting, and
the CPUs this process may run on. Shared by the config's `cpuset_cpus` check and the NUMA
plan, so it sits with the other shared modules at the bottom of the package.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def parse_cpulist(text: str, limit: int | None = None) -> frozenset[int]:
    """Parse the kernel's list format ("0-3,8-11,16"); blank means no CPUs.

    `limit` (the host's possible CPU count) refuses CPU numbers at or above it before any
    range is expanded, so "0-999999999" is an error, not a MemoryError.
    Raises ValueError (not a gpulaunch error) so config validators can wrap it.
    """
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        lo, hi = lo.strip(), hi.strip()
        if not (_ascii_digits(lo) and (not sep or _ascii_digits(hi))):
            raise ValueError(f"invalid CPU list {text.strip()!r}: bad item {part!r}")
        first = int(lo)
        last = int(hi) if sep else first
        if last < first:
            raise ValueError(f"invalid CPU list {text.strip()!r}: bad range {part!r}")
        if limit is not None and last >= limit:
            raise ValueError(
                f"invalid CPU list {text.strip()!r}: CPU {last} does not exist "
                f"(this host has CPUs 0-{limit - 1})"
            )
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def _ascii_digits(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()


def possible_cpus(sysfs: Path = Path("/sys/devices/system/cpu/possible")) -> int:
    """How many CPU numbers this host can ever have (the kernel's `possible` mask)."""
    try:
        text = sysfs.read_text(encoding="ascii")
        return max(parse_cpulist(text)) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


def format_cpulist(cpus: Iterable[int]) -> str:
    """Compact ranges in the kernel's style: [0, 1, 2, 3, 8] -> "0-3,8"."""
    items = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        parts.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpumask(text: str) -> frozenset[int]:
    """Parse a hex mask like sysfs `local_cpus` ("ffff,00000000"), lowest CPU = lowest bit."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def current_allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (honours cpusets, unlike os.cpu_count())."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))  # pragma: no cover - non-Linux
