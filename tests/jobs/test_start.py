"""The one job-start sequence (jobs/execute.start_job) that run, rerun, shell and smoke share:
the same steps for each, what differs passed as data (`Start`). Fakes only at the engine seam."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.errors import EngineError

PACKAGE = Path(__file__).resolve().parents[2] / "gpulaunch"
PUSHED = "registry.example/team/job@sha256:" + "a" * 64
CONFIG = """\
version: 1
name: startseq
image:
  base: local/base:bookworm
  python: "3.11"
  torch: none
launch:
  gpus: 0
"""
# what nvidia-container-cli says when the image's CUDA needs a newer driver (failures.yaml)
DRIVER_REFUSAL = (
    "OCI runtime create failed: nvidia-container-cli: requirement error: "
    "unsatisfied condition: cuda>=12.4, please update your driver"
)


class RefusingEngine:
    """An engine that has the pushed image and refuses to create any container."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pull(self, ref: str) -> None:
        self.calls.append(f"pull {ref}")

    def network_names(self) -> list[str]:
        return ["bridge", "host", "none"]

    def refused_ulimits(self) -> set[str]:
        return set()

    def create_container(self, body: Any, before_start: Any = None) -> Any:
        self.calls.append("create")
        raise EngineError(DRIVER_REFUSAL)

    def discard(self, container: Any) -> None:
        raise AssertionError("no container was created, none to discard")

    def find_leftover(self, name: str, run_id: str) -> Any:
        raise EngineError(f"no container {name}")  # none was created

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"start sequence asked the engine for {name}")


@pytest.fixture
def project(in_tmp: Path) -> Path:
    (in_tmp / "gpulaunch.yaml").write_text(CONFIG)
    return in_tmp


@pytest.mark.parametrize("how", [[], ["--detach"]], ids=["attached", "detached"])
def test_every_start_explains_a_refused_start(
    project: Path, monkeypatch: pytest.MonkeyPatch, how: list[str]
) -> None:
    """A start the engine refuses for a known cause gets that cause's fix as the hint, whether
    the job is supervised or detached: one sequence, one failure path."""
    import gpulaunch.cli.jobs as cli

    engine = RefusingEngine()
    monkeypatch.setattr(cli, "make_engine", lambda: engine)
    before = snapshot(project)
    result = CliRunner().invoke(
        app, ["run", *how, "--image", PUSHED, "--", "true"], catch_exceptions=False
    )
    assert result.exit_code == 3, result.stderr
    lines = result.stderr.splitlines()
    assert lines[-2] == f"gpulaunch: error: {DRIVER_REFUSAL}"
    assert lines[-1].startswith("hint: cause: the host's NVIDIA driver is too old for the image")
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert engine.calls == [f"pull {PUSHED}", "create"]
    after = {path: data for path, data in snapshot(project).items() if data != b"dir"}
    assert after == before  # no record: the job never started


def test_a_host_job_asks_no_engine(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpulaunch.cli.jobs as cli

    def no_engine() -> None:
        raise AssertionError("--no-container asked for the engine")

    monkeypatch.setattr(cli, "make_engine", no_engine)
    result = CliRunner().invoke(
        app, ["run", "--no-container", "--no-status", "--", "true"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.stderr
    assert "running on this host: true" in result.stderr


# The steps of a start, each called only by jobs/execute.py: a command that called one itself
# would be a second copy of the sequence (and miss what the copy forgot: an explanation, a
# record, the run files).
START_STEPS = {
    "gpulaunch.engine.supervise": {"start", "supervise"},
    "gpulaunch.engine.host": {"run_on_host"},
    "gpulaunch.launch.plan": {"write_run_files"},
    "gpulaunch.jobs.execute": {"build_image"},
}


def _step_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in START_STEPS:
            steps = START_STEPS[node.module]
            found |= {f"{node.module}.{a.name}" for a in node.names if a.name in steps}
    return found


def test_only_the_start_sequence_takes_its_steps() -> None:
    users = {
        str(path.relative_to(PACKAGE)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if (names := _step_imports(path))
    }
    assert users == {
        "jobs/execute.py": {
            "gpulaunch.launch.plan.write_run_files",
            "gpulaunch.engine.supervise.start",
            "gpulaunch.engine.host.run_on_host",
            "gpulaunch.engine.supervise.supervise",
        },
        # rerun --rebuild builds as run does: the step is handed to start_job (Start.image)
        "jobs/rerun.py": {"gpulaunch.jobs.execute.build_image"},
    }
