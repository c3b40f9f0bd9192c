"""The pip seam: `pip install --dry-run` replays a resolution without installing anything,
with a timeout. pip's own configuration applies (PIP_INDEX_URL, PIP_NO_INDEX,
PIP_FIND_LINKS: tests point it at a folder of fake wheels).

Nothing here decides what a failed resolution means for an image: that is `image.init`.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

from gpulaunch.errors import GpulaunchError

TIMEOUT_S = 180.0


class PipUnavailable(GpulaunchError):
    """pip did not run, did not finish in time, or failed for a reason other than the
    resolution (no index reachable, a broken requirement)."""


@dataclass(frozen=True)
class Resolution:
    ok: bool
    conflict: str = ""  # pip's explanation, one line (not ok)


def dry_run(requirements: list[str], *, timeout: float = TIMEOUT_S) -> Resolution:
    """Resolve `requirements` (PEP 508 texts) for this interpreter, installing nothing."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    argv += ["--", *requirements]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise PipUnavailable(f"pip did not resolve within {timeout:.0f} s") from None
    except OSError as err:
        raise PipUnavailable(f"pip did not run: {err.strerror}") from None
    if proc.returncode == 0:
        return Resolution(True)
    text = f"{proc.stdout}\n{proc.stderr}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    start = next((i for i, x in enumerate(lines) if "conflict is caused by" in x), None)
    if start is not None:
        stop = ("To fix", "ERROR", "1.", "2.", "Additionally")
        cause = list(itertools.takewhile(lambda x: not x.startswith(stop), lines[start + 1 :]))
        return Resolution(False, conflict="; ".join(cause[:4]) or lines[-1])
    errors = [x for x in lines if x.startswith("ERROR:")] or lines or [""]
    raise PipUnavailable(f"pip could not resolve: {errors[-1].removeprefix('ERROR: ')}")
