"""`gpulaunch catalog update` against the real PyPI (marker `pypi`; CI machines reach PyPI, and
with GPULAUNCH_NO_SKIPS=1 a skip for an unreachable PyPI fails the run).

PyPI has torch 2.15.0 (Requires-Python >= 3.11) since 2026-10-28; the packaged catalog stops at
2.14.0. After an update the overlay has it, `versions` shows it with its Python floor and marks
its rows as overlay rows, and `init` refuses Python 3.10 for it naming 3.11.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.pypi


def _gl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulaunch", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_update_from_pypi_adds_torch_2_15(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    update = _gl("catalog", "update", "--json", cwd=project)
    if update.returncode == 1 and "PyPI did not answer" in update.stderr:
        pytest.skip(f"PyPI is not reachable from here: {update.stderr.strip()}")
    assert update.returncode == 0, update.stderr
    report = json.loads(update.stdout)
    overlay = Path(report["path"])
    assert overlay == tmp_path / "_config" / "gpulaunch" / "catalog.d" / "pypi.yaml"
    doc = yaml.safe_load(overlay.read_text())
    assert "https://pypi.org/pypi/torch/json" in doc["sources"]["reached"]
    minors = {row["minor"]: row for row in doc["torch"]["releases"]}
    assert minors["2.15"]["python"]["min"] == "3.11"
    assert "2.15.0" in {p["torch"] for p in minors["2.15"]["patches"]}
    assert any(line.startswith("torch 2.15: Python 3.11") for line in report["added"])

    shown = _gl("versions", "--torch", "2.15.0", "--json", cwd=project)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert rows and {r["torch"] for r in rows} == {"2.15.0"}
    assert {r["python_min"] for r in rows} == {"3.11"}
    assert {r["origin"] for r in rows} == {str(overlay)}
    table = _gl("versions", "--torch", "2.15.0", cwd=project)
    assert table.returncode == 0 and "3.11" in table.stdout and "pypi.yaml" in table.stdout

    refused = _gl("init", "--torch", "2.15.0", "--python", "3.10", "--yes", cwd=project)
    assert refused.returncode == 2
    assert "torch 2.15.0 supports Python 3.11" in refused.stderr
    assert "got 3.10" in refused.stderr
    assert not (project / "gpulaunch.yaml").exists()
