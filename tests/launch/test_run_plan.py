"""`gpulaunch run --dry-run` / `--no-container` on fixture topologies: per-rank binding,
env with sources, and a real two-rank host run whose affinity equals the plan."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from affinity_check import FIXTURES, plan_and_run, tiny2_on_allowed_cpus
from conftest import EXAMPLES, REPO
from typer.testing import CliRunner

from gpulaunch.cli.app import app


@pytest.fixture(autouse=True)
def _examples_are_copies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """EXAMPLES here means a fresh copy: runs and dry runs never touch the checked-in ones."""
    copy = tmp_path / "examples"
    shutil.copytree(EXAMPLES, copy, symlinks=True)
    monkeypatch.setattr(sys.modules[__name__], "EXAMPLES", copy)


def _dry(runner: CliRunner, monkeypatch: pytest.MonkeyPatch, fixture: str, *args: str) -> dict:
    monkeypatch.setenv("GPULAUNCH_SYSFS_ROOT", str(FIXTURES / fixture))
    monkeypatch.chdir(EXAMPLES / "ddp")
    result = runner.invoke(app, ["run", "train_ddp.py", *args, "--dry-run", "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_issue_example_on_dgx8(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _dry(
        runner,
        monkeypatch,
        "dgx8",
        "--gpus",
        "4",
        "--nccl",
        "debug",
        "--numa",
        "auto",
        "--precision",
        "bf16",
    )
    ranks = plan["numa_plan"]
    node0 = list(range(0, 8)) + list(range(16, 24))
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["numa_node"] == 0 and r["cpus"] == node0 for r in ranks)
    assert len({r["gpu"] for r in ranks}) == 4
    env = plan["run"]["env"]
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert env["GPULAUNCH_PRECISION"] == "bf16"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    numa_env = json.loads(env["GPULAUNCH_NUMA_PLAN"])
    assert [r["cpus"] for r in numa_env["ranks"]] == [node0] * 4
    assert plan["sources"]["NCCL_DEBUG"] == "nccl preset debug"
    command = plan["run"]["command"]
    assert command[:4] == ["torchrun", "--standalone", "--nproc-per-node", "4"]
    assert command[4] == "/opt/gpulaunch/bin/numa_bind.py"
    targets = {m["target"] for m in plan["run"]["options"]["mounts"]}
    assert "/opt/gpulaunch/bin/numa_bind.py" in targets
    assert "/opt/gpulaunch/lib/gpulaunch_precision.py" in targets


def test_gpu_selection_maps_ranks_by_bus_id(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _dry(runner, monkeypatch, "dgx8", "--gpus", "5,1", "--numa", "node")
    ranks = plan["numa_plan"]
    assert [r["numa_node"] for r in ranks] == [1, 0]  # rank 0 is GPU 5, on socket 1
    assert plan["run"]["options"]["gpus"] == "5,1"
    assert '"device=5,1"' in plan["run"]["docker_run"]


def test_too_many_gpus_is_a_usage_error(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULAUNCH_SYSFS_ROOT", str(FIXTURES / "box4"))
    monkeypatch.chdir(EXAMPLES / "ddp")
    result = runner.invoke(app, ["run", "train_ddp.py", "--gpus", "8", "--dry-run"])
    assert result.exit_code == 2
    assert "--gpus: " in result.stderr and "8" in result.stderr
    assert "Traceback" not in result.stderr


def test_deprecated_env_names_warn(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLES / "ddp")
    result = runner.invoke(
        app,
        [
            "run",
            "train_ddp.py",
            "--gpus",
            "0",
            "--env",
            "NCCL_ASYNC_ERROR_HANDLING=1",
            "--env",
            "NCCL_TIMEOUT=600",
            "--dry-run",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in result.stderr
    assert "NCCL_TIMEOUT" in result.stderr
    env = json.loads(result.stdout)["run"]["env"]
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_cpu_run_has_no_numa_plan_and_script_args_pass_through(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(EXAMPLES / "cpu")
    result = runner.invoke(
        app, ["run", "train_ddp.py", "--lr", "0.1", "--dry-run", "--json", "--", "--gpus", "9"]
    )
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["numa_plan"] == []
    assert plan["run"]["command"][-5:] == ["/workspace/train_ddp.py", "--lr", "0.1", "--gpus", "9"]
    assert plan["run"]["options"]["gpus"] == 0


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed CPUs")
def test_host_mode_two_ranks_follow_the_plan(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # torchrun comes with torch; .ci/run installs the CPU wheel
    project = tmp_path / "proj"
    project.mkdir()
    (project / "gpulaunch.yaml").write_text("version: 1\nname: affinity\n")
    fixture, (cpu_a, cpu_b) = tiny2_on_allowed_cpus(tmp_path)
    planned, seen = plan_and_run(
        project,
        fixture,
        ["--no-container", "--gpus", "2", "--numa", "node", "--precision", "fp32"],
        timeout=300,
    )
    assert planned == {0: [cpu_a], 1: [cpu_b]}
    assert {r["rank"]: r["cpus"] for r in seen} == planned
    assert {r["precision"] for r in seen} == {"fp32"}


def test_host_mode_exit_code_passes_through(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "gpulaunch.yaml").write_text("version: 1\nname: codes\nlaunch: {gpus: 0}\n")
    (project / "fail.py").write_text("import sys; print('hello'); sys.exit(5)\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpulaunch", "run", "fail.py", "--no-container"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "VIRTUAL_ENV": sys.prefix},
    )
    assert proc.returncode == 5
    assert "hello" in proc.stdout


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--numa", "sometimes"], "--numa: 'sometimes' is not one of"),
        (["--nccl", "warp"], "--nccl: unknown NCCL preset 'warp'"),
        (["--precision", "fp8"], "--precision: 'fp8' is not one of"),
        (["--network", "bridge"], "--network: 'bridge' is not default, host or none"),
    ],
)
def test_bad_launch_flags_are_usage_errors(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, flag: list[str], message: str
) -> None:
    monkeypatch.chdir(EXAMPLES / "cpu")
    result = runner.invoke(app, ["run", "train_ddp.py", *flag, "--dry-run"])
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_python_m_with_several_processes_is_torchrun_m(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(EXAMPLES / "cpu")
    argv = ["run", "--nproc", "2", "--dry-run", "--json", "--", "python", "-m", "pkg.train", "-x"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.stderr
    run = json.loads(result.stdout)["run"]
    assert run["command"] == [
        "torchrun", "--standalone", "--nproc-per-node", "2", "-m", "pkg.train", "-x"
    ]  # fmt: skip
    # the project root is importable from scripts in subfolders
    assert run["env"]["PYTHONPATH"].split(":")[-1] == "/workspace"
    one = runner.invoke(app, [*argv[:1], "--nproc", "1", *argv[3:]])
    assert json.loads(one.stdout)["run"]["command"] == ["python", "-m", "pkg.train", "-x"]


def test_several_processes_on_a_plain_script_warn(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "gpulaunch.yaml").write_text("version: 1\nname: lone\nimage: {cuda: cpu}\n")
    (tmp_path / "plain.py").write_text("print('one copy')\n")
    (tmp_path / "ddp.py").write_text(
        "import torch.distributed as dist\ndist.init_process_group()\n"
    )
    monkeypatch.chdir(tmp_path)
    two = runner.invoke(app, ["run", "--gpus", "0", "--nproc", "2", "--dry-run", "plain.py"])
    assert two.exit_code == 0, two.stderr
    assert "plain.py shows no sign of distributed use" in two.stderr
    ddp = runner.invoke(app, ["run", "--gpus", "0", "--nproc", "2", "--dry-run", "ddp.py"])
    assert "no sign of distributed use" not in ddp.stderr
    one = runner.invoke(app, ["run", "--gpus", "0", "--nproc", "1", "--dry-run", "plain.py"])
    assert "no sign of distributed use" not in one.stderr


def test_gpus_asked_of_a_cpu_image_warn(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`run --gpus 2` of a CPU build starts (the stub hook hands over devices), but torch in
    it sees no GPU: the run says so; a CUDA build and a --gpus 0 run do not."""
    (tmp_path / "gpulaunch.yaml").write_text("version: 1\nname: cpuimg\nimage: {cuda: cpu}\n")
    (tmp_path / "train.py").write_text("import torch.distributed as dist\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPULAUNCH_SYSFS_ROOT", raising=False)
    two = runner.invoke(app, ["run", "--gpus", "2", "--dry-run", "train.py"])
    assert two.exit_code == 0, two.stderr
    assert (
        "warning: --gpus 2: the image is a CPU build (image.cuda: cpu): torch in it cannot use "
        "the GPUs asked for" in two.stderr
    )
    none = runner.invoke(app, ["run", "--gpus", "0", "--dry-run", "train.py"])
    assert "CPU build" not in none.stderr
    cuda_config = "version: 1\nname: gpuimg\nimage: {torch: '2.4.1', cuda: '12.4'}\n"
    (tmp_path / "gpulaunch.yaml").write_text(cuda_config)
    cuda = runner.invoke(app, ["run", "--gpus", "2", "--dry-run", "train.py"])
    assert cuda.exit_code == 0, cuda.stderr
    assert "CPU build" not in cuda.stderr


def test_src_layout_on_pythonpath_in_run(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A src/ package nothing installs is importable in `run` as in the image."""
    (tmp_path / "gpulaunch.yaml").write_text(
        "version: 1\nname: srcl\nimage: {cuda: cpu, requirements: requirements.txt}\n"
    )
    (tmp_path / "requirements.txt").write_text("numpy\n")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("import pkg\n")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--gpus", "0", "--dry-run", "--json", "train.py"])
    assert result.exit_code == 0, result.stderr
    path = json.loads(result.stdout)["run"]["env"]["PYTHONPATH"].split(":")
    assert path[-2:] == ["/workspace", "/workspace/src"]
