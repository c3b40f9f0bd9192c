"""Driver / GPU-architecture refusal and host-GPU validation, with NVML faked (tests/fake_nvml.py).

No GPU on CI machines: the fake is the complete pynvml surface gpulaunch calls, so a test
that passes here passes because gpulaunch validated, not because a function was missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_nvml import A100, B200, H100, FakeNvml, gpus, install
from typer.testing import CliRunner

from gpulaunch.catalog import compat
from gpulaunch.catalog.resolver import resolve
from gpulaunch.cli.app import app
from gpulaunch.config import ProjectConfig, load_config
from gpulaunch.errors import ConfigError
from gpulaunch.image.render import image_request

CU121 = '{torch: "2.4.1", cuda: "12.1"}'  # no kernels for compute capability 10.0 (B200)


def _project(path: Path, image: str = CU121) -> None:
    (path / "gpulaunch.yaml").write_text(f"version: 1\nname: p\nimage: {image}\n")
    (path / "train.py").write_text("print('hi')\n")


def _config(path: Path) -> ProjectConfig:
    return load_config(path / "gpulaunch.yaml")


def _dry(runner: CliRunner, *flags: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", "train.py", *flags, "--dry-run"])
    return result.exit_code, result.stdout, result.stderr


def test_old_driver_is_refused_with_alternatives(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(A100), driver="520.61.05"))
    _project(in_tmp)
    result = runner.invoke(app, ["run", "train.py", "--gpus", "1", "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr == (
        "gpulaunch: error: image.cuda: nvidia/cuda:12.1.1-runtime-ubuntu22.04 needs driver >= "
        "530.30.02 (cuda>=12.1); tesla GPUs also on driver branch 470, 525; this host has "
        "driver 520.61.05 (tesla GPU); with this driver use: cuda 11.8 (cu118)\n"
    )


def test_forward_compat_branch_admits_a_datacenter_gpu(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12.1.1's NVIDIA_REQUIRE_CUDA lists branch 470: the container starts, so do we."""
    install(monkeypatch, FakeNvml(gpus(A100), driver="470.82.01"))
    _project(in_tmp)
    code, _, err = _dry(runner, "--gpus", "1")
    assert code == 0, err


def test_new_gpu_without_kernels_is_refused(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(B200), driver="580.95.05"))
    _project(in_tmp)
    code, _, err = _dry(runner, "--gpus", "1")
    assert code == 2
    archs = " ".join(resolve(image_request(_config(in_tmp))).cuda_archs)
    assert archs  # the message lists the build's own archs
    assert err == (
        "gpulaunch: error: image.cuda: NVIDIA B200 (compute capability 10.0) is not supported "
        f"by the cu121 build (archs: {archs})\n"
    )


def test_matching_host_passes_and_cpu_runs_skip_the_check(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(B200), driver="470.82.01"))
    _project(in_tmp)
    assert _dry(runner, "--gpus", "0")[0] == 0
    install(monkeypatch, FakeNvml(gpus(H100), driver="550.54.15"))
    code, out, err = _dry(runner, "--gpus", "1")
    assert code == 0, err
    assert "# topology: nvml" in out
    assert "# gpus: validated against this host's 1 GPU(s) (nvml)" in out


@pytest.mark.parametrize(
    "image", ['{torch: "none", cuda: "cpu"}', '{torch: "2.4.1", cuda: "cpu"}'], ids=["none", "cpu"]
)
def test_a_cpu_image_given_gpus_has_no_arch_to_check(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, image: str
) -> None:
    """No kernels run on the GPUs of a CPU build: a B200 or an H100 is not refused for it."""
    for gpu in (B200, H100):
        install(monkeypatch, FakeNvml(gpus(gpu), driver="580.95.05"))
        _project(in_tmp, image)
        code, _, err = _dry(runner, "--gpus", "1")
        assert code == 0, err
        assert "error" not in err


