"""`gpulaunch doctor` on injected GPU boxes: fake NVML, a fake engine, fixture sysfs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_doctor_table_matches_json
from fake_nvml import FakeGpu, FakeNvml, install
from typer.testing import CliRunner

from gpulaunch.ci.doctor import run_doctor
from gpulaunch.cli import app
from gpulaunch.config import validate_data
from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.errors import EngineError

SYSFS = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"


class FakeEngine:
    def __init__(self, runtime: bool = True, reachable: bool = True) -> None:
        self.host = "unix:///var/run/docker.sock"
        self.env: dict[str, str] = {}
        self.runtime = runtime
        self.reachable = reachable

    def facts(self) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        if not self.reachable:
            raise EngineError(f"cannot reach the Docker engine at {self.host}: refused")
        info = {"Runtimes": {"runc": {}}, "DockerRootDir": "/"}
        return {"Version": "27.3.1", "ApiVersion": "1.47"}, info, ["busybox:latest"]

    def docker_cli(self) -> DockerCli:
        return DockerCli("/usr/bin/docker", "buildx")

    def create_container(self, kwargs: dict[str, Any]) -> Any:
        if not self.runtime:
            raise EngineError("the Docker engine has no NVIDIA GPU runtime (could not select...)")
        return object()

    def discard(self, container: Any) -> None:
        pass


def _config(**image: str) -> Any:
    return validate_data({"version": 1, "name": "demo", "image": image})


def _line(report: Any, name: str) -> Any:
    (check,) = [c for c in report.checks if c.name == name]
    return check


def test_every_line_that_is_not_ok_has_a_fix(fake_nvml: FakeNvml) -> None:
    report = run_doctor(FakeEngine(runtime=False), None, {})
    assert [c for c in report.checks if c.status != "ok" and not c.fix] == []
    assert _line(report, "NVIDIA runtime").status == "fail"
    assert "NVIDIA Container Toolkit" in _line(report, "NVIDIA runtime").fix
    assert report.failed


def test_no_nvml_is_a_warning_with_the_fix() -> None:
    report = run_doctor(FakeEngine(), None, {})
    nvml = _line(report, "NVML")
    assert (nvml.status, nvml.fix.startswith("install the NVIDIA driver")) == ("warn", True)
    assert _line(report, "BuildKit").detail == "docker buildx (/usr/bin/docker)"
    assert not report.failed


def test_driver_470_cannot_run_a_cuda_12_4_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(driver="470.239.06"))
    config = _config(torch="2.4.1", cuda="12.4", base="python:3.11-slim-bookworm")

    driver = _line(run_doctor(FakeEngine(), config, {}), "driver")

    assert driver.status == "fail"
    assert "470.239.06 cannot start python:3.11-slim-bookworm" in driver.detail
    assert "the newest CUDA this driver runs is 11.4" in driver.detail
    # on this base only the wheel's floor applies: CUDA 11 wheels (>= 450.80.02) run on 470
    assert driver.fix.startswith("upgrade the driver to 525.60.13 or newer, or use cu118 ")
    assert "--set image.torch=2.4.1 --set image.cuda=11.8" in driver.fix
    assert "cu121" not in driver.fix and "cu124" not in driver.fix


def test_driver_470_on_the_cuda_12_4_image_only_by_forward_compat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, FakeNvml(driver="470.239.06"))
    driver = _line(run_doctor(FakeEngine(), _config(torch="2.4.1", cuda="12.4"), {}), "driver")
    assert driver.status == "warn"
    assert "forward-compatibility branch" in driver.detail and "11.4" in driver.detail


def test_sm_120_with_a_cu124_build_names_newer_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    rtx = FakeGpu("GPU-5090", "0000:01:00.0", name="NVIDIA GeForce RTX 5090", brand=5)
    install(monkeypatch, FakeNvml([rtx], driver="570.124.06"))

    report = run_doctor(FakeEngine(), _config(torch="2.4.1", cuda="12.4"), {})

    gpu = _line(report, "GPU 0")
    assert gpu.status == "fail"
    assert "NVIDIA GeForce RTX 5090, 80 GiB, compute capability 12.0" in gpu.detail
    assert "sm_120 is not in the cu124 build" in gpu.detail
    assert re.search(r"\bcu1(2[89]|3\d) \(--set image.torch=", gpu.fix), gpu.fix
    assert "cu130" not in gpu.fix  # CUDA 13.0 needs driver 580: not for this 570
    assert report.failed


def test_supported_gpu_is_ok(fake_nvml: FakeNvml) -> None:
    report = run_doctor(FakeEngine(), _config(torch="2.4.1", cuda="12.4"), {})
    assert _line(report, "GPU 1").status == "ok"
    assert "supported by the cu124 build" in _line(report, "GPU 0").detail


def test_numa_from_a_fixture_tree() -> None:
    numa = _line(
        run_doctor(FakeEngine(), None, {"GPULAUNCH_SYSFS_ROOT": str(SYSFS / "dgx8")}),
        "NUMA / affinity",
    )
    assert "node 0:" in numa.detail and "node 1:" in numa.detail
    assert numa.status in ("ok", "warn") and (numa.status == "ok" or numa.fix)


def test_cli_json_and_table_carry_the_same_lines(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/doctor.sock")
    as_json = runner.invoke(app, ["doctor", "--json"])
    table = runner.invoke(app, ["doctor"])

    assert as_json.exit_code == 1 and table.exit_code == 1  # the engine line is ✗
    checks = assert_doctor_table_matches_json(as_json.stdout, table.stdout)
    assert checks[0]["name"] == "engine" and checks[0]["status"] == "fail"


def test_a_refused_memory_query_keeps_the_driver_and_gpu_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not Supported on unified-memory parts: one refused query is not 'no driver'."""
    install(monkeypatch, FakeNvml(driver="570.124.06", failing=["nvmlDeviceGetMemoryInfo"]))
    report = run_doctor(FakeEngine(), _config(torch="2.4.1", cuda="12.4"), {})
    assert _line(report, "NVML").status == "ok" and "570.124.06" in _line(report, "NVML").detail
    assert _line(report, "driver").status == "ok"
    gpu = _line(report, "GPU 0")
    assert gpu.status == "ok" and "GiB" not in gpu.detail  # memory unknown, the rest known


