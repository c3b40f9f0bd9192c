"""Shared by the host-mode and container NUMA tests: a worker that reports its affinity, and
one routine that asks gpulaunch for the plan (--dry-run --json) and then really runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sysfs"

# One os.write per rank: ranks share stdout, and a single write cannot interleave.
AFFINITY_SCRIPT = """
import json, os
line = json.dumps({"rank": int(os.environ.get("LOCAL_RANK", "0")),
                   "cpus": sorted(os.sched_getaffinity(0)),
                   "gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
                   "precision": os.environ.get("GPULAUNCH_PRECISION")})
os.write(1, (line + "\\n").encode())
import gpulaunch_precision
"""


def plan_and_run(
    project: Path, fixture: str, flags: list[str], timeout: int
) -> tuple[dict[int, list[int]], list[dict[str, Any]]]:
    """(planned CPUs per rank, what each rank reported) for `gpulaunch run affinity.py FLAGS`."""
    (project / "affinity.py").write_text(AFFINITY_SCRIPT)
    env = {**os.environ, "GPULAUNCH_SYSFS_ROOT": str(FIXTURES / fixture), "NO_COLOR": "1"}
    base = [sys.executable, "-m", "gpulaunch", "run", "affinity.py", *flags]
    dry = subprocess.run(
        [*base, "--dry-run", "--json"], cwd=project, env=env, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    planned = {r["rank"]: r["cpus"] for r in json.loads(dry.stdout)["numa_plan"]}
    real = subprocess.run(
        base, cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert real.returncode == 0, real.stderr[-3000:]
    seen = [json.loads(line) for line in real.stdout.splitlines() if line.startswith("{")]
    return planned, seen
