"""Driver-aware `init`: with NVML (tests/fake_nvml.py) the default build is the newest stable
torch / CUDA build the driver can start and the GPUs run; without NVML, today's default."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fake_nvml import H100, FakeGpu, FakeNvml, gpus, install
from packaging.version import Version
from typer.testing import CliRunner

from gpulaunch.catalog import compat, driver_rule
from gpulaunch.catalog.resolver import resolve
from gpulaunch.cli.app import app
from gpulaunch.config import ProjectConfig, load_config
from gpulaunch.image.init import InitOptions, InitResult, run_init
from gpulaunch.image.render import image_request

RTX_4090 = "NVIDIA GeForce RTX 4090"  # compute capability 8.9 by the catalog's name table
GEFORCE, TESLA = 5, 2  # nvmlDeviceGetBrand


def _host(monkeypatch: pytest.MonkeyPatch, driver: str, *devices: FakeGpu) -> FakeNvml:
    return install(monkeypatch, FakeNvml(list(devices), driver=driver))


def _gpu(name: str, brand: int, cc: str | None = None) -> FakeGpu:
    (gpu,) = gpus(name)
    gpu.brand, gpu.cc = brand, cc
    return gpu


def _init(folder: Path, **flags: str) -> tuple[ProjectConfig, InitResult]:
    result = run_init(InitOptions(directory=folder, env={}, force=True, **flags))  # type: ignore[arg-type]
    return load_config(folder / "gpulaunch.yaml"), result


def _today(folder: Path) -> ProjectConfig:
    """What init writes when the host is not looked at (env=None): today's default."""
    run_init(InitOptions(directory=folder, force=True))
    return load_config(folder / "gpulaunch.yaml")


def _reason(result: InitResult) -> list[str]:
    return [n for n in result.notes if n.startswith("this machine:")]


def _starts(config: ProjectConfig, driver: str, brand: str) -> bool:
    resolved = resolve(image_request(config))
    rule = driver_rule.requirement_for(resolved.base_image, resolved.cuda)
    assert rule is not None
    return driver_rule.host_can_run(rule, driver, brand).ok


def test_geforce_on_driver_550_gets_a_build_its_driver_can_start(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    today = _today(in_tmp)
    assert not _starts(today, "550.54.15", "geforce")  # the catalog default needs a newer driver
    _host(monkeypatch, "550.54.15", _gpu(RTX_4090, GEFORCE))

    config, result = _init(in_tmp)

    assert (config.image.torch, config.image.cuda) == ("2.7.1", "11.8")
    assert _starts(config, "550.54.15", "geforce")
    assert Version(str(config.image.cuda)) < Version("12.8")  # cu128 images need driver 570
    assert _reason(result) == [
        "this machine: driver 550.54.15, 1x NVIDIA GeForce RTX 4090 (sm_89): torch 2.7.1+cu118 "
        "is the newest stable build this driver can start and these GPUs run "
        "(--torch/--cuda choose another)"
    ]
    assert not [n for n in result.notes if n.startswith("warning: this machine")]


def test_h100_on_a_new_driver_gets_the_newest_torch_and_cuda(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, "595.58.03", _gpu(H100, TESLA), _gpu(H100, TESLA))
    # builds whose image's driver rule is not read from NVIDIA (13.2: reported) and unverified
    # builds (2.15's cu126/cu130: the release plan's) are never picked: torch 2.15 and 2.14's
    # cu132 are left out
    rows = [r for r in compat.matrix() if r.cuda and r.driver_verified and r.verified]
    newest = max(rows, key=lambda r: Version(r.torch)).torch
    stable = [r.cuda for r in compat.matrix(newest) if r.cuda and r.status == "stable"]

    config, result = _init(in_tmp)

    assert config.image.torch == newest == "2.14.1"
    assert "13.2" in stable and config.image.cuda == "13.0"
    assert _today(in_tmp).image.cuda == "13.0"
    assert "2x NVIDIA H100 80GB HBM3 (sm_90)" in _reason(result)[0]


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA GeForce RTX 5090", None),  # sm_120 by the catalog's name table
        ("NVIDIA Made-Up Blackwell", "12.0"),  # not in the table: NVML's compute capability
    ],
)
def test_an_sm_120_gpu_gets_a_build_with_sm_120(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, name: str, cc: str | None
) -> None:
    _host(monkeypatch, "580.95.05", _gpu(name, GEFORCE, cc))

    config, result = _init(in_tmp)

    resolved = resolve(image_request(config))
    assert compat.supports_arch(resolved, "12.0")
    assert Version(str(config.image.cuda)) >= Version("12.8")
    assert _starts(config, "580.95.05", "geforce")
    assert f"{name} (sm_120)" in _reason(result)[0]


