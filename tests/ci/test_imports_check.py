"""The end of `build` (ci/imports.py) against a fake engine: what the container is given (the
image's own code, no network, no GPU, no mount), what is believed of its output (the
program's own last line, for the modules asked only), and `build --import-check`'s input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpulaunch.ci.imports import IMPORTS_MARK, check_image
from gpulaunch.cli import app

TRAIN = "import numpy\nimport tiktoken\n\nif __name__ == '__main__':\n    pass\n"


class FakeContainer:
    def __init__(self, output: str) -> None:
        self.output = output
        self.waited = False

    def wait(self) -> dict[str, Any]:
        self.waited = True
        return {"StatusCode": 1}

    def logs(self) -> bytes:
        return self.output.encode()

    def kill(self) -> None:
        pass


class FakeEngine:
    def __init__(self, output: str, layers: list[str] | None = None) -> None:
        self.container = FakeContainer(output)
        self.bodies: list[dict[str, Any]] = []
        self.discarded: list[Any] = []
        self.layers = ["sha256:base", "sha256:deps", "sha256:code"] if layers is None else layers

    def image_layers(self, ref: str) -> list[str]:
        return self.layers

    def create_container(self, body: dict[str, Any]) -> FakeContainer:
        self.bodies.append(body)
        return self.container

    def discard(self, container: Any) -> None:
        self.discarded.append(container)


def _project(root: Path) -> Path:
    (root / "train.py").write_text(TRAIN)
    return root


def test_only_the_modules_asked_and_named_failed_are_reported(tmp_path: Path) -> None:
    output = (
        "ok: import numpy\n"
        "train.py:1: import numpy failed in the image: spoofed by a module's import\n"
        "train.py:2: import tiktoken failed in the image: ModuleNotFoundError: No module named"
        " 'tiktoken'; add 'tiktoken' to the requirements\n"
        f"{IMPORTS_MARK} " + json.dumps({"checked": 2, "failed": ["tiktoken", "os"]}) + "\n"
    )
    engine = FakeEngine(output)
    found = check_image(engine, "p:gl-1", "p", _project(tmp_path), None)

    assert found is not None and found.checked == 2 and found.finished
    assert found.failed == [
        "train.py:2: import tiktoken failed in the image: ModuleNotFoundError: No module named"
        " 'tiktoken'; add 'tiktoken' to the requirements"
    ]
    assert found.lines()[0].startswith("imports: 1 of 2 imports of train.py fail (in ")
    (body,) = engine.bodies
    assert body["Image"] == "p:gl-1"
    assert body["HostConfig"]["NetworkMode"] == "none"
    assert body["HostConfig"]["Mounts"] == [] and "DeviceRequests" not in body["HostConfig"]
    assert body["Cmd"][:2] == ["python", "-c"]
    assert json.loads(body["Cmd"][3]) == [
        ["numpy", "train.py:1", "numpy"],
        ["tiktoken", "train.py:2", "tiktoken"],
    ]
    assert engine.discarded == [engine.container] and engine.container.waited


def test_output_without_the_programs_last_line_is_not_finished(tmp_path: Path) -> None:
    engine = FakeEngine("Segmentation fault\n")
    found = check_image(engine, "p:gl-1", "p", _project(tmp_path), None)
    assert found is not None and not found.finished and found.failed == []
    assert found.lines() == [
        f"imports: the check of train.py did not finish (in {found.seconds:.1f} s); "
        "`smoke --imports`"
    ]
    assert engine.discarded == [engine.container]


def test_no_entry_point_starts_no_container(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text("import numpy\n")  # no __main__ block: not an entry
    engine = FakeEngine("")
    assert check_image(engine, "p:gl-1", "p", tmp_path, None) is None
    assert engine.bodies == []


def test_a_bad_import_check_value_is_one_line_before_anything_runs(
    runner: CliRunner, in_tmp: Path
) -> None:
    (in_tmp / "gpulaunch.yaml").write_text("version: 1\nname: p\nimage: {torch: none}\n")
    before = sorted(p.name for p in in_tmp.iterdir())
    result = runner.invoke(app, ["build", "--import-check", "maybe"])
    assert result.exit_code == 2
    assert result.output == "gpulaunch: error: --import-check: 'maybe' is not warn, fail or off\n"
    assert sorted(p.name for p in in_tmp.iterdir()) == before


def test_a_failure_line_with_control_characters_is_shown_as_its_prefix(tmp_path: Path) -> None:
    """The image's output is the image's: a module's error text with an escape sequence is
    not printed, only gpulaunch's own words for it."""
    output = (
        "train.py:2: import tiktoken failed in the image: ImportError: \x1b[2Jgone\n"
        f"{IMPORTS_MARK} " + json.dumps({"checked": 2, "failed": ["tiktoken"]}) + "\n"
    )
    found = check_image(FakeEngine(output), "p:gl-1", "p", _project(tmp_path), None)
    assert found is not None
    assert found.failed == ["train.py:2: import tiktoken failed in the image:"]


