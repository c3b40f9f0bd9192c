"""One container run as data (`RunPlan`), rendered both as docker SDK kwargs and as a
`docker run` command line, so `--dry-run` prints exactly what the SDK call does (a test
checks every option both ways, and the real engine inspects both containers).
"""

from __future__ import annotations

import secrets
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from gpulaunch.engine.docker_api import MANAGED_LABEL, RUN_ID_LABEL
from gpulaunch.gpurequest import GpuRequest

WORKSPACE = "/workspace"
STOP_TIMEOUT = 45  # longer than torchrun's 30 s graceful shutdown of its workers
NGC_ULIMITS = {"memlock": -1, "stack": 67108864}
V4MAPPED_LOOPBACK_NAME = "localhost-v4mapped"


MASK_BYTES = 4096  # a mask holds nothing: the smallest tmpfs the kernel gives


@dataclass(frozen=True)
class Mount:
    """A bind mount of a host path, or a mask: an empty read-only tmpfs laid over a path of
    another mount, so the job can neither read nor write what the host has there."""

    source: str  # absolute host path; "" for a mask
    target: str
    read_only: bool = False
    kind: str = "bind"  # "bind" or "tmpfs" (a mask)

    @classmethod
    def mask(cls, target: str) -> Mount:
        return cls("", target, True, "tmpfs")

    def cli(self) -> str:
        if self.kind == "tmpfs":
            return f"type=tmpfs,target={self.target},readonly,tmpfs-size={MASK_BYTES}"
        return f"type=bind,source={self.source},target={self.target}" + (
            ",readonly" if self.read_only else ""
        )

    def body(self) -> dict[str, Any]:
        """The engine's HostConfig.Mounts entry (what the SDK's types.Mount sends)."""
        if self.kind == "tmpfs":
            return {
                "Target": self.target,
                "Source": None,
                "Type": "tmpfs",
                "ReadOnly": True,
                "TmpfsOptions": {"SizeBytes": MASK_BYTES},
            }
        return {
            "Target": self.target,
            "Source": self.source,
            "Type": "bind",
            "ReadOnly": self.read_only,
        }


@dataclass
class RunPlan:
    image: str
    name: str
    command: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    user: str
    gpus: int | str  # a GpuRequest's value: 0 = none, N, "all", or "0,2"
    labels: dict[str, str]
    workdir: str = WORKSPACE
    ipc: str | None = "host"
    shm_size: str | None = None
    memory: str | None = None  # docker --memory: the container's memory limit
    ulimits: dict[str, int] = field(default_factory=lambda: dict(NGC_ULIMITS))
    init: bool = True
    stop_timeout: int = STOP_TIMEOUT
    network: str | None = None
    cap_add: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    cpuset_cpus: str | None = None
    nproc: int = 1
    numa: list[dict[str, Any]] = field(default_factory=list)
    hostname: str | None = None
    extra_hosts: dict[str, str] = field(default_factory=dict)
    restart_retries: int = 0  # a detached single-process job: the engine restarts it on failure
    stdin: bool = False  # docker run --interactive: gpulaunch's stdin goes to the job
    tty: bool = False  # docker run --tty: the job gets a terminal (stdout and stderr are one)

    def __post_init__(self) -> None:
        if self.network == "none":
            self.pin_hostname()

    def pin_hostname(self) -> None:
        """Give the container a hostname that resolves to loopback.

        Without a network (`none`, or the default network on an engine that has no bridge)
        the container's own hostname has no address, and torchrun's rendezvous and c10d
        resolve that name: they retry for minutes instead of starting.
        """
        if self.hostname is None:
            self.hostname = "gl-" + self.labels.get(RUN_ID_LABEL, "job")[-6:]
        self.extra_hosts.setdefault(self.hostname, "127.0.0.1")
        # A store listening on [::] sees IPv4 clients as ::ffff:127.0.0.1; /etc/hosts has no
        # name for that, so c10d's reverse lookup falls through to DNS and warns
        # "hostname of the client socket cannot be retrieved" on every connection.
        self.extra_hosts.setdefault(V4MAPPED_LOOPBACK_NAME, "::ffff:127.0.0.1")

    @property
    def gpu_request(self) -> GpuRequest:
        return GpuRequest(self.gpus)

    @property
    def run_id(self) -> str:
        return self.labels.get(RUN_ID_LABEL, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "name": self.name,
            "command": self.command,
            "nproc": self.nproc,
            "env": dict(sorted(self.env.items())),
            "docker_run": docker_run_argv(self),
            "options": {
                "user": self.user,
                "workdir": self.workdir,
                "gpus": self.gpus,
                "ipc": self.ipc,
                "shm_size": self.shm_size,
                "memory": self.memory,
                "ulimits": self.ulimits,
                "init": self.init,
                "stop_timeout": self.stop_timeout,
                "network": self.network,
                "cap_add": self.cap_add,
                "devices": self.devices,
                "cpuset_cpus": self.cpuset_cpus,
                "hostname": self.hostname,
                "extra_hosts": self.extra_hosts,
                "labels": self.labels,
                "mounts": [m.__dict__ for m in self.mounts],
                "restart_retries": self.restart_retries,
                "interactive": self.stdin,
                "tty": self.tty,
            },
            "numa": self.numa,
        }


