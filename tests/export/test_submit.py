"""`submit k8s|slurm`: the seam gets the exported text; --dry-run prints and calls nothing;
a missing tool is exit 3 with the fix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.outside import tools

IMAGE = "registry.example.com/ml/train:v1"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    config: dict[str, Any] = {"version": 1, "name": "trainer", "image": {"torch": "2.4.1"}}
    (tmp_path / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_submit_k8s_pipes_the_manifest_to_kubectl(
    runner: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], str | None]] = []

    def fake_run(argv: list[str], stdin: str | None = None, timeout: float = 60) -> Any:
        calls.append((argv, stdin))
        return subprocess.CompletedProcess(argv, 0, "job.batch/trainer created\n", "")

    monkeypatch.setattr(tools, "find_tool", lambda name, fix: f"/usr/bin/{name}")
    monkeypatch.setattr(tools, "run_tool", fake_run)
    code, out, err = invoke(
        runner, "submit", "k8s", "train.py", "--image", IMAGE, "--context", "prod"
    )
    assert code == 0, err
    assert out == "job.batch/trainer created\n"
    ((argv, stdin),) = calls
    assert argv == ["/usr/bin/kubectl", "--context", "prod", "apply", "-f", "-"]
    assert [d["kind"] for d in yaml.safe_load_all(stdin or "")] == ["Service", "Job"]


def test_submit_k8s_dry_run_calls_nothing(
    runner: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tools, "run_tool", lambda *a, **k: pytest.fail("ran a tool"))
    code, out, err = invoke(runner, "submit", "k8s", "train.py", "--image", IMAGE, "--dry-run")
    assert code == 0, err
    assert out.startswith("# kubectl apply -f - <<'MANIFEST'\n")
    assert out.rstrip().endswith("MANIFEST") and 'kind: "Job"' in out


def test_missing_kubectl_is_exit_3(
    runner: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(project))  # no kubectl there
    code, out, err = invoke(runner, "submit", "k8s", "train.py", "--image", IMAGE)
    assert code == 3 and out == ""
    assert err.splitlines()[0] == "gpulaunch: error: kubectl not found on PATH"
    assert err.splitlines()[1].startswith("hint: install kubectl")


def test_submit_slurm_prints_the_job_id(
    runner: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def fake_run(argv: list[str], stdin: str | None = None, timeout: float = 60) -> Any:
        seen.append(stdin or "")
        return subprocess.CompletedProcess(argv, 0, "4711;cluster\n", "")

    monkeypatch.setattr(tools, "find_tool", lambda name, fix: f"/usr/bin/{name}")
    monkeypatch.setattr(tools, "run_tool", fake_run)
    code, out, err = invoke(
        runner, "submit", "slurm", "train.py", "--image", IMAGE, "--container", "pyxis"
    )
    assert (code, out) == (0, "4711\n"), err
    assert seen[0].startswith("#!/bin/bash\n") and "#SBATCH --nodes=1" in seen[0]


def test_sbatch_refusal_is_exit_3(
    runner: CliRunner, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tools, "find_tool", lambda name, fix: f"/usr/bin/{name}")
    monkeypatch.setattr(
        tools,
        "run_tool",
        lambda argv, stdin=None, timeout=60: subprocess.CompletedProcess(
            argv, 1, "", "sbatch: error: invalid partition specified: gpu\n"
        ),
    )
    code, out, err = invoke(
        runner, "submit", "slurm", "train.py", "--image", IMAGE, "--container", "pyxis"
    )
    assert code == 3 and out == ""
    assert err.strip() == (
        "gpulaunch: error: sbatch failed: sbatch: error: invalid partition specified: gpu"
    )
