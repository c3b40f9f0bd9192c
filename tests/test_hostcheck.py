"""Driver / GPU-architecture refusal up front, with NVML faked (no GPU on CI machines)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.cli import app


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, driver: str, names: list[str]) -> None:
    mod = types.ModuleType("pynvml")
    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    mod.nvmlSystemGetDriverVersion = lambda: driver  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: len(names)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: names[h]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", mod)


def _project(path: Path, image: str) -> None:
    (path / "gpulaunch.yaml").write_text(f"version: 1\nname: p\nimage: {image}\n")
    (path / "train.py").write_text("print('hi')\n")


def test_old_driver_is_refused_with_alternatives(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvml(monkeypatch, "470.82.01", ["NVIDIA A100-SXM4-40GB"])
    _project(in_tmp, '{torch: "2.4.1", cuda: "12.1"}')
    result = runner.invoke(app, ["run", "train.py", "--gpus", "1", "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr == (
        "gpulaunch: error: image.cuda: CUDA 12.1.1 needs driver >= 525.60.13; this host has "
        "470.82.01; with this driver use: cuda 11.8 (cu118)\n"
    )


def test_new_gpu_without_kernels_is_refused(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvml(monkeypatch, "580.95.05", ["NVIDIA B200"])
    _project(in_tmp, '{torch: "2.4.1", cuda: "12.1"}')
    result = runner.invoke(app, ["run", "train.py", "--gpus", "1", "--dry-run"])
    assert result.exit_code == 2
    assert "NVIDIA B200 (compute capability 10.0) is not supported by the cu121 build" in (
        result.stderr
    )


def test_matching_host_passes_and_cpu_runs_skip_the_check(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nvml(monkeypatch, "470.82.01", ["NVIDIA B200"])
    _project(in_tmp, '{torch: "2.4.1", cuda: "12.1"}')
    assert runner.invoke(app, ["run", "train.py", "--gpus", "0", "--dry-run"]).exit_code == 0
    _fake_nvml(monkeypatch, "550.54.15", ["NVIDIA H100 80GB HBM3"])
    result = runner.invoke(app, ["run", "train.py", "--gpus", "1", "--dry-run"])
    assert result.exit_code == 0, result.stderr
