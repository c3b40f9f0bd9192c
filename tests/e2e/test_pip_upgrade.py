"""An air-gapped build upgrades the venv's old pip from the wheelhouse before installing (real
engine, `--network none`). The base image's venv has Debian's pip 23.0.1, which cannot read the
PyTorch index; a real pip wheel (fetched from PyPI into the project's wheelhouse beforehand, so
marked `pypi` too) replaces it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from e2e.support import BUILD_TIMEOUT_S, gl, temp_name, tiny_config, write_project

pytestmark = [pytest.mark.docker, pytest.mark.pypi]
PIP = "25.0.1"


def _wheel(folder: Path) -> None:
    """A minimal pure wheel `glpin-1.0` for the requirements step."""
    folder.mkdir(exist_ok=True)
    info = "glpin-1.0.dist-info"
    files = {
        "glpin/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: glpin\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gltest\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(folder / "glpin-1.0-py3-none-any.whl", "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{info}/RECORD", "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n")


def test_old_pip_is_upgraded_from_the_wheelhouse(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("pip")
    config = tiny_config(name)
    config["image"]["requirements"] = "requirements.txt"
    config["image"]["pip"] = {"no_index": True, "find_links": ["wheels"]}
    project = write_project(tmp_path / "pip", "tiny", config)
    (project / "requirements.txt").write_text("glpin\n")  # something to install, not pip
    _wheel(project / "wheels")
    fetched = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"pip=={PIP}", "--no-deps",
         "--only-binary=:all:", "-d", str(project / "wheels"), "-q", "--timeout", "30"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    if fetched.returncode != 0:
        pytest.skip(f"PyPI is not reachable for the pip wheel: {fetched.stderr.strip()[-300:]}")

    rendered = gl("render", "--builder", "classic", cwd=project)
    assert rendered.returncode == 0, rendered.describe()
    assert f"--upgrade pip=={PIP} --no-index --find-links /opt/gpulaunch/find-links/0" in (
        rendered.stdout
    )
    built = gl("build", "--builder", "classic", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    tag = built.stdout.strip().splitlines()[-1]
    out = docker_client.containers.run(
        tag,
        ["sh", "-c", "python -m pip --version; python -c 'import glpin; print(glpin.__file__)'"],
        network_mode="none",
        remove=True,
    ).decode()
    lines = out.splitlines()
    assert lines[0].startswith(f"pip {PIP} from /opt/venv/"), out  # not Debian's 23.0.1
    assert lines[1].startswith("/opt/venv/"), out
