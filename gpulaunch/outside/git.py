"""The project's git state for run records: the commit and whether the tree is dirty.

The one place gpulaunch runs `git`, with a timeout; no git, no repository or a refusal
(an unsafe-owner checkout, say) is simply no git state.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

TIMEOUT_S = 10


def _git(project: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(project), *args],
            capture_output=True,
            text=True,
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
