"""Podman behind Docker's API: which engine answers, and what Podman needs to be told otherwise.

Podman's service speaks Docker's API on its socket (rootful `/run/podman/podman.sock`, rootless
`$XDG_RUNTIME_DIR/podman/podman.sock`), and names itself in the `/version` answer's
`Components` ("Podman Engine"). Two things differ for gpulaunch:

- builds: the API has no BuildKit session, so `podman build` (Buildah: cache, bind and secret
  mounts, `--network`) builds instead of the docker CLI;
- GPUs: Podman hands GPUs to containers through CDI (`--device nvidia.com/gpu=0`, specs that
  `nvidia-ctk cdi generate` writes to /etc/cdi or /var/run/cdi), never through `--gpus`. Its
  Docker-compatible create ignores DeviceRequests and stats every device as a path, so a run on
  Podman is created through Podman's own endpoint (`libpod_spec`: the same container, spelled
  as Podman's SpecGenerator), with each GPU named as a CDI device that a spec present defines.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpulaunch.engine import daycache
from gpulaunch.engine.buildspec import BuildRequest, DockerCli
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.fsio import read_back

Kind = Literal["docker", "podman"]
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")  # Podman's (and the CDI library's) defaults
CDI_GPU_KIND = "nvidia.com/gpu"
CDI_FIX = "generate the spec: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
SPEC_LIMIT = 4 << 20  # a CDI spec larger than this is not read (bounded work on a file)
LIBPOD_INFO = "/v4.0.0/libpod/info"  # says rootless or not (its Docker-style /info does not)
LIBPOD_CREATE = "/v4.0.0/libpod/containers/create"  # libpod routes need a version (its minimum)
_SIGNALS = {"SIGTERM": 15, "SIGINT": 2, "SIGKILL": 9, "SIGQUIT": 3, "SIGHUP": 1, "SIGUSR1": 10}


@dataclass(frozen=True)
class EngineKind:
    """Which engine answers the API: Docker or Podman, its version, and whether it runs
    rootless (None: the answer did not say)."""

    name: Kind
    version: str
    rootless: bool | None = None

    @property
    def podman(self) -> bool:
        return self.name == "podman"

    def describe(self) -> str:
        label = "Podman" if self.podman else "Docker"
        mode = {True: ", rootless", False: ", rootful", None: ""}[self.rootless]
        return f"{label} {self.version}{mode}"


def engine_kind(version: Mapping[str, Any], info: Any = None) -> EngineKind:
    """The engine named by its `/version` answer; rootless or not from `info` when given:
    Docker's `/info` (a rootless dockerd says `name=rootless` in its security options) or
    Podman's own (`host.security.rootless`: its Docker-style /info says nothing)."""
    components = version.get("Components")
    podman = None
    for part in components if isinstance(components, list) else []:
        if isinstance(part, dict) and str(part.get("Name", "")).startswith("Podman"):
            podman = part
            break
    info = info if isinstance(info, dict) else {}
    if podman is not None:
        host = info.get("host")
        security = host.get("security") if isinstance(host, dict) else None
        rootless = security.get("rootless") if isinstance(security, dict) else None
        name = str(podman.get("Version") or version.get("Version"))
        return EngineKind("podman", name, rootless if isinstance(rootless, bool) else None)
    options = info.get("SecurityOptions")
    rootless = (
        any("name=rootless" in str(o) for o in options) if isinstance(options, list) else None
    )
    return EngineKind("docker", str(version.get("Version", "?")), rootless)


@dataclass(frozen=True)
class PodmanCli(DockerCli):
    """`podman --url ENGINE build`: the docker CLI's build line (Dockerfile, tags, labels,
    build args, network, secrets: Buildah takes them all) sent to the engine gpulaunch talks
    to, whatever podman's own default connection is."""

    url: str

    def build_argv(
        self,
        req: BuildRequest,
        dockerfile_path: Path,
        context: Path | None = None,
        secret_dir: Path | None = None,
    ) -> list[str]:
        argv = super().build_argv(req, dockerfile_path, context, secret_dir)
        return [argv[0], "--url", self.url, *argv[1:]]


def find_cli(env: Mapping[str, str], url: str) -> PodmanCli | None:
    """The podman binary on PATH (GPULAUNCH_BUILDER=classic: none), for `url`'s engine."""
    import shutil

    if env.get("GPULAUNCH_BUILDER") == "classic":
        return None
    found = shutil.which("podman", path=env.get("PATH", os.defpath))
    return None if found is None else PodmanCli(found, "env", url)


