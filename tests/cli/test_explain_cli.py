"""`gpulaunch explain RUN_ID|LOGFILE` through the typer app, and when `run` passes stdin or
allocates a terminal (`engine.supervise.choose`, with real pipes, files and a pty)."""

from __future__ import annotations

import json
import os
import pty
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.engine.supervise import choose
from gpulaunch.records.seal import seal

LOGS = Path(__file__).resolve().parent.parent / "records" / "failure_logs"
RUN_ID = "20261204-101500-abcdef"


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def project(in_tmp: Path) -> Path:
    (in_tmp / "gpulaunch.yaml").write_text(
        "version: 1\nname: demo\nimage: {torch: none, cuda: cpu}\nlaunch: {gpus: 0}\n"
    )
    return in_tmp


def _record(project: Path, **extra: Any) -> None:
    runs = project / ".gpulaunch" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    record = {"schema_version": 1, "id": RUN_ID, "state": "failed", "exit_code": 1, **extra}
    (runs / f"{RUN_ID}.json").write_text(json.dumps(seal(record)))  # history reads sealed ones


def test_explain_a_log_file(runner: CliRunner, project: Path) -> None:
    (project / "job.log").write_bytes((LOGS / "cuda_oom_torch2.log").read_bytes())
    result = invoke(runner, "explain", "job.log")
    assert result.exit_code == 0, result.stderr
    cause, fix, see = result.stdout.splitlines()
    assert cause == "cause: the GPU ran out of memory (CUDA out of memory)"
    assert fix.startswith("fix: lower the batch size") and "--expandable-segments" in fix
    assert see.startswith("see: https://pytorch.org/")
    data = json.loads(invoke(runner, "explain", "job.log", "--json").stdout)
    assert data["explanation"]["id"] == "cuda-oom"


def test_explain_a_run_id_shows_the_recorded_explanation(runner: CliRunner, project: Path) -> None:
    _record(project, explanation={"id": "port-in-use", "cause": "C", "fix": "F", "doc": None})
    result = invoke(runner, "explain", RUN_ID)
    assert (result.exit_code, result.stdout) == (0, "cause: C\nfix: F\n")


def test_explain_a_smoke_run_reads_its_log(runner: CliRunner, project: Path) -> None:
    _record(project)
    logs = project / ".gpulaunch" / "logs"
    logs.mkdir(parents=True)
    (logs / f"smoke-20261204-101500-{RUN_ID[-6:]}.log").write_bytes(
        (LOGS / "nccl_watchdog_timeout.log").read_bytes()
    )
    result = invoke(runner, "explain", RUN_ID, "--json")
    assert json.loads(result.stdout)["explanation"]["id"] == "nccl-failure"


def test_nothing_known_is_exit_1_and_a_bad_target_exit_2(runner: CliRunner, project: Path) -> None:
    _record(project)
    result = invoke(runner, "explain", RUN_ID)
    assert result.exit_code == 1 and "no known cause found" in result.stderr
    (project / "fine.log").write_text("all good\n")
    assert invoke(runner, "explain", "fine.log").exit_code == 1
    missing = invoke(runner, "explain", "nope.log")
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [
        "gpulaunch: error: RUN_ID|LOGFILE: 'nope.log' is neither a run id nor a file"
    ]


def test_stdin_is_passed_from_a_pipe_or_file_not_from_devnull(tmp_path: Path) -> None:
    read, write = os.pipe()
    try:
        assert choose(None, None, stdin_fd=read, stdout_fd=write) == (True, False)
    finally:
        os.close(read)
        os.close(write)
    data = tmp_path / "in.txt"
    data.write_text("x")
    with data.open() as fh, open(os.devnull) as null:
        assert choose(None, None, stdin_fd=fh.fileno()) == (True, False)
        assert choose(None, None, stdin_fd=null.fileno()) == (False, False)
        assert choose(True, None, stdin_fd=null.fileno()) == (True, False)
        assert choose(None, True, stdin_fd=null.fileno()) == (False, True)
    assert choose(None, None, stdin_fd=9999) == (False, False)  # a closed descriptor


def test_a_terminal_is_allocated_only_for_a_foreground_terminal() -> None:
    parent, child = pty.openpty()
    try:
        # not this process's controlling terminal, so not in its foreground: no stdin, no tty
        assert choose(None, None, stdin_fd=child, stdout_fd=child) == (False, False)
        assert choose(None, True, stdin_fd=child, stdout_fd=child) == (False, True)
    finally:
        os.close(parent)
        os.close(child)


def test_dry_run_shows_interactive_flags_only_when_asked(runner: CliRunner, project: Path) -> None:
    plain = invoke(runner, "run", "--dry-run", "--", "cat")
    assert plain.exit_code == 0, plain.stderr
    line = next(x for x in plain.stdout.splitlines() if x.startswith("docker run "))
    assert "--interactive" not in line and "--tty" not in line
    asked = invoke(runner, "run", "--dry-run", "-i", "-t", "--", "cat")
    line = next(x for x in asked.stdout.splitlines() if x.startswith("docker run "))
    assert " --interactive --tty " in line


@pytest.mark.parametrize("flag", ["--interactive", "--tty"])
def test_interactive_flags_refuse_detach(runner: CliRunner, project: Path, flag: str) -> None:
    result = invoke(runner, "run", "--detach", flag, "--", "cat")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"gpulaunch: error: {flag}: not available with --detach"
    ]
