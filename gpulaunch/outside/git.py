"""What git knows of the project: the commit and whether the tree is dirty (run records), and
which files git would publish (the build context).

The one place gpulaunch runs `git`, with a timeout; no git, no repository or a refusal
(an unsafe-owner checkout, say) is simply no git state, and the build context falls back to
.dockerignore alone.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_S = 10


def _git(project: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(project), *args],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(project: Path) -> dict[str, Any] | None:
    """{"commit": sha, "dirty": bool} when `project` is inside a git work tree, else None.

    Untracked files do not make a tree dirty: run records themselves are untracked files.
    """
    commit = _git(project, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return None
    status = _git(project, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


_STAGED = re.compile(r"(?P<mode>[0-7]{6}) [0-9a-f]{40,64} [0-3]\t(?P<path>.+)", re.DOTALL)


@dataclass(frozen=True)
class Published:
    """The files git would publish from a project folder: tracked ones (even where an ignore
    rule matches them) plus untracked ones that no ignore rule matches. `gitlinks` are
    submodules and nested repositories: git lists the folder, not its files, so everything
    below one counts."""

    files: frozenset[str]
    gitlinks: frozenset[str]
    folders: frozenset[str]  # every parent folder of a published path

    def has(self, rel: str, is_dir: bool) -> bool:
        """`rel` (project-relative, `/`-separated) is published, or is a folder holding some."""
        if rel in self.files or rel in self.gitlinks or (is_dir and rel in self.folders):
            return True
        return any(folder in self.gitlinks for folder in _parents(rel))


def _parents(path: str) -> Iterator[str]:
    """The folders above a `/`-separated path, nearest first: "a/b/c" gives "a/b", "a"."""
    return (path.rsplit("/", i)[0] for i in range(1, path.count("/") + 1))


def published(project: Path) -> Published | None:
    """What git would publish from `project` (one `git ls-files` call), or None outside a git
    work tree, when git cannot answer, or when the checkout ignores the project folder itself
    (a home folder kept in git with `*` ignored is not the project's repository).

    Paths come relative to `project` (git runs there), NUL-separated, so no name is quoted.
    """
    listed = _git(project, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "-s")
    if listed is None or _git(project, "check-ignore", "-q", ".") is not None:
        return None
    files: set[str] = set()
    gitlinks: set[str] = set()
    for item in filter(None, listed.split("\0")):
        staged = _STAGED.fullmatch(item)
        if staged is not None:  # tracked: `mode sha stage\tpath`
            (gitlinks if staged["mode"] == "160000" else files).add(staged["path"])
        elif item.endswith("/"):  # an untracked nested repository
            gitlinks.add(item.rstrip("/"))
        else:
            files.add(item)
    folders = frozenset(folder for path in files | gitlinks for folder in _parents(path))
    return Published(frozenset(files), frozenset(gitlinks), folders)


def changed_since(project: Path, commit: str) -> list[str] | None:
    """Files of `project` that differ from `commit` (committed since, or changed in the work
    tree), plus untracked files git would publish; None when git cannot say (no git, no
    repository, a commit this clone does not have)."""
    if not re.fullmatch(r"[0-9a-f]{40,64}", commit):
        return None
    changed = _git(project, "diff", "--relative", "--name-only", "-z", commit, "--", ".")
    untracked = _git(project, "ls-files", "-z", "--others", "--exclude-standard")
    if changed is None or untracked is None:
        return None
    paths = (changed + untracked).split("\0")
    return sorted({p for p in paths if p and not p.startswith(".gpulaunch/")})
