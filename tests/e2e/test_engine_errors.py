"""Nothing listening behind DOCKER_HOST: exit 3 and one line (plus a hint), no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.support import cli_env, gl, temp_name, tiny_config, write_project

pytestmark = pytest.mark.docker

NOWHERE = "unix:///nonexistent.sock"


@pytest.mark.parametrize(
    "args", [("run", "hello.py"), ("build",), ("ps",), ("logs", "gl-x")], ids=lambda a: a[0]
)
def test_unreachable_engine(docker_client: Any, tmp_path: Path, args: tuple[str, ...]) -> None:
    project = write_project(tmp_path / "p", "tiny", tiny_config(temp_name("nohost")))

    result = gl(*args, cwd=project, env=cli_env(DOCKER_HOST=NOWHERE), timeout=60)

    assert result.returncode == 3, result.describe()
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert [line for line in lines if not line.startswith("hint:")] == [lines[0]], result.describe()
    assert lines[0].startswith(f"gpulaunch: error: cannot reach the Docker engine at {NOWHERE}")
    assert len(lines) <= 2
