"""Topology discovery + NUMA planning on the largest fixture (tests/fixtures/sysfs/dgx8).

Timed inside one process (`python -c`, the one place a benchmark imports gpulaunch; it tries
`gpulaunch.launch.topology`, then `gpulaunch.topology`, so it survives the layout move):
discover() + select_gpus("all") + plan_numa(..., "auto") (now in gpulaunch.launch.numa) per
iteration, median over many.
Goal <= 20 ms. Also reports the wall time of `run --gpus 8 --dry-run --json` on that fixture.

    python bench/topology_bench.py [--iterations 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchlib import GPULAUNCH, Row, interleaved, median, run_checked, runner, text_table

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sysfs" / "dgx8"

INNER = """
import importlib, json, os, statistics, sys, time
for name in ("gpulaunch.launch.topology", "gpulaunch.topology"):
    try:
        topology = importlib.import_module(name)
        break
    except ModuleNotFoundError:
        continue
else:
    sys.exit("no gpulaunch topology module")
# planning moved from the topology module to gpulaunch.launch.numa
planner = topology if hasattr(topology, "plan_numa") else importlib.import_module(
    "gpulaunch.launch.numa"
)
env = {"GPULAUNCH_SYSFS_ROOT": sys.argv[1]}
try:  # the request is one GpuRequest value since issue 30
    from gpulaunch.gpurequest import GpuRequest
    every = GpuRequest("all")
except ModuleNotFoundError:
    every = "all"
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    topo = topology.discover(env)
    gpus = planner.select_gpus(topo, every)
    plan = planner.plan_numa(topo, gpus, "auto")
    times.append(time.perf_counter() - start)
print(json.dumps({"gpus": len(gpus), "ranks": len(plan.ranks), "times": times}))
"""

CONFIG = """version: 1
name: topobench
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
launch:
  gpus: 8
"""


def measure(iterations: int, runs: int = 5) -> list[Row]:
    out = run_checked([sys.executable, "-c", INNER, str(FIXTURE), str(iterations)]).stdout
    result = json.loads(out)
    if result["gpus"] != 8 or result["ranks"] != 8:
        raise RuntimeError(f"dgx8 should give 8 GPUs and 8 ranks, got {result}")
    with tempfile.TemporaryDirectory(prefix="glbench-topo-") as tmp:
        project = Path(tmp)
        (project / "train.py").write_text("print('train')\n")
        (project / "gpulaunch.yaml").write_text(CONFIG)
        argv = [*GPULAUNCH, "run", "train.py", "--gpus", "8", "--dry-run", "--json"]
        env = {"GPULAUNCH_SYSFS_ROOT": str(FIXTURE)}
        plan = json.loads(run_checked(argv, project, env).stdout)
        if "GPULAUNCH_NUMA_PLAN" not in plan["run"]["env"]:
            raise RuntimeError("the dry-run on dgx8 made no NUMA plan")
        wall = median(interleaved({"dry": runner(argv, project, env)}, runs)["dry"])
    return [
        Row(
            "topology discover + NUMA plan, dgx8 (in-process)",
            median(result["times"]),
            "s",
            0.020,
            detail=f"median of {iterations}",
        ),
        Row("run --gpus 8 --dry-run --json on dgx8 (whole process)", wall, "s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=50)
    sys.stdout.write(text_table(measure(parser.parse_args().iterations)))


if __name__ == "__main__":
    main()
