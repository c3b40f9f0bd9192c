"""The wheel ships the templates: build it, install it in a fresh venv, render outside the repo."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import REPO


@pytest.mark.slow
def test_wheel_install_renders_outside_repo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("gpulaunch-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], check=True)
    listing = subprocess.run(
        [
            py,
            "-c",
            "import gpulaunch, pathlib; p = pathlib.Path(gpulaunch.__file__).parent;"
            "print(sorted(x.name for x in (p / 'templates').iterdir()))",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repo, whose ./gpulaunch would shadow the installed one
    )
    assert "Dockerfile.j2" in listing.stdout

    project = tmp_path / "elsewhere"
    project.mkdir()
    gl = env_dir / "bin" / "gpulaunch"
    init = subprocess.run(
        [gl, "init", "--yes", "--torch", "2.4.1"], cwd=project, capture_output=True, text=True
    )
    assert init.returncode == 0, init.stderr
    out = subprocess.run([gl, "render"], cwd=project, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "FROM nvidia/cuda:11.8.0-runtime-ubuntu22.04" in out.stdout
    assert "# Driver: driver >= 520.61.05 (cuda>=11.8)" in out.stdout  # packaged driver rules
    assert "--index-url https://download.pytorch.org/whl/cu118" in out.stdout  # = image CUDA
    bad = subprocess.run(
        [gl, "init", "--yes", "--torch", "2.0.1", "--cuda", "12.4", "--force"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "available: cu117, cu118" in bad.stderr and "Traceback" not in bad.stderr