@pytest.mark.parametrize("order", ["datacenter first", "geforce first"])
def test_a_mixed_host_fails_on_the_refused_brand_whatever_the_order(
    monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """Driver 550 with CUDA 12.6: the A100 only by forward compat, the GeForce not at all."""
    a100 = FakeGpu("GPU-a", "0000:01:00.0", name="NVIDIA A100-SXM4-40GB", brand=2)
    rtx = FakeGpu("GPU-g", "0000:02:00.0", name="NVIDIA GeForce RTX 4090", brand=5)
    pair = [a100, rtx] if order == "datacenter first" else [rtx, a100]
    install(monkeypatch, FakeNvml(pair, driver="550.54.15"))
    driver = _line(run_doctor(FakeEngine(), _config(torch="2.6.0", cuda="12.6"), {}), "driver")
    assert driver.status == "fail", driver
    assert "cu124 (--set image.torch=2.6.0 --set image.cuda=12.4)" in driver.fix  # native fit


def test_a_remote_engine_gets_no_verdict_from_this_machines_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, FakeNvml(driver="470.239.06"))
    engine = FakeEngine()
    engine.host = "tcp://gpubox:2376"  # from DOCKER_HOST or the docker context alike
    report = run_doctor(engine, _config(torch="2.4.1", cuda="12.4"), {})
    nvml = _line(report, "NVML")
    assert nvml.status == "warn" and "remote (tcp://gpubox:2376)" in nvml.detail
    assert "engine's machine" in nvml.fix
    assert not [c for c in report.checks if c.name == "driver" or c.name.startswith("GPU ")]


def test_no_gpu_runtime_is_a_warning_for_a_cpu_image(monkeypatch: pytest.MonkeyPatch) -> None:
    no_runtime = FakeEngine(runtime=False)
    cpu = run_doctor(no_runtime, _config(torch="2.4.1", cuda="cpu"), {})  # CPU image
    runtime = _line(cpu, "NVIDIA runtime")
    assert runtime.status == "warn" and "the image is a CPU build" in runtime.detail
    assert runtime.fix and not cpu.failed  # still says how, for a later GPU run
    # a CUDA image: ✗ even where NVML sees no GPU (a GPU box whose driver broke looks so)
    cuda = run_doctor(no_runtime, _config(torch="2.4.1", cuda="12.4"), {})
    assert _line(cuda, "NVIDIA runtime").status == "fail" and cuda.failed


def test_an_unreadable_docker_context_is_the_engine_line(tmp_path: Path) -> None:
    from gpulaunch.engine.docker_api import Engine

    engine = Engine({"DOCKER_CONTEXT": "nope", "DOCKER_CONFIG": str(tmp_path), "PATH": ""})
    report = run_doctor(engine, None, {})
    line = _line(report, "engine")
    assert line.status == "fail" and "docker context" in line.fix
    assert report.failed and _line(report, "shared memory")  # the other lines still come
    assert _line(report, "disk").detail == "not checked: the engine did not answer"
