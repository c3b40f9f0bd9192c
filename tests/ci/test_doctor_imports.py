"""`gpulaunch doctor` in a configured project: init's findings on the entry points' imports
(file:line, the requirement to add), in the table and in `--json`; none without a project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.cli import app

CONFIG = "version: 1\nname: demo\nimage:\n  torch: '2.4.1'\n  cuda: cpu\n{extra}"
TRAIN = (
    "import os\nimport yaml\nimport tiktoken\nimport numpy as np\n"
    "from models.net import Net\n\nif __name__ == '__main__':\n    Net()\n"
)


def _project(root: Path, requirements: str | None, extra: str = "") -> None:
    if requirements is not None:
        (root / "requirements.txt").write_text(requirements)
        extra = "  requirements: requirements.txt\n" + extra
    (root / "gpulaunch.yaml").write_text(CONFIG.format(extra=extra))
    (root / "train.py").write_text(TRAIN)
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "net.py").write_text("import einops\n\nclass Net: ...\n")


def _doctor(runner: CliRunner, *args: str) -> tuple[list[dict[str, str]], str]:
    as_json = runner.invoke(app, ["doctor", "--json", *args])
    table = runner.invoke(app, ["doctor", *args])
    assert as_json.exit_code == table.exit_code == 1, as_json.output  # no engine here: ✗
    imports = [c for c in json.loads(as_json.stdout)["checks"] if c["name"] == "imports"]
    rows = [line.strip() for line in table.stdout.splitlines() if " imports " in line]
    assert len(rows) == len(imports)  # the table carries the same lines, mark and fix
    for check, row in zip(imports, rows, strict=True):
        mark = {"ok": "✓", "warn": "!"}[check["status"]]
        assert row.startswith(f"{mark}  imports") and check["detail"] in row, row
        assert check["fix"] in row
    return imports, table.stdout


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/doctor.sock")


def test_doctor_names_each_import_nothing_provides(runner: CliRunner, in_tmp: Path) -> None:
    _project(in_tmp, "torch\nnumpy\n")
    imports, table = _doctor(runner)

    assert [(c["status"], c["detail"], c["fix"]) for c in imports] == [
        (
            "warn",
            "train.py:2: import yaml — no dependency provides it",
            "add 'pyyaml' (gpulaunch init --add-missing)",
        ),
        (
            "warn",
            "train.py:3: import tiktoken — no dependency provides it",
            "add 'tiktoken' (gpulaunch init --add-missing)",
        ),
        (
            "warn",
            "models/net.py:1: import einops — no dependency provides it",
            "add 'einops' (gpulaunch init --add-missing)",
        ),
    ]
    assert "train.py:3: import tiktoken — no dependency provides it" in table


def test_a_project_that_declares_everything_is_one_ok_line(runner: CliRunner, in_tmp: Path) -> None:
    _project(in_tmp, "torch\nnumpy\npyyaml\ntiktoken\neinops\n")
    imports, _ = _doctor(runner)
    assert imports == [
        {
            "name": "imports",
            "status": "ok",
            "detail": "every third-party import of train.py is provided",
            "fix": "",
        }
    ]


def test_no_image_requirements_means_nothing_the_project_lists_is_installed(
    runner: CliRunner, in_tmp: Path
) -> None:
    """The image installs a dependency file only when image.requirements names it: a
    requirements.txt lying there provides nothing."""
    _project(in_tmp, None)
    (in_tmp / "requirements.txt").write_text("numpy\npyyaml\ntiktoken\neinops\n")
    imports, _ = _doctor(runner)
    assert [c["detail"].split(" — ")[0] for c in imports] == [
        "train.py:2: import yaml",
        "train.py:3: import tiktoken",
        "train.py:4: import numpy",
        "models/net.py:1: import einops",
    ]


def test_no_project_no_import_lines(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "train.py").write_text(TRAIN)  # a script, but no gpulaunch.yaml
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    names = [c["name"] for c in json.loads(result.stdout)["checks"]]
    assert "imports" not in names and "engine" in names


def test_an_unreadable_requirements_file_is_one_line_not_a_traceback(
    runner: CliRunner, in_tmp: Path
) -> None:
    _project(in_tmp, "torch\n-r missing.txt\n")
    imports, _ = _doctor(runner)
    assert len(imports) == 1 and imports[0]["status"] == "warn"
    assert "missing.txt" in imports[0]["detail"] and "\n" not in imports[0]["detail"]
