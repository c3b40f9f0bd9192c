"""`gpulaunch doctor` against the real engines: the stand-in one and the one without a hook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_env import nogpu_docker_host

from e2e.support import cli_env, gl

pytestmark = pytest.mark.docker


def _checks(stdout: str) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(stdout)["checks"]}


def test_doctor_here(docker_client: Any, tmp_path: Path) -> None:
    result = gl("doctor", "--json", cwd=tmp_path)

    checks = _checks(result.stdout)
    assert result.returncode == (1 if any(c["status"] == "fail" for c in checks.values()) else 0)
    assert checks["engine"]["status"] == "ok", result.describe()
    assert checks["BuildKit"]["status"] == "ok", result.describe()
    assert checks["NVIDIA runtime"]["status"] == "ok"  # the stand-in hook takes GPU requests
    assert checks["NVML"]["status"] == "warn"  # no GPU here: a warning with the fix
    assert "nvidia-ml-py" in checks["NVML"]["fix"] or "nvml" in checks["NVML"]["fix"]
    table = gl("doctor", cwd=tmp_path)
    assert table.returncode == result.returncode
    assert any(line.lstrip().startswith("✓  engine") for line in table.stdout.splitlines())
    assert any(line.lstrip().startswith("!  NVML") for line in table.stdout.splitlines())


def test_doctor_against_the_engine_without_nvidia_runtime(
    nogpu_client: Any, tmp_path: Path
) -> None:
    env = cli_env(DOCKER_HOST=nogpu_docker_host())

    result = gl("doctor", "--json", cwd=tmp_path, env=env)

    assert result.returncode == 1, result.describe()
    runtime = _checks(result.stdout)["NVIDIA runtime"]
    assert runtime["status"] == "fail"
    assert "no NVIDIA GPU runtime" in runtime["detail"]
    assert "NVIDIA Container Toolkit" in runtime["fix"]
    leftovers = nogpu_client.containers.list(
        all=True, filters={"label": "io.gpulaunch.project=doctor"}
    )
    assert leftovers == []  # the probe container is removed
