"""What `run` was asked for: one type, RunOptions, with one field per flag. The flag each
field stands for is in its metadata, and its type is the flag's: run, shell and smoke build
it from their parameters, records store it, and jobs/options.py checks both against it. Kept
apart from the run plan so that what needs only the flags (a record's check, `build`'s
--network) does not load the planner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _flag(flag: str, default: Any = None) -> Any:
    """A RunOptions field that `flag` sets (a list one: field(default_factory=list, ...))."""
    return field(default=default, metadata={"flag": flag})


@dataclass
class RunOptions:
    """What `run` was asked for: one field per flag, named in its metadata["flag"]. The field's
    type is the flag's: jobs/options.py checks a record's `options` against both."""

    script: str | None = _flag("SCRIPT")
    args: list[str] = field(default_factory=list, metadata={"flag": "ARGS"})
    # after `--`: run as-is
    command: list[str] = field(default_factory=list, metadata={"flag": "-- COMMAND"})
    gpus: str | None = _flag("--gpus")
    nproc: int | None = _flag("--nproc")
    env: list[str] = field(default_factory=list, metadata={"flag": "--env"})
    mounts: list[str] = field(default_factory=list, metadata={"flag": "--mount"})
    network: str | None = _flag("--network")
    detach: bool = _flag("--detach", False)
    profile: str | None = _flag("--profile")
    nccl: str | None = _flag("--nccl")
    nccl_ifname: str | None = _flag("--nccl-ifname")
    numa: str | None = _flag("--numa")
    precision: str | None = _flag("--precision")
    expandable_segments: bool | None = _flag("--expandable-segments")
    no_container: bool = _flag("--no-container", False)
    restarts: int = _flag("--restarts", 0)  # torchrun --max-restarts, or gpulaunch restarts
    # multi-node (torchrun c10d rendezvous; host networking implied)
    nnodes: int | None = _flag("--nnodes")
    node_rank: int | None = _flag("--node-rank")
    rdzv_endpoint: str | None = _flag("--rdzv-endpoint")
    rdzv_id: str | None = _flag("--rdzv-id")
    local_addr: str | None = _flag("--local-addr")  # torchrun's: this node's address and name
    image: str | None = _flag("--image")  # a pushed image to run instead of building
    # mounts may expose the key, engine or credentials
    allow_unsafe_mounts: bool = _flag("--allow-unsafe-mounts", False)
