"""What a build hands the engine: the request (Dockerfile, exact context entries, build args,
secrets), the docker CLI argv for BuildKit, build secrets as in-memory files (never on a
disk), and SIGTERM turned into an exception so temp files and the docker child are always
cleaned up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpulaunch.engine.context import Entry
from gpulaunch.errors import (
    ExitCode,
    GpulaunchError,
)

Builder = Literal["buildkit", "classic"]
CLASSIC_DOCKERFILE = ".gpulaunch-build.Dockerfile"  # only inside the context tar we send


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: str  # rendered text
    context: Path
    tags: tuple[str, ...]
    build_args: dict[str, str] = field(default_factory=dict)
    network: str = "default"  # default | host | none
    no_cache: bool = False
    # BuildKit secret id -> value (index credentials); passed as files, never as args.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    labels: dict[str, str] = field(default_factory=dict)
    # exactly what the engine receives (hashed into the tag; see gpulaunch.engine.context)
    entries: tuple[Entry, ...] = ()


@dataclass(frozen=True)
class DockerCli:
    """A docker client binary and how it reaches BuildKit."""

    path: str
    mode: Literal["buildx", "env"]  # `docker buildx build` or DOCKER_BUILDKIT=1 docker build

    def build_argv(
        self,
        req: BuildRequest,
        dockerfile_path: Path,
        context: Path | None = None,
        secret_dir: Path | None = None,
    ) -> list[str]:
        verb = ["buildx", "build", "--load"] if self.mode == "buildx" else ["build"]
        argv = [self.path, *verb, "--progress=plain", "-f", str(dockerfile_path)]
        for tag in req.tags:
            argv += ["-t", tag]
        for key, value in sorted(req.build_args.items()):
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in sorted(req.labels.items()):
            argv += ["--label", f"{key}={value}"]
        if req.network != "default":
            argv += ["--network", req.network]
        if req.no_cache:
            argv.append("--no-cache")
        for sid in sorted(req.secrets):  # files in the private build temp dir
            folder = secret_dir or dockerfile_path.parent
            argv += ["--secret", f"id={sid},src={folder / sid}"]
        argv.append(str(context or req.context))
        return argv


class BuildTerminated(GpulaunchError):
    """SIGTERM arrived during a build; the docker child and temp files were cleaned up."""

    exit_code = ExitCode.TERMINATED


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM (and SIGHUP) as BuildTerminated, so `finally` blocks clean up; only the main
    thread may install handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        err = BuildTerminated(f"build stopped by {signal.Signals(signum).name}")
        if signum == signal.SIGHUP:
            err.exit_code = ExitCode.HANGUP
        raise err

    stops = (signal.SIGTERM, signal.SIGHUP)  # a closed terminal stops a build as SIGTERM does
    previous = {sig: signal.signal(sig, handler) for sig in stops}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _write_secrets(folder: Path, secrets: Mapping[str, str]) -> list[int]:
    """Each BuildKit secret as `folder/ID`, a link to an anonymous in-memory file of this
    process (`/proc/PID/fd/N`, a memfd): the value is never written to a disk, so a build
    killed at any moment, SIGKILL included, leaves at most a dangling link (the memory file dies
    with the process), never a credential copy. Returns the descriptors; closing them
    (`secret_links` does) drops the values, else the process's exit does.

    Where the system has no memfd (not Linux), a 0600 file in the private (0700) folder:
    removed with the folder, but a SIGKILL leaves it."""
    fds: list[int] = []
    for sid, value in secrets.items():
        data = value.encode("utf-8")
        if not hasattr(os, "memfd_create"):
            fd = os.open(folder / sid, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            continue
        fd = os.memfd_create(f"gpulaunch-secret-{sid}", os.MFD_CLOEXEC)
        fds.append(fd)
        os.write(fd, data)
        os.fchmod(fd, 0o600)
        os.symlink(f"/proc/{os.getpid()}/fd/{fd}", folder / sid)
    return fds


@contextlib.contextmanager
def secret_links(folder: Path, secrets: Mapping[str, str]) -> Iterator[None]:
    """`_write_secrets` for the length of a build: the in-memory files closed after it."""
    fds = _write_secrets(folder, secrets)
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)
