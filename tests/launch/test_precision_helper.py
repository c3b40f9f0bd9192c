"""gpulaunch_precision (gpulaunch/launch/pythonpath/) with real CPU PyTorch."""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO

torch = pytest.importorskip("torch")

Loader = Callable[[str | None], ModuleType]
HELPER = REPO / "gpulaunch" / "launch" / "pythonpath" / "gpulaunch_precision.py"


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loader]:
    """Import the helper the way the container does: as `gpulaunch_precision`, fresh, with a
    chosen GPULAUNCH_PRECISION; restores torch's TF32 settings afterwards."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)

    def _load(precision: str | None) -> ModuleType:
        if precision is None:
            monkeypatch.delenv("GPULAUNCH_PRECISION", raising=False)
        else:
            monkeypatch.setenv("GPULAUNCH_PRECISION", precision)
        spec = importlib.util.spec_from_file_location("gpulaunch_precision", HELPER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield _load
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.allow_tf32 = saved[1]


def _matmul_dtype(module: ModuleType, device: str = "cpu") -> Any:
    a = torch.randn(8, 8)
    with module.autocast(device):
        return (a @ a).dtype


def test_bf16_autocast_on_cpu(load: Loader) -> None:
    mod = load("bf16")
    assert mod.PRECISION == "bf16"
    assert mod.dtype is torch.bfloat16
    assert _matmul_dtype(mod) == torch.bfloat16
    # device defaults to cpu when no GPU is visible
    if not torch.cuda.is_available():
        a = torch.randn(4, 4)
        with mod.autocast():
            assert (a @ a).dtype == torch.bfloat16


def test_fp32_gives_float32_and_strict_matmul(load: Loader) -> None:
    mod = load("fp32")
    assert mod.dtype is torch.float32
    assert isinstance(mod.autocast(), contextlib.nullcontext)
    assert _matmul_dtype(mod) == torch.float32
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cudnn.allow_tf32 is False


def test_tf32_enables_tf32_without_autocast(load: Loader) -> None:
    mod = load("tf32")
    assert mod.dtype is torch.float32
    assert _matmul_dtype(mod) == torch.float32
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cudnn.allow_tf32 is True
    # the legacy setters keep the newer per-backend view consistent (no "mixed API" error)
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_unset_precision_changes_nothing(load: Loader) -> None:
    torch.set_float32_matmul_precision("medium")
    mod = load(None)
    assert mod.PRECISION is None
    assert mod.dtype is torch.float32
    assert torch.get_float32_matmul_precision() == "medium"
    assert _matmul_dtype(mod) == torch.float32
    assert not mod.grad_scaler("cpu").is_enabled()


def test_fp16_grad_scaler_disabled_on_cpu(load: Loader) -> None:
    mod = load("fp16")
    assert mod.dtype is torch.float16
    scaler = mod.grad_scaler("cpu")
    assert isinstance(scaler, torch.amp.GradScaler)
    assert not scaler.is_enabled()
    # a disabled scaler passes the training step through unchanged
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    with mod.autocast("cpu", precision="bf16"):
        loss = model(torch.randn(2, 4)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before, model.weight.detach())


def test_grad_scaler_enabled_only_for_fp16_on_cuda(load: Loader) -> None:
    mod = load("fp16")
    for precision in ("fp32", "tf32", "bf16"):
        assert not mod.grad_scaler("cpu", precision=precision).is_enabled()
    if torch.cuda.is_available():
        assert mod.grad_scaler("cuda").is_enabled()
        assert not mod.grad_scaler("cuda", precision="bf16").is_enabled()


def test_explicit_precision_argument_overrides_env(load: Loader) -> None:
    mod = load("fp32")
    assert _matmul_dtype(mod) == torch.float32
    a = torch.randn(4, 4)
    with mod.autocast("cpu", precision="bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="'int8' is not one of"):
        mod.autocast("cpu", precision="int8")


def test_bad_env_value_fails_at_import(load: Loader) -> None:
    with pytest.raises(ValueError, match="GPULAUNCH_PRECISION='fp8' is not one of"):
        load("fp8")


def test_plain_script_uses_it_from_pythonpath(tmp_path: Path) -> None:
    """As in the container: the file is copied as gpulaunch_precision.py onto PYTHONPATH."""
    (tmp_path / "gpulaunch_precision.py").write_bytes(HELPER.read_bytes())
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from gpulaunch_precision import autocast, grad_scaler, dtype\n"
        "x = torch.randn(4, 4)\n"
        "with autocast('cpu'):\n"
        "    y = x @ x\n"
        "print(y.dtype, dtype, grad_scaler('cpu').is_enabled())\n"
    )
    env = {"PYTHONPATH": str(tmp_path), "GPULAUNCH_PRECISION": "bf16", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "torch.bfloat16 torch.bfloat16 False"
