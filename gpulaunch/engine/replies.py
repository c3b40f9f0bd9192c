"""Small helpers for the engine seam: reading the docker CLI's version, short error texts,
and the executable test for CLI discovery."""

from __future__ import annotations

import os
import re
from pathlib import Path


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


def _short(err: BaseException) -> str:
    explanation = getattr(err, "explanation", None)
    text = str(explanation or err).strip()
    return " ".join(text.split())[:400]
