"""GPU steps for bench/gpu_check.sh; the script gpulaunch launches (and the same script run bare).

Each subcommand prints one JSON line per process (prefix `GLCHECK `) that bench/gpu_table.py
reads; a check that fails exits non-zero, it never passes silently.

    python gpu_steps.py rank                        # device, CUDA_VISIBLE_DEVICES, affinity
    python gpu_steps.py train --precision bf16      # matmul-heavy steps/s (fp32 or bf16)
    python gpu_steps.py autocast                    # gpulaunch_precision.autocast gives bf16
    python gpu_steps.py memory                      # expandable segments in the allocator

The pure helpers (`result_line`, `parse_lines`, `tflops`, `allocator_has_expandable`) are
unit-tested without a GPU; torch is imported only inside the GPU subcommands.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

PREFIX = "GLCHECK "


def result_line(step: str, **fields: Any) -> str:
    return PREFIX + json.dumps({"step": step, **fields}, sort_keys=True)


def parse_lines(text: str) -> list[dict[str, Any]]:
    """The GLCHECK records in a process's output (other lines are ignored)."""
    records = []
    for line in text.splitlines():
        if line.startswith(PREFIX):
            records.append(json.loads(line[len(PREFIX) :]))
    return records


def tflops(size: int, layers: int, steps: int, seconds: float) -> float:
    """Forward + backward of `layers` square matmuls of `size`: 3 matmuls of 2*n^3 each."""
    if seconds <= 0:
        raise ValueError("seconds must be positive")
    return 3 * 2 * size**3 * layers * steps / seconds / 1e12


def allocator_has_expandable(settings: str) -> bool:
    """`expandable_segments:True` in an allocator settings string (PYTORCH_ALLOC_CONF form)."""
    for item in settings.replace(" ", "").split(","):
        key, _, value = item.partition(":")
        if key == "expandable_segments":
            return value.lower() == "true"
    return False


def _emit(step: str, **fields: Any) -> None:
    print(result_line(step, **fields), flush=True)


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_steps: torch.cuda.is_available() is False (no GPU or a CPU-only torch)")
    return torch


def _bus_id(props: Any, local: int) -> str:
    """PCI address from the device properties (torch >= 2.x has the parts), else its UUID."""
    parts = [getattr(props, f"pci_{n}_id", None) for n in ("domain", "bus", "device")]
    if all(isinstance(p, int) for p in parts):
        return f"{parts[0]:08x}:{parts[1]:02x}:{parts[2]:02x}.0"
    return str(getattr(props, "uuid", f"local-{local}"))


def cmd_rank(_args: argparse.Namespace) -> int:
    torch = _torch()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    props = torch.cuda.get_device_properties(local)
    bus = _bus_id(props, local)
    _emit(
        "rank",
        rank=int(os.environ.get("RANK", "0")),
        local_rank=local,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        device=torch.cuda.current_device(),
        name=torch.cuda.get_device_name(local),
        pci_bus_id=bus,
        capability=list(torch.cuda.get_device_capability(local)),
        affinity=sorted(os.sched_getaffinity(0)),
        numa_plan=bool(os.environ.get("GPULAUNCH_NUMA_PLAN")),
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    torch = _torch()
    precision = args.precision or os.environ.get("GPULAUNCH_PRECISION", "fp32")
    if precision not in ("fp32", "bf16"):
        sys.exit(f"gpu_steps: precision {precision!r}: use fp32 or bf16")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    layers = [torch.nn.Linear(args.size, args.size, bias=False) for _ in range(args.layers)]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.size, args.size, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    _emit(
        "train",
        precision=precision,
        steps_per_s=args.steps / seconds,
        tflops=tflops(args.size, args.layers, args.steps, seconds),
        launcher=os.environ.get("GPULAUNCH_PRECISION") is not None,
    )
    return 0


def cmd_autocast(_args: argparse.Namespace) -> int:
    torch = _torch()
    try:
        from gpulaunch_precision import autocast  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("gpu_steps: gpulaunch_precision is not importable (not launched by gpulaunch?)")
    a = torch.randn(256, 256, device="cuda")
    with autocast():
        out = a @ a
    dtype = str(out.dtype).removeprefix("torch.")
    _emit("autocast", dtype=dtype, precision=os.environ.get("GPULAUNCH_PRECISION"))
    return 0 if dtype == "bfloat16" else 1


def cmd_memory(_args: argparse.Namespace) -> int:
    torch = _torch()
    block = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # make a segment
    settings = torch._C._accelerator_getAllocatorSettings()
    segments = torch.cuda.memory._snapshot().get("segments", [])
    expandable_segments = [s.get("is_expandable") for s in segments]
    del block
    ok = allocator_has_expandable(settings) and any(expandable_segments)
    _emit(
        "memory",
        env=os.environ.get("PYTORCH_ALLOC_CONF"),
        settings=settings,
        segments_expandable=expandable_segments,
        ok=ok,
    )
    return 0 if ok else 1


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu_steps")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("rank")
    train = sub.add_parser("train")
    train.add_argument("--precision", choices=("fp32", "bf16"))
    train.add_argument("--size", type=int, default=8192)
    train.add_argument("--layers", type=int, default=4)
    train.add_argument("--steps", type=int, default=30)
    train.add_argument("--warmup", type=int, default=5)
    sub.add_parser("autocast")
    sub.add_parser("memory")
    args = parser.parse_args(None if argv is None else list(argv))
    handlers = {"rank": cmd_rank, "train": cmd_train, "autocast": cmd_autocast}
    return handlers.get(args.cmd, cmd_memory)(args)


if __name__ == "__main__":
    sys.exit(main())