# -- which engine an address had, for --dry-run (which asks no daemon) --------------------------
# Real commands remember what the engine at an address said it is (`Engine.kind`) for a dry
# run to print its line; where not known (`daycache`), it prints Docker's and says it did not ask.
KINDS_FILE = "engine-kinds.json"


def remember_kind(address: str, kind: EngineKind, now: float | None = None) -> None:
    found = {"name": kind.name, "version": kind.version, "rootless": kind.rootless}
    daycache.put(KINDS_FILE, {address: found}, now)


def known_kind(address: str, now: float | None = None) -> EngineKind | None:
    """What a real command last found at `address` (within a day), or None."""
    entry = daycache.get(KINDS_FILE, address, now)
    if entry is None:
        return None
    name, version, rootless = entry.get("name"), entry.get("version"), entry.get("rootless")
    if name not in ("docker", "podman") or not isinstance(version, str):
        return None
    if rootless is not None and not isinstance(rootless, bool):
        return None
    return EngineKind("podman" if name == "podman" else "docker", version[:40], rootless)


# -- CDI -------------------------------------------------------------------------------------
def cdi_names(gpus: Mapping[str, Any]) -> list[str]:
    """The CDI devices for one DeviceRequest of `runspec.create_body` (Count -1: all, Count
    N: indices 0..N-1, DeviceIDs: each index or UUID)."""
    ids = [str(i) for i in gpus.get("DeviceIDs") or []]
    count = int(gpus.get("Count") or 0)
    if not ids:
        ids = ["all"] if count == -1 else [str(i) for i in range(count)]
    return [f"{CDI_GPU_KIND}={i}" for i in ids]


def cdi_devices(dirs: Iterable[str] = CDI_DIRS) -> dict[str, str]:
    """Every CDI device the spec files in `dirs` define ("vendor/class=name" -> its spec file).
    A file that is not a regular readable spec of at most 4 MiB is passed over: the engine
    would not use it either."""
    found: dict[str, str] = {}
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            path = os.path.join(folder, name)
            for device in _spec_devices(path):
                found.setdefault(device, path)
    return found


def _spec_devices(path: str) -> list[str]:
    import yaml

    try:  # no link followed, a FIFO never waited on, at most SPEC_LIMIT bytes
        raw = read_back(Path(path), SPEC_LIMIT)
    except (OSError, ValueError):
        return []
    spec: Any = None
    with contextlib.suppress(yaml.YAMLError, UnicodeDecodeError, RecursionError):
        spec = yaml.safe_load(raw.decode("utf-8"))
    if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
        return []
    devices = spec.get("devices")
    out = []
    for device in devices if isinstance(devices, list) else []:
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            out.append(f"{spec['kind']}={device['name']}")
    return out


def check_cdi(wanted: list[str], dirs: Iterable[str] = CDI_DIRS) -> None:
    """EngineError naming `nvidia-ctk cdi generate` when a wanted device has no spec."""
    dirs = tuple(dirs)
    present = cdi_devices(dirs)
    missing = [name for name in wanted if name not in present]
    if not missing:
        return
    gpus = sorted(n for n in present if n.startswith(CDI_GPU_KIND + "="))
    seen = f"the specs define {', '.join(gpus)}" if gpus else f"no GPU spec in {', '.join(dirs)}"
    raise EngineError(
        f"Podman hands GPUs over through CDI: no CDI spec defines {', '.join(missing)} "
        f"({seen}); generate one with `nvidia-ctk cdi generate`",
        hint=CDI_FIX,
    )


