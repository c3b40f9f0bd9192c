"""Which docker CLI can build with BuildKit: `docker buildx` (23+) or a pre-23 client behind
DOCKER_BUILDKIT=1; None means the SDK's classic builder. No daemon is asked (dry-run asks none),
and the answer is kept per process for the same binaries: a command asks more than once, and
each probe runs two subprocesses per `docker` on PATH."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.engine.replies import _client_version, _is_executable, _major

CLI_PROBE_TIMEOUT_S = 10

# by (each candidate's path and file identity, DOCKER_CONFIG): a replaced binary is asked anew
_PROBED: dict[tuple[object, ...], DockerCli | None] = {}


def probe_cli(env: Mapping[str, str]) -> DockerCli | None:
    """The docker CLI a build uses, from GPULAUNCH_BUILDER, GPULAUNCH_DOCKER_CLI and PATH."""
    if env.get("GPULAUNCH_BUILDER") == "classic":
        return None
    candidates: list[str] = []
    explicit = env.get("GPULAUNCH_DOCKER_CLI")
    if explicit:
        candidates.append(explicit)
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        found = Path(directory) / "docker"
        if _is_executable(found) and str(found) not in candidates:
            candidates.append(str(found))
    key = (tuple(_file_key(path) for path in candidates), env.get("DOCKER_CONFIG"))
    if key not in _PROBED:
        _PROBED[key] = _probe(candidates, _probe_env(env))
    return _PROBED[key]


def _probe(candidates: list[str], env: dict[str, str]) -> DockerCli | None:
    for path in candidates:
        if _output(path, ["buildx", "version"], env) is not None:
            return DockerCli(path, "buildx")
        # `docker --version` is the client alone: the answer must not depend on whether
        # a daemon answered (dry-run and the real build pick the same builder and tag).
        version = _output(path, ["--version"], env)
        if version and _major(_client_version(version)) < 23:
            # Pre-23 clients carry their own BuildKit frontend behind DOCKER_BUILDKIT=1.
            return DockerCli(path, "env")
    return None


def _probe_env(env: Mapping[str, str]) -> dict[str, str]:
    """Probing needs no daemon, but Debian's docker 20.10 CLI dials the engine even for
    `--version` and waits for ever on a hung one: point it at a socket that cannot exist so
    it fails at once and still reports itself."""
    out = {k: v for k, v in env.items() if k != "DOCKER_CONTEXT"}
    out["DOCKER_HOST"] = "unix:///nonexistent/gpulaunch-probe.sock"
    return out


def _output(path: str, args: list[str], env: dict[str, str]) -> str | None:
    try:
        proc = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=CLI_PROBE_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _file_key(path: str) -> tuple[str, int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (path, 0, 0, 0)
    return (path, st.st_ino, st.st_size, st.st_mtime_ns)
