"""The CI switch (tests/no_skips.py): GPULAUNCH_NO_SKIPS=1 turns any skip into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SAMPLE = """
import pytest

def test_passes():
    pass

def test_skips_inside():
    pytest.skip("no engine here")

@pytest.mark.skipif(True, reason="needs two CPUs")
def test_skipif():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert False
"""

MODULE_SKIP = """
import pytest
pytest.skip("module needs torch", allow_module_level=True)

def test_never():
    pass
"""


def _pytest(folder: Path, no_skips: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPULAUNCH_NO_SKIPS"}
    if no_skips is not None:
        env["GPULAUNCH_NO_SKIPS"] = no_skips
    env["PYTHONPATH"] = str(TESTS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no_skips", "-p", "no:cacheprovider", "-q",
         "-rA", "--rootdir", str(folder), "-c", os.devnull, str(folder)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "module").mkdir()
    (tmp_path / "module" / "test_module_skip.py").write_text(MODULE_SKIP)
    return tmp_path


def test_without_the_switch_skips_pass(sample: Path) -> None:
    result = _pytest(sample, None)
    assert result.returncode == 0, result.stdout
    assert "1 passed, 3 skipped, 1 xfailed" in result.stdout, result.stdout


def test_with_the_switch_every_skipped_test_fails(sample: Path) -> None:
    result = _pytest(sample / "tests", "1")
    assert result.returncode == 1, result.stdout
    # a skip in the call is a failure, a skipif (setup) an error: both fail the run
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in result.stdout, result.stdout
    for reason in ("no engine here", "needs two CPUs"):
        assert f"GPULAUNCH_NO_SKIPS=1 allows no skips: Skipped: {reason}" in result.stdout


def test_with_the_switch_a_skipped_module_fails(sample: Path) -> None:
    result = _pytest(sample / "module", "1")
    assert result.returncode not in (0, 5), result.stdout  # 5: nothing collected
    assert "GPULAUNCH_NO_SKIPS=1 allows no skips: Skipped: module needs torch" in result.stdout