PASS = f"{IMPORTS_MARK} " + json.dumps({"checked": 2, "failed": []}) + "\n"
FAIL = f"{IMPORTS_MARK} " + json.dumps({"checked": 2, "failed": ["numpy"]}) + "\n"


def test_a_pass_is_not_run_again_when_only_the_code_layer_changed(tmp_path: Path) -> None:
    """A source edit changes only the last layer: the modules asked and every layer below
    are what the outcome depends on, so a pass on them is remembered (the user's cache)."""
    project = _project(tmp_path)
    assert (
        check_image(FakeEngine(PASS), "p:gl-1", "p", project, None)
        .lines()[0]
        .startswith("imports: all 2 third-party imports of train.py work (in ")
    )
    edited = FakeEngine(PASS, ["sha256:base", "sha256:deps", "sha256:code-2"])
    found = check_image(edited, "p:gl-2", "p", project, None)
    assert found is not None and found.remembered and edited.bodies == []
    assert "checked before on the same dependency layers" in found.lines()[0]


@pytest.mark.parametrize(
    "change",
    [
        ["sha256:base", "sha256:deps-2", "sha256:code"],  # a requirement changed
        ["sha256:base-2", "sha256:deps", "sha256:code"],  # a new base
        ["sha256:deps", "sha256:code"],  # a layer fewer
        [],  # the engine gave no layers: never remembered
    ],
)
def test_a_changed_dependency_layer_runs_the_check_again(tmp_path: Path, change: list[str]) -> None:
    project = _project(tmp_path)
    check_image(FakeEngine(PASS), "p:gl-1", "p", project, None)
    again = FakeEngine(PASS, change)
    found = check_image(again, "p:gl-2", "p", project, None)
    assert found is not None and not found.remembered and len(again.bodies) == 1


def test_a_new_import_runs_the_check_again(tmp_path: Path) -> None:
    project = _project(tmp_path)
    check_image(FakeEngine(PASS), "p:gl-1", "p", project, None)
    (project / "train.py").write_text("import yaml\n" + TRAIN)
    again = FakeEngine(PASS)
    check_image(again, "p:gl-2", "p", project, None)
    assert len(again.bodies) == 1


def test_a_failure_is_never_remembered(tmp_path: Path) -> None:
    project = _project(tmp_path)
    check_image(FakeEngine(FAIL), "p:gl-1", "p", project, None)
    again = FakeEngine(FAIL)
    found = check_image(again, "p:gl-1", "p", project, None)
    assert found is not None and found.failed and len(again.bodies) == 1


def test_the_time_limit_kill_ignores_a_gone_container_but_not_a_bug() -> None:
    from gpulaunch.ci.imports import _kill
    from gpulaunch.errors import EngineError

    class Gone:
        def kill(self) -> None:
            raise EngineError("no such container")

    class Buggy:
        def kill(self) -> None:
            raise ValueError("a bug")

    _kill(Gone())
    with pytest.raises(ValueError):
        _kill(Buggy())
