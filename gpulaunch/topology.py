"""GPUs, NUMA nodes and cpusets, and the per-rank CPU binding plan built from them.

Discovery keys every GPU by its PCI bus id, never by an index alone: NVML and CUDA
indices shift with `CUDA_VISIBLE_DEVICES` and `--gpus`, bus ids do not. The plan maps
local rank *i* to the *i*-th selected GPU, carries that GPU's bus id for the record,
and is applied inside the container by `gpulaunch/numa_bind.py` (which must stay a
stdlib-only script because it runs with the image's Python, not ours).

Only the standard library is imported here; `pynvml` loads inside `discover()`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulaunch.errors import TopologyError

SYSFS_ROOT_ENV = "GPULAUNCH_SYSFS_ROOT"
PLAN_ENV = "GPULAUNCH_NUMA_PLAN"
PLAN_VERSION = 1
MODES = ("off", "node", "socket", "auto")

_NVIDIA_VENDOR = 0x10DE
_GPU_CLASSES = (0x0300, 0x0302)  # VGA compatible controller, 3D controller
_BUS_ID_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


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


@dataclass(frozen=True)
class RankBinding:
    rank: int
    gpu: str  # bus id
    numa_node: int | None
    cpus: tuple[int, ...]
    mems: tuple[int, ...]


@dataclass(frozen=True)
class NumaPlan:
    mode: str
    ranks: tuple[RankBinding, ...]
    notes: tuple[str, ...]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "rank": r.rank,
                "gpu": r.gpu,
                "numa_node": r.numa_node,
                "cpus": list(r.cpus),
                "mems": list(r.mems),
            }
            for r in self.ranks
        ]

    def to_env(self) -> dict[str, str]:
        """The one variable `numa_bind.py` reads; empty when there is nothing to bind."""
        if not self.ranks:
            return {}
        doc = {"version": PLAN_VERSION, "mode": self.mode, "ranks": self.to_json()}
        return {PLAN_ENV: json.dumps(doc, separators=(",", ":"))}

    def describe(self) -> list[str]:
        """One human line per rank, for `--dry-run` style output."""
        return [
            f"rank {r.rank}: GPU {r.gpu} (NUMA node {_or_unknown(r.numa_node)}) -> "
            f"CPUs {format_cpulist(r.cpus)}, memory nodes {format_cpulist(r.mems) or '-'}"
            for r in self.ranks
        ]


# --------------------------------------------------------------------------- cpulists


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


def _parse_cpumask(text: str) -> frozenset[int]:
    """Parse a hex mask like sysfs `local_cpus` ("ffff,00000000"), lowest CPU = lowest bit."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def current_allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (honours cpusets, unlike os.cpu_count())."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset(range(os.cpu_count() or 1))  # pragma: no cover - non-Linux


def normalize_bus_id(text: str) -> str:
    """ "00000000:3B:00.0" (NVML), "3b:00.0" or "0000:3b:00.0" -> "0000:3b:00.0" (sysfs)."""
    m = _BUS_ID_RE.match(text.strip().lower())
    if m is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"


# --------------------------------------------------------------------------- discovery


def discover(env: Mapping[str, str] | None = None) -> Topology:
    """Find GPUs and NUMA layout: fixture sysfs if `GPULAUNCH_SYSFS_ROOT`, else NVML, else /sys.

    Never raises for a machine without GPUs or without NUMA information; the
    result then has `gpus=()` and/or empty `nodes`, and planning decides.
    """
    env = os.environ if env is None else env
    root = env.get(SYSFS_ROOT_ENV)
    if root:
        return _discover_sysfs(Path(root))
    from gpulaunch import nvml

    with nvml.session(env) as lib:
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
    found.sort(key=lambda g: _bus_sort_key(g[0]))
    gpus = tuple(
        Gpu(index=i, bus_id=b, uuid=None, name=None, numa_node=n, local_cpus=c)
        for i, (b, n, c) in enumerate(found)
    )
    return Topology(gpus=gpus, nodes=nodes, sockets=sockets, source="sysfs")


