"""Start-up benchmark: `gpulaunch --help` against a bare typer app, measured in the same run.

The goal (issue: foundation) is that --help starts about as fast as a bare typer app, because
docker, jinja2, pydantic and NVML load only in the commands that need them. Prints the median
wall time of each and their ratio; exits non-zero only if a run fails (timings are reported,
not asserted: machines differ).

    python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def a() -> None: ...
@app.command()
def b() -> None: ...
app()
"""


def _median(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE)
        subprocess.run([sys.executable, str(bare), "--help"], check=True, capture_output=True)
        baseline = _median([sys.executable, str(bare), "--help"], runs)
    ours = _median([sys.executable, "-m", "gpulaunch", "--help"], runs)
    heavy = _median([sys.executable, "-c", "import docker, jinja2, pydantic, yaml, rich"], runs)
    print(f"bare typer --help     : {baseline * 1000:7.1f} ms (baseline)")
    print(f"gpulaunch --help      : {ours * 1000:7.1f} ms  ratio {ours / baseline:.2f}x")
    print(
        f"import docker+jinja2+pydantic+yaml+rich: {heavy * 1000:7.1f} ms "
        f"(what eager imports would add)"
    )


if __name__ == "__main__":
    main()
