"""CPU cost of the live GPU metrics sampler (gpulaunch.records.metrics.Sampler).

    python bench/sampler_bench.py [--seconds 20] [--interval 2] [--gpus 8]

Goal: under 1 % of one core at the default interval. The sampler measures its own thread's
CPU time (time.thread_time); this prints it as a share of the wall time. On a machine with a
driver it samples the real GPUs through NVML; elsewhere a stand-in NVML module answering at
once (so the number is gpulaunch's own overhead, not the driver's).
"""

from __future__ import annotations

import argparse
import sys
import types
from typing import Any


def _stand_in(gpus: int) -> types.ModuleType:
    mod: Any = types.ModuleType("pynvml")
    mod.NVMLError = RuntimeError
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: gpus
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50, memory=10)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1 << 30, total=80 << 30)
    mod.nvmlDeviceGetPowerUsage = lambda h: 250_000
    return mod


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()

    from gpulaunch.engine.nvml import session
    from gpulaunch.records.metrics import Sampler

    with session({}) as real:
        count = int(real.nvmlDeviceGetCount()) if real is not None else 0
    source = f"NVML, {count} GPU(s)"
    if not count:
        sys.modules["pynvml"] = _stand_in(args.gpus)
        count, source = args.gpus, f"stand-in NVML, {args.gpus} GPU(s)"
    sampler = Sampler({}, list(range(count)), interval=args.interval)
    sampler.start()
    import time

    time.sleep(args.seconds)
    summary = sampler.stop()
    if summary is None:
        print("no samples")
        return 1
    share = 100 * summary["sampler_cpu_s"] / max(summary["sampler_wall_s"], 1e-9)
    samples = summary["gpus"][0]["samples"]
    print(
        f"sampler: {source}, interval {args.interval} s, {samples} rounds in "
        f"{summary['sampler_wall_s']} s: {summary['sampler_cpu_s'] * 1000:.1f} ms CPU = "
        f"{share:.3f} % of one core (goal < 1 %)"
    )
    return 0 if share < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