# -- multi-GPU hosts: only the selected GPUs count ---------------------------------------
@pytest.mark.parametrize(
    ("flag", "refused"),
    [
        ("1", False),  # GPU 0 (H100) only
        ("0", False),
        ("2", True),  # GPUs 0 and 1: the B200 is in
        ("all", True),
    ],
)
def test_only_selected_gpus_are_checked_by_count(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, flag: str, refused: bool
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100, B200)))
    _project(in_tmp)
    code, _, err = _dry(runner, "--gpus", flag)
    if refused:
        assert code == 2 and "NVIDIA B200 (compute capability 10.0)" in err, err
    else:
        assert code == 0, err


def test_an_index_list_checks_the_gpus_it_names(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(B200, H100, H100)))
    _project(in_tmp)
    assert _dry(runner, "--gpus", "1,2")[0] == 0  # the B200 (index 0) is not used
    code, _, err = _dry(runner, "--gpus", "2,0")
    assert code == 2 and "NVIDIA B200" in err, err


def test_check_ignores_unselected_gpus(tmp_path: Path) -> None:
    """compat.check directly: the selection, not the whole host, decides."""
    (tmp_path / "gpulaunch.yaml").write_text(f"version: 1\nname: p\nimage: {CU121}\n")
    config = load_config(tmp_path / "gpulaunch.yaml")
    resolved = resolve(image_request(config))
    host = compat.HostGpus("550.54.15", (H100, B200))
    compat.check(resolved, host, [0])  # the B200 is not used: passes
    with pytest.raises(ConfigError, match="NVIDIA B200"):
        compat.check(resolved, host, [1])
    with pytest.raises(ConfigError, match="NVIDIA B200"):
        compat.check(resolved, host, None)  # all GPUs


def test_nvml_compute_capability_decides_for_a_gpu_the_catalog_does_not_name(
    tmp_path: Path,
) -> None:
    """A product name the catalog lacks: NVML's compute capability (12.0) still refuses a
    build without its kernels, as init's own choice (host_builds) already excludes it."""
    (tmp_path / "gpulaunch.yaml").write_text(f"version: 1\nname: p\nimage: {CU121}\n")
    resolved = resolve(image_request(load_config(tmp_path / "gpulaunch.yaml")))
    future = compat.HostGpus("580.65.06", ("NVIDIA Future GPU",), ("nvidia",), ("12.0",))
    with pytest.raises(ConfigError, match=r"NVIDIA Future GPU \(compute capability 12.0\)"):
        compat.check(resolved, future)
    with pytest.raises(ConfigError, match=r"compute capability 12\.0"):
        compat.check(resolved, future, [0])
    compat.check(resolved, compat.HostGpus("580.65.06", ("NVIDIA Future GPU",), ("nvidia",)))
    assert not any(r.torch == "2.4.1" and r.cuda == "12.1" for r in compat.host_builds(future))


# -- partial NVML failures: validated, refused cleanly, or said to be unvalidated ---------
def test_more_gpus_than_the_host_has_are_refused(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100)))
    _project(in_tmp)
    code, _, err = _dry(runner, "--gpus", "4")
    assert code == 2, err
    assert err.startswith("gpulaunch: error: --gpus:"), err


@pytest.mark.parametrize("missing", ["nvmlDeviceGetPciInfo", "nvmlDeviceGetCount"])
def test_bindings_missing_a_function_never_pass_unvalidated(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    """`run --gpus 4` on a one-GPU host must not pass because discovery broke halfway."""
    install(monkeypatch, FakeNvml(gpus(H100), missing=[missing]))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "4")
    assert code != 0, out
    assert "Traceback" not in err
    assert err.startswith("gpulaunch: ") and missing in err, err
    assert len(err.splitlines()) == 1, err


def test_a_refused_nvml_query_is_reported_in_the_dry_run(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100), failing=["nvmlDeviceGetPciInfo"]))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "1")
    assert code == 0, err
    assert "# gpus: not validated: GPU discovery failed: NVML: Not Supported" in out, out
    code, out, err = _dry(runner, "--gpus", "1", "--json")
    assert code == 0, err
    check = json.loads(out)["gpu_check"]
    assert check["validated"] is False
    assert "Not Supported (nvmlDeviceGetPciInfo)" in check["detail"]


