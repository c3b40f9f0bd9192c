"""`export slurm`: the sbatch script for every container mode is shellcheck-clean and
carries the #SBATCH lines, the rendezvous and the container invocation asked for."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.export.slurm import CONTAINERS

IMAGE = "registry.example.com/ml/train:v1"


def _project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    config: dict[str, Any] = {"version": 1, "name": "trainer", "image": {"torch": "2.4.1"}}
    config["launch"] = {"gpus": 8, "env": {"WEIRD": "it's $HOME `x`"}}
    (tmp_path / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _shellcheck(path: Path) -> None:
    tool = shutil.which("shellcheck")
    assert tool, "shellcheck is not installed (apt-get install shellcheck)"
    proc = subprocess.run([tool, "-s", "bash", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("nodes", [1, 4])
def test_sbatch_script(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, container: str, nodes: int
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    code, _out, err = invoke(
        runner,
        "export",
        "slurm",
        "train.py",
        "--nodes",
        str(nodes),
        "--container",
        container,
        "--image",
        IMAGE,
        "--partition",
        "gpu",
        "--account",
        "ml",
        "--time",
        "24:00:00",
        "--cpus",
        "64",
        "-o",
        "job.sbatch",
        "--",
        "--lr",
        "0.1 x",
    )
    assert code == 0, err
    script = project / "job.sbatch"
    text = script.read_text()
    _shellcheck(script)
    sbatch = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    for line in (
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--cpus-per-task=64",
        "--time=24:00:00",
        "--partition=gpu",
        "--account=ml",
        "--signal=B:SIGTERM@120",
        "--job-name=trainer",
    ):
        assert f"#SBATCH {line}" in sbatch
    assert 'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "'--lr' '0.1 x'" in srun or "--lr '0.1 x'" in srun
    if container == "none":
        assert f"gpulaunch run --no-container --nnodes {nodes}" in srun
        assert '--rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$SLURM_JOB_ID"' in srun
        assert f"#SBATCH --chdir={project}" in sbatch
    else:
        assert f"torchrun --nnodes {nodes} --nproc-per-node 8 --rdzv-backend c10d" in srun
        assert "export WEIRD='it'\"'\"'s $HOME `x`'" in text
    if container == "pyxis":
        assert "--container-image=registry.example.com#ml/train:v1" in srun
    if container == "apptainer":
        assert f"apptainer exec --nv --pwd /workspace docker://{IMAGE}" in srun
    if container == "docker":
        assert "docker run --rm --init --network host --ipc host --gpus 8" in srun
        assert "--env WEIRD" in srun


@pytest.mark.parametrize("container", CONTAINERS)
def test_profile_memory_is_the_jobs_memory(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, container: str
) -> None:
    """The profile's docker.memory becomes `#SBATCH --mem` (what Slurm gives each node), and
    a container the engine starts (outside the job's cgroup) gets `--memory` as well."""
    project = _project(tmp_path)
    config = yaml.safe_load((project / "gpulaunch.yaml").read_text())
    config["profiles"] = {
        "big": {"docker": {"memory": "64g"}},
        "odd": {"docker": {"memory": "3000000"}},
    }
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(project)
    base = ["export", "slurm", "train.py", "--container", container, "--image", IMAGE]
    code, out, err = invoke(runner, *base, "--profile", "big")
    assert code == 0, err
    assert "#SBATCH --mem=64G" in out.splitlines()
    srun = next(line for line in out.splitlines() if line.startswith("srun "))
    assert ("--memory 64g" in srun) == (container in ("docker", "podman"))
    if container == "none":  # gpulaunch run on the node applies the profile itself
        assert "--profile big" in srun
    code, out, err = invoke(runner, *base, "--profile", "odd")
    assert code == 0, err
    assert "#SBATCH --mem=3M" in out.splitlines()  # Slurm counts no bytes: 2.86 MiB -> 3M
    code, out, err = invoke(runner, *base)
    assert code == 0, err
    assert not any(line.startswith("#SBATCH --mem") for line in out.splitlines())
    assert "--memory" not in out


def test_local_image_only_for_one_docker_node(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", "slurm", "train.py", "--container", "docker")
    assert code == 0, err
    assert " trainer:gl-" in out  # the one node is this machine's engine
    code, out, err = invoke(runner, "export", "slurm", "train.py", "--nodes", "2")
    assert code == 2 and "exists only on this machine" in err and out == ""
    code, out, err = invoke(runner, "export", "slurm", "train.py", "--container", "pyxis")
    assert code == 2 and "build --push" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--container", "lxc"], "--container: 'lxc' is not one of pyxis, apptainer"),
        (["--time", "1 day"], "--time: '1 day' is not a Slurm time"),
        (["--partition", "gpu;rm"], "--partition: 'gpu;rm' is not a Slurm name"),
        (["--nodes", "0"], "--nodes: 0 is not between 1 and 4096"),
        (["--cpus", "0"], "--cpus: 0 is not between 1 and 4096"),
    ],
)
def test_bad_input(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    project = _project(tmp_path)
    monkeypatch.chdir(project)
    code, out, err = invoke(runner, "export", "slurm", "train.py", "--image", IMAGE, *args)
    assert code == 2 and out == ""
    assert err.startswith(f"gpulaunch: error: {message}"), err
