"""A target-neutral description of one multi-node job, from the same config, profile and
flags as `gpulaunch run`: image, torchrun argv, nodes x processes, env, /dev/shm, node
selection. The Kubernetes and Slurm renderers only change the wrapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from gpulaunch.engine.runspec import WORKSPACE
from gpulaunch.errors import ConfigError
from gpulaunch.gpurequest import GpuRequest
from gpulaunch.launch.options import RunOptions
from gpulaunch.textcheck import dns_1035, single_line
from gpulaunch.textcheck import docker_size as check_size

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig

RDZV_PORT = 29500


@dataclass
class ExportOptions(RunOptions):
    """`run`'s flags as export takes them (SCRIPT required; --gpus and --nproc per node; of the
    rest only --image, --profile, --nccl, --precision, --env and --restarts), and the two a
    cluster job adds. --nodes is not run's --nnodes: that one unset means no rendezvous."""

    script: str
    nodes: int = 1
    name: str | None = None  # Job, Service and Slurm job name; default: from the project name


@dataclass(frozen=True)
class ExportSpec:
    name: str  # a DNS-1035 label: Job, Service and Slurm job name
    image: str
    script: str  # path inside the image (/workspace/...)
    args: tuple[str, ...]
    rel_script: str  # relative to the project (host mode)
    nodes: int
    gpus: int  # per node
    nproc: int  # per node
    env: dict[str, str]
    shm: str | None  # Kubernetes quantity for the /dev/shm emptyDir, None = unbounded
    memory: str | None  # docker.memory as docker writes it ("64g"): the container's limit
    host_network: bool
    cap_add: tuple[str, ...]
    node_selector: dict[str, str]
    node_affinity: dict[str, list[str]]
    checkpoint_pvc: str | None
    restarts: int
    warnings: tuple[str, ...] = ()
    profile_flags: tuple[str, ...] = ()  # for `gpulaunch run` on the node (Slurm, none mode)


def docker_size(size: str, field: str) -> tuple[int, str]:
    """textcheck.docker_size, its refusal naming `field`."""
    try:
        return check_size(size)
    except ValueError as err:
        raise ConfigError(f"{field}: {err}") from None


def k8s_quantity(size: str, field: str = "docker.shm_size") -> str:
    """docker's 16g (GiB) as Kubernetes' 16Gi."""
    number, unit = docker_size(size, field)
    return str(number) + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def slurm_memory(size: str) -> str:
    """docker's 64g as sbatch's --mem=64G (Slurm has no bytes: rounded up to MiB)."""
    number, unit = docker_size(size, "docker.memory")
    if not unit:
        return f"{max(1, -(-number // 2**20))}M"
    return f"{number}{unit.upper()}"


def default_name(config_name: str) -> str:
    """The project name as a DNS-1035 label (a Service name starts with a letter) short
    enough for `NAME-node-0-0` hostnames: `2024-llm` becomes `job-2024-llm`."""
    name = re.sub(r"[^a-z0-9-]+", "-", config_name.lower()).strip("-")
    if name and not name[0].isalpha():
        name = f"job-{name}"
    return (name[:40].rstrip("-")) or "gpulaunch"


def per_node_gpus(flag: str | None, configured: int | str) -> int:
    request = GpuRequest(configured) if flag is None else GpuRequest.parse(flag, "--gpus")
    count = request.count(None)
    if count is None:
        raise ConfigError('--gpus: give a count per node for a cluster ("all" is per machine)')
    return count


def build_spec(
    config: ProjectConfig, project: Path, cwd: Path, opts: ExportOptions, image: str
) -> ExportSpec:
    """Validate flags and resolve the profile into one ExportSpec (writes nothing)."""
    from gpulaunch.launch.flags import MAX_NODES
    from gpulaunch.launch.plan import CHECKPOINT_ENV, CHECKPOINTS
    from gpulaunch.launch.profiles import resolve_launch

    if not 1 <= opts.nodes <= MAX_NODES:
        raise ConfigError(f"--nodes: {opts.nodes} is not between 1 and {MAX_NODES}")
    if not 0 <= opts.restarts <= 1000:
        raise ConfigError(f"--restarts: {opts.restarts} is not between 0 and 1000")
    name = opts.name or default_name(config.name)
    try:
        dns_1035(name, 40)
    except ValueError as err:
        raise ConfigError(f"--name: {err}") from None
    gpus = per_node_gpus(opts.gpus, config.launch.gpus)
    nproc = opts.nproc or config.launch.nproc or max(gpus, 1)
    script = _script_in_image(opts.script, project, cwd)
    for arg in opts.args:
        try:
            single_line(arg)
        except ValueError as err:
            raise ConfigError(f"ARGS: {arg!r} {err}") from None
    # NUMA binding is the node's kubelet / Slurm's job (documented)
    launch = resolve_launch(config, replace(opts, numa="off"))
    docker = {key: item.value for key, item in launch.docker.items()}
    shm = k8s_quantity(str(docker["shm_size"])) if docker.get("shm_size") else None
    memory = str(docker["memory"]) if docker.get("memory") else None
    if memory is not None:
        docker_size(memory, "docker.memory")  # refused here, before any manifest is drawn
    env = launch.env_values()
    if config.launch.checkpoint_pvc:
        env[CHECKPOINT_ENV] = CHECKPOINTS
    given = [("--profile", opts.profile), ("--nccl", opts.nccl), ("--precision", opts.precision)]
    flags = [word for flag, value in given if value for word in (flag, value)]
    flags += [word for item in opts.env for word in ("--env", item)]
    return ExportSpec(
        name=name,
        image=image,
        script=str(PurePosixPath(WORKSPACE) / script),
        args=tuple(opts.args),
        rel_script=script,
        nodes=opts.nodes,
        gpus=gpus,
        nproc=nproc,
        env=env,
        shm=shm,
        memory=memory,
        host_network=docker.get("network") == "host",
        cap_add=_pod_caps(docker.get("cap_add") or []),
        node_selector=dict(config.launch.node_selector),
        node_affinity={k: list(v) for k, v in config.launch.node_affinity.items()},
        checkpoint_pvc=config.launch.checkpoint_pvc,
        restarts=opts.restarts,
        warnings=launch.warnings,
        profile_flags=tuple(flags),
    )


def _script_in_image(script: str, project: Path, cwd: Path) -> str:
    """SCRIPT as a path relative to the project (the image holds it under /workspace)."""
    from gpulaunch.launch.flags import project_script

    try:
        single_line(script)
    except ValueError as err:
        raise ConfigError(f"SCRIPT: {script!r} {err}") from None
    return project_script(script, project, cwd, "SCRIPT")[1]


def _pod_caps(caps: list[str]) -> tuple[str, ...]:
    """Capabilities for the pod. SYS_NICE serves the local NUMA wrapper only (NUMA binding on
    a cluster is the kubelet's or Slurm's job), and Pod Security `baseline` refuses it."""
    names = {str(cap).removeprefix("CAP_") for cap in caps}
    return tuple(sorted(names - {"SYS_NICE"}))
