"""What the engine and its CLI answer: which docker CLI can build with BuildKit (`docker
buildx`, 23+, or a pre-23 client behind DOCKER_BUILDKIT=1; None: the SDK's classic builder),
probed without a daemon and kept per process for the same binaries (a command asks more than
once, and each probe runs two subprocesses per `docker` on PATH); its version text; short
error texts; whether an error came from the HTTP layer under the SDK, and that error as the
one line naming the engine that stopped answering; and what an engine refused before (below:
`refused_ulimits`)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.fsio import cache_dir, read_cache, write_cache

TIMEOUT_ENV = "GPULAUNCH_ENGINE_TIMEOUT"  # seconds of each API call after the ping
API_TIMEOUT_S = 60  # each later API call (streams and waits disable their read timeout)


def api_timeout(env: Mapping[str, str]) -> float:
    """GPULAUNCH_ENGINE_TIMEOUT, or 60 s; anything but a number in (0, 86400] is exit 2."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return API_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 86400:
        raise ConfigError(f"{TIMEOUT_ENV}: {text!r} is not a number of seconds in (0, 86400]")
    return value


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
    candidates = _candidates(env)
    key = cli_key(env, candidates)
    if key not in _PROBED:
        _PROBED[key] = _probe(candidates, _probe_env(env))
    return _PROBED[key]


def _candidates(env: Mapping[str, str]) -> list[str]:
    candidates: list[str] = []
    explicit = env.get("GPULAUNCH_DOCKER_CLI")
    if explicit:
        candidates.append(explicit)
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        found = Path(directory) / "docker"
        if _is_executable(found) and str(found) not in candidates:
            candidates.append(str(found))
    return candidates


def cli_key(env: Mapping[str, str], candidates: list[str] | None = None) -> tuple[object, ...]:
    """What the probe's answer depends on (each candidate's path and file identity,
    DOCKER_CONFIG, GPULAUNCH_BUILDER): equal keys, equal answers, so it can key caches."""
    if candidates is None:
        candidates = _candidates(env)
    return (
        tuple(_file_key(path) for path in candidates),
        env.get("DOCKER_CONFIG"),
        env.get("GPULAUNCH_BUILDER"),
    )


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


# -- what an engine refused before -------------------------------------------------------
# What an engine refused before, remembered per engine: a ulimit it may not raise (an
# engine inside an unprivileged sandbox refuses memlock=-1 at container start).
#
# Without this every run creates the container, has its start refused, removes it and creates
# it again: two round trips of create and start for nothing. The answer is kept in the user
# cache dir keyed by the engine's identity (its ID, version and kernel from /info) and for a
# day at most, so a reconfigured engine is asked again; a cache file that is missing, corrupt
# or planted only means asking again (read through fsio.read_cache, checked field by field).

FILE_NAME = "engines.json"
MAX_AGE_S = 24 * 3600
MAX_ENGINES = 32
ULIMIT_NAMES = frozenset({"memlock", "stack", "nofile"})


def _path() -> Path:
    return cache_dir() / FILE_NAME


def _entries() -> dict[str, dict[str, object]]:
    data = read_cache(_path())
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)}


def refused_ulimits(engine_id: str, now: float | None = None) -> set[str]:
    """The ulimits this engine refused within the last day (empty when unknown)."""
    entry = _entries().get(engine_id)
    if entry is None:
        return set()
    at, refused = entry.get("at"), entry.get("refused_ulimits")
    now = time.time() if now is None else now
    if not isinstance(at, int | float) or not 0 <= now - at <= MAX_AGE_S:
        return set()
    if not isinstance(refused, list):
        return set()
    return {name for name in refused if isinstance(name, str) and name in ULIMIT_NAMES}


def remember_refused_ulimit(engine_id: str, name: str, now: float | None = None) -> None:
    """Record that this engine refused ulimit `name` (a failed write is ignored)."""
    if name not in ULIMIT_NAMES:
        return
    now = time.time() if now is None else now
    entries = _entries()
    known = refused_ulimits(engine_id, now)
    entries[engine_id] = {"at": now, "refused_ulimits": sorted(known | {name})}
    newest = sorted(entries, key=lambda k: _at(entries[k]), reverse=True)[:MAX_ENGINES]
    root = cache_dir().parent
    write_cache(_path(), {k: entries[k] for k in newest}, root=root)


def _at(entry: dict[str, object]) -> float:
    at = entry.get("at")
    return float(at) if isinstance(at, int | float) else 0.0
