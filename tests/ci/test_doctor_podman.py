"""`gpulaunch doctor` on Podman (fake engine at the seam): which engine, rootless or not, the
cgroup version, the build path (podman build, Buildah) and the CDI specs GPUs need there."""

from __future__ import annotations

from typing import Any

import pytest

from gpulaunch.ci.doctor import run_doctor
from gpulaunch.engine.podman import EngineKind, PodmanCli

PODMAN_VERSION = {
    "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}],
    "Version": "4.3.1",
    "ApiVersion": "1.41",
}


class PodmanEngine:
    def __init__(
        self,
        rootless: bool = False,
        cgroup: str = "2",
        cdi: dict[str, str] | None = None,
        podman: bool = True,
        host: str = "unix:///run/podman/podman.sock",
    ) -> None:
        self.host = host
        self.env = {"DOCKER_HOST": host}
        self.rootless, self.cgroup, self.podman = rootless, cgroup, podman
        self.cdi = cdi or {}

    def facts(self) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        info = {
            "SecurityOptions": ["name=seccomp,profile=default"],  # rootless or not: Podman 4.3.1
            "CgroupVersion": self.cgroup,
            "CgroupDriver": "systemd",
            "DockerRootDir": "/",
        }
        return PODMAN_VERSION, info, ["localhost/demo:latest"]

    def kind(self) -> EngineKind:
        """What the seam reads from Podman's own info (`Engine.kind`)."""
        return EngineKind("podman", "4.3.1", self.rootless)

    def podman_cli(self) -> PodmanCli | None:
        return PodmanCli("/usr/bin/podman", "env", url=self.host) if self.podman else None

    def cdi_devices(self) -> dict[str, str]:
        return self.cdi

    def docker_cli(self) -> Any:
        raise AssertionError("on Podman the docker CLI's BuildKit is not the build path")

    def create_container(self, _body: dict[str, Any]) -> Any:
        raise AssertionError("doctor probes no --gpus container on Podman: CDI specs say it")


def _lines(report: Any) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def test_podman_rootful_with_a_cdi_spec() -> None:
    spec = "/etc/cdi/nvidia.yaml"
    engine = PodmanEngine(
        cdi={"nvidia.com/gpu=0": spec, "nvidia.com/gpu=all": spec, "x.com/y=1": "/z"}
    )
    lines = _lines(run_doctor(engine, None, {}))
    assert lines["engine"].detail == (
        "Podman 4.3.1, rootful, reachable at unix:///run/podman/podman.sock (DOCKER_HOST)"
    )
    assert (lines["engine mode"].status, lines["engine mode"].detail) == (
        "ok",
        "rootful, cgroup v2 (systemd)",
    )
    assert lines["API version"].detail == "Podman 4.3.1, Docker-compatible API 1.41"
    assert lines["BuildKit"].detail == (
        "podman build (Buildah, /usr/bin/podman): cache and secret mounts"
    )
    runtime = lines["NVIDIA runtime"]
    assert (runtime.status, runtime.detail) == (
        "ok",
        "CDI nvidia.com/gpu=0, nvidia.com/gpu=all (/etc/cdi/nvidia.yaml)",
    )


def test_podman_without_a_cdi_spec_names_nvidia_ctk() -> None:
    report = run_doctor(PodmanEngine(), None, {})
    runtime = _lines(report)["NVIDIA runtime"]
    assert runtime.status == "fail" and report.failed
    assert runtime.detail == (
        "Podman hands GPUs over through CDI: no spec in /etc/cdi, /var/run/cdi"
    )
    assert (
        runtime.fix
        == "generate the spec: sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
    )


def test_rootless_on_cgroup_v1_is_a_warning_with_the_fix() -> None:
    lines = _lines(run_doctor(PodmanEngine(rootless=True, cgroup="1"), None, {}))
    assert lines["engine"].detail.startswith("Podman 4.3.1, rootless, reachable at ")
    mode = lines["engine mode"]
    assert mode.status == "warn"
    assert mode.detail == ("rootless, cgroup v1 (systemd): --memory and --cpuset are not applied")
    assert "unified_cgroup_hierarchy" in mode.fix


@pytest.mark.parametrize("rootless", [False, True])
def test_no_podman_cli_is_a_warning_naming_the_classic_builder(rootless: bool) -> None:
    lines = _lines(run_doctor(PodmanEngine(podman=False, rootless=rootless), None, {}))
    builder = lines["BuildKit"]
    assert builder.status == "warn" and "--builder classic" in builder.fix


def test_a_remote_podmans_cdi_specs_are_not_read_here() -> None:
    engine = PodmanEngine(host="ssh://gpu-box", cdi={"nvidia.com/gpu=0": "/etc/cdi/local.yaml"})
    runtime = _lines(run_doctor(engine, None, {}))["NVIDIA runtime"]
    assert (runtime.status, runtime.detail) == (
        "warn",
        "the engine is remote: its CDI specs are not on this machine",
    )