def _discover_nvml(nvml: Any, sysfs: Path) -> Topology:
    """GPUs (index, UUID, name, bus id) from NVML; NUMA facts from sysfs keyed by bus id.

    sysfs wins for `numa_node`/`local_cpus` because it is what the kernel allocates
    by; NVML's own answers are used only when sysfs lacks the device (NVML's NUMA
    id can be a GPU-memory node on coherent systems, which planning handles).
    """
    nodes = _read_nodes(sysfs / "devices" / "system" / "node")
    sockets = _read_sockets(sysfs / "devices" / "system" / "cpu")
    gpus: list[Gpu] = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        bus_id = normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        dev = sysfs / "bus" / "pci" / "devices" / bus_id
        numa_node = _read_numa_node(dev) if (dev / "numa_node").is_file() else None
        if numa_node is None:
            nvml_node = _call(nvml.nvmlDeviceGetNumaNodeId, handle)
            numa_node = nvml_node if isinstance(nvml_node, int) and nvml_node >= 0 else None
        local_cpus = _read_local_cpus(dev)
        if not local_cpus:
            local_cpus = _nvml_cpu_affinity(nvml, handle)
        uuid = _call(nvml.nvmlDeviceGetUUID, handle)
        name = _call(nvml.nvmlDeviceGetName, handle)
        gpus.append(
            Gpu(
                index=index,
                bus_id=bus_id,
                uuid=_text(uuid) if uuid is not None else None,
                name=_text(name) if name is not None else None,
                numa_node=numa_node,
                local_cpus=local_cpus,
            )
        )
    return Topology(gpus=tuple(gpus), nodes=nodes, sockets=sockets, source="nvml")


