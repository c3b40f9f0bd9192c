"""`gpulaunch smoke --imports` against the real engine: the entry point's third-party modules
are imported in the built image, each failure named with its file:line and what to add, and
the training itself never starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    gl,
    project_containers,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

TRAIN = """\
import json
import pip
from helpers import load
try:
    import apex
except ImportError:
    apex = None

if __name__ == "__main__":
    print("TRAINING STARTED", flush=True)
"""
HELPERS = "import os\nimport tiktoken\nimport yaml\n\ndef load():\n    return 1\n"


def test_smoke_imports_names_what_the_image_lacks_and_runs_no_training(
    docker_client: Any, tmp_path: Path
) -> None:
    name = temp_name("smoke-imports")
    project = write_project(tmp_path / "imports", "tiny", tiny_config(name))
    (project / "train.py").write_text(TRAIN)
    (project / "helpers.py").write_text(HELPERS)

    result = gl("smoke", "--imports", "--json", "train.py", cwd=project, timeout=BUILD_TIMEOUT_S)

    assert result.returncode == 1, result.describe()
    assert "Traceback" not in result.stderr.split("failed in the image")[0]
    data = json.loads(result.stdout)
    assert data["result"] == "failed"
    assert data["command"] == "imports of train.py"
    # pip is in the image's venv; apex is guarded (optional); json and os are stdlib
    assert data["imports"] == {"checked": 3, "failed": ["tiktoken", "yaml"]}
    assert data["message"] == "2 of 3 imports failed in the image: tiktoken, yaml"
    err = result.stderr  # --json: the job's output goes to stderr
    assert (
        "helpers.py:2: import tiktoken failed in the image: ModuleNotFoundError: "
        "No module named 'tiktoken'; add 'tiktoken' to the requirements"
    ) in err
    assert "helpers.py:3: import yaml failed in the image: ModuleNotFoundError: " in err
    assert "add 'pyyaml' to the requirements" in err
    assert "ok: import pip" in err
    assert "TRAINING STARTED" not in result.stdout + err
    assert project_containers(docker_client, name) == []

    (project / "helpers.py").write_text("import os\n\ndef load():\n    return 1\n")
    fixed = gl("smoke", "--imports", "--json", "train.py", cwd=project, timeout=BUILD_TIMEOUT_S)

    assert fixed.returncode == 0, fixed.describe()
    data = json.loads(fixed.stdout)
    assert (data["result"], data["imports"]) == ("passed", {"checked": 1, "failed": []})
    assert data["message"] == "all 1 third-party imports of train.py work in the image"
    assert "TRAINING STARTED" not in fixed.stdout + fixed.stderr
