"""A real project layout on the real engine: a root requirements.txt of `-r
requirements/base.txt` and `-e .`, a src-layout package with its own pyproject dependency,
and an entry script in a subfolder that imports it. Built offline from the wheelhouse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    gl,
    link_wheels,
    remove_project_images,
    temp_name,
    tiny_config,
    write_files,
)

pytestmark = pytest.mark.docker

FILES = {
    "requirements.txt": "-r requirements/base.txt\n-e .\n",
    "requirements/base.txt": "typing_extensions\n",
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n'
        '[project]\nname = "mypkg"\nversion = "0.1.0"\ndependencies = ["filelock"]\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    ),
    "src/mypkg/__init__.py": "GREETING = 'hello from mypkg'\n",
    "src/mypkg/hello.py": "print('module run ok')\n",
    "common/__init__.py": "NAME = 'common at the project root'\n",
    "tools/check.py": (
        "import filelock, typing_extensions\n"
        "import mypkg, common\n"
        "print(mypkg.GREETING, '|', common.NAME, '|', mypkg.__file__)\n"
    ),
}


def test_includes_editable_src_layout_and_subfolder_script(
    docker_client: Any, tmp_path: Path
) -> None:
    name = temp_name("layout")
    project = tmp_path / "layout"
    write_files(project, FILES)
    config = tiny_config(name)
    config["image"]["requirements"] = "requirements.txt"
    config["image"]["pip"] = {"no_index": True, "find_links": ["wheels"]}
    import yaml

    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    link_wheels(project)  # setuptools (the build backend), filelock, typing_extensions
    try:
        rendered = gl("render", cwd=project)
        assert rendered.returncode == 0, rendered.describe()
        text = rendered.stdout
        copied = '"workspace/requirements/base.txt", "/opt/gpulaunch/req/requirements/base.txt"'
        assert f"COPY [{copied}]" in text
        assert text.index("-r /opt/gpulaunch/req/requirements.txt filelock") < text.index(
            "COPY --chown"
        )
        assert text.index("COPY --chown") < text.index("--no-deps -e /workspace")

        built = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
        assert built.returncode == 0, built.describe()

        ran = gl("run", "tools/check.py", cwd=project)
        assert ran.returncode == 0, ran.describe()
        assert "hello from mypkg | common at the project root | /workspace/src/mypkg/" in ran.stdout

        module = gl("run", "--", "python", "-m", "mypkg.hello", cwd=project)
        assert module.returncode == 0, module.describe()
        assert "module run ok" in module.stdout
    finally:
        remove_project_images(docker_client, name)
