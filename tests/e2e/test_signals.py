"""Ctrl-C, SIGTERM and SIGHUP sent to a real `gpulaunch run` process while its job runs.

The first signal becomes SIGTERM for the job (docker-init forwards it to python or to
torchrun, which forwards it to every rank); gpulaunch exits 130 (SIGINT), 143 (SIGTERM) or
129 (SIGHUP)
and removes the container. A second Ctrl-C kills the job at once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.support import SESSION_NAME, LiveJob, cli_env, container_name, gl_argv, managed_containers

pytestmark = pytest.mark.docker


@pytest.fixture
def start_job(app: Path) -> Iterator[Any]:
    jobs: list[LiveJob] = []

    def start(*args: str) -> LiveJob:
        job = LiveJob(gl_argv("run", *args), cwd=app, env=cli_env())
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()


def _assert_no_container(client: Any, job: LiveJob) -> None:
    name = container_name("\n".join(job.stderr))
    assert client.containers.list(all=True, filters={"name": name}) == [], job.describe()
    assert managed_containers(client, SESSION_NAME) == [], job.describe()


@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize(
    ("signum", "expected"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
    ids=["INT", "TERM", "HUP"],  # HUP: the terminal or ssh session closed
)
def test_signal_stops_the_job_gracefully(
    start_job: Any, docker_client: Any, nproc: int, signum: int, expected: int
) -> None:
    job = start_job("--nproc", str(nproc), "sleeper.py")
    job.wait_for("ready rank", count=nproc)

    job.send(signum)
    code = job.finish(timeout=90)

    assert code == expected, job.describe()
    # the job's own handler ended it (the stop timeout's SIGKILL would leave no such line)
    for rank in range(nproc):
        assert f"got SIGTERM rank {rank}" in job.stdout, job.describe()
    assert not any("slept through" in line for line in job.stdout)
    assert f"gpulaunch: job exited with {expected}" in job.stderr, job.describe()
    # torchrun reports its SignalException with a traceback (job output); gpulaunch must not.
    assert not any("/gpulaunch/" in line and 'File "' in line for line in job.stderr)
    _assert_no_container(docker_client, job)


def test_second_ctrl_c_kills_a_job_that_ignores_sigterm(start_job: Any, docker_client: Any) -> None:
    job = start_job("sleeper.py", "--ignore-term")
    job.wait_for("ready rank 0")

    job.send(signal.SIGINT)
    job.wait_for("ignored SIGTERM rank 0")  # the first Ctrl-C reached the job as SIGTERM...
    assert job.proc.poll() is None, "the first Ctrl-C must wait for the job\n" + job.describe()
    job.send(signal.SIGINT)
    code = job.finish(timeout=90)

    assert code == 130, job.describe()
    # ...and the second killed it: it never slept through (runner's unit tests prove the kill
    # is immediate: tests/test_supervisor.py::test_a_second_ctrl_c_kills_at_once)
    assert not any("got SIGTERM" in line or "slept through" in line for line in job.stdout)
    _assert_no_container(docker_client, job)
