"""Which docker CLI can build with BuildKit (`docker buildx`, 23+, or a pre-23 client behind
DOCKER_BUILDKIT=1; None: the SDK's classic builder), probed without a daemon.

Each probe runs two subprocesses per `docker` on PATH (about 100 ms), and a command asks more
than once, so the answer is kept per process and in the user cache, keyed by all it depends
on (`probe_key`). Every command reads the cache; only build and run write it, never a dry run."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from gpulaunch.engine import daycache
from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.fsio import identity, read_back


def client_version(text: str) -> str:
    """'Docker version 20.10.24, build 297e128' -> '20.10.24'."""
    match = re.search(r"version (\d+[\w.+-]*)", text)
    return match.group(1) if match else ""


def _major(version: str) -> int:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        return 0


CLI_PROBE_TIMEOUT_S = 10

# by `probe_key`'s digest: a replaced binary, plugin or config is asked anew
_PROBED: dict[str, DockerCli | None] = {}
_FRESH: dict[str, tuple[list[object], DockerCli | None]] = {}  # probed here, not yet saved


def probe_cli(env: Mapping[str, str]) -> DockerCli | None:
    """The docker CLI a build uses, from GPULAUNCH_BUILDER, GPULAUNCH_DOCKER_CLI and PATH."""
    if env.get("GPULAUNCH_BUILDER") == "classic":
        return None
    candidates = _candidates(env)
    disk_key = probe_key(env, candidates)
    key = _digest(disk_key)
    if key not in _PROBED:
        found = _cached_probe(disk_key, candidates)
        if found is False:
            found = _probe(candidates, _probe_env(env))
            _FRESH[key] = (disk_key, found)
        _PROBED[key] = found
    return _PROBED[key]


def remember_probes(now: float | None = None) -> None:
    """Save what this process probed to the user cache (a failed write is ignored)."""
    if not _FRESH:
        return
    found = {
        digest: {"key": disk_key, "cli": None if cli is None else [cli.path, cli.mode]}
        for digest, (disk_key, cli) in _FRESH.items()
    }
    _FRESH.clear()
    daycache.put(PROBE_FILE, found, now)


def _candidates(env: Mapping[str, str]) -> list[str]:
    candidates: list[str] = []
    explicit = env.get("GPULAUNCH_DOCKER_CLI")
    if explicit:
        candidates.append(explicit)
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which("docker", path=directory)  # a folder we may not read: skipped
        if found and found not in candidates:
            candidates.append(found)
    return candidates


def cli_key(env: Mapping[str, str]) -> tuple[object, ...]:
    """What the probe's answer depends on (`probe_key`, as its digest): equal keys, equal
    answers, so it keys the tag cache too."""
    return (_digest(probe_key(env, _candidates(env))),)


def _probe(candidates: list[str], env: dict[str, str]) -> DockerCli | None:
    for path in candidates:
        if _output(path, ["buildx", "version"], env) is not None:
            return DockerCli(path, "buildx")
        # `docker --version` is the client alone: the answer must not depend on whether
        # a daemon answered (dry-run and the real build pick the same builder and tag).
        version = _output(path, ["--version"], env)
        if version and _major(client_version(version)) < 23:
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


# -- the probe's answer across processes ----------------------------------------------------
# An entry that is missing, corrupt, stale, planted under another key or naming a binary that
# is not a candidate only means probing again.

PROBE_FILE = "docker-cli.json"
PROBE_FORMAT = 1
PLUGIN_DIRS = (  # where the docker CLI looks for docker-buildx, after DOCKER_CONFIG's
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)
_PROBE_IGNORES = ("DOCKER_HOST", "DOCKER_CONTEXT")  # the probe sets or drops these itself


def probe_key(env: Mapping[str, str], candidates: list[str]) -> list[object]:
    """What the probe's answer depends on: each candidate binary (path, real path, inode,
    size, mtime, ctime), the docker config (config.json names extra plugin folders), every
    docker-buildx plugin file the CLI could find, and a digest of the DOCKER_* / BUILDX_*
    variables the probe passes on (a digest: their values may be secrets)."""
    from gpulaunch import __version__  # read at call time (tests patch it)

    home = env.get("HOME") or str(Path.home())
    config = Path(env.get("DOCKER_CONFIG") or Path(home) / ".docker")
    extra: list[str] = []  # a config that cannot be read or parsed names none
    with contextlib.suppress(OSError, ValueError, AttributeError, RecursionError):
        # a regular file of at most a MiB: a FIFO or device planted there is not waited on
        raw = read_back(config / "config.json", 1 << 20, follow=True)
        dirs = json.loads(raw).get("cliPluginsExtraDirs")
        extra = [d for d in dirs if isinstance(d, str)] if isinstance(dirs, list) else []
    plugins = [str(config / "cli-plugins"), *extra, *PLUGIN_DIRS]
    variables = sorted(
        (k, v)
        for k, v in env.items()
        if k.startswith(("DOCKER_", "BUILDX_")) and k not in _PROBE_IGNORES
    )
    digest = hashlib.sha256(json.dumps(variables).encode()).hexdigest()
    return [
        PROBE_FORMAT,
        __version__,
        [_identity(path) for path in candidates],
        _identity(str(config / "config.json")),
        [_identity(str(Path(d) / "docker-buildx")) for d in plugins],
        digest,
        env.get("GPULAUNCH_BUILDER"),
    ]


def _digest(disk_key: list[object]) -> str:
    return hashlib.sha256(json.dumps(disk_key).encode()).hexdigest()[:32]


def _cached_probe(
    disk_key: list[object], candidates: list[str], now: float | None = None
) -> DockerCli | Literal[False] | None:
    """The saved answer for this key, or False (probe again)."""
    entry = daycache.get(PROBE_FILE, _digest(disk_key), now)  # None: stale, or from the future
    if entry is None or entry.get("key") != json.loads(json.dumps(disk_key)):
        return False
    cli = entry.get("cli")
    if cli is None:
        return None
    if isinstance(cli, list) and len(cli) == 2 and cli[0] in candidates:
        return DockerCli(cli[0], cli[1]) if cli[1] in ("buildx", "env") else False
    return False


def _identity(path: str) -> list[str]:
    """A file as the probe cache keys it: its path, where links lead, device, inode, size,
    mtime and ctime (a binary replaced in place with its mtime kept still has a new ctime)."""
    try:
        st = os.stat(path)
    except OSError:
        return [path]
    return [path, os.path.realpath(path), *map(str, identity(st))]
