"""One process is one process, and torchrun hides nothing (issue 31 §3), on the real engine.

A script that calls init_process_group and runs as one rank is started without torchrun, with
the variables torchrun would give it: its argparse error is its own last lines and its exit
code 2 is gpulaunch's. Two real gloo ranks under torchrun: a rank that exits 3 makes gpulaunch
exit 3, a rank killed by SIGKILL makes it exit 137, each named once, on the last line; the run
record and `gpulaunch explain` name the rank's own error, never torchrun's ChildFailedError.

Its own project (the app's files and the offline torch wheels, its scripts added before the
build: a script written into the shared session project would make every later run rebuild).
The same promises hold under `run --no-container` (`python -m torch.distributed.run` on this
host, with the venv's CPU torch): the last test, which needs no engine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    Result,
    app_config,
    cli_env,
    gl,
    link_wheels,
    temp_name,
    write_project,
)

# argparse first, then the group: under torchrun --nproc-per-node 1 its error was buried
# under torchrun's summary and exit 2 became 1
ARGS_THEN_GROUP = """\
import argparse, os
import torch.distributed as dist
parser = argparse.ArgumentParser(prog="ddp_args.py")
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()}/{dist.get_world_size()} lr={args.lr} "
      f"local={os.environ['LOCAL_RANK']} torchrun={'TORCHELASTIC_RUN_ID' in os.environ}",
      flush=True)
