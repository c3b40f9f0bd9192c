"""The dependency-shape examples: each gpulaunch.yaml is exactly what `init` writes for the
folder (so the example shows what init reads), and each renders (goldens: test_render.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES

from gpulaunch.config import load_config
from gpulaunch.image.init import InitOptions, run_init
from gpulaunch.image.render import plan_image, render_dockerfile

SHAPES = ["uv-cuda-index", "poetry", "conda-env", "requirements-includes"]


@pytest.mark.parametrize("name", SHAPES)
def test_example_config_is_what_init_writes(name: str, tmp_path: Path) -> None:
    project = tmp_path / name
    shutil.copytree(EXAMPLES / name, project)
    (project / "gpulaunch.yaml").unlink()
    run_init(InitOptions(directory=project, name=f"example-{name}"))
    assert load_config(project / "gpulaunch.yaml") == load_config(
        EXAMPLES / name / "gpulaunch.yaml"
    )


def test_requirements_includes_example_render() -> None:
    project = EXAMPLES / "requirements-includes"
    text = render_dockerfile(
        plan_image(load_config(project / "gpulaunch.yaml"), project, "buildkit")
    )
    for rel in ("requirements.txt", "requirements/base.txt", "requirements/constraints.txt"):
        assert f'COPY ["workspace/{rel}", "/opt/gpulaunch/req/{rel}"]' in text
    assert "sed -i -e 4d /opt/gpulaunch/req/requirements.txt" in text  # `-e .` waits
    assert text.index("pip install -r /opt/gpulaunch/req/requirements.txt tqdm") < text.index(
        "COPY --chown"
    )
    assert text.index("COPY --chown") < text.index("pip install --no-deps -e /workspace")
    assert (
        "torch==2.4.1 torchvision==0.19.1 --index-url https://download.pytorch.org/whl/cu121"
        in text
    )
    assert "libgl1 libglib2.0-0" in text
