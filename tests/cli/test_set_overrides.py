"""`--set dotted.path=value`: one config, a CI matrix of versions, the schema's own errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from gpulaunch.cli import app
from gpulaunch.yamlio import apply_overrides

CONFIG = """\
version: 1
name: demo
image: {python: "3.11", torch: "2.4.1"}
launch: {gpus: 0}
"""


@pytest.fixture
def project(in_tmp: Path) -> Path:
    (in_tmp / "gpulaunch.yaml").write_text(CONFIG)
    (in_tmp / "train.py").write_text("print('hi')\n")
    return in_tmp


def test_set_changes_the_rendered_dockerfile(runner: CliRunner, project: Path) -> None:
    plain = runner.invoke(app, ["render", "--builder", "classic"])
    changed = runner.invoke(
        app, ["render", "--builder", "classic", "--set", "image.torch=2.5.1", "--set", "name=x"]
    )
    assert plain.exit_code == 0 and changed.exit_code == 0, changed.output
    assert "torch==2.4.1" in plain.stdout
    assert "torch==2.5.1" in changed.stdout and "torch==2.4.1" not in changed.stdout
    assert (project / "gpulaunch.yaml").read_text() == CONFIG  # the file is never edited


def test_set_keeps_versions_as_strings() -> None:
    data = apply_overrides({"image": {}}, ["image.torch=2.10", "launch.gpus=2", "image.os=null"])
    assert data == {"image": {"torch": "2.10", "os": None}, "launch": {"gpus": 2}}


def test_set_changes_the_build_tag_and_the_run_plan(runner: CliRunner, project: Path) -> None:
    def tag(*extra: str) -> str:
        out = runner.invoke(app, ["build", "--dry-run", "--json", "--builder", "classic", *extra])
        assert out.exit_code == 0, out.output
        return str(json.loads(out.stdout)["tag"])

    assert tag() != tag("--set", "image.torch=2.5.1")
    run = runner.invoke(app, ["run", "train.py", "--dry-run", "--json", "--set", "launch.nproc=3"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["run"]["nproc"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "image.torhc=2.5.1"], "gpulaunch: error: image.torhc: unknown field (valid: "),
        (["--set", "launch.gpus=lots"], "gpulaunch: error: launch.gpus: 'lots' is not a count"),
        (["--set", "image.flavor=gpu"], "gpulaunch: error: image.flavor: 'gpu' is not allowed"),
        (["--set", "image.torch"], "gpulaunch: error: --set: 'image.torch' is not PATH=VALUE"),
        (["--set", "image..torch=1"], "gpulaunch: error: --set: 'image..torch' is not a dotted"),
        (["--set", "name.x=1"], "gpulaunch: error: --set: name is not a mapping"),
        (["--set", "image.torch=2.5\u20281"], "gpulaunch: error: --set image.torch: "),
    ],
)
@pytest.mark.parametrize("command", ["render", "build", "run", "smoke"])
def test_bad_set_is_exit_2_naming_the_field(
    runner: CliRunner,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/never-asked.sock")
    before = snapshot(project)
    argv = [command, *args] + (["train.py"] if command in ("run", "smoke") else [])

    result = runner.invoke(app, argv)

    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.output
    assert snapshot(project) == before
