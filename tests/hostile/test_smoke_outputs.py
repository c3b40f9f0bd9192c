"""`smoke`'s output paths: `--junit FILE` follows `render -o`'s rule (no write through a
linked folder inside the project, an existing file that is not a JUnit report kept unless
--force), checked before anything is built; `smoke --dry-run` builds, runs and writes nothing
and asks no daemon.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostile.conftest import Hostile

NO_ENGINE = "unix:///nonexistent/gpulaunch-smoke-dry.sock"


@pytest.fixture
def no_engine(hostile: Hostile) -> Hostile:
    hostile.monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    return hostile


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("train.py", "print('ok')\n"),  # the user's own script
        ("notes.xml", "<?xml version='1.0'?><notes/>"),  # XML, but not JUnit
        ("results.xml", "plain text\n"),
        ("empty.xml", ""),
    ],
)
def test_junit_keeps_a_file_that_is_not_a_report(
    no_engine: Hostile, name: str, content: str
) -> None:
    target = no_engine.project / name
    target.write_text(content)
    outcome = no_engine.invoke_unchanged("smoke", "--junit", name, "train.py")
    outcome.assert_clean_error(2, "--junit", name, "--force")


def test_junit_outside_the_project_keeps_a_file_too(no_engine: Hostile) -> None:
    target = no_engine.outside / "keep.txt"
    target.write_text("mine\n")
    outcome = no_engine.invoke_unchanged("smoke", "--junit", str(target), "train.py")
    outcome.assert_clean_error(2, "--junit", "keep.txt")


@pytest.mark.parametrize("depth", [1, 2])
def test_junit_never_writes_through_a_linked_folder(no_engine: Hostile, depth: int) -> None:
    real = no_engine.outside / "reports"
    real.mkdir()
    if depth == 1:
        os.symlink(real, no_engine.project / "reports")
        rel = "reports/junit.xml"
    else:
        (no_engine.project / "ci").mkdir()
        os.symlink(real, no_engine.project / "ci" / "reports")
        rel = "ci/reports/junit.xml"
    outcome = no_engine.invoke_unchanged("smoke", "--junit", rel, "train.py")
    outcome.assert_clean_error(2, "--junit", "link")
    assert not (real / "junit.xml").exists()


def test_junit_replaces_its_own_report_and_force_replaces_any(no_engine: Hostile) -> None:
    """Against a missing engine the smoke run is an <error> result (exit 3) and the report is
    written: over an earlier JUnit report always, over another file only with --force."""
    report = no_engine.project / "junit.xml"
    report.write_text('<?xml version="1.0"?>\n<testsuite name="old"/>\n')
    assert no_engine.invoke("smoke", "--junit", "junit.xml", "train.py").code == 3
    assert "<error" in report.read_text()
    other = no_engine.project / "other.txt"
    other.write_text("x\n")
    assert no_engine.invoke("smoke", "--force", "--junit", "other.txt", "train.py").code == 3
    assert "<testsuite" in other.read_text()


@pytest.mark.parametrize("extra", [(), ("--json",), ("--junit", "j.xml"), ("--gpus", "2")])
def test_smoke_dry_run_builds_and_writes_nothing(
    no_engine: Hostile, extra: tuple[str, ...]
) -> None:
    outcome = no_engine.invoke_unchanged("smoke", "--dry-run", *extra, "train.py")
    assert outcome.code == 0, outcome
    assert "Traceback" not in outcome.stderr
    text = outcome.stdout
    assert "GPULAUNCH_SMOKE" in text and "docker" in text
    assert not (no_engine.project / ".gpulaunch").exists()
    assert not Path(no_engine.project / "j.xml").exists()
