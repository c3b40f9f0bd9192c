"""Shared fixtures: an isolated environment for every test and the real-engine gate."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, install
from typer.testing import CliRunner

pytest_plugins = ["no_skips"]  # GPULAUNCH_NO_SKIPS=1 (set by dev/test for CI): skips fail

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
_EXAMPLES_BEFORE = pytest.StashKey[set[str]]()


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_EXAMPLES_BEFORE] = _tree(EXAMPLES)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests run gpulaunch in copies (fixture example_copy): examples/ must not gain a path."""
    before = session.config.stash.get(_EXAMPLES_BEFORE, None)
    if before is None:
        return
    added = sorted(_tree(EXAMPLES) - before)
    if added:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"FAILED: the tests wrote into examples/: {', '.join(added)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # the user's folders lie beside the test's folder, not in it: tests use tmp_path as the
    # project, and a project that holds the state or cache folder is refused (exposure.py)
    home = tmp_path.with_name(tmp_path.name + "-user")
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(home / "_state"))
    for key in list(os.environ):
        if (
            key.startswith("GPULAUNCH_")
            and key
            not in (
                "GPULAUNCH_REQUIRE_DOCKER",
                "GPULAUNCH_STATE_DIR",
            )
            and not key.startswith("GPULAUNCH_TEST_")
        ):
            monkeypatch.delenv(key, raising=False)
    # the user's overlay catalogs and caches stay out of tests; the once-a-day staleness
    # warning is off (tests/catalog/test_overlay.py turns it on where it is the subject)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "_config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "_cache"))
    monkeypatch.setenv("GPULAUNCH_NO_STALE_WARNING", "1")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """The shared fake pynvml (tests/fake_nvml.py) installed: two H100s, driver 550.

    Change `.devices`, `.driver`, `.missing` or `.failing` in the test, or install another
    with `fake_nvml.install(monkeypatch, FakeNvml(...))`."""
    return install(monkeypatch, FakeNvml())


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    yield project


@pytest.fixture
def example_copy(tmp_path: Path) -> Callable[[str], Path]:
    """A fresh copy of examples/NAME: tests never run gpulaunch in the checked-in examples
    (a run may write .gpulaunch/ there; a dry run must not, and hostile tests check that)."""

    def copy(name: str) -> Path:
        dest = tmp_path / "examples" / name
        # Without what a run in the checkout left there (dev/demo runs a copy; a developer
        # may not): a stray run record must not change what a test sees.
        shutil.copytree(
            EXAMPLES / name, dest, symlinks=True, ignore=shutil.ignore_patterns(".gpulaunch")
        )
        return dest

    return copy


def snapshot(tree: Path) -> dict[str, bytes]:
    """Everything under a folder, to prove nothing was written, created or changed: files with
    their bytes, links with their targets, folders (an empty one left behind counts too)."""
    out: dict[str, bytes] = {}
    for p in sorted(tree.rglob("*")):
        key = str(p.relative_to(tree))
        if p.is_symlink():
            out[key] = b"link -> " + os.fsencode(os.readlink(p))
        elif p.is_dir():
            out[key + "/"] = b"dir"
        elif p.is_file():
            out[key] = p.read_bytes()
        else:
            out[key] = b"special"
    return out


def assert_doctor_table_matches_json(as_json: str, table: str) -> list[dict[str, str]]:
    """`doctor --json` and the `doctor` table carry the same lines with the same marks."""
    checks: list[dict[str, str]] = json.loads(as_json)["checks"]
    for check in checks:
        # the row whose name column (after the mark) is this check's name
        row = [
            line
            for line in table.splitlines()
            if line.strip()[1:].lstrip().startswith(f"{check['name']} ")
        ]
        assert row, check
        mark = {"ok": "✓", "warn": "!", "fail": "✗"}[check["status"]]
        assert row[0].lstrip().startswith(mark), (check, row[0])
        assert check["detail"][:40] in row[0], (check, row[0])
    return checks


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="Rewrite tests/golden/* from the current output (review the diff!).",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
