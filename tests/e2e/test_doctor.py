"""`gpulaunch doctor` against the real engines: the stand-in one and the one without a hook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_doctor_table_matches_json
from engine_env import nogpu_docker_host

from e2e.support import cli_env, gl

TESTS = Path(__file__).resolve().parent.parent
# pynvml, as the CLI imports it: the fake module with one GeForce RTX 5090 (sm_120) on driver
# 570; a stand-in for a GPU host (this machine has none)
SHIM = """\
import sys
sys.path.insert(0, {tests!r})
from fake_nvml import FakeGpu, FakeNvml
rtx = FakeGpu("GPU-5090", "0000:01:00.0", name="NVIDIA GeForce RTX 5090", brand=5, cc="12.0")
sys.modules[__name__] = FakeNvml([rtx], driver={driver!r})
"""

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
    assert_doctor_table_matches_json(result.stdout, table.stdout)
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


@pytest.mark.parametrize(
    ("driver", "torch", "cuda", "line", "needle"),
    [
        ("470.239.06", "2.4.1", "12.4", "driver", "the newest CUDA this driver runs is 11.4"),
        ("570.124.06", "2.4.1", "12.4", "GPU 0", "sm_120 is not in the cu124 build"),
    ],
)
def test_doctor_with_an_injected_gpu_fails_the_line_and_json_matches_the_table(
    docker_client: Any,
    tmp_path: Path,
    driver: str,
    torch: str,
    cuda: str,
    line: str,
    needle: str,
) -> None:
    """The real CLI on the real engine, NVML answering for an RTX 5090 on `driver`."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(SHIM.format(tests=str(TESTS), driver=driver))
    project = tmp_path / "proj"
    project.mkdir()
    (project / "gpulaunch.yaml").write_text(
        f'version: 1\nname: doc\nimage:\n  torch: "{torch}"\n  cuda: "{cuda}"\n'
    )
    env = cli_env(PYTHONPATH=str(shim))

    as_json = gl("doctor", "--json", cwd=project, env=env)
    table = gl("doctor", cwd=project, env=env)

    assert as_json.returncode == 1 and table.returncode == 1, as_json.describe()
    checks = {c["name"]: c for c in assert_doctor_table_matches_json(as_json.stdout, table.stdout)}
    assert checks["engine"]["status"] == "ok", as_json.describe()
    assert checks[line]["status"] == "fail" and needle in checks[line]["detail"], checks[line]
    assert checks[line]["fix"], checks[line]
    if line == "GPU 0":
        assert "cu128" in checks[line]["fix"] or "cu129" in checks[line]["fix"], checks[line]