def new_run_id() -> str:  # docker_api.RUN_ID_RE matches exactly these
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def docker_run_argv(plan: RunPlan, detach: bool = False) -> list[str]:
    argv = ["docker", "run", "--detach" if detach else "--rm", "--name", plan.name]
    switches = (("--init", plan.init), ("--interactive", plan.stdin), ("--tty", plan.tty))
    argv += [switch for switch, on in switches if on]
    gpus = None if plan.gpu_request.none else plan.gpu_request.docker_flag()
    restart = f"on-failure:{plan.restart_retries}" if plan.restart_retries else None
    argv += ["--user", plan.user, "--workdir", plan.workdir]
    # in this order: a list once per item, a value when it is set
    options: list[tuple[str, list[str] | str | None]] = [
        ("--gpus", gpus),
        ("--ipc", plan.ipc),
        ("--shm-size", plan.shm_size),
        ("--memory", plan.memory),
        ("--ulimit", [f"{name}={limit}" for name, limit in sorted(plan.ulimits.items())]),
        # explicit, as the SDK call is: an image's STOPSIGNAL must not change how the job stops
        ("--stop-signal", "SIGTERM"),
        ("--stop-timeout", str(plan.stop_timeout)),
        ("--network", plan.network),
        ("--hostname", plan.hostname),
        ("--add-host", [f"{host}:{ip}" for host, ip in sorted(plan.extra_hosts.items())]),
        ("--cap-add", plan.cap_add),
        ("--device", plan.devices),
        ("--cpuset-cpus", plan.cpuset_cpus),
        ("--restart", restart),
        ("--label", [f"{key}={label}" for key, label in sorted(plan.labels.items())]),
        ("--mount", [mount.cli() for mount in plan.mounts]),
        ("--env", [f"{key}={value}" for key, value in sorted(plan.env.items())]),
    ]
    for option, values in options:
        for value in values if isinstance(values, list) else [values] if values else []:
            argv += [option, value]
    return [*argv, plan.image, *plan.command]


