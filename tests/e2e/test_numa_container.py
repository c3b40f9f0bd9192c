"""A real two-rank run with a NUMA plan inside a container (issue: launch profiles).

The topology is the `tiny2` fixture (two GPUs, one CPU per NUMA node) moved onto two CPUs
this process may use; the GPU
request reaches the container through the stand-in nvidia hook (not a GPU). Each rank reports
os.sched_getaffinity(0), which must equal the plan `--dry-run --json` printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from affinity_check import plan_and_run, tiny2_on_allowed_cpus
from engine_env import base_image, wheelhouse

from e2e.support import project_containers, temp_name

pytestmark = pytest.mark.docker


def _project(tmp_path: Path, name: str) -> Path:
    project = tmp_path / "numa"
    (project / "wheels").mkdir(parents=True)
    for wheel in wheelhouse().glob("*.whl"):
        try:
            os.link(wheel, project / "wheels" / wheel.name)
        except OSError:
            (project / "wheels" / wheel.name).write_bytes(wheel.read_bytes())
    (project / "gpulaunch.yaml").write_text(
        f"version: 1\nname: {name}\n"
        f"image:\n  base: {base_image()}\n  python: '3.11'\n  torch: '2.13.0'\n  cuda: cpu\n"
        "  pip: {no_index: true, find_links: [wheels]}\n"
        "build: {network: none}\nlaunch: {network: none}\n"
    )
    return project


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed CPUs")
def test_container_ranks_follow_the_numa_plan(tmp_path: Path, docker_client: Any) -> None:
    name = temp_name("numa")  # this session's: its image is removed when the session ends
    project = _project(tmp_path, name)
    fixture, (cpu_a, cpu_b) = tiny2_on_allowed_cpus(tmp_path)
    planned, seen = plan_and_run(project, fixture, ["--gpus", "2", "--numa", "node"], timeout=900)
    assert planned == {0: [cpu_a], 1: [cpu_b]}
    assert {r["rank"]: r["cpus"] for r in seen} == planned
    assert {r["gpus"] for r in seen} == {"0,1"}  # stand-in hook: the request arrived
    assert project_containers(docker_client, name) == []
    image = docker_client.images.get(f"{name}:latest")
    assert image.labels["io.gpulaunch.managed"] == "true"
    assert image.labels["io.gpulaunch.torch"] == "2.13.0"
