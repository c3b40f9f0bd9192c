"""What a container job's mounts may show it: never gpulaunch's state, the engine or the user's
credentials (SECURITY.md, "the job").

A job in a container is untrusted with respect to gpulaunch's own files. Two rules, applied
to every bind mount of a run (the project at /workspace, `launch.mounts`, `--mount`,
`launch.checkpoint_dir`) on the resolved host path, so no spelling or link gets around them:

1. The project's `.gpulaunch/` (records, tag cache, logs) is masked wherever a mount shows
   it: an empty read-only tmpfs lies over it, so the job can neither read nor write there and
   whatever it tries is not there for the next `run`, `history`, `rerun` or `explain`.
2. A mount whose host path holds, or lies inside, a protected path is refused: gpulaunch's
   state folder (the record key) and cache folder (the config cache), the engine's sockets
   and the user's runtime folder, credential folders in the home folder, `/`, `/proc`,
   `/sys`, `/dev`, `/etc` and the engines' data roots. `--allow-unsafe-mounts` says the user
   accepts the risk; the run then warns instead.

Host mode (`--no-container`) mounts nothing: that job runs as the user and is trusted as the
user is.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpulaunch.engine.runspec import Mount
from gpulaunch.errors import ConfigError
from gpulaunch.fsio import cache_dir, state_dir

STATE_IN_PROJECT = ".gpulaunch"
UNSAFE_FLAG = "--allow-unsafe-mounts"

# home-relative folders and files that hold credentials (keys, tokens, cloud logins)
_HOME_SECRETS = (
    ".ssh",
    ".docker",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".config/gcloud",
    ".config/gh",
    ".netrc",
    ".pypirc",
    ".git-credentials",
)
_SYSTEM = {
    "/proc": "the host's processes (/proc)",
    "/sys": "the host's kernel settings (/sys)",
    "/dev": "the host's devices (/dev)",
    "/etc": "the host's system configuration (/etc)",
    "/var/lib/docker": "Docker's data root",
    "/var/lib/containers": "Podman's data root",
    "/run/docker.sock": "the Docker socket (root on the host)",
    "/var/run/docker.sock": "the Docker socket (root on the host)",
    "/run/podman": "the Podman socket (root on the host)",
    "/run/containerd": "the containerd socket (root on the host)",
}


def protected(env: Mapping[str, str]) -> dict[str, str]:
    """Resolved host path -> what a job would get from it."""
    found = {"/": "the host's root folder /", **_SYSTEM}
    found[str(state_dir())] = "gpulaunch's state folder (the record key)"
    found[str(cache_dir())] = "gpulaunch's cache folder (the config cache)"
    host = env.get("DOCKER_HOST", "")
    if host.lower().startswith("unix://"):
        found[host[len("unix://") :]] = "the engine's socket (root on the host)"
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        found[runtime] = "your runtime folder (engine and agent sockets)"
    home = os.path.expanduser("~")
    if home != "/":
        for name in _HOME_SECRETS:
            found[os.path.join(home, name)] = f"your credentials in ~/{name}"
    return {os.path.realpath(path): what for path, what in found.items()}


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def exposed(source: str, env: Mapping[str, str], project: Path) -> str | None:
    """What mounting `source` would hand the job, or None when nothing protected."""
    src = os.path.realpath(source)
    state = _state_folder(project)
    if _within(src, state):
        return f"gpulaunch's own state ({state})"
    for path, what in sorted(protected(env).items(), key=lambda item: len(item[0])):
        if path == "/" and src != "/":
            continue  # everything lies inside /: only a mount of / itself hands it over
        if _within(path, src) or _within(src, path):
            return what if path == src else f"{what}, {path}"
    return None


def _state_folder(project: Path) -> str:
    """The project's `.gpulaunch`, resolved up to but not through its own name: the mask is
    laid over that name, so a link or file there is refused, never followed elsewhere."""
    state = os.path.join(os.path.realpath(project), STATE_IN_PROJECT)
    try:
        mode = os.lstat(state).st_mode
    except FileNotFoundError:
        return state
    except OSError as err:
        raise ConfigError(f"the project: {state} cannot be read: {err.strerror}") from None
    if not stat.S_ISDIR(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
        raise ConfigError(
            f"the project: {state} is {kind}; gpulaunch keeps its state there and hides it "
            "from the job: remove it"
        )
    return state


def _reachable(state: str) -> bool:
    """Whether a job could see or make `.gpulaunch/`: it exists, or the project is writable
    (the job runs with the user's uid). A read-only shared checkout needs no mask, and the
    engine could not make the mask's mount point there."""
    return os.path.lexists(state) or os.access(os.path.dirname(state), os.W_OK)


def guard(
    mounts: Sequence[tuple[Mount, str]], project: Path, env: Mapping[str, str], allow: bool
) -> tuple[list[Mount], list[str]]:
    """The masks to add over `.gpulaunch/` and the warnings for mounts let through by
    `allow`; ConfigError for the first mount that exposes a protected path otherwise.
    `mounts`: each bind mount with where it came from ("the project", "--mount", ...)."""
    masks: list[Mount] = []
    warnings: list[str] = []
    state = _state_folder(project)
    for mount, where in mounts:
        src = os.path.realpath(mount.source)
        if _within(state, src) and state != src and _reachable(state):
            masks.append(Mount.mask(posixpath.join(mount.target, os.path.relpath(state, src))))
        what = exposed(src, env, project)
        if what is None:
            continue
        said = f"{where}: {mount.source} would hand the job {what}"
        if not allow:
            raise ConfigError(
                f"{said}; mount another folder, or pass {UNSAFE_FLAG} to accept the risk"
            )
        warnings.append(f"{said} ({UNSAFE_FLAG})")
    return masks, warnings
