"""ExportSpec -> an sbatch script (templates/slurm/job.sbatch.j2): one torchrun per node
through srun, c10d rendezvous at the first node, the container through pyxis, apptainer,
docker or podman on the node (many clusters run Podman, often rootless, not Docker: its GPUs
are CDI devices, `--device nvidia.com/gpu=N`, from the node's `nvidia-ctk cdi generate` spec),
or none (`gpulaunch run --no-container` on each node).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpulaunch.errors import ConfigError
from gpulaunch.export.images import parse_ref
from gpulaunch.export.spec import RDZV_PORT, ExportSpec, slurm_memory
from gpulaunch.gpurequest import GpuRequest

CONTAINERS = ("pyxis", "apptainer", "docker", "podman", "none")
_TIME = re.compile(r"(?:[0-9]+-)?[0-9]{1,2}(?::[0-9]{2}){0,2}|[0-9]+")
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Expanded by the batch shell on the first node: the same values for every node.
RDZV = ["--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", "--rdzv-id", "$SLURM_JOB_ID"]


@dataclass(frozen=True)
class SlurmOptions:
    container: str = "docker"
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    cpus: int | None = None
    gpulaunch: str = "gpulaunch"  # the command on the nodes (none mode)
    chdir: str | None = None  # the project folder on the nodes (none mode)


def _word(arg: str) -> str:
    """One shell word: quoted, except the rendezvous variables the batch shell expands."""
    if arg.startswith("$MASTER_ADDR") or arg.startswith("$SLURM_"):
        return f'"{arg}"'
    return shlex.quote(arg)


def torchrun_argv(spec: ExportSpec) -> list[str]:
    return [
        "torchrun",
        "--nnodes",
        str(spec.nodes),
        "--nproc-per-node",
        str(spec.nproc),
        "--rdzv-backend",
        "c10d",
        *RDZV,
        spec.script,
        *spec.args,
    ]


def srun_argv(spec: ExportSpec, opts: SlurmOptions, project: Path) -> list[str]:
    if opts.container == "none":
        argv = [opts.gpulaunch, "run", "--no-container", "--nnodes", str(spec.nodes), *RDZV]
        argv += ["--gpus", str(spec.gpus), "--nproc", str(spec.nproc), *spec.profile_flags]
        return [*argv, spec.rel_script, "--", *spec.args]
    if opts.container == "pyxis":
        ref = parse_ref(spec.image, "image")
        # enroot names a registry's image REGISTRY#PATH (a registry host holds no slash)
        enroot = str(ref).replace("/", "#", 1) if ref.registry else str(ref)
        return [
            f"--container-image={enroot}",
            "--container-workdir=/workspace",
            *torchrun_argv(spec),
        ]
    if opts.container == "apptainer":
        nv = ["--nv"] if spec.gpus else []
        return [
            "apptainer",
            "exec",
            *nv,
            "--pwd",
            "/workspace",
            f"docker://{spec.image}",
            *torchrun_argv(spec),
        ]
    engine = opts.container  # docker or podman: the same line, GPUs each engine's way
    argv = [engine, "run", "--rm", "--init", "--network", "host", "--ipc", "host"]
    gpus = GpuRequest(spec.gpus)
    if not gpus.none and engine == "podman":
        from gpulaunch.engine.podman import cdi_names

        for device in cdi_names(gpus.device_request()):
            argv += ["--device", device]
    elif not gpus.none:
        argv += ["--gpus", gpus.docker_flag()]
    if spec.memory:  # the engine's container is outside the job's cgroup: limit it too
        argv += ["--memory", spec.memory]
    for key in sorted(spec.env):
        argv += ["--env", key]  # exported above; docker passes the value through
    return [*argv, "--workdir", "/workspace", spec.image, *torchrun_argv(spec)]


def render_sbatch(spec: ExportSpec, opts: SlurmOptions, project: Path) -> str:
    from gpulaunch.export.k8s import container_environment

    if opts.container not in CONTAINERS:
        raise ConfigError(f"--container: {opts.container!r} is not one of {', '.join(CONTAINERS)}")
    if opts.time is not None and not _TIME.fullmatch(opts.time):
        raise ConfigError(f"--time: {opts.time!r} is not a Slurm time (MINUTES, HH:MM:SS, D-HH)")
    for flag, value in (("--partition", opts.partition), ("--account", opts.account)):
        if value is not None and not _SLURM_NAME.fullmatch(value):
            raise ConfigError(f"{flag}: {value!r} is not a Slurm name")
    if opts.cpus is not None and not 1 <= opts.cpus <= 4096:
        raise ConfigError(f"--cpus: {opts.cpus} is not between 1 and 4096")
    chdir = opts.chdir or (str(project) if opts.container in ("none", "docker", "podman") else None)
    if chdir is not None and (re.search(r"[\s%\\]", chdir) or not chdir.startswith("/")):
        raise ConfigError(f"--chdir: {chdir!r} must be an absolute path without spaces or %")
    words = " ".join(_word(a) for a in srun_argv(spec, opts, project))
    env = [] if opts.container == "none" else sorted(spec.env.items())
    return str(
        container_environment()
        .get_template("slurm/job.sbatch.j2")
        .render(
            container=opts.container,
            name=spec.name,
            nodes=spec.nodes,
            nproc=spec.nproc,
            gpus=spec.gpus,
            memory=slurm_memory(spec.memory) if spec.memory else None,
            cpus=opts.cpus,
            time=opts.time,
            partition=opts.partition,
            account=opts.account,
            output=f"{spec.name}-%j.out",
            chdir=chdir,
            port=RDZV_PORT,
            env=env,
            srun_args=words,
        )
    )
