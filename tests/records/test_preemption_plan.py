"""Preemption settings in the launch plan: launch.checkpoint_dir, launch.stop_grace, --restarts
(seen through `run --dry-run --json`, which writes nothing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, snapshot
from typer.testing import CliRunner

from gpulaunch.cli.app import app


@pytest.fixture
def spot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "spot"
    shutil.copytree(EXAMPLES / "spot-resume", project)
    monkeypatch.chdir(project)
    return project


def _plan(runner: CliRunner, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["run", "--dry-run", "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_checkpoint_dir_and_stop_grace(runner: CliRunner, spot: Path) -> None:
    before = snapshot(spot)
    plan = _plan(runner, "--gpus", "0", "train.py")["run"]
    mounts = plan["options"]["mounts"]
    assert {
        "source": str(spot / "checkpoints"),
        "target": "/checkpoints",
        "read_only": False,
        "kind": "bind",
    } in (mounts)
    assert plan["env"]["GPULAUNCH_CHECKPOINT_DIR"] == "/checkpoints"
    assert plan["options"]["stop_timeout"] == 120
    assert "--stop-timeout" in plan["docker_run"]
    assert plan["docker_run"][plan["docker_run"].index("--stop-timeout") + 1] == "120"
    assert snapshot(spot) == before  # --dry-run made no checkpoint folder


def test_checkpoint_dir_is_not_in_the_build_context(runner: CliRunner, spot: Path) -> None:
    first = _plan(runner, "--gpus", "0", "train.py")["image"]["tag"]
    (spot / "checkpoints").mkdir()
    (spot / "checkpoints" / "step-00000010.json").write_text('{"step": 10}')
    assert _plan(runner, "--gpus", "0", "train.py")["image"]["tag"] == first


def test_restarts_use_torchrun_for_several_processes(runner: CliRunner, spot: Path) -> None:
    command = _plan(runner, "--gpus", "0", "--nproc", "2", "--restarts", "3", "train.py")["run"][
        "command"
    ]
    assert command[:3] == ["torchrun", "--max-restarts", "3"]
    single = _plan(runner, "--gpus", "0", "--restarts", "3", "train.py")["run"]
    assert "--max-restarts" not in single["command"] and single["command"][0] == "python"
    assert "--restart" not in single["docker_run"]  # attached: gpulaunch restarts it
    detached = _plan(runner, "--gpus", "0", "-d", "--restarts", "3", "train.py")["run"]
    line = detached["docker_run"]
    assert line[line.index("--restart") + 1] == "on-failure:3"  # nobody stays: the engine does
    assert detached["options"]["restart_retries"] == 3


def test_host_mode_checkpoint_folder_is_created_on_the_host(runner: CliRunner, spot: Path) -> None:
    outside = spot.parent / "ckpt" / "deep"
    text = (spot / "gpulaunch.yaml").read_text().replace("checkpoints   #", f"{outside}   #")
    (spot / "gpulaunch.yaml").write_text(text)
    result = runner.invoke(
        app,
        ["run", "--no-container", "--gpus", "0", "train.py"],
        env={"STEPS": "2", "STEP_SECONDS": "0"},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["step-00000002.json"]
    assert json.loads((outside / "step-00000002.json").read_text()) == {"step": 2, "weight": 1.0}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("stop_grace: 0", "launch.stop_grace"),
        ("checkpoint_dir: ''", "launch.checkpoint_dir"),
        ("checkpoint_dir: .", "launch.checkpoint_dir: must not be the project folder"),
    ],
)
def test_bad_preemption_settings(runner: CliRunner, spot: Path, value: str, message: str) -> None:
    (spot / "gpulaunch.yaml").write_text(
        f"version: 1\nname: spot\nimage: {{torch: none, cuda: cpu}}\nlaunch:\n  {value}\n"
    )
    result = runner.invoke(app, ["run", "--dry-run", "--gpus", "0", "train.py"])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
