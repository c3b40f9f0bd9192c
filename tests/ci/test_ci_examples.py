"""examples/ci/ passes the linters CI systems would apply: actionlint (with shellcheck on the
`run:` scripts) and check-jsonschema's built-in GitHub-workflow and GitLab-CI schemas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

CI = EXAMPLES / "ci"
BIN = Path(sys.executable).parent
WORKFLOWS = [CI / "github-cpu.yml", CI / "github-gpu.yml"]


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False
    )


def _actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    return _run(BIN / "actionlint", "-no-color", "-config-file", CI / "actionlint.yaml", *files)


def test_workflows_pass_actionlint() -> None:
    result = _actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_would_see_a_mistake(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = (CI / "github-cpu.yml").read_text()
    broken.write_text(text.replace("${{ matrix.torch }}", "${{ matrix.pytorch }}"))
    result = _actionlint(broken)
    assert result.returncode == 1
    assert "pytorch" in result.stdout


@pytest.mark.parametrize(
    ("schema", "files"),
    [("vendor.github-workflows", WORKFLOWS), ("vendor.gitlab-ci", [CI / "gitlab-ci.yml"])],
)
def test_ci_files_match_their_schemas(schema: str, files: list[Path]) -> None:
    result = _run(BIN / "check-jsonschema", "--builtin-schema", schema, *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gitlab_schema_would_see_a_mistake(tmp_path: Path) -> None:
    broken = tmp_path / "gitlab-ci.yml"
    broken.write_text((CI / "gitlab-ci.yml").read_text().replace("when: always", "when: often"))
    result = _run(BIN / "check-jsonschema", "--builtin-schema", "vendor.gitlab-ci", broken)
    assert result.returncode == 1


def test_gitlab_job_reports_junit() -> None:
    import yaml

    job = yaml.safe_load((CI / "gitlab-ci.yml").read_text())["smoke"]
    assert job["artifacts"]["reports"]["junit"] == "smoke-junit.xml"
    assert any("--junit smoke-junit.xml" in line for line in job["script"])