# -- the container as Podman's SpecGenerator ---------------------------------------------------
def libpod_spec(
    body: Mapping[str, Any], name: str, rlimits: bool = True, keep_id: bool = False
) -> dict[str, Any]:
    """`runspec.create_body`'s container for Podman's own create endpoint, each GPU request
    as CDI devices (the module docstring says why).

    `rlimits` False sends no ulimits at all: given any, Podman adds its own nofile and nproc
    maximums, which an engine whose limits are lower (a sandbox) refuses; with none, the
    container keeps the service's limits, as Docker's containers keep dockerd's.

    `keep_id` (rootless Podman): the user's own uid and gid are the same inside, so what the
    job writes into the project belongs to the user (without it, uid 1000 inside is one of
    the user's subordinate ids outside)."""
    host = dict(body.get("HostConfig") or {})
    spec: dict[str, Any] = {
        "name": name,
        "image": body["Image"],
        "command": list(body.get("Cmd") or []),
        "env": dict(_env_pair(item) for item in body.get("Env") or []),
        "user": body.get("User") or "",
        "work_dir": body.get("WorkingDir") or "",
        "create_working_dir": True,  # as Docker does (libpod refuses a missing one otherwise)
        "labels": dict(body.get("Labels") or {}),
        "terminal": bool(body.get("Tty")),
        "stdin": bool(body.get("OpenStdin")),
        "init": bool(host.get("Init")),
        "stop_signal": _SIGNALS.get(str(body.get("StopSignal") or "SIGTERM"), 15),
        "stop_timeout": int(body.get("StopTimeout") or 10),
        "mounts": [_mount(m) for m in host.get("Mounts") or []],
    }
    if body.get("Hostname"):
        spec["hostname"] = body["Hostname"]
    if keep_id:
        spec["userns"] = {"nsmode": "keep-id"}
    if rlimits and host.get("Ulimits"):
        spec["r_limits"] = [
            {"type": u["Name"], "soft": _rlimit(u["Soft"]), "hard": _rlimit(u["Hard"])}
            for u in host["Ulimits"]
        ]
    network = str(host.get("NetworkMode") or "default")
    if network in ("none", "host"):
        spec["netns"] = {"nsmode": network}
    elif network not in ("default", "bridge"):
        spec["netns"] = {"nsmode": "bridge"}
        spec["Networks"] = {network: {}}
    if host.get("IpcMode"):
        spec["ipcns"] = {"nsmode": host["IpcMode"]}
    if host.get("ShmSize"):
        spec["shm_size"] = int(host["ShmSize"])
    limits: dict[str, Any] = {}
    if host.get("Memory"):
        limits["memory"] = {"limit": int(host["Memory"])}
    if host.get("CpusetCpus"):
        limits["cpu"] = {"cpus": host["CpusetCpus"]}
    if limits:
        spec["resource_limits"] = limits
    if host.get("ExtraHosts"):
        spec["hostadd"] = list(host["ExtraHosts"])
    if host.get("CapAdd"):
        spec["cap_add"] = list(host["CapAdd"])
    devices = [
        {"path": f"{d['PathOnHost']}:{d['PathInContainer']}:{d['CgroupPermissions']}"}
        for d in host.get("Devices") or []
    ]
    devices += [{"path": n} for n in gpu_devices(body)]
    if devices:
        spec["devices"] = devices
    policy = host.get("RestartPolicy") or {}
    if policy.get("Name"):
        spec["restart_policy"] = policy["Name"]
        spec["restart_tries"] = int(policy.get("MaximumRetryCount") or 0)
    return spec


def gpu_devices(body: Mapping[str, Any]) -> list[str]:
    """The CDI device names of the body's GPU requests (none: [])."""
    requests = (body.get("HostConfig") or {}).get("DeviceRequests") or []
    return [n for r in requests for n in cdi_names(r)]


def _env_pair(item: str) -> tuple[str, str]:
    key, _, value = str(item).partition("=")
    return key, value


def _rlimit(value: Any) -> int:
    """-1 (unlimited, Docker's spelling) is the largest unsigned value for Podman."""
    number = int(value)
    return (1 << 64) - 1 if number < 0 else number


def _mount(mount: Mapping[str, Any]) -> dict[str, Any]:
    """A HostConfig.Mounts entry as an OCI mount (Podman's spelling)."""
    if mount.get("Type") == "tmpfs":
        size = (mount.get("TmpfsOptions") or {}).get("SizeBytes")
        # notmpcopyup: Podman would copy what lies under a tmpfs into it, and a mask exists
        # to hide exactly that (Docker never copies)
        options = ["ro"] if mount.get("ReadOnly") else []
        options += [f"size={size}"] if size else []
        options.append("notmpcopyup")
        return {
            "destination": mount["Target"],
            "type": "tmpfs",
            "source": "tmpfs",
            "options": options,
        }
    if mount.get("Type") != "bind":
        raise ConfigError(f"mount {mount.get('Target')}: {mount.get('Type')} is not a bind mount")
    options = ["rbind", "ro" if mount.get("ReadOnly") else "rw"]
    return {
        "destination": mount["Target"],
        "type": "bind",
        "source": mount["Source"],
        "options": options,
    }


def rootless_socket(env: Mapping[str, str], default_socket: str) -> Path | None:
    """The user's own Podman socket (`$XDG_RUNTIME_DIR/podman/podman.sock`, a socket of theirs)
    when docker's `default_socket` is not one this user may open; else None."""
    if _is_socket(Path(default_socket)) and os.access(default_socket, os.R_OK | os.W_OK):
        return None
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime or not os.path.isabs(runtime):
        return None
    path = Path(runtime) / "podman" / "podman.sock"
    return path if _is_socket(path) and os.access(path, os.R_OK | os.W_OK) else None


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False
