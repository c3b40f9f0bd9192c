"""Issue 31 §5 on the real engine, offline from the wheelhouse, in one project:

- the project pins torch==2.4.1 in its requirements and the config asks for the wheelhouse's
  torch 2.13.0 (init --torch): the image builds (the requirements step no longer asks pip
  for the old torch beside the constraint that pins the new one);
- the end of `build` imports train.py's third-party modules in the new image and names the
  one nothing installs (tiktoken), with the build's exit code 0, and 1 with
  `--import-check fail`; `--dry-run` runs no check;
- a namespace package under src/ (no __init__.py) imports in the container."""

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
    "requirements.txt": "torch==2.4.1\nfilelock\n",
    "src/nsfeat/util.py": "import filelock\n\nVALUE = 'namespace package ok'\n",
    "train.py": (
        "import filelock\nimport nsfeat.util\nimport tiktoken\nimport torch\n\n"
        "if __name__ == '__main__':\n    print(tiktoken, torch)\n"
    ),
    "tools/ns.py": (
        "import nsfeat.util\nimport torch\n\nprint(nsfeat.util.VALUE, torch.__version__)\n"
    ),
}


def test_torch_override_builds_and_the_build_checks_the_imports(
    docker_client: Any, tmp_path: Path
) -> None:
    name = temp_name("imports")
    project = tmp_path / "imports"
    write_files(project, FILES)
    inited = gl("init", "--yes", "--torch", "2.13.0", "--cuda", "cpu", cwd=project)
    assert inited.returncode == 0, inited.describe()
    assert "--torch 2.13.0 overrides the project's torch==2.4.1 (requirements.txt:1)" in (
        inited.stderr
    )
    assert "train.py:3: import tiktoken — no dependency provides it" in inited.stderr
    config = app_config(name)  # torch 2.13.0 from the wheelhouse, no network
    config["image"]["requirements"] = "requirements.txt"
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    link_wheels(project)
    try:
        dry = gl("build", "--dry-run", cwd=project)
        assert dry.returncode == 0, dry.describe()
        assert "imports:" not in dry.stdout + dry.stderr  # a dry run asks no engine

        built = gl("build", "--progress", "quiet", cwd=project, timeout=BUILD_TIMEOUT_S)
        assert built.returncode == 0, built.describe()  # warn: the image stands
        lines = built.stderr.splitlines()
        head = next(line for line in lines if line.startswith("imports: "))
        assert head.startswith("imports: 1 of 3 imports of train.py fail (in "), built.stderr
        failed = lines[lines.index(head) + 1]
        assert failed.startswith(
            "train.py:3: import tiktoken failed in the image: ModuleNotFoundError"
        ), failed
        assert failed.endswith("add 'tiktoken' to the requirements"), failed

        ran = gl("run", "tools/ns.py", cwd=project)
        assert ran.returncode == 0, ran.describe()
        assert "namespace package ok 2.13.0" in ran.stdout

        strict = gl(
            "build", "--rebuild", "--progress", "quiet", "--import-check", "fail",
            cwd=project, timeout=BUILD_TIMEOUT_S,
        )  # fmt: skip
        assert strict.returncode == 1, strict.describe()
        assert "train.py:3: import tiktoken failed in the image" in strict.stderr
    finally:
        remove_project_images(docker_client, name)
