"""Shared by the host-mode and container NUMA tests: a worker that reports its affinity, and
one routine that asks gpulaunch for the plan (--dry-run --json) and then really runs it."""

from __future__ import annotations

import json
import os
import shutil
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


def tiny2_on_allowed_cpus(dest: Path) -> tuple[Path, tuple[int, int]]:
    """The `tiny2` fixture (two GPUs, NUMA node 0 = CPU 0, node 1 = CPU 1) with its two CPUs
    renamed to the two highest CPUs this process may run on, so the plan is runnable on any
    machine (a CI runner's cpuset need not include CPUs 0 and 1). None when fewer than two."""
    allowed = sorted(os.sched_getaffinity(0))
    assert len(allowed) >= 2, f"two allowed CPUs are needed, have {allowed}"
    cpus = (allowed[-2], allowed[-1])
    root = dest / "tiny2-allowed"
    shutil.copytree(FIXTURES / "tiny2", root)
    for path in root.rglob("*"):
        if path.is_file() and path.name in ("cpulist", "local_cpulist"):
            old = int(path.read_text().strip())
            path.write_text(f"{cpus[old]}\n")
    cpu_dir = root / "devices" / "system" / "cpu"
    for old in (0, 1):
        (cpu_dir / f"cpu{old}").rename(cpu_dir / f"tmp{old}")
    for old in (0, 1):
        (cpu_dir / f"tmp{old}").rename(cpu_dir / f"cpu{cpus[old]}")
    return root, cpus


def plan_and_run(
    project: Path, fixture: str | Path, flags: list[str], timeout: int
) -> tuple[dict[int, list[int]], list[dict[str, Any]]]:
    """(planned CPUs per rank, what each rank reported) for `gpulaunch run affinity.py FLAGS`.

    `fixture`: a name under tests/fixtures/sysfs or a sysfs tree's path."""
    (project / "affinity.py").write_text(AFFINITY_SCRIPT)
    root = fixture if isinstance(fixture, Path) else FIXTURES / fixture
    env = {**os.environ, "GPULAUNCH_SYSFS_ROOT": str(root), "NO_COLOR": "1"}
    env["VIRTUAL_ENV"] = sys.prefix  # --no-container runs the active venv's python (with torch)
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
