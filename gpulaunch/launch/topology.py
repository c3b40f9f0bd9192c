"""GPU and NUMA discovery: NVML when present, else sysfs (`GPULAUNCH_SYSFS_ROOT` points it at
a fixture tree), plus CPU-list parsing and the process's allowed CPUs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulaunch.cpulist import parse_cpulist, parse_cpumask
from gpulaunch.engine.nvml import SYSFS_ROOT_ENV, Nvml, listing, query, session, text
from gpulaunch.textcheck import normalize_bus_id

_NVIDIA_VENDOR = 0x10DE
_GPU_CLASSES = (0x0300, 0x0302)  # VGA compatible controller, 3D controller


@dataclass(frozen=True)
class Gpu:
    index: int  # enumeration order (sorted by bus id; NVML index when from NVML)
    bus_id: str  # normalized "0000:17:00.0"
    uuid: str | None
    name: str | None
    numa_node: int | None  # None when the kernel reports -1 / unknown
    local_cpus: frozenset[int]


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    nodes: dict[int, frozenset[int]]  # may hold empty sets: memory-only (GPU memory) nodes
    sockets: dict[int, frozenset[int]]  # physical package -> CPUs; {} when unknown
    source: str  # "nvml" | "sysfs" | "none"


def discover(env: Mapping[str, str] | None = None) -> Topology:
    """Find GPUs and NUMA layout: fixture sysfs if `GPULAUNCH_SYSFS_ROOT`, else NVML, else /sys.

    Never raises for a machine without GPUs or without NUMA information; the
    result then has `gpus=()` and/or empty `nodes`, and planning decides.
    """
    env = os.environ if env is None else env
    root = env.get(SYSFS_ROOT_ENV)
    if root:
        return _discover_sysfs(Path(root))
    with session(env) as lib:
        if lib is not None:
            return _discover_nvml(lib, Path("/sys"))
    return _discover_sysfs(Path("/sys"))


def _discover_sysfs(root: Path) -> Topology:
    pci = root / "bus" / "pci" / "devices"
    node_dir = root / "devices" / "system" / "node"
    nodes = _read_nodes(node_dir)
    sockets = _read_sockets(root / "devices" / "system" / "cpu")
    if not pci.is_dir() and not nodes:
        return Topology(gpus=(), nodes={}, sockets=sockets, source="none")
    found: list[tuple[str, int | None, frozenset[int]]] = []
    for dev in sorted(pci.iterdir()) if pci.is_dir() else []:
        if not _is_nvidia_gpu(dev):
            continue
        try:
            bus_id = normalize_bus_id(dev.name)
        except ValueError:
            continue
        found.append((bus_id, _read_numa_node(dev), _read_local_cpus(dev)))
    found.sort(key=lambda g: tuple(int(part, 16) for part in re.split("[:.]", g[0])))
    gpus = tuple(
        Gpu(index=i, bus_id=b, uuid=None, name=None, numa_node=n, local_cpus=c)
        for i, (b, n, c) in enumerate(found)
    )
    return Topology(gpus=gpus, nodes=nodes, sockets=sockets, source="sysfs")


def _discover_nvml(lib: Nvml, sysfs: Path) -> Topology:
    """GPUs (index, UUID, name, bus id) from NVML; NUMA facts from sysfs keyed by bus id.
    A required query NVML cannot answer is NvmlError; the optional ones read as unknown.

    sysfs wins for `numa_node`/`local_cpus` because it is what the kernel allocates
    by; NVML's own answers are used only when sysfs lacks the device (NVML's NUMA
    id can be a GPU-memory node on coherent systems, which planning handles).
    """
    nodes = _read_nodes(sysfs / "devices" / "system" / "node")
    sockets = _read_sockets(sysfs / "devices" / "system" / "cpu")
    gpus: list[Gpu] = []
    for device in listing(lib, optional={"name", "uuid"}).devices:
        handle = device.handle
        bus_id = normalize_bus_id(text(lib.nvmlDeviceGetPciInfo(handle).busId))
        dev = sysfs / "bus" / "pci" / "devices" / bus_id
        numa_node = _read_numa_node(dev)
        if numa_node is None:
            nvml_node = query(lib, "nvmlDeviceGetNumaNodeId", handle)
            numa_node = nvml_node if isinstance(nvml_node, int) and nvml_node >= 0 else None
        local_cpus = _read_local_cpus(dev)
        if not local_cpus:
            local_cpus = _nvml_cpu_affinity(lib, handle)
        gpus.append(
            Gpu(
                index=device.index,
                bus_id=bus_id,
                uuid=device.uuid,
                name=device.name,
                numa_node=numa_node,
                local_cpus=local_cpus,
            )
        )
    return Topology(gpus=tuple(gpus), nodes=nodes, sockets=sockets, source="nvml")


def _nvml_cpu_affinity(lib: Nvml, handle: Any) -> frozenset[int]:
    """nvmlDeviceGetCpuAffinity: array of 64-bit words, bit k of word i = CPU 64*i + k."""
    words = max(1, -(-(os.cpu_count() or 1) // 64))
    mask = query(lib, "nvmlDeviceGetCpuAffinity", handle, words)
    if mask is None:
        return frozenset()
    return frozenset(
        64 * i + bit for i, word in enumerate(mask) for bit in range(64) if int(word) >> bit & 1
    )


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text.strip(), 0) if text is not None else None
    except ValueError:
        return None


def _is_nvidia_gpu(dev: Path) -> bool:
    vendor = _read_int(dev / "vendor")
    pci_class = _read_int(dev / "class")
    return vendor == _NVIDIA_VENDOR and pci_class is not None and pci_class >> 8 in _GPU_CLASSES


def _read_numa_node(dev: Path) -> int | None:
    node = _read_int(dev / "numa_node")
    return node if node is not None and node >= 0 else None


def _read_local_cpus(dev: Path) -> frozenset[int]:
    try:
        text = _read(dev / "local_cpulist")
        if text is not None:
            return parse_cpulist(text)
        text = _read(dev / "local_cpus")
        return parse_cpumask(text) if text is not None else frozenset()
    except ValueError:
        return frozenset()


def _read_nodes(node_dir: Path) -> dict[int, frozenset[int]]:
    nodes: dict[int, frozenset[int]] = {}
    if not node_dir.is_dir():
        return nodes
    for entry in node_dir.iterdir():
        m = re.fullmatch(r"node(\d+)", entry.name)
        text = _read(entry / "cpulist") if m else None
        if m is None or text is None:
            continue
        try:
            nodes[int(m[1])] = parse_cpulist(text)
        except ValueError:
            continue
    return dict(sorted(nodes.items()))


def _read_sockets(cpu_dir: Path) -> dict[int, frozenset[int]]:
    sockets: dict[int, set[int]] = {}
    if not cpu_dir.is_dir():
        return {}
    for entry in cpu_dir.iterdir():
        m = re.fullmatch(r"cpu(\d+)", entry.name)
        if m is None:
            continue
        package = _read_int(entry / "topology" / "physical_package_id")
        if package is not None and package >= 0:  # offline CPUs have no topology/
            sockets.setdefault(package, set()).add(int(m[1]))
    return {p: frozenset(c) for p, c in sorted(sockets.items())}
