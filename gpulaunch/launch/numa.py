"""GPU selection and the per-rank NUMA plan: rank -> GPU -> node -> CPUs, intersected with
the allowed CPUs, with notes where the topology is unknown or a node has no CPUs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpulaunch.cpulist import format_cpulist
from gpulaunch.errors import TopologyError
from gpulaunch.gpurequest import GpuRequest
from gpulaunch.launch.topology import Gpu, Topology
from gpulaunch.textcheck import normalize_bus_id

PLAN_ENV = "GPULAUNCH_NUMA_PLAN"
PLAN_VERSION = 1
MODES = ("off", "node", "socket", "auto")


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
        return [{**asdict(r), "cpus": list(r.cpus), "mems": list(r.mems)} for r in self.ranks]

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


def select_gpus(topo: Topology, request: GpuRequest) -> tuple[Gpu, ...]:
    """The GPUs of this host a request names; the returned order is the local-rank order.

    A count takes the first N; a list may mix indices ("0,2"), UUIDs ("GPU-…") and bus ids
    (any of NVML's, sysfs' or the short "3b:00.0" form).
    """
    shown = repr(request.value)
    if not request.ids:
        count = request.count(len(topo.gpus)) or 0
        if count > len(topo.gpus):
            raise TopologyError(
                f"GPU selection {shown}: asked for {count} GPUs, {_available(topo)}"
            )
        return topo.gpus[:count]
    chosen: list[Gpu] = []
    for token in request.ids:
        gpu = _match_one(topo, token, shown)
        if gpu in chosen:  # parsing cannot know that an index and a UUID are one GPU
            raise TopologyError(f"GPU selection {shown}: {token!r} names a GPU twice")
        chosen.append(gpu)
    return tuple(chosen)


def _match_one(topo: Topology, token: str, shown: str) -> Gpu:
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
                f"GPU selection {shown}: {token!r} is not an index, UUID or PCI bus id"
            ) from None
        hits = [g for g in topo.gpus if g.bus_id == bus_id]
        what = f"no GPU at bus id {token}"
    if not hits:
        raise TopologyError(f"GPU selection {shown}: {what}; {_available(topo)}")
    return hits[0]


def _available(topo: Topology) -> str:
    if not topo.gpus:
        return f"no GPUs found (source: {topo.source})"
    listed = ", ".join(
        f"{g.index}={g.bus_id}" + (f" {g.uuid}" if g.uuid else "") for g in topo.gpus
    )
    return f"available GPUs: {listed}"


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