def engine_run_argv(plan: RunPlan, kind: Any, detach: bool = False) -> list[str]:
    """The line the engine `kind` (a podman.EngineKind, or None: not known) runs for the plan:
    `docker run` on Docker, `podman run` on Podman, whose GPUs are CDI devices
    (`--device nvidia.com/gpu=N`, podman.cdi_names) and which keeps a rootless user's ids
    (`--userns keep-id`), as `Engine.create_container` creates it there."""
    argv = docker_run_argv(plan, detach)
    if kind is None or not kind.podman:
        return argv
    from gpulaunch.engine.podman import cdi_names

    options = argv[1 : len(argv) - len(plan.command) - 1]  # between `docker` and the image
    if "--gpus" in options:
        at = options.index("--gpus")
        cdi = cdi_names(plan.gpu_request.device_request())
        options[at : at + 2] = [word for name in cdi for word in ("--device", name)]
    for i, word in enumerate(options):  # a mask stays empty: Podman copies up unless told
        if word.startswith("type=tmpfs,") and options[i - 1] == "--mount":
            options[i] = word + ",notmpcopyup"
    keep_id = ["--userns", "keep-id"] if kind.rootless else []
    return ["podman", options[0], *keep_id, *options[1:], plan.image, *plan.command]


def shell_line(argv: list[str]) -> str:
    return shlex.join(argv)


def base_labels(project_name: str, run_id: str) -> dict[str, str]:
    return {
        MANAGED_LABEL: "true",
        "io.gpulaunch.project": project_name,
        RUN_ID_LABEL: run_id,
    }


def _bytes(text: str) -> int:
    """docker's size text ("16g", "512m", "1024") as bytes (textcheck.docker_size)."""
    from gpulaunch.errors import EngineError
    from gpulaunch.textcheck import SIZE_FACTORS, docker_size

    try:
        number, unit = docker_size(text)
    except ValueError:
        raise EngineError(f"docker: {text!r} is not a size (b, k, m or g)") from None
    return number * SIZE_FACTORS[unit]


def create_body(plan: RunPlan) -> dict[str, Any]:
    """The engine's POST /containers/create body for the plan, plus "name" (sent as the query
    parameter, never in the body): what the docker SDK sends for the same plan
    (tests/engine/test_create_body.py compares the two for many plans, with the SDK's kwargs
    from tests/engine/sdk_oracle.py)."""
    restart = {"Name": "on-failure", "MaximumRetryCount": plan.restart_retries}
    optional = {  # sent only when the plan sets them, as the SDK sends them
        "DeviceRequests": None if plan.gpu_request.none else [plan.gpu_request.device_request()],
        "IpcMode": plan.ipc or None,
        "ShmSize": _bytes(plan.shm_size) if plan.shm_size else None,
        "Memory": _bytes(plan.memory) if plan.memory else None,
        "ExtraHosts": [f"{k}:{v}" for k, v in sorted(plan.extra_hosts.items())] or None,
        "CapAdd": list(plan.cap_add) or None,
        "Devices": [_device(d) for d in plan.devices] or None,
        "CpusetCpus": plan.cpuset_cpus or None,
        "RestartPolicy": restart if plan.restart_retries else None,
    }
    host = {
        "Ulimits": [{"Name": k, "Soft": v, "Hard": v} for k, v in sorted(plan.ulimits.items())],
        "Init": plan.init,
        "Mounts": [m.body() for m in plan.mounts],
        "NetworkMode": plan.network or "default",  # as the SDK's containers.run sends it
        **{key: value for key, value in optional.items() if value is not None},
    }
    body: dict[str, Any] = {
        "name": plan.name,
        "User": plan.user,
        "Tty": plan.tty,
        "OpenStdin": plan.stdin,
        "StdinOnce": plan.stdin,
        "AttachStdin": plan.stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Env": [f"{k}={v}" for k, v in plan.env.items()],
        "Cmd": list(plan.command),
        "Image": plan.image,
        "NetworkDisabled": False,
        "WorkingDir": plan.workdir,
        "HostConfig": host,
        "Labels": dict(plan.labels),
        "StopSignal": "SIGTERM",
        "StopTimeout": plan.stop_timeout,
    }
    if plan.hostname:
        body["Hostname"] = plan.hostname
    return body


def _device(text: str) -> dict[str, str]:
    parts = text.split(":")
    return {
        "PathOnHost": parts[0],
        "PathInContainer": parts[1] if len(parts) > 1 else parts[0],
        "CgroupPermissions": parts[2] if len(parts) > 2 else "rwm",
    }