def test_no_nvml_is_said_in_the_dry_run(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100), fail_init=True))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu_check"] == {
        "validated": False,
        "detail": "not validated: no NVML (nvidia-ml-py not installed or no driver); "
        "sysfs alone is not trusted",
    }
    install(monkeypatch, FakeNvml(gpus(H100)))
    code, out, err = _dry(runner, "--gpus", "1", "--json")
    assert json.loads(out)["gpu_check"]["validated"] is True


def test_a_remote_engine_is_not_validated(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml: FakeNvml
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "8")
    assert code == 0, err
    assert "# gpus: not validated: the engine is remote (tcp://127.0.0.1:2375)" in out


def _docker_context(folder: Path, name: str, host: str | None) -> Path:
    """A docker config folder whose current context is `name` (endpoint `host`; None: its
    meta file is missing, as after a half-removed context)."""
    import hashlib

    config = folder / "docker-config"
    meta = config / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (config / "config.json").write_text(json.dumps({"currentContext": name}))
    if host is not None:
        doc = {"Name": name, "Endpoints": {"docker": {"Host": host}}}
        (meta / "meta.json").write_text(json.dumps(doc))
    return config


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("tcp://gpubox:2376", "the engine is remote (tcp://gpubox:2376)"),
        ("ssh://gpubox", "the engine is remote (ssh://gpubox)"),
    ],
)
def test_a_remote_docker_context_is_not_this_machine(
    runner: CliRunner,
    in_tmp: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host: str | None,
    why: str,
) -> None:
    """`run` reads the engine's address as the engine seam does: with no DOCKER_HOST, the
    docker context. This machine's GPU (a B200 on a driver too old for it, one GPU for
    --gpus 8) must then neither refuse the run nor validate it."""
    install(monkeypatch, FakeNvml(gpus(B200), driver="470.82.01"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_context(tmp_path, "gpubox", host)))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "8")
    assert code == 0, err
    assert f"# gpus: not validated: {why}" in out


def test_an_unreadable_docker_context_is_one_line(
    runner: CliRunner, in_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(B200), driver="470.82.01"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(_docker_context(tmp_path, "gpubox", None)))
    _project(in_tmp)
    code, _, err = _dry(runner, "--gpus", "1")
    assert (code, err) == (
        3,
        "gpulaunch: error: docker context 'gpubox': cannot read its endpoint\n",
    )


def test_a_local_docker_context_is_this_machine(
    runner: CliRunner, in_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100), driver="550.54.15"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    config = _docker_context(tmp_path, "rootless", "unix:///run/user/1000/docker.sock")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "1")
    assert code == 0, err
    assert "# gpus: validated against this host's 1 GPU(s) (nvml)" in out
    assert _dry(runner, "--gpus", "8")[0] == 2  # one GPU here: 8 is refused


def test_probe_reads_the_fake(fake_nvml: FakeNvml) -> None:
    fake_nvml.devices = gpus(H100, B200)
    assert compat.probe({}) == compat.HostGpus(
        "550.54.15", (H100, B200), ("tesla", "tesla"), (None, None)
    )  # these bindings lack nvmlDeviceGetCudaComputeCapability: the name table decides
    fake_nvml.devices[0].cc = "9.0"  # the second GPU's query is refused (NVMLError): None
    assert compat.probe({}).ccs == ("9.0", None)  # type: ignore[union-attr]
    fake_nvml.devices[1].brand = 5  # NVML_BRAND_GEFORCE
    assert compat.probe({}).brands == ("tesla", "geforce")  # type: ignore[union-attr]
    assert fake_nvml.calls[:2] == ["init", "shutdown"]
    fake_nvml.failing = {"nvmlDeviceGetName"}
    assert compat.probe({}) is None
    assert compat.probe({"GPULAUNCH_SYSFS_ROOT": "/x"}) is None
