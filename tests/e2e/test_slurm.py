"""`export slurm` / `submit slurm` on a real one-node Slurm: the exported script runs in
docker mode (the session image) and in none mode (gpulaunch on the node), 2 processes on CPU,
and ends COMPLETED with the all-reduce in its output; a failing job ends FAILED with
gpulaunch's message in its output."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.slurm_cluster import slurm_cluster, wait_for_job
from e2e.support import cli_env, gl

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def _env(slurm_env: dict[str, str]) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)  # gpulaunch on the node's PATH (none mode)
    return cli_env(SLURM_CONF=slurm_env["SLURM_CONF"], PATH=f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize("container", ["docker", "none"])
def test_exported_script_runs_on_slurm(
    app: Path, slurm_env: dict[str, str], container: str
) -> None:
    name = f"gl-{container}"
    result = gl(
        "submit",
        "slurm",
        "allreduce.py",
        "--container",
        container,
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--name",
        name,
        cwd=app,
        env=_env(slurm_env),
    )
    assert result.returncode == 0, result.describe()
    job_id = result.stdout.strip()
    assert job_id.isdigit(), result.describe()
    state = wait_for_job(job_id, slurm_env)
    output = (app / f"{name}-{job_id}.out").read_text()
    assert state == "COMPLETED", output
    sums = dict(re.findall(r"^rank (\d)/2 all_reduce=(\S+)$", output, re.M))
    assert sums == {"0": "3.0", "1": "3.0"}, output


def test_failing_job_shows_failed(app: Path, slurm_env: dict[str, str]) -> None:
    result = gl(
        "submit",
        "slurm",
        "exit_with.py",
        "--container",
        "none",
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--name",
        "gl-fails",
        "--",
        "7",
        cwd=app,
        env=_env(slurm_env),
    )
    assert result.returncode == 0, result.describe()
    job_id = result.stdout.strip()
    state = wait_for_job(job_id, slurm_env)
    output = (app / f"gl-fails-{job_id}.out").read_text()
    assert state == "FAILED", output
    assert "gpulaunch: job exited with" in output
    assert "gpulaunch: job step failed with exit code" in output
