"""`gpulaunch smoke` against the real engines: pass, timeout, a raising job, no GPU runtime.

The JUnit files are read back with junitparser, as a CI system would read them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from engine_env import nogpu_docker_host
from junitparser import Error, Failure, JUnitXml

from e2e.support import (
    BUILD_TIMEOUT_S,
    SESSION_NAME,
    cli_env,
    gl,
    link_wheels,
    managed_containers,
    project_containers,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker
TESTS = Path(__file__).resolve().parent.parent
FOREVER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(10**9)"


def _case(path: Path) -> Any:
    suites = list(JUnitXml.fromfile(str(path)))
    assert len(suites) == 1
    assert suites[0].tests == 1
    (case,) = list(suites[0])
    return suites[0], case


def fake_nvml_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The CLI as a process with tests/fake_nvml.py as its pynvml (two H100s, driver 550)."""
    shim = tmp_path / "nvml-shim"
    shim.mkdir(exist_ok=True)
    (shim / "pynvml.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from fake_nvml import FakeNvml\nsys.modules[__name__] = FakeNvml()\n"
    )
    return cli_env(PYTHONPATH=str(shim), **extra)


def test_smoke_of_the_offline_cpu_example_passes(
    docker_client: Any, example_copy: Any, tmp_path: Path
) -> None:
    project = example_copy("offline-cpu")
    link_wheels(project)
    summary = tmp_path / "summary.md"
    summary.write_text("")
    env = cli_env(GITHUB_STEP_SUMMARY=str(summary))

    result = gl(
        "smoke", "train_ddp.py", "--junit", str(tmp_path / "junit.xml"), "--json",
        cwd=project, env=env, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip

    assert result.returncode == 0, result.describe()
    data = json.loads(result.stdout)  # --json: the result alone on stdout
    assert data["result"] == "passed"
    assert data["gpus"] == "0"
    assert data["cpu_fallback"] == "the image is a CPU build (image.cuda: cpu)"
    assert data["versions"]["torch"] == "2.13.0"
    suite, case = _case(tmp_path / "junit.xml")
    assert (suite.failures, suite.errors) == (0, 0)
    assert case.name == "example-offline-cpu: train_ddp.py"
    assert "steps=2 ok" in (case.system_out or "")  # the example read GPULAUNCH_SMOKE_STEPS
    text = summary.read_text()
    assert text.startswith("### gpulaunch smoke: example-offline-cpu\n")
    assert "| result | ✅ **passed** (exit 0) |" in text
    log = Path(data["log"])
    assert log.parent == project / ".gpulaunch" / "logs"
    assert "rank 0/2 all_reduce=3 expected=3 steps=2 ok" in log.read_text()
    assert f"log: {log}" in result.stderr
    (record,) = [json.loads(p.read_text()) for p in (project / ".gpulaunch" / "runs").iterdir()]
    assert (record["kind"], record["state"], record["exit_code"]) == ("smoke", "succeeded", 0)


def test_smoke_timeout_stops_a_job_that_sleeps_forever(
    app: Path, docker_client: Any, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    began = time.monotonic()

    result = gl(
        "smoke", "--timeout", "15", "--grace", "5", "--junit", str(junit),
        "--", "python", "-c", FOREVER, cwd=app,
    )  # fmt: skip

    elapsed = time.monotonic() - began
    assert result.returncode == 124, result.describe()
    assert elapsed < 15 + 5 + 20, elapsed  # timeout + grace + start-up and removal
    assert "smoke timeout: timed out after 15 s" in result.stderr
    suite, case = _case(junit)
    assert suite.failures == 1
    (failure,) = case.result
    assert isinstance(failure, Failure) and failure.type == "timeout"
    assert "timed out after 15 s" in (failure.message or "")
    assert managed_containers(docker_client, SESSION_NAME) == []


def test_smoke_of_a_raising_script_reports_the_traceback(
    app: Path, docker_client: Any, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"

    result = gl(
        "smoke", "--junit", str(junit), "--", "python", "-c", "raise ValueError('smoke boom 42')",
        cwd=app,
    )  # fmt: skip

    assert result.returncode == 1, result.describe()
    _, case = _case(junit)
    (failure,) = case.result
    assert isinstance(failure, Failure) and failure.type == "exit"
    assert "ValueError: smoke boom 42" in (failure.text or "")
    assert failure.message == "the job exited with 1"
    assert managed_containers(docker_client, SESSION_NAME) == []


@pytest.fixture
def nogpu_project(docker_client: Any, nogpu_client: Any, tmp_path: Path) -> tuple[Path, str]:
    """A tiny image built in the main engine and handed to the engine without the hook."""
    name = temp_name("smoke-nogpu")
    config = tiny_config(name)
    config["image"]["cuda"] = "12.4"  # a CUDA build: GPUs are worth asking for
    project = write_project(tmp_path / "nogpu", "tiny", config)
    built = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    tag = built.stdout.strip().splitlines()[-1]
    nogpu_client.images.load(docker_client.images.get(tag).save(named=tag))
    return project, name


def test_require_gpu_without_runtime_is_exit_3_and_auto_falls_back(
    nogpu_project: tuple[Path, str], nogpu_client: Any, tmp_path: Path
) -> None:
    project, name = nogpu_project
    # NVML sees two GPUs here, so only the engine's missing runtime decides
    env = fake_nvml_env(tmp_path, DOCKER_HOST=nogpu_docker_host())
    junit = tmp_path / "junit.xml"

    required = gl("smoke", "--require-gpu", "--junit", str(junit), "hello.py", cwd=project, env=env)

    assert required.returncode == 3, required.describe()
    assert "Traceback" not in required.stderr
    assert "no NVIDIA GPU runtime" in required.stderr
    assert "hint: install the NVIDIA Container Toolkit" in required.stderr
    _, case = _case(junit)
    assert isinstance(case.result[0], Error)
    assert project_containers(nogpu_client, name) == []  # the probe container is gone

    auto = gl("smoke", "hello.py", cwd=project, env=env)

    assert auto.returncode == 0, auto.describe()
    assert "smoke: no GPU runtime: the Docker engine has no NVIDIA GPU runtime" in auto.stderr
    assert "CPU fallback: --gpus 0" in auto.stderr
    assert "hello uid=" in auto.stdout
    assert project_containers(nogpu_client, name) == []


def test_auto_takes_every_gpu_where_the_runtime_and_nvml_see_them(
    docker_client: Any, tmp_path: Path
) -> None:
    """The main engine's stand-in hook accepts GPU requests: auto asks for all of them."""
    name = temp_name("smoke-gpu")
    project = write_project(tmp_path / "gpu", "tiny", tiny_config(name))
    env = fake_nvml_env(tmp_path)

    result = gl(
        "smoke", "--json", "--set", "image.cuda=12.4",
        "--", "sh", "-c", 'echo "visible=$NVIDIA_VISIBLE_DEVICES"',
        cwd=project, env=env, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip

    assert result.returncode == 0, result.describe()
    data = json.loads(result.stdout)
    assert (data["gpus"], data["cpu_fallback"]) == ("all", None)
    assert data["versions"]["cuda"] == "12.4"  # --set reached the build
    assert "visible=all" in result.stderr  # --json: the job's output goes to stderr
    assert project_containers(docker_client, name) == []
