"""Mixed-precision helpers for plain PyTorch scripts launched by gpulaunch.

gpulaunch mounts this file into the container as ``gpulaunch_precision.py`` on PYTHONPATH and
sets ``GPULAUNCH_PRECISION`` to ``fp32``, ``tf32``, ``fp16`` or ``bf16`` (``--precision``)::

    from gpulaunch_precision import autocast, grad_scaler, dtype

    scaler = grad_scaler()
    with autocast():
        loss = model(batch)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

Why this exists: **no environment variable turns on ``torch.autocast`` or a ``GradScaler`` by
itself.** Accelerate, the HF Trainer and Lightning read ``ACCELERATE_MIXED_PRECISION`` /
``PL_TRAINER_PRECISION`` (which gpulaunch also sets), but a plain script has to opt in with code;
this module is that code, driven by the same setting. The only precision behaviour that
variables alone control is TF32 (``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``, ``NVIDIA_TF32_OVERRIDE``).

Importing the module applies the TF32 policy once (``apply()``): ``tf32`` enables TF32 for
matmuls and cuDNN, ``fp32`` disables both, ``fp16``/``bf16`` and an unset variable leave
PyTorch's defaults alone. It uses ``torch.set_float32_matmul_precision`` and
``torch.backends.cudnn.allow_tf32`` rather than the newer ``fp32_precision`` attributes:
recent PyTorch raises a RuntimeError when a script reads the legacy settings after the new
ones were written, while the legacy setters keep both views consistent.

Standalone on purpose: standard library and torch only, importable without gpulaunch.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

ENV_VAR = "GPULAUNCH_PRECISION"
MODES = ("fp32", "tf32", "fp16", "bf16")
_DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}

__all__ = ["ENV_VAR", "PRECISION", "apply", "autocast", "current", "dtype", "grad_scaler"]


def current(environ: Any = None) -> str | None:
    """The precision gpulaunch asked for, or None when GPULAUNCH_PRECISION is unset."""
    env = os.environ if environ is None else environ
    value = str(env.get(ENV_VAR, "")).strip().lower()
    if not value:
        return None
    if value not in MODES:
        raise ValueError(f"{ENV_VAR}={value!r} is not one of {', '.join(MODES)}")
    return value


def _mode(precision: str | None) -> str | None:
    if precision is None:
        return current()
    if precision not in MODES:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(MODES)}")
    return precision


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def apply(precision: str | None = None) -> None:
    """Apply the TF32 policy of a precision (default: GPULAUNCH_PRECISION)."""
    mode = _mode(precision)
    if mode == "tf32":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    elif mode == "fp32":
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False


def autocast(
    device_type: str | None = None, *, precision: str | None = None
) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for fp16/bf16, a no-op context for fp32/tf32 or an unset precision.

    ``device_type`` defaults to "cuda" when a GPU is visible, else "cpu" (bf16 autocast works on
    CPU too).
    """
    mode = _mode(precision)
    if mode not in ("fp16", "bf16"):
        return contextlib.nullcontext()
    return torch.autocast(device_type or _default_device(), dtype=_DTYPES[mode])


def grad_scaler(device_type: str | None = None, *, precision: str | None = None) -> Any:
    """A GradScaler that is enabled only for fp16 on CUDA (bf16 and fp32 need no loss scaling).

    A disabled scaler passes ``scale(loss)``, ``step(opt)`` and ``update()`` through, so the
    same training loop works for every precision.
    """
    mode = _mode(precision)
    device = device_type or _default_device()
    enabled = mode == "fp16" and device == "cuda"
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # PyTorch < 2.3


PRECISION = current()
dtype = _DTYPES[PRECISION] if PRECISION else torch.float32
apply(PRECISION)
