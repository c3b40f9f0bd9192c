"""Run every benchmark and rewrite BENCHMARKS.md (date, machine, medians, ratios, goals).

    python bench/run_all.py [--quick] [--output BENCHMARKS.md]

Engine benchmarks take /tmp/gpulaunch-e2e.lock around their engine use (the engine is
shared). About 2-3 minutes on a 2-core machine; `--quick` runs fewer repetitions (a smoke run).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import context_bench
import engine_bench
import sampler_bench
import startup
import topology_bench
from benchlib import Machine, Row, benchmarks_md, markdown_table, replace_marked, text_table

ROOT = Path(__file__).resolve().parent.parent

# What it would take, for each goal not met. Findings from `python -X importtime` and cProfile
# of the same commands on this machine (2 cores); "profiled" times include cProfile's overhead
# (about 2x), the others are plain wall time. See the report of issue 13.
NOT_MET = {
    "--help vs typer": (
        "`gpulaunch --help` imports no heavy module (a suite check, "
        "tests/cli/test_lazy_imports.py, fails if one comes back) and parses no flag through "
        "pydantic (gpulaunch.cli.app fast_value), "
        "so what is left is gpulaunch's own CLI: its 17 extra modules (about 28 ms self time in "
        "`-X importtime`: cli.app, jobs, image, cluster, ci, records, profiles) and typer building "
        "all 19 commands' parameters (`typer.main.get_group`, about 60 ms profiled) and printing "
        "them, where the bare app has two commands without parameters. Both apps pay typer and "
        "`typer.rich_utils` (about 90 ms). At or under 1.0x needs doing less than a bare typer "
        "app: a group that builds only the command being run (for `--help`: names and one-line "
        "helps from a static table, kept equal by a test), or the top-level help printed without "
        "`typer.rich_utils`."
    ),
    "versions vs typer": (
        "cProfile of `gpulaunch versions` (1.36 s profiled): the catalog comes from its JSON copy "
        "(no yaml) and driver rules are memoized, so what is left is **rich rendering the "
        "150-row matrix table** (`Console.print`, 0.41 s profiled, the largest part) and "
        "resolving each of the 100 torch x CUDA rows (`compat.matrix` -> `resolver.resolve`, "
        "0.33 s profiled). It would take a plain-text writer for non-TTY output (or a narrower "
        "table) and a matrix computed once per catalog version (cached beside the catalog JSON "
        "copy)."
    ),
    "profiles vs typer": (
        "`profiles` validates the built-in profiles with the pydantic models of "
        "`gpulaunch.config`: importing pydantic (40-60 ms, with `importlib.metadata` pulled in "
        "by pydantic's plugin loader) and building the config models (about 35 ms self) is most "
        "of the gap. It would take validating the shipped profiles at build/test time and "
        "reading them from their JSON copy without the models, or config models that do not "
        "need pydantic."
    ),
    "render vs typer": (
        "Done: the docker CLI probe's answer is kept in `~/.cache/gpulaunch/docker-cli.json` "
        "(written by render, build and run, read by every command, --dry-run too; keyed by the "
        "docker binaries, their buildx plugin files and the DOCKER_* variables), and the "
        "Dockerfile templates are compiled once and shipped (`templates/compiled.json`, used "
        "when its sha256 names the template's text and the jinja2 version and options match). "
        "What is left: loading gpulaunch.yaml (pydantic + the config models, the largest part), "
        "importing image.render and what it needs (resolver, catalog, project layout: about "
        "60 ms), jinja2 itself (about 20 ms), resolving and rendering (about 25 ms). This "
        "machine sets PYTHONDONTWRITEBYTECODE=1 and the checkout has no `__pycache__`, so every "
        "gpulaunch module is compiled from source on each run (about 100 ms of CPU in a dry "
        "run; an installed wheel has its .pyc). It would take the pydantic cost above and "
        "fewer modules on the render path."
    ),
    "ps vs typer": (
        "`ps` must ask the engine: the docker SDK import (about 90-180 ms, paid by any SDK "
        "client) and one list call. It would take asking the engine's HTTP API directly over "
        "its socket (`http.client` on a Unix socket) for this one read-only call."
    ),
    "history vs typer": (
        "`history` reaches the engine only when a running record needs checking (none here), "
        "so what is left is loading gpulaunch.yaml for the project: pydantic and the config "
        "models (about 100 ms) and yaml (about 15 ms). It would take finding the project "
        "folder without validating the whole config."
    ),
    "run --gpus 4 --dry-run vs typer": (
        "Done: the docker CLI probe (two subprocesses, about 100 ms) is answered from "
        "`~/.cache/gpulaunch/docker-cli.json` once a render, build or run saved it (a dry run "
        "needs the answer: the builder shapes the Dockerfile and the tag, and the CLI's path "
        "and mode are in the printed `docker build` line; it reads the file and never writes "
        "it), the templates come compiled (`templates/compiled.json`), and render no longer "
        "imports the pyproject reader nor packaging's requirement parser for a project without "
        "requirements. What is left is what `render` pays (above), the docker_api/runspec "
        "modules the builder choice and the run plan need, and the launch plan (profiles, "
        "presets, NUMA: about 20 ms). It would take the pydantic cost above."
    ),
    "init (big project) vs gpulaunch --help": (
        "cProfile of `init --yes --force --cuda 12.1` on the big project (1.6 s profiled): "
        "**reading the 5,000 requirement lines is half of it** (`project.requirements.read` "
        "0.78 s profiled, of which `packaging`'s `Requirement` parser 0.66 s), the catalog "
        "matrix (`compat.matrix`) 0.21 s, imports (pydantic, yaml for writing the config) the "
        "rest. What it would take: parse only the lines that can matter to the image "
        "(torch-family names, index and include options, URLs and VCS specs) with `packaging` "
        "and keep the others as names; build the matrix rows only for the torch versions the "
        "project pins."
    ),
    "run vs docker SDK script": (
        "Done: with nothing changed the up-to-date check reads `.gpulaunch/tag-cache.json` (no "
        "catalog, render, CLI probe or context hash; keyed by gpulaunch's files, overlays, "
        "config, builder choice, .dockerignore, build args, and checked against every context "
        "entry's stat), a ulimit the engine refused is remembered per engine (one create and "
        "start instead of two), the supervisor wakes when the job ends (it polled every 0.2 s), "
        "and the client asks /version once without a separate /_ping. cProfile of what is left "
        "(1.12 s profiled): the docker SDK import (about 90 ms, paid by the baseline too), "
        "**gpulaunch's own imports**: typer (about 100 ms), pydantic and the config models (about"
        " 100 ms), the launch plan and what it imports (about 30 ms; on a cache hit neither the "
        "render nor the catalog modules are imported), rich's console for the build status line "
        "(about 16 ms); then create + attach + start + wait + remove as the SDK script does, the "
        "engine's /info for the capability cache (about 8 ms) and the run record written when the"
        " job starts and ends. It would take a run path that imports no more than the SDK script "
        "does: no pydantic (a config already validated, cached like the tag), no rich status line"
        " when the tag cache answers, and no typer for `run`."
    ),
    "edit + run vs unchanged run": (
        "The rebuild after a source-only edit should re-run only the final `COPY . /workspace`; "
        "if the ratio is over goal while no dependency layer ran again, the cost is the build "
        "round trip itself (docker CLI start, BuildKit solve, image export and tagging)."
    ),
    "build context sent (1 GB data/, 200 MB .venv)": (
        "Ignored trees must not be sent: check the `.dockerignore` rules and `context.scan`."
    ),
    "content hash: scan + hash_entries (cProfile)": (
        "`context.scan` must prune ignored directories before descending into them."
    ),
    "NVML sampler CPU vs one core": (
        "Profile the sampler thread (`python -m cProfile bench/sampler_bench.py`): one round is "
        "three NVML queries per GPU and a few additions; a cost above 1 % of a core means the "
        "queries themselves are slow (the driver, on a real GPU) or the interval is too short."
    ),
    "topology discover + NUMA plan, dgx8 (in-process)": (
        "Profile `topology.discover` on the fixture: sysfs reads should be a few hundred."
    ),
}

NOTES = [
    "Baselines: a bare typer app with two commands (`--help`); `docker run --rm --network none "
    "-v PROJECT:/workspace IMAGE true` with the docker CLI on PATH; a ten-line docker-SDK script "
    "(`containers.run(IMAGE, ['true'], remove=True, network_mode='none', volumes=…)`).",
    "The engine project is tiny and offline: `local/base:bookworm`, no torch, one requirement "
    "from a one-wheel wheelhouse, `--network none` (these engines have no bridge network).",
    "The dry-run project pins torch 2.4.1 / CUDA 12.1 with `launch.gpus: 4`; no GPU and no "
    "daemon are needed. init is timed with `--yes --force --cuda 12.1` on a project whose "
    "requirements.txt has 5,000 lines and whose pyproject.toml has 300 dependencies.",
    "Context bytes are the sizes of the entries `build --dry-run --json` lists (what "
    "gpulaunch sends); the 1 GB `data/` and the 200 MB `.venv` are sparse files behind the "
    "default `.dockerignore` that `init` writes.",
    "GPU metrics sampler: `gpulaunch.records.metrics.Sampler` on 8 GPUs (a stand-in NVML "
    "answering at once where there is no driver, so the cost is gpulaunch's own) at the default "
    "2 s interval for 20 s; its thread's CPU time (`time.thread_time`) against the CPU time a "
    "busy-loop process got over the same window (one core, measured in the same run). Goal: "
    "under 1 % of one core.",
    "Start-up commands: `versions`, `profiles`, `render`, `ps` and `history` run in the dry-run "
    "project (a config, no runs; `ps` asks the engine, which has no gpulaunch container then).",
    "Caches that make `run` fast (each safe when missing, corrupt or planted; a miss means "
    "recomputing): `.gpulaunch/tag-cache.json` (the tag, its inputs' hash and every context "
    "entry's stat), `~/.cache/gpulaunch/engines.json` (ulimits an engine refused, by engine ID, "
    "version and kernel, for a day), and `gpulaunch/data/json/` (JSON copies of the shipped "
    "YAML data, used only when their sha256 names the exact text), "
    "`~/.cache/gpulaunch/docker-cli.json` (the docker CLI probe's answer, for a day, by the "
    "docker binaries, plugins and DOCKER_* variables) and `templates/compiled.json` (the "
    "templates as jinja2 compiles them, used only when their sha256 names the exact text). "
    "`--dry-run` reads docker-cli.json and writes none.",
    "Edit loop: each edit rewrites train.py, then `run train.py` rebuilds and runs; the build "
    "log (`.gpulaunch/logs/build-*.log`) is checked so that every step but FROM, WORKDIR and "
    "the final `COPY . /workspace` is CACHED.",
]


def engine_version() -> str:
    try:
        out = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (no engine answered)"
    return out.stdout.strip()


def machine() -> Machine:
    now = datetime.datetime.now(datetime.UTC)
    return Machine(
        date=now.strftime("%Y-%m-%d %H:%M UTC"),
        cores=os.cpu_count() or 0,
        engine=engine_version(),
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument(
        "--readme", type=Path, default=ROOT / "README.md", help="its marked table is rewritten"
    )
    args = parser.parse_args()
    runs = 3 if args.quick else 11
    engine_runs = 2 if args.quick else 7
    rows: list[Row] = []
    parts: list[tuple[str, Callable[[], list[Row]]]] = [
        ("start-up", lambda: startup.measure(runs)),
        ("build context", lambda: context_bench.measure(3 if args.quick else 7)),
        ("topology", lambda: topology_bench.measure(20 if args.quick else 100)),
        ("GPU metrics sampler", lambda: sampler_bench.measure(10 if args.quick else 20)),
        ("engine", lambda: engine_bench.measure(engine_runs)),
    ]
    for title, measure in parts:
        print(f"== {title}", flush=True)
        part = measure()
        sys.stdout.write(text_table(part))
        rows += part
    info = machine()
    args.output.write_text(benchmarks_md(info, rows, NOT_MET, NOTES))
    print(f"wrote {args.output}")
    if args.readme.exists():
        summary = f"Measured {info.date} ({info.cores} cores, Docker {info.engine}).\n\n"
        args.readme.write_text(
            replace_marked(args.readme.read_text(), summary + markdown_table(rows))
        )
        print(f"updated the table in {args.readme}")


if __name__ == "__main__":
    main()
