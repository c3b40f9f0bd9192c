"""Engine benchmarks (the real Docker engine, under the shared lock /tmp/gpulaunch-e2e.lock):

1. launch: `gpulaunch run --gpus 0 -- true` on an already-built image vs `docker run --rm` of
   the same image and command, and vs a minimal docker-SDK script doing the same run
   (goal <= 1.10x the SDK script);
2. edit loop: after a source-only edit of train.py, `run` (rebuild + run) vs `run` with nothing
   changed (goal <= 1.3x), asserting from the build log under .gpulaunch/logs/ that no
   dependency layer ran again.

The project is tiny and offline: base `local/base:bookworm`, no torch, one requirement
(filelock) from a one-wheel wheelhouse, `--network none` for build and run (these engines have
no bridge network). Images it tags (`glbench-<pid>:*`) are removed at the end.

    python bench/engine_bench.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchlib import (
    GPULAUNCH,
    Row,
    compile_like_an_install,
    engine_lock,
    interleaved,
    median,
    reexecuted_dependency_steps,
    remove_images,
    run_checked,
    runner,
    text_table,
)

WHEELHOUSE = Path(os.environ.get("GPULAUNCH_TEST_WHEELHOUSE", "/var/cache/gpulaunch/wheels"))
BASE_IMAGE = os.environ.get("GPULAUNCH_TEST_BASE_IMAGE", "local/base:bookworm")

CONFIG = """version: 1
name: {name}
image:
  base: {base}
  python: "3.11"
  torch: none
  cuda: cpu
  requirements: requirements.txt
  pip:
    no_index: true
    find_links: [wheels]
build:
  network: none
launch:
  gpus: 0
  network: none
"""

SDK_SCRIPT = """import sys

import docker

image, project = sys.argv[1], sys.argv[2]
client = docker.from_env()
client.containers.run(
    image,
    ["true"],
    remove=True,
    network_mode="none",
    working_dir="/workspace",
    volumes={project: {"bind": "/workspace", "mode": "rw"}},
)
"""


def make_project(root: Path, name: str) -> Path:
    project = root / "proj"
    (project / "wheels").mkdir(parents=True)
    wheels = sorted(WHEELHOUSE.glob("filelock-*.whl"))
    if not wheels:
        raise RuntimeError(f"no filelock wheel in {WHEELHOUSE} (run dev/engine-setup)")
    shutil.copy2(wheels[-1], project / "wheels")
    (project / "requirements.txt").write_text("filelock\n")
    (project / "train.py").write_text("print('step')\n")
    (project / "gpulaunch.yaml").write_text(CONFIG.format(name=name, base=BASE_IMAGE))
    return project


def image_tag(project: Path) -> str:
    out = run_checked([*GPULAUNCH, "build", "--dry-run", "--json"], project).stdout
    return str(json.loads(out)["tag"])


def latest_build_log(project: Path) -> str:
    logs = sorted((project / ".gpulaunch" / "logs").glob("build-*.log"), key=os.path.getmtime)
    if not logs:
        raise RuntimeError("no build log under .gpulaunch/logs/")
    return logs[-1].read_text()


def measure_launch(project: Path, runs: int) -> list[Row]:
    tag = image_tag(project)
    sdk = project.parent / "sdk_run.py"
    sdk.write_text(SDK_SCRIPT)
    docker = shutil.which("docker") or "docker"
    times = interleaved(
        {
            "gpulaunch": runner([*GPULAUNCH, "run", "--gpus", "0", "--", "true"], project),
            "docker": runner(
                [
                    docker,
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "-v",
                    f"{project}:/workspace",
                    "-w",
                    "/workspace",
                    tag,
                    "true",
                ]
            ),
            "sdk": runner([sys.executable, str(sdk), tag, str(project)]),
        },
        runs,
    )
    ours, cli, sdk_s = median(times["gpulaunch"]), median(times["docker"]), median(times["sdk"])
    return [
        Row("docker run --rm IMAGE true", cli, "s", detail="baseline"),
        Row("docker SDK script: containers.run(IMAGE, true)", sdk_s, "s", detail="baseline"),
        Row("gpulaunch run --gpus 0 -- true (image built)", ours, "s"),
        Row("run vs docker run --rm", ours / cli, "x", None, f"docker run {cli * 1000:.0f} ms"),
        Row("run vs docker SDK script", ours / sdk_s, "x", 1.10, f"SDK {sdk_s * 1000:.0f} ms"),
    ]


def measure_edit_loop(project: Path, runs: int) -> list[Row]:
    train = project / "train.py"
    unchanged = runner([*GPULAUNCH, "run", "train.py"], project)
    rebuilt: list[float] = []
    plain: list[float] = []
    offenders: list[str] = []
    for i in range(runs + 1):
        train.write_text(f"print('step')  # edit {i} {time.time_ns()}\n")
        start = time.perf_counter()
        run_checked([*GPULAUNCH, "run", "train.py"], project)
        edit_s = time.perf_counter() - start
        offenders += reexecuted_dependency_steps(latest_build_log(project))
        start = time.perf_counter()
        unchanged()
        plain_s = time.perf_counter() - start
        if i:  # the first pair is the warm-up
            rebuilt.append(edit_s)
            plain.append(plain_s)
    edit, same = median(rebuilt), median(plain)
    detail = (
        "no dependency layer re-executed"
        if not offenders
        else (f"re-executed: {sorted(set(offenders))}")
    )
    return [
        Row("run, nothing changed", same, "s", detail="baseline"),
        Row("run after a source-only edit of train.py", edit, "s"),
        Row(
            "edit + run vs unchanged run",
            edit / same,
            "x",
            1.3,
            f"unchanged {same * 1000:.0f} ms",
            detail=detail,
            extra_ok=not offenders,
        ),
    ]


def measure(runs: int) -> list[Row]:
    compile_like_an_install()
    name = f"glbench-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="glbench-engine-") as tmp:
        project = make_project(Path(tmp), name)
        try:
            with engine_lock():
                run_checked([*GPULAUNCH, "build"], project)  # built once, before timing
                rows = measure_launch(project, runs)
            with engine_lock():
                rows += measure_edit_loop(project, runs)
        finally:
            with engine_lock():
                remove_images("docker", name)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    sys.stdout.write(text_table(measure(parser.parse_args().runs)))


if __name__ == "__main__":
    main()
