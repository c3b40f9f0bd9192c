"""`run --nnodes`: the torchrun rendezvous options, host networking, and each refusal."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.cli.app import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpu"


@pytest.fixture
def cpu_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "cpu"
    shutil.copytree(EXAMPLE, project)
    monkeypatch.chdir(project)
    return project


def _run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", "train_ddp.py", "--dry-run", *args])
    return result.exit_code, result.stdout, result.stderr


def test_rendezvous_options_and_host_network(runner: CliRunner, cpu_project: Path) -> None:
    code, out, err = _run(
        runner, "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "10.0.0.5:29400"
    )
    assert code == 0, err
    line = out.splitlines()[-1]
    assert "--network host" in line
    assert (
        "torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint 10.0.0.5:29400 "
        "--rdzv-id example-cpu --node-rank 1 --nproc-per-node 2 /workspace/train_ddp.py"
    ) in line


@pytest.mark.parametrize(("addr", "shown"), [("node-7.cluster", None), ("fd00::0:7", "fd00::7")])
def test_local_addr_reaches_torchrun(
    runner: CliRunner, cpu_project: Path, addr: str, shown: str | None
) -> None:
    code, out, err = _run(
        runner, "--nnodes", "2", "--rdzv-endpoint", "10.0.0.5:29400", "--local-addr", addr
    )
    assert code == 0, err
    assert "--node-rank" not in out.splitlines()[-1]
    assert f"--rdzv-id example-cpu --local-addr {shown or addr} --nproc-per-node 2" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "0", "--rdzv-endpoint", "h:1"], "--nnodes: 0 is not between 1 and 4096"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank: 2 is not"),
        (["--nnodes", "2", "--rdzv-endpoint", "h"], "--rdzv-endpoint: 'h' is not HOST:PORT"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:70000"], "--rdzv-endpoint: 'h:70000' is not"),
        (["--nnodes", "2", "--rdzv-endpoint", "a b:1"], "--rdzv-endpoint: 'a b' is not a host"),
        (["--nnodes", "2"], "--rdzv-endpoint: required with --nnodes"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--network", "none"], "--network: none"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--rdzv-id", "a/b"], "--rdzv-id: 'a/b'"),
        (["--node-rank", "1"], "--node-rank/--rdzv-endpoint/--rdzv-id/--local-addr: need"),
        (["--local-addr", "10.0.0.6"], "--node-rank/--rdzv-endpoint/--rdzv-id/--local-addr: need"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--local-addr", "a b"], "--local-addr: 'a b'"),
        (["--nnodes", "2", "--rdzv-endpoint", "h:1", "--local-addr", "[::1]"], "--local-addr:"),
        (
            ["--nnodes", "2", "--rdzv-endpoint", "h:1", "--local-addr", "n1\u2028x"],
            "--local-addr",
        ),
        (
            ["--nnodes", "2", "--rdzv-endpoint", "h:1", "--nccl", "ib-gdr", "--network", "default"],
            "--nccl: ib-gdr needs host networking",
        ),
    ],
)
def test_refusals(runner: CliRunner, cpu_project: Path, args: list[str], message: str) -> None:
    code, out, err = _run(runner, *args)
    assert code == 2 and out == ""
    assert err.startswith(f"gpulaunch: error: {message}"), err
    assert len(err.strip().splitlines()) == 1
