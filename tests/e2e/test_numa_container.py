"""A real two-rank run with a NUMA plan inside a container (issue: launch profiles).

The topology is the `tiny2` fixture (two GPUs whose NUMA nodes hold CPU 0 and CPU 1); the GPU
request reaches the container through the stand-in nvidia hook (not a GPU). Each rank reports
os.sched_getaffinity(0), which must equal the plan `--dry-run --json` printed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from affinity_check import plan_and_run
from engine_env import base_image, require_docker, wheelhouse

pytestmark = pytest.mark.docker


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
    return project


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")
def test_container_ranks_follow_the_numa_plan(tmp_path: Path) -> None:
    require_docker()
    project = _project(tmp_path)
    planned, seen = plan_and_run(project, "tiny2", ["--gpus", "2", "--numa", "node"], timeout=900)
    assert planned == {0: [0], 1: [1]}
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
