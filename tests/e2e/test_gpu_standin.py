"""GPU requests against the stand-in NVIDIA hook, and against an engine without any.

The main engine's hook is a stub (see DEVELOPERS.md): it proves gpulaunch *asks* for the
right GPUs (the container sees NVIDIA_VISIBLE_DEVICES), never that anything runs on one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_env import nogpu_docker_host

from e2e.support import (
    BUILD_TIMEOUT_S,
    cli_env,
    gl,
    project_containers,
    run_job,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    ("gpus", "visible"), [("0", None), ("2", "0,1"), ("0,2", "0,2")], ids=["none", "2", "0,2"]
)
def test_gpus_flag_reaches_the_container(app: Path, gpus: str, visible: str | None) -> None:
    result = run_job(app, "--gpus", gpus, "--nproc", "1", "show_env.py")

    assert result.returncode == 0, result.describe()
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert env.get("NVIDIA_VISIBLE_DEVICES") == visible, result.describe()


def test_engine_without_gpu_runtime_is_a_clear_error(
    docker_client: Any, nogpu_client: Any, tmp_path: Path
) -> None:
    name = temp_name("nogpu")
    project = write_project(tmp_path / "nogpu", "tiny", tiny_config(name))
    built = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    tag = built.stdout.strip().splitlines()[-1]
    # The second engine has no registry either: hand it the image.
    nogpu_client.images.load(docker_client.images.get(tag).save(named=tag))
    env = cli_env(DOCKER_HOST=nogpu_docker_host())

    result = gl("run", "--gpus", "1", "hello.py", cwd=project, env=env)

    assert result.returncode == 3, result.describe()
    assert f"image {tag} is up to date" in result.stderr  # found there; nothing rebuilt
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    error = [line for line in result.stderr.splitlines() if line.startswith("gpulaunch: error:")]
    assert len(error) == 1, result.describe()
    assert "no NVIDIA GPU runtime" in error[0]
    assert "NVIDIA Container Toolkit" in result.stderr
    assert "--gpus 0" in result.stderr
    assert project_containers(nogpu_client, name) == []

    # ...and the advice works: the same job on the CPU.
    cpu = gl("run", "--gpus", "0", "hello.py", cwd=project, env=env)
    assert cpu.returncode == 0, cpu.describe()
    assert "hello uid=" in cpu.stdout
    assert project_containers(nogpu_client, name) == []
