"""Issue 24's build classes on the real engine, offline from the wheelhouse: a project whose
setup.py imports torch (pip's isolated build env has none, so it failed there) is built
without isolation after torch and imports; the same `-e .` named by two requirement files is
installed once; a top-level `data/` package is kept in the build context by the
.dockerignore `init` writes, and imports in the container."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import (
    BUILD_TIMEOUT_S,
    app_config,
    gl,
    link_wheels,
    remove_project_images,
    temp_name,
    write_files,
)

pytestmark = pytest.mark.docker

FILES = {
    "requirements.txt": "-r requirements-train.txt\n-e .\n",
    "requirements-train.txt": "filelock\n-e .\n",
    # the version is read from torch while building: pip's isolated env would have no torch
    "setup.py": (
        "import torch\n"
        "from setuptools import setup\n\n"
        "setup(name='torchbuilt', version=torch.__version__.split('+')[0], "
        "packages=['torchbuilt'])\n"
    ),
    "torchbuilt/__init__.py": "from importlib.metadata import version\n"
    "BUILT_WITH = version('torchbuilt')\n",
    "data/__init__.py": "NAME = 'data package'\n",
    "data/loader.py": "def load():\n    return 'loaded'\n",
    "tools/check.py": (
        "import filelock, torchbuilt\n"
        "from data.loader import load\n"
        "import data\n"
        "print('built with', torchbuilt.BUILT_WITH, '|', data.NAME, '|', load())\n"
    ),
}


def test_setup_py_importing_torch_builds_and_imports(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("torchbuild")
    project = tmp_path / "torchbuild"
    write_files(project, FILES)
    inited = gl("init", "--yes", "--torch", "2.13.0", "--cuda", "cpu", cwd=project)
    assert inited.returncode == 0, inited.describe()
    assert ".dockerignore keeps data/ in the build context: a Python package" in inited.stderr
    assert "installed with --no-build-isolation after torch" in inited.stderr
    config = app_config(name)
    config["image"]["requirements"] = "requirements.txt"
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    link_wheels(project)  # torch, setuptools (>=70.1: the build requirement), filelock
    try:
        rendered = gl("render", cwd=project)
        assert rendered.returncode == 0, rendered.describe()
        assert rendered.stdout.count("-e /workspace") == 1
        assert "--no-deps --no-build-isolation --use-pep517 -e /workspace" in rendered.stdout

        built = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
        assert built.returncode == 0, built.describe()

        ran = gl("run", "tools/check.py", cwd=project)
        assert ran.returncode == 0, ran.describe()
        assert "built with 2.13.0 | data package | loaded" in ran.stdout
    finally:
        remove_project_images(docker_client, name)