def test_old_gpu_excludes_builds_without_its_arch(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A P100 (sm_60) on a new driver: the newest torch builds dropped Pascal."""
    _host(monkeypatch, "595.58.03", _gpu("Tesla P100-PCIE-16GB", TESLA))

    config, _ = _init(in_tmp)

    assert compat.supports_arch(resolve(image_request(config)), "6.0")
    assert Version(str(config.image.torch)) < Version("2.11")


@pytest.mark.parametrize(
    "fake",
    [
        None,  # no nvidia-ml-py
        FakeNvml(fail_init=True),  # no driver
        FakeNvml([], driver="550.54.15"),  # a driver, no GPU
    ],
    ids=["no-bindings", "no-driver", "no-gpu"],
)
def test_without_nvml_or_gpus_init_is_unchanged(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeNvml | None
) -> None:
    today = (in_tmp / "gpulaunch.yaml", _today(in_tmp))
    before = today[0].read_text()
    if fake is None:
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    else:
        install(monkeypatch, fake)

    config, result = _init(in_tmp)

    assert config == today[1]
    assert (in_tmp / "gpulaunch.yaml").read_text() == before
    assert not _reason(result)
    assert not [n for n in result.notes if "this machine" in n]


def test_explicit_torch_and_cuda_are_untouched(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, "550.54.15", _gpu(RTX_4090, GEFORCE))

    config, result = _init(in_tmp, torch="2.14.0", cuda="13.0")
    assert (config.image.torch, config.image.cuda) == ("2.14.0", "13.0")
    assert not _reason(result)
    (warning,) = [n for n in result.notes if n.startswith("warning: this machine")]
    assert warning.startswith(
        "warning: this machine (driver 550.54.15, 1x NVIDIA GeForce RTX 4090 (sm_89)) cannot "
        "run this image (--torch/--cuda chose it): image.cuda: nvidia/cuda:13.0"
    )

    config, result = _init(in_tmp, torch="2.4.1")  # --torch alone: its catalog default CUDA
    assert (config.image.torch, config.image.cuda) == ("2.4.1", "11.8")
    assert not _reason(result)


def test_project_pin_wins_with_a_warning_when_this_driver_cannot_run_it(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, "550.54.15", _gpu(RTX_4090, GEFORCE))
    (in_tmp / "requirements.txt").write_text("torch==2.14.0\n")

    config, result = _init(in_tmp)

    assert config.image.torch == "2.14.0"
    assert not _reason(result)
    (warning,) = [n for n in result.notes if n.startswith("warning: this machine")]
    assert "(the project pins torch==2.14.0 in requirements.txt:1)" in warning
    assert "needs driver >= 580.65.06" in warning


def test_project_pin_range_bounds_the_host_choice(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, "550.54.15", _gpu(RTX_4090, GEFORCE))
    (in_tmp / "requirements.txt").write_text("torch>=2.4,<2.7\n")

    config, result = _init(in_tmp)

    assert (config.image.torch, config.image.cuda) == ("2.6.0", "12.4")
    assert "newest stable build within torch<2.7,>=2.4 (requirements.txt:1)" in _reason(result)[0]


def test_cli_init_says_why(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, "550.54.15", _gpu(RTX_4090, GEFORCE))

    result = runner.invoke(app, ["init", "--yes"], catch_exceptions=False)

    assert result.exit_code == 0, result.stderr
    assert (
        "this machine: driver 550.54.15, 1x NVIDIA GeForce RTX 4090 (sm_89): torch 2.7.1+cu118 "
        "is the newest stable build this driver can start and these GPUs run "
        "(--torch/--cuda choose another)\n"
    ) in result.stderr
    assert "image: torch 2.7.1+cu118 | CUDA 11.8.0" in result.stdout
