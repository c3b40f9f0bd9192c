"""Start-up benchmarks against a bare typer app's `--help`, measured in the same run.

- `gpulaunch --help` (goal <= 1.25x the bare typer app),
- `versions`, `profiles`, `render`, `ps`, `history` (goal <= 1.5x each; `render`, `ps` and
  `history` in a project with a config and no runs; `ps` asks the engine),
- `gpulaunch run train.py --gpus 4 --dry-run` in a temp project whose config allows GPUs
  (no GPU and no daemon needed): on a config it has seen before (goal <= 1.5x) and on one it
  has not (a new comment line before each run, so no cache of the config can answer; goal
  <= 2.0x),
- `gpulaunch init --yes` in a project with a 5,000-line requirements.txt and a pyproject with
  300 dependencies (goal <= 1.5x `gpulaunch --help`).

Prints medians and ratios; exits non-zero only if a run fails (timings are reported, not
asserted).

    python bench/startup.py [--runs 11]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchlib import (
    BARE_TYPER,
    GPULAUNCH,
    Row,
    compile_like_an_install,
    interleaved,
    median,
    run_checked,
    runner,
    text_table,
)

CONFIG = """version: 1
name: benchproj
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
launch:
  gpus: 4
"""


QUICK = ("versions", "profiles", "render", "ps", "history")


def make_dryrun_project(root: Path, name: str = "dry") -> Path:
    project = root / name
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    (project / "gpulaunch.yaml").write_text(CONFIG)
    return project


def fresh_config(project: Path) -> Callable[[], None]:
    """Before each run, a config whose bytes gpulaunch has not seen (a new comment line)."""
    count = itertools.count()

    def go() -> None:
        (project / "gpulaunch.yaml").write_text(f"# variant {next(count)}\n{CONFIG}")
        run_checked([*GPULAUNCH, "run", "train.py", "--gpus", "4", "--dry-run"], project)

    return go


def make_big_project(root: Path) -> Path:
    """5,000 requirement lines (no torch pin among them) and 300 pyproject dependencies."""
    project = root / "big"
    project.mkdir()
    (project / "train.py").write_text("print('train')\n")
    reqs = ["torch==2.4.1"] + [f"pkg-{i:04d}>=1.{i % 10},<3  # line {i}" for i in range(4999)]
    (project / "requirements.txt").write_text("\n".join(reqs) + "\n")
    deps = ",\n".join(f'  "dep-{i:03d}>=0.{i % 7}"' for i in range(300))
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "big"\nversion = "0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [\n{deps}\n]\n"
    )
    return project


def measure(runs: int) -> list[Row]:
    compile_like_an_install()
    with tempfile.TemporaryDirectory(prefix="glbench-startup-") as tmp:
        root = Path(tmp)
        bare = root / "bare.py"
        bare.write_text(BARE_TYPER)
        dry = make_dryrun_project(root)
        unseen = make_dryrun_project(root, "unseen")
        big = make_big_project(root)
        init_argv = [*GPULAUNCH, "init", "--yes", "--force", "--cuda", "12.1", str(big)]
        # the first init must succeed and write the config (then --force rewrites it each run)
        run_checked(init_argv)
        if not (big / "gpulaunch.yaml").is_file():
            raise RuntimeError("init wrote no gpulaunch.yaml")
        commands = {
            "typer": runner([sys.executable, str(bare), "--help"]),
            "help": runner([*GPULAUNCH, "--help"]),
            **{name: runner([*GPULAUNCH, name], dry) for name in QUICK},
            "dry": runner([*GPULAUNCH, "run", "train.py", "--gpus", "4", "--dry-run"], dry),
            "unseen": fresh_config(unseen),
            "init": runner(init_argv),
        }
        # a command that reads the config fills whatever cache it has, so "dry" runs on a
        # config gpulaunch has seen
        run_checked([*GPULAUNCH, "render"], dry)
        times = interleaved(commands, runs)
    typer_s = median(times["typer"])
    help_s = median(times["help"])
    dry_s = median(times["dry"])
    unseen_s = median(times["unseen"])
    init_s = median(times["init"])
    base = f"bare typer --help {typer_s * 1000:.0f} ms"
    rows = [
        Row("bare typer app --help", typer_s, "s", detail="baseline"),
        Row("gpulaunch --help", help_s, "s"),
        *(Row(f"gpulaunch {name}", median(times[name]), "s") for name in QUICK),
        Row("gpulaunch run train.py --gpus 4 --dry-run", dry_s, "s"),
        Row("gpulaunch run train.py --gpus 4 --dry-run, config not seen before", unseen_s, "s"),
        Row(
            "gpulaunch init (5,000-line requirements, 300 pyproject deps)",
            init_s,
            "s",
        ),
        Row("--help vs typer", help_s / typer_s, "x", 1.25, base),
    ]
    rows += [
        Row(f"{name} vs typer", median(times[name]) / typer_s, "x", 1.5, base) for name in QUICK
    ]
    rows += [
        Row("run --gpus 4 --dry-run vs typer", dry_s / typer_s, "x", 1.5, base),
        Row("run --gpus 4 --dry-run, unseen config, vs typer", unseen_s / typer_s, "x", 2.0, base),
        Row(
            "init (big project) vs gpulaunch --help",
            init_s / help_s,
            "x",
            1.5,
            f"gpulaunch --help {help_s * 1000:.0f} ms",
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    sys.stdout.write(text_table(measure(parser.parse_args().runs)))


if __name__ == "__main__":
    main()
