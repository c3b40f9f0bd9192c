"""`gpulaunch catalog update` against the real PyPI (marker `pypi`; CI machines reach PyPI, and
with GPULAUNCH_NO_SKIPS=1 a skip for an unreachable PyPI fails the run).

PyPI has torch 2.15.0 (Requires-Python >= 3.11) since 2026-10-28, and the packaged catalog has
it (read from PyPI on 2026-12-04). An update adds only what is newer than the packaged rows, says
it refreshed torch facts only (so the CUDA/NGC staleness is not silenced), and the packaged 2.15.0
agrees with PyPI: Python floor 3.11, torchvision 0.29.2, `init` refusing Python 3.10 naming 3.11.
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


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_update_from_pypi_agrees_with_the_packaged_2_15(tmp_path: Path) -> None:
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
    assert doc["sources"]["refreshed"][0] == "torch"
    for row in (doc.get("torch") or {}).get("releases", []):  # only what is newer than 2.15.0
        assert all(_vt(p["torch"]) > (2, 15, 0) for p in row["patches"]), row

    shown = _gl("versions", "--torch", "2.15.0", "--json", cwd=project)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert rows and {r["torch"] for r in rows} == {"2.15.0"}
    assert {(r["python_min"], r["torchvision"], r["origin"]) for r in rows} == {
        ("3.11", "0.29.2", None)
    }

    refused = _gl("init", "--torch", "2.15.0", "--python", "3.10", "--yes", cwd=project)
    assert refused.returncode == 2
    assert "torch 2.15.0 supports Python 3.11" in refused.stderr
    assert "got 3.10" in refused.stderr
    assert not (project / "gpulaunch.yaml").exists()