dist.destroy_process_group()
"""
# rank 1 fails the way it is told; rank 0 waits until torchrun stops it. (Had rank 0 failed
# too, in the same second, torchrun could name either as the first failure: it orders
# failures without an error file by a timestamp in whole seconds.)
RANK_ONE_FAILS = """\
import os, signal, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    how = sys.argv[1]
    if how == "exit3":
        sys.stderr.write("rank one: cannot read shard 7 of the training set\\n")
        sys.stderr.flush()
        sys.exit(3)
    if how == "keyerror":
        labels = {"cat": 0}
        labels["dog"]
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
time.sleep(300)
"""


@pytest.fixture(scope="module")
def proj(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = write_project(
        tmp_path_factory.mktemp("oneproc") / "app", "app", app_config(temp_name("oneproc"))
    )
    link_wheels(project)
    (project / "ddp_args.py").write_text(ARGS_THEN_GROUP)
    (project / "rank_fails.py").write_text(RANK_ONE_FAILS)
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    return project


def _run(proj: Path, *args: str) -> Result:
    result = gl("run", *args, cwd=proj, env=cli_env())
    assert "is up to date" in result.stderr, "rebuilt:\n" + result.describe()
    return result


def _ours(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("gpulaunch:")]


def _newest_record(proj: Path) -> dict[str, Any]:
    runs = (proj / ".gpulaunch" / "runs").glob("*.json")
    return dict(json.loads(max(runs, key=lambda p: p.stat().st_mtime).read_text()))


@pytest.mark.docker
def test_one_rank_runs_without_torchrun_and_keeps_its_argparse_error_and_exit_2(
    proj: Path,
) -> None:
    bad = _run(proj, "ddp_args.py", "--lr", "fast")
    assert bad.returncode == 2, bad.describe()
    assert "torchrun" not in bad.stderr and "ChildFailedError" not in bad.stderr
    job = [
        line
        for line in bad.stderr.splitlines()
        if not line.startswith(("gpulaunch:", "running gl-"))
    ]
    job = [line for line in job if "is up to date" not in line and "NumPy" not in line]
    assert job[-2:] == [
        "usage: ddp_args.py [-h] --lr LR",
        "ddp_args.py: error: argument --lr: invalid float value: 'fast'",
    ], bad.describe()
    assert bad.stderr.strip().splitlines()[-1] == "gpulaunch: job exited with 2", bad.describe()
    good = _run(proj, "ddp_args.py", "--lr", "0.5")
    assert good.returncode == 0, good.describe()
    # a real process group of one, from the variables gpulaunch gave (no torchrun agent)
    assert "rank 0/1 lr=0.5 local=0 torchrun=False" in good.stdout, good.describe()


@pytest.mark.docker
def test_a_rank_that_exits_3_makes_gpulaunch_exit_3_naming_the_rank_once(proj: Path) -> None:
    result = _run(proj, "--nproc", "2", "rank_fails.py", "exit3")
    assert result.returncode == 3, result.describe()
    ours = _ours(result)
    assert ours[-2] == "gpulaunch: job exited with 3", result.describe()
    last = ours[-1]
    assert result.stderr.strip().splitlines()[-1] == last
    assert last.startswith("gpulaunch: cause: rank 1 (local rank 1) failed first and exited with 3")
    assert "cannot read shard 7 of the training set" in last
    assert sum("rank 1" in line for line in ours) == 1, result.describe()
    record = _newest_record(proj)
    assert record["exit_code"] == 3 and record["explanation"]["id"] == "rank-failed"
    again = gl("explain", record["id"], cwd=proj, env=cli_env())
    assert again.returncode == 0, again.describe()
    assert "rank 1" in again.stdout and "cannot read shard 7" in again.stdout
    assert "ChildFailedError" not in again.stdout + again.stderr


@pytest.mark.docker
def test_explain_names_the_ranks_own_exception_not_childfailederror(proj: Path) -> None:
    result = _run(proj, "--nproc", "2", "rank_fails.py", "keyerror")
    assert result.returncode == 1, result.describe()
    assert "ChildFailedError" in result.stderr  # torchrun's summary is there, passed through
    record = _newest_record(proj)
    assert record["explanation"]["line"] == "KeyError: 'dog'", record
    again = gl("explain", record["id"], cwd=proj, env=cli_env())
    assert again.stdout.splitlines()[0] == (
        "cause: rank 1 (local rank 1) failed first and exited with 1: KeyError: 'dog'"
    ), again.describe()
    # the same output as a log file: read through torchrun's summary the same way
    log = proj / "job.log"
    log.write_text(result.stderr)
    try:
        as_file = gl("explain", "job.log", "--json", cwd=proj, env=cli_env())
    finally:
        log.unlink()
    assert json.loads(as_file.stdout)["explanation"] == record["explanation"]


@pytest.mark.docker
def test_a_rank_killed_by_sigkill_is_reported_once_as_137(proj: Path) -> None:
    result = _run(proj, "--nproc", "2", "rank_fails.py", "sigkill")
    assert result.returncode == 137, result.describe()
    ours = _ours(result)
    assert ours[-2] == "gpulaunch: job exited with 137", result.describe()
    assert ours[-1].startswith(
        "gpulaunch: cause: rank 1: the job was killed with SIGKILL (exit 137)"
    )
    assert result.stderr.strip().splitlines()[-1] == ours[-1]
    assert sum("SIGKILL" in line for line in ours) == 1, result.describe()
    record = _newest_record(proj)
    assert record["exit_code"] == 137 and record["signal"] == "SIGKILL"
    assert record["explanation"]["id"] == "killed"


def test_on_this_host_one_rank_and_a_failed_rank_keep_their_own_exit_codes(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the CPU wheel dev/bootstrap puts in the venv
    project = tmp_path / "host"
    project.mkdir()
    (project / "gpulaunch.yaml").write_text(
        "version: 1\nname: hostranks\nimage: {torch: none, cuda: cpu}\n"
        f"launch: {{gpus: 0, python: {sys.executable}}}\n"
    )
    (project / "ddp_args.py").write_text(ARGS_THEN_GROUP)
    (project / "rank_fails.py").write_text(RANK_ONE_FAILS)
    env = cli_env(GPULAUNCH_STATE_DIR=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path))
    bad = gl("run", "--no-container", "ddp_args.py", "--lr", "fast", cwd=project, env=env)
    assert bad.returncode == 2, bad.describe()
    assert "ddp_args.py: error: argument --lr: invalid float value: 'fast'" in bad.stderr
    assert "torch.distributed.run" not in bad.stderr and "ChildFailedError" not in bad.stderr
    two = gl(
        "run", "--no-container", "--nproc", "2", "rank_fails.py", "exit3", cwd=project, env=env
    )
    assert two.returncode == 3, two.describe()
    ours = _ours(two)
    assert ours[-2:] == [
        "gpulaunch: job exited with 3",
        "gpulaunch: cause: rank 1 (local rank 1) failed first and exited with 3; its last "
        "line: rank one: cannot read shard 7 of the training set; fix: no known environment cause "
        "matched, so the error is most likely the job's own (code, data or arguments): read "
        "rank 1's traceback above torchrun's summary (see "
        "https://pytorch.org/docs/stable/elastic/errors.html)",
    ], two.describe()
