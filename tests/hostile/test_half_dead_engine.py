"""Engines that half answer: the ping works, then every request hangs.

Each engine-using command must end within the documented read timeout
(GPULAUNCH_ENGINE_TIMEOUT, here 2 s; default 60 s) with exit 3 and one line naming the
engine's address, and change nothing inside or outside the project (smoke keeps its own log,
as documented). Commands run as real processes, so a hang is caught by the subprocess timeout
instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostile.conftest import Hostile, Outcome, tree_state
from hostile.half_dead_engine import HalfDeadEngine

TIMEOUT_S = 2
SLACK_S = 10  # interpreter start-up and imports on a loaded 2-core CI machine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[HalfDeadEngine]:
    fake = HalfDeadEngine(tmp_path)
    yield fake
    fake.stop()


def _run(hostile: Hostile, engine: HalfDeadEngine, *args: str) -> tuple[Outcome, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "GPULAUNCH_"))}
    env.update(DOCKER_HOST=engine.url, GPULAUNCH_ENGINE_TIMEOUT=str(TIMEOUT_S), NO_COLOR="1")
    env["DOCKER_CONFIG"] = str(hostile.project.parent / "docker-config")  # no context
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpulaunch", *args],
        cwd=hostile.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 60,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr), time.monotonic() - start


@pytest.mark.parametrize(
    "args",
    [
        ("ps",),
        ("ps", "-a"),
        ("logs", "gl-job"),
        ("logs", "-f", "gl-job"),
        ("stop", "gl-job"),
        ("build",),
        ("run", "train.py"),
        ("run", "--detach", "train.py"),
        ("build", "--push", "127.0.0.1:1/x"),
    ],
)
def test_every_engine_command_ends_within_the_timeout(
    hostile: Hostile, engine: HalfDeadEngine, args: tuple[str, ...]
) -> None:
    before = hostile.state()
    outcome, took = _run(hostile, engine, *args)
    assert hostile.state() == before
    outcome.assert_clean_error(3, engine.url, "stopped answering", f"{TIMEOUT_S} s")
    assert took <= TIMEOUT_S + SLACK_S, took
    # it got past the reachability check (/version: the client asks no separate /_ping)
    assert any("/version" in line for line in engine.requests)


def test_smoke_reports_the_engine_within_the_timeout(
    hostile: Hostile, engine: HalfDeadEngine
) -> None:
    outside = tree_state(hostile.outside)
    junit = hostile.project / "junit.xml"
    outcome, took = _run(hostile, engine, "smoke", "--junit", str(junit), "train.py")
    assert outcome.code == 3, outcome
    assert took <= TIMEOUT_S + SLACK_S, took
    assert "Traceback" not in outcome.stderr
    error = [line for line in outcome.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and engine.url in error[0], outcome.stderr
    assert "<error" in junit.read_text() and engine.url in junit.read_text()
    assert tree_state(hostile.outside) == outside


def test_doctor_names_the_engine_on_its_engine_line(
    hostile: Hostile, engine: HalfDeadEngine
) -> None:
    before = hostile.state()
    outcome, took = _run(hostile, engine, "doctor")
    assert hostile.state() == before
    assert outcome.code == 1, outcome  # doctor's contract: a report, exit 1 on any ✗
    assert took <= TIMEOUT_S + SLACK_S, took
    line = next(x for x in outcome.stdout.splitlines() if " engine " in x)
    assert "✗" in line and engine.url in line and "stopped answering" in line


def test_an_engine_that_stalls_before_its_version_is_the_connect_error(
    hostile: Hostile, tmp_path: Path
) -> None:
    fake = HalfDeadEngine(tmp_path, answer_version=False)
    try:
        outcome, took = _run(hostile, fake, "ps")
    finally:
        fake.stop()
    outcome.assert_clean_error(3, fake.url, "no answer within 5 s")
    assert took <= 5 + SLACK_S, took


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "1e9"])
def test_a_bad_engine_timeout_is_exit_2(
    hostile: Hostile, engine: HalfDeadEngine, value: str
) -> None:
    hostile.monkeypatch.setenv("DOCKER_HOST", engine.url)
    hostile.monkeypatch.setenv("GPULAUNCH_ENGINE_TIMEOUT", value)
    hostile.invoke_unchanged("ps").assert_clean_error(2, "GPULAUNCH_ENGINE_TIMEOUT", repr(value))
