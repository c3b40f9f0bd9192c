"""Build-context benchmark: a project with a 1 GB `data/` (sparse file) and a 200 MB `.venv`.

Goals: at most 1 MB sent to the engine, and the content hash (scan + hash of the entries)
<= 50 ms, i.e. ignored trees are skipped without being read.

Bytes come from what gpulaunch reports: `build --dry-run --json` lists the context entries
(no daemon needed); their sizes are summed. The hash time is the cumulative time of the
gpulaunch functions `scan` and `hash_entries` in a cProfile of the same command (found by
name, wherever the module lives; the profiler's overhead makes it an upper bound).

    python bench/context_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import pstats
import sys
import tempfile
from pathlib import Path

from benchlib import GPULAUNCH, Row, cumtime, file_bytes, median, run_checked, text_table

HASH_FUNCS = {"scan", "hash_entries"}


def sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def make_project(root: Path) -> Path:
    project = root / "ctx"
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    (project / "model.py").write_text("# model code\n" * 200)
    sparse(project / "data" / "train.bin", 1 << 30)
    for i in range(20):  # 200 MB in 20 files, as a venv's site-packages would be spread
        sparse(project / ".venv" / "lib" / f"pkg{i}" / "lib.so", 10 << 20)
    run_checked(
        [*GPULAUNCH, "init", "--yes", "--torch", "2.4.1", "--cuda", "12.1", str(project)]
    )  # writes gpulaunch.yaml and the default .dockerignore, as a user would
    return project


def measure(runs: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="glbench-ctx-") as tmp:
        project = make_project(Path(tmp))
        plan = json.loads(run_checked([*GPULAUNCH, "build", "--dry-run", "--json"], project).stdout)
        entries = [str(e) for e in plan["context"]]
        sent = file_bytes(project, entries)
        hash_times = []
        prof = Path(tmp) / "prof.out"
        for _ in range(runs):
            run_checked(
                [
                    sys.executable,
                    "-m",
                    "cProfile",
                    "-o",
                    str(prof),
                    "-m",
                    "gpulaunch",
                    "build",
                    "--dry-run",
                    "--json",
                ],
                project,
            )
            stats = pstats.Stats(str(prof)).stats  # type: ignore[attr-defined]
            hash_times.append(cumtime(stats, HASH_FUNCS))
    leaked = [e for e in entries if e.split("/")[0] in {"data", ".venv"}]
    return [
        Row(
            "build context sent (1 GB data/, 200 MB .venv)",
            float(sent),
            "B",
            float(1 << 20),
            detail=f"{len(entries)} entries" + (f"; leaked {leaked[:3]}" if leaked else ""),
            extra_ok=not leaked,
        ),
        Row(
            "content hash: scan + hash_entries (cProfile)",
            median(hash_times),
            "s",
            0.050,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    sys.stdout.write(text_table(measure(parser.parse_args().runs)))


if __name__ == "__main__":
    main()
