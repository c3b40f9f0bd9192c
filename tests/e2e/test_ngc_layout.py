"""The NGC flavor's render on a local image that imitates NGC's layout (built offline FROM the
test base image): a /etc/pip/constraint.txt, no python3-venv. The build must succeed without
a venv, and NGC's constraint must still decide what pip installs."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from engine_env import base_image

from e2e.support import cli_env, gl

pytestmark = pytest.mark.docker


def _wheel(folder: Path, version: str) -> None:
    """A minimal pure wheel `glpin-VERSION` (enough for pip to choose and install it)."""
    name = f"glpin-{version}"
    path = folder / f"{name}-py3-none-any.whl"
    files = {
        "glpin/__init__.py": f"VERSION = {version!r}\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: glpin\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: gltest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{f},,\n" for f in files) + f"{name}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for f, text in files.items():
            zf.writestr(f, text)
        zf.writestr(f"{name}.dist-info/RECORD", record)


def _build(client: Any, context: Path, dockerfile: str, tag: str) -> None:
    _, logs = client.images.build(
        path=str(context), dockerfile=dockerfile, tag=tag, network_mode="none", rm=True
    )
    for _ in logs:
        pass


def test_ngc_render_keeps_the_image_constraints(docker_client: Any, tmp_path: Path) -> None:
    suffix = secrets.token_hex(4)
    fake_ngc = f"gltest-ngc-layout:{suffix}"
    built = f"gltest-ngc-app:{suffix}"
    base_ctx = tmp_path / "fake-ngc"
    base_ctx.mkdir()
    (base_ctx / "Dockerfile").write_text(
        f"FROM {base_image()}\n"
        "RUN dpkg -r python3-venv python3.11-venv \\\n"
        " && mkdir -p /etc/pip && printf 'glpin==1.0\\n' > /etc/pip/constraint.txt\n"
        "ENV PIP_CONSTRAINT=/etc/pip/constraint.txt\n"
    )
    project = tmp_path / "proj"
    (project / "wheels").mkdir(parents=True)
    _wheel(project / "wheels", "1.0")
    _wheel(project / "wheels", "2.0")  # what pip picks when NGC's constraint is lost
    (project / "requirements.txt").write_text("glpin\n")
    (project / "train.py").write_text("print('hi')\n")
    config = {
        "version": 1,
        "name": "ngcproj",
        "image": {
            "flavor": "ngc",
            "torch": "2.4",
            "requirements": "requirements.txt",
            "pip": {"no_index": True, "find_links": ["wheels"]},
        },
    }
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        _build(docker_client, base_ctx, "Dockerfile", fake_ngc)
        result = gl("render", "--builder", "classic", cwd=project, env=cli_env())
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert text.count("\nFROM nvcr.io/nvidia/pytorch:") == 1 and "-m venv" not in text
        # the context as gpulaunch sends it: the project under workspace/, the wheelhouse
        # under inputs/ (gpulaunch/engine/context.py)
        context = tmp_path / "context"
        shutil.copytree(project, context / "workspace")
        shutil.copytree(project / "wheels", context / "inputs" / "wheels")
        (context / "Dockerfile.test").write_text(
            "\n".join(
                f"FROM {fake_ngc}" if line.startswith("FROM ") else line
                for line in text.splitlines()
            )
            + "\n"
        )
        _build(docker_client, context, "Dockerfile.test", built)
        out = docker_client.containers.run(
            built,
            [
                "sh",
                "-c",
                "python3 -c 'import glpin; print(glpin.VERSION)';"
                " cat /opt/gpulaunch/constraints.txt; echo PIP_CONSTRAINT=$PIP_CONSTRAINT;"
                " test -e /opt/venv && echo venv || echo no-venv",
            ],
            network_mode="none",
            remove=True,
        ).decode()
        lines = out.split()
        assert lines[0] == "1.0", out  # NGC's pin won over the newer wheel
        # NGC's constraint file stays in PIP_CONSTRAINT, ours added beside it (issue 31 §4)
        assert "PIP_CONSTRAINT=/etc/pip/constraint.txt" in lines
        assert "/opt/gpulaunch/constraints.txt" in lines
        assert lines[-1] == "no-venv"
    finally:
        for tag in (built, fake_ngc):
            with contextlib.suppress(Exception):
                docker_client.images.remove(tag, force=True)