def _nvml_cpu_affinity(nvml: Any, handle: Any) -> frozenset[int]:
    """nvmlDeviceGetCpuAffinity: array of 64-bit words, bit k of word i = CPU 64*i + k."""
    words = max(1, -(-(os.cpu_count() or 1) // 64))
    mask = _call(nvml.nvmlDeviceGetCpuAffinity, handle, words)
    if mask is None:
        return frozenset()
    return frozenset(
        64 * i + bit for i, word in enumerate(mask) for bit in range(64) if int(word) >> bit & 1
    )


def _call(fn: Any, *args: Any) -> Any:
    """Call an optional NVML function; old drivers lack some, so failures read as unknown."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        return _parse_cpumask(text) if text is not None else frozenset()
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


def _bus_sort_key(bus_id: str) -> tuple[int, ...]:
    domain, bus, rest = bus_id.split(":")
    dev, fn = rest.split(".")
    return (int(domain, 16), int(bus, 16), int(dev, 16), int(fn))


# --------------------------------------------------------------------------- selection


def select_gpus(topo: Topology, selection: str | int) -> tuple[Gpu, ...]:
    """Resolve a user's GPU selection; the returned order is the local-rank order.

    int N -> the first N GPUs; "all"; or a comma list mixing indices ("0,2"),
    UUIDs ("GPU-…") and bus ids (any of NVML's, sysfs' or the short "3b:00.0" form).
    A bare digit string is a list of one index, not a count.
    """
    if isinstance(selection, bool) or not isinstance(selection, int | str):
        raise TopologyError(f"GPU selection {selection!r}: expected a count, 'all' or a list")
    if isinstance(selection, int):
        if selection < 0:
            raise TopologyError(f"GPU selection {selection}: count cannot be negative")
        if selection > len(topo.gpus):
            raise TopologyError(
                f"GPU selection {selection}: asked for {selection} GPUs, {_available(topo)}"
            )
        return topo.gpus[:selection]
    text = selection.strip()
    if text.lower() == "all":
        return topo.gpus
    chosen: list[Gpu] = []
    for token in (t.strip() for t in text.split(",")):
        gpu = _match_one(topo, token, selection)
        if gpu in chosen:
            raise TopologyError(f"GPU selection {selection!r}: {token!r} names a GPU twice")
        chosen.append(gpu)
    return tuple(chosen)


def _match_one(topo: Topology, token: str, selection: str) -> Gpu:
    if not token:
        raise TopologyError(f"GPU selection {selection!r}: empty item")
    if token.isdigit():
        hits = [g for g in topo.gpus if g.index == int(token)]
        what = f"no GPU with index {token}"
    elif token.upper().startswith(("GPU-", "MIG-")):
        hits = [g for g in topo.gpus if g.uuid is not None and g.uuid.lower() == token.lower()]
        what = f"no GPU with UUID {token}"
        if not any(g.uuid for g in topo.gpus):
            what += " (UUIDs need NVML: install nvidia-ml-py)"
    else:
        try:
            bus_id = normalize_bus_id(token)
        except ValueError:
            raise TopologyError(
                f"GPU selection {selection!r}: {token!r} is not an index, UUID or PCI bus id"
            ) from None
        hits = [g for g in topo.gpus if g.bus_id == bus_id]
        what = f"no GPU at bus id {token}"
    if not hits:
        raise TopologyError(f"GPU selection {selection!r}: {what}; {_available(topo)}")
    return hits[0]


def _available(topo: Topology) -> str:
    if not topo.gpus:
        return f"no GPUs found (source: {topo.source})"
    listed = ", ".join(
        f"{g.index}={g.bus_id}" + (f" {g.uuid}" if g.uuid else "") for g in topo.gpus
    )
    return f"available GPUs: {listed}"


# --------------------------------------------------------------------------- planning


def plan_numa(
    topo: Topology,
    gpus: Sequence[Gpu],
    mode: str,
    allowed_cpus: frozenset[int] | None = None,
) -> NumaPlan:
    """Bind local rank i to CPUs near gpus[i].

    "node": the CPUs of the GPU's NUMA node; "socket": every CPU on the package(s)
    holding them; "auto": like "node", but turns itself off (with a note) when the
    machine reports no topology. A GPU whose node has no CPUs (GPU memory on
    GH200-class systems) or is unknown falls back to its PCI `local_cpulist`, then
    to the only socket, else that rank runs unbound; each fallback leaves a note.
    `allowed_cpus` (the container's cpuset) is intersected in, and a rank that
    would end up with no CPUs gets all allowed CPUs rather than an empty mask.
    """
    if mode not in MODES:
        raise TopologyError(f"NUMA mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "off" or not gpus:
        return NumaPlan(mode=mode, ranks=(), notes=())
    if _topology_unknown(topo, gpus):
        if mode == "auto":
            return NumaPlan(
                mode="off",
                ranks=(),
                notes=(f"no NUMA topology found (source: {topo.source}); CPU binding off",),
            )
        raise TopologyError(
            f"NUMA mode {mode!r}: no NUMA topology found (source: {topo.source})",
            hint="use --numa auto or --numa off",
        )
    notes: list[str] = []
    ranks: list[RankBinding] = []
    for rank, gpu in enumerate(gpus):
        node = _effective_node(topo, gpu)
        cpus = _rank_cpus(topo, gpu, node, mode, notes, f"rank {rank} (GPU {gpu.bus_id})")
        if not cpus:
            continue
        if allowed_cpus is not None:
            inside = cpus & allowed_cpus
            if not inside and allowed_cpus:
                notes.append(
                    f"rank {rank} (GPU {gpu.bus_id}): CPUs {format_cpulist(cpus)} are outside "
                    f"the allowed CPUs {format_cpulist(allowed_cpus)}; using all allowed CPUs"
                )
                inside = allowed_cpus
            cpus = inside
        if not cpus:
            continue
        mems = tuple(n for n, node_cpus in sorted(topo.nodes.items()) if node_cpus & cpus)
        ranks.append(
            RankBinding(
                rank=rank,
                gpu=gpu.bus_id,
                numa_node=gpu.numa_node if gpu.numa_node is not None else node,
                cpus=tuple(sorted(cpus)),
                mems=mems,
            )
        )
    return NumaPlan(mode=mode, ranks=tuple(ranks), notes=tuple(notes))


def _topology_unknown(topo: Topology, gpus: Sequence[Gpu]) -> bool:
    if topo.source == "none":
        return True
    has_node_cpus = any(topo.nodes.values())
    return not has_node_cpus and not any(g.local_cpus for g in gpus)


def _effective_node(topo: Topology, gpu: Gpu) -> int | None:
    """The GPU's node; a GPU reporting -1 on a single-node machine is on that node."""
    if gpu.numa_node is not None:
        return gpu.numa_node
    if len(topo.nodes) == 1:
        return next(iter(topo.nodes))
    return None


def _rank_cpus(
    topo: Topology, gpu: Gpu, node: int | None, mode: str, notes: list[str], who: str
) -> frozenset[int]:
    node_cpus = topo.nodes.get(node, frozenset()) if node is not None else frozenset()
    if mode == "socket":
        base = node_cpus or gpu.local_cpus
        packages = [cpus for cpus in topo.sockets.values() if cpus & base]
        if packages:
            if not node_cpus:
                notes.append(
                    f"{who}: NUMA node {_or_unknown(node)} has no CPUs; "
                    "using the socket of its PCI local CPUs"
                )
            return frozenset().union(*packages)
        if base:
            notes.append(f"{who}: socket layout unknown; binding to its NUMA node CPUs")
    if node_cpus:
        return node_cpus
    why = (
        "has no NUMA node"
        if node is None
        else f"is on NUMA node {node}, which has no CPUs (memory-only)"
        if node in topo.nodes
        else f"is on NUMA node {node}, which sysfs does not list"
    )
    if gpu.local_cpus:
        notes.append(f"{who} {why}; using its PCI local CPUs {format_cpulist(gpu.local_cpus)}")
        return gpu.local_cpus
    if len(topo.sockets) == 1:
        only = next(iter(topo.sockets.values()))
        notes.append(f"{who} {why}; using the only socket's CPUs {format_cpulist(only)}")
        return only
    notes.append(f"{who} {why} and no local CPUs; this rank runs unbound")
    return frozenset()


def numa_bind_script() -> Path:
    """The wrapper to copy or mount into the container (`python numa_bind.py train.py …`)."""
    return Path(__file__).with_name("numa_bind.py")


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else str(value)
