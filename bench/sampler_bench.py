"""CPU cost of the live GPU metrics sampler (gpulaunch.records.metrics.Sampler).

    python bench/sampler_bench.py [--seconds 20] [--interval 2] [--gpus 8]

Goal: under 1 % of one core at the default interval, as a ratio against a baseline measured
in the same run: while the sampler samples for SECONDS, a busy-loop process spins for the same
window and reports the CPU time it got (what one core delivered here, on a shared machine
perhaps less than the wall time). The sampler measures its own thread's CPU time
(time.thread_time); the ratio sampler CPU / busy-loop CPU must stay <= 0.01.

The sampler runs in a child process (`python -c`, the one place a benchmark imports gpulaunch,
as topology_bench does). On a machine with a driver it samples the real GPUs through NVML;
elsewhere a stand-in NVML module answering at once (so the number is gpulaunch's own
overhead, not the driver's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from benchlib import Row, run_checked, text_table

GOAL = 0.01  # of one core

SPIN = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
print(time.process_time())
"""

INNER = """
import json, sys, time, types
from gpulaunch.engine.nvml import session
from gpulaunch.records.metrics import Sampler

seconds, interval, gpus = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
with session({}) as real:
    count = int(real.nvmlDeviceGetCount()) if real is not None else 0
source = f"NVML, {count} GPU(s)"
if not count:
    mod = types.ModuleType("pynvml")
    mod.NVMLError = RuntimeError
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: gpus
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=50, memory=10)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1 << 30, total=80 << 30)
    mod.nvmlDeviceGetPowerUsage = lambda h: 250_000
    sys.modules["pynvml"] = mod
    count, source = gpus, f"stand-in NVML, {gpus} GPU(s)"
sampler = Sampler({}, list(range(count)), interval=interval)
sampler.start()
time.sleep(seconds)
summary = sampler.stop()
if summary is None:
    sys.exit("the sampler took no sample")
print(json.dumps({"source": source, "rounds": summary["gpus"][0]["samples"],
                  "cpu_s": sampler.cpu_s, "wall_s": sampler.wall_s}))
"""


def measure(seconds: float = 20.0, interval: float = 2.0, gpus: int = 8) -> list[Row]:
    spin = subprocess.Popen(
        [sys.executable, "-c", SPIN, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        result = json.loads(
            run_checked(
                [sys.executable, "-c", INNER, str(seconds), str(interval), str(gpus)],
                timeout=seconds + 120,
            ).stdout
        )
        core_s = float(spin.communicate(timeout=seconds + 60)[0])
    finally:
        if spin.poll() is None:
            spin.kill()
            spin.wait()
    if result["rounds"] < 2 or core_s <= 0:
        raise RuntimeError(f"sampler bench: too few rounds or no baseline: {result}, {core_s}")
    what = f"{result['source']}, every {interval:g} s, {result['rounds']} rounds"
    return [
        Row(
            f"one core for {seconds:g} s: busy-loop process CPU (baseline)",
            core_s,
            "s",
        ),
        Row(f"NVML sampler thread CPU in {result['wall_s']:.1f} s ({what})", result["cpu_s"], "s"),
        Row(
            "NVML sampler CPU vs one core",
            result["cpu_s"] / core_s,
            "x",
            GOAL,
            f"busy loop {core_s:.1f} s CPU",
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    rows = measure(args.seconds, args.interval, args.gpus)
    sys.stdout.write(text_table(rows))
    return 0 if rows[-1].met else 1


if __name__ == "__main__":
    sys.exit(main())
