"""The `run` use case: prepare the image, turn config + flags into a RunPlan, launch it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.build import BuildOptions, PreparedBuild, prepare_build
from gpulaunch.engine import Builder
from gpulaunch.errors import ConfigError
from gpulaunch.launch import (
    WORKSPACE,
    Mount,
    RunPlan,
    base_labels,
    gpu_count,
    new_run_id,
    parse_env_flags,
    parse_gpus_flag,
    parse_mount,
    script_command,
)

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig


@dataclass
class RunOptions:
    script: str | None = None
    args: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # after `--`: run as-is
    gpus: str | None = None
    nproc: int | None = None
    env: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    network: str | None = None
    detach: bool = False


def host_gpu_count() -> int | None:
    """GPUs of the engine's host when we can know them, else None (no validation).

    Counted from NVML, or from a fixture tree when GPULAUNCH_SYSFS_ROOT is set. Plain sysfs
    without a driver is not trusted, and a remote DOCKER_HOST is not this machine.
    """
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    from gpulaunch.topology import discover

    try:
        topo = discover()
    except Exception:
        return None
    if topo.source == "nvml" or os.environ.get("GPULAUNCH_SYSFS_ROOT"):
        return len(topo.gpus)
    return None


def plan_run(
    config: ProjectConfig,
    project: Path,
    cwd: Path,
    opts: RunOptions,
    image: str,
    host_gpus: int | None,
) -> RunPlan:
    gpus = parse_gpus_flag(opts.gpus, config.launch.gpus)
    count = gpu_count(gpus, host_gpus)
    if host_gpus is not None and count is not None and count > host_gpus:
        raise ConfigError(f"--gpus: asked for {count} GPUs; this host has {host_gpus}")
    if isinstance(gpus, str) and gpus != "all" and host_gpus is not None:
        for item in gpus.split(","):
            if item.isdigit() and int(item) >= host_gpus:
                raise ConfigError(f"--gpus: GPU {item} does not exist; this host has {host_gpus}")
    nproc = opts.nproc or config.launch.nproc or (count if count and count > 0 else 1)
    if opts.script and opts.command:
        raise ConfigError("run: give either SCRIPT [ARGS] or -- COMMAND, not both")
    if opts.script:
        command = script_command(opts.script, opts.args, project, cwd, nproc, None)
    elif opts.command:
        command = list(opts.command)
    else:
        raise ConfigError("run: missing SCRIPT (or -- COMMAND ...)")
    if gpus == "all" and count is None and command[0] == "torchrun" and not opts.nproc:
        command[command.index("--nproc-per-node") + 1] = "gpu"

    env = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **config.launch.env}
    env.update(parse_env_flags(opts.env))
    mounts = [Mount(str(project), WORKSPACE)]
    for i, spec in enumerate(config.launch.mounts):
        mounts.append(parse_mount(spec, project, f"launch.mounts[{i}]"))
    for spec in opts.mounts:
        mounts.append(parse_mount(spec, project, "--mount"))
    targets = [m.target for m in mounts]
    if len(set(targets)) != len(targets):
        raise ConfigError("--mount: two mounts share the same container path")

    run_id = new_run_id()
    network = opts.network or config.launch.network
    return RunPlan(
        image=image,
        name=f"gl-{config.name.replace('/', '-')}-{run_id}",
        command=command,
        env=env,
        mounts=mounts,
        user=f"{os.getuid()}:{os.getgid()}",
        gpus=gpus,
        labels=base_labels(config.name, run_id),
        network=None if network == "default" else network,
        nproc=nproc,
    )


def prepare_image(
    config: ProjectConfig, project: Path, builder: Builder, network: str | None, write: bool
) -> PreparedBuild:
    return prepare_build(config, project, builder, BuildOptions(network=network), write=write)


def dry_run_json(prepared: PreparedBuild, plan: RunPlan) -> dict[str, Any]:
    return {
        "image": {
            "tag": prepared.tag,
            "builder": prepared.plan.builder,
            "build_args": prepared.request.build_args,
            "network": prepared.request.network,
            "base_image": prepared.plan.resolved.base_image,
        },
        "run": plan.to_json(),
    }
