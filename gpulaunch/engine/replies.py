"""What the engine and its CLI answer: which docker CLI can build with BuildKit (`docker
buildx`, 23+, or a pre-23 client behind DOCKER_BUILDKIT=1; None: the SDK's classic builder),
probed without a daemon and kept per process for the same binaries (a command asks more than
once, and each probe runs two subprocesses per `docker` on PATH); its version text; short
error texts; whether an error came from the HTTP layer under the SDK, and that error as the
one line naming the engine that stopped answering."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.errors import EngineError

TIMEOUT_ENV = "GPULAUNCH_ENGINE_TIMEOUT"  # seconds of each API call after the ping


def _is_executable(path: Path) -> bool:
    """Like shutil.which's test: a PATH entry we may not read (root's ~/bin under sudo or
    another uid) is skipped instead of raising PermissionError."""
    try:
        return path.is_file() and os.access(path, os.X_OK)
    except OSError:
        return False


def _client_version(text: str) -> str:
    """'Docker version 20.10.24, build 297e128' -> '20.10.24'."""
    match = re.search(r"version (\d+[\w.+-]*)", text)
    return match.group(1) if match else ""


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        return 0


def _from_transport(err: BaseException) -> bool:
    """An error of the HTTP layer under the docker SDK (requests, urllib3), by module, so
    nothing imports them for this."""
    return any(c.__module__.split(".")[0] in ("requests", "urllib3") for c in type(err).__mro__)


def _stalls_raise(api: Any, host: str) -> None:
    """Make every request of the SDK's session that the transport fails (a read timeout, a
    dropped connection) an EngineError naming the engine, instead of urllib3's pool text.

    The SDK sends each call through `Session.request`; wrapping it on this one session
    covers every call, including those made inside the SDK's models."""
    send = api.request

    def request(*args: Any, **kwargs: Any) -> Any:
        try:
            return send(*args, **kwargs)
        except Exception as err:
            if not _from_transport(err):
                raise
            limit = kwargs.get("timeout")
            if "timed out" in str(err).lower() and isinstance(limit, int | float):
                reason = f"no answer within {limit:g} s"
            else:
                reason = "the connection failed"
            raise EngineError(
                f"the Docker engine at {host} stopped answering: {reason}",
                hint=f"check dockerd (its ping answers, its API does not); {TIMEOUT_ENV} sets "
                "the wait",
            ) from None

    api.request = request


def _short(err: BaseException) -> str:
    explanation = getattr(err, "explanation", None)
    text = str(explanation or err).strip()
    return " ".join(text.split())[:400]


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
