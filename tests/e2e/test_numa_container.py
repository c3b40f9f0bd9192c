"""A real two-rank run with a NUMA plan inside a container (issue: launch profiles).

The topology is the `tiny2` fixture (two GPUs whose NUMA nodes hold CPU 0 and CPU 1); the GPU
request reaches the container through the stand-in nvidia hook (not a GPU). Each rank reports
os.sched_getaffinity(0), which must equal the plan `--dry-run --json` printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_env import base_image, require_docker, wheelhouse

pytestmark = pytest.mark.docker

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs" / "tiny2"
SCRIPT = """
import json, os
line = json.dumps({"rank": int(os.environ["LOCAL_RANK"]),
                   "cpus": sorted(os.sched_getaffinity(0)),
                   "gpus": os.environ.get("NVIDIA_VISIBLE_DEVICES")})
os.write(1, (line + "\\n").encode())  # one write: ranks share stdout, lines must not mix
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "numa"
    (project / "wheels").mkdir(parents=True)
    for wheel in wheelhouse().glob("*.whl"):
        try:
            os.link(wheel, project / "wheels" / wheel.name)
        except OSError:
            (project / "wheels" / wheel.name).write_bytes(wheel.read_bytes())
    (project / "gpulaunch.yaml").write_text(
        "version: 1\nname: gltest-numa\n"
        f"image:\n  base: {base_image()}\n  python: '3.11'\n  torch: '2.13.0'\n  cuda: cpu\n"
        "  pip: {no_index: true, find_links: [wheels]}\n"
        "build: {network: none}\nlaunch: {network: none}\n"
    )
    (project / "affinity.py").write_text(SCRIPT)
    return project


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")
def test_container_ranks_follow_the_numa_plan(tmp_path: Path) -> None:
    require_docker()
    project = _project(tmp_path)
    env = {**os.environ, "GPULAUNCH_SYSFS_ROOT": str(FIXTURE), "NO_COLOR": "1"}
    base = [
        sys.executable,
        "-m",
        "gpulaunch",
        "run",
        "affinity.py",
        "--gpus",
        "2",
        "--numa",
        "node",
    ]
    dry = subprocess.run(
        [*base, "--dry-run", "--json"], cwd=project, env=env, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    planned = {r["rank"]: r["cpus"] for r in json.loads(dry.stdout)["numa_plan"]}
    assert planned == {0: [0], 1: [1]}

    real = subprocess.run(base, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert real.returncode == 0, real.stderr[-3000:]
    seen = [json.loads(line) for line in real.stdout.splitlines() if line.startswith("{")]
    assert {r["rank"]: r["cpus"] for r in seen} == planned
    assert {r["gpus"] for r in seen} == {"0,1"}  # stand-in hook: the request arrived
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=io.gpulaunch.project=gltest-numa"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == ""
    label = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "gltest-numa:latest",
            "--format",
            '{{index .Config.Labels "io.gpulaunch.managed"}} '
            '{{index .Config.Labels "io.gpulaunch.torch"}}',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert label.stdout.split() == ["true", "2.13.0"]
