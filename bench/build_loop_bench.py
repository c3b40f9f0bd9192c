"""The build loop users feel (issue 32), on the real engine, under /tmp/gpulaunch-e2e.lock:
`gpulaunch build` against a hand-written Dockerfile built with the same BuildKit, measured in
the same run, interleaved round by round, on examples/offline-cpu's layout (torch from a
wheels/ folder in the project, the wheelhouse linked from dev/engine-setup's).

Each round: a cold build (`--no-cache` for both), a build with nothing changed, a source-only
edit of train_ddp.py, one added requirement (a one-module wheel made here, in the project's
wheelhouse from the start so the torch layer stays valid), and the image sizes. Goals: cold
<= 1.2x; a source edit <= 1.5x (the hand-written rebuild plus gpulaunch's own unchanged
build: its floor, reading the config and asking the engine); requirement edit <= 1.2x; image
size <= 1.05x; the new layers of a source edit <= the changed bytes + 1 MiB (`docker
history`). These rows run `build --import-check off`: the hand-written Dockerfile checks no
imports. Two more rows time the default (`--import-check warn`) on the same edits: a source
edit, where a pass on the same dependency layers is remembered, and a requirement edit, where
the check runs in the new image. Images it tags (`glbench-loop-<pid>*`) are removed at the end.

    python bench/build_loop_bench.py [--rounds 3]
    python bench/run_all.py --only build-loop     # and writes its section of BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from benchlib import (
    GPULAUNCH,
    Row,
    compile_like_an_install,
    engine_lock,
    median,
    remove_images,
    run_checked,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "offline-cpu"
WHEELHOUSE = Path(os.environ.get("GPULAUNCH_TEST_WHEELHOUSE", "/var/cache/gpulaunch/wheels"))
OFF = ("--import-check", "off")
BASE_IMAGE = os.environ.get("GPULAUNCH_TEST_BASE_IMAGE", "local/base:bookworm")
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
MIB = 1 << 20
EXTRA = "glbench-extra"  # the added requirement
QUICK_SAMPLES = 3  # samples a round of each sub-second row (one cold build a round)

# What a user writes by hand for the same project: seed-style, the wheelhouse bind-mounted
# (not copied: the fairest size baseline), no pip cache in the image.
HAND_DOCKERFILE = """\
FROM {base}
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,source=wheels,target=/wheels \\
    pip install --no-cache-dir --no-index --find-links /wheels torch==2.13.0
COPY requirements.txt /tmp/requirements.txt
RUN --mount=type=bind,source=wheels,target=/wheels \\
    pip install --no-cache-dir --no-index --find-links /wheels -r /tmp/requirements.txt
WORKDIR /workspace
COPY train_ddp.py /workspace/
"""

# What it would take, for each goal not met (cProfile and the BuildKit log of the same
# rebuild on this machine; what was tried and measured).
NOT_MET = {
    "source edit vs hand-written rebuild + unchanged build": (
        "Only the final COPY runs again, its layer is the code alone (the last row), and the "
        "context BuildKit receives is the same folder every build (`.gpulaunch/build-context`, "
        "kept between builds), so BuildKit sends only the edited file. A code-only edit reuses "
        "the image plan and its Dockerfile (gpulaunch/planreads.py: what the plan read, "
        "recorded through Python's audit events and checked by content), so no catalog, "
        "resolver or jinja2 is imported, and detect-secrets imports with a stand-in requests "
        "(its verifiers never run). What is left once the tag cache misses: detect-secrets' "
        "own import and the compiling of its plugins' patterns (about 45 ms), the docker "
        "CLI's start and BuildKit's solve and export (the hand-written rebuild pays those "
        "too), and gpulaunch's own bookkeeping (the context hash, the log, the size and the "
        "prune notice, about 20 ms). 2026-12-05: 1.98x before this session's changes, 1.46x "
        "after."
    ),
    "requirement edit vs hand-written": (
        "Both re-run the requirements step (pip, about 2.5 s); gpulaunch adds its render, "
        "scans and hash (the 0.3 s a source edit shows), so the ratio sits at the goal's edge "
        "and moves with the machine's load: 1.18x and 1.20x in two runs of this build path "
        "on 2026-12-05. The same two changes would bring it under."
    ),
    "source edit, default import check, vs hand-written rebuild + unchanged build": (
        "The same rebuild with `build`'s default import check: a pass on the same dependency "
        "layers is remembered (the user's cache, by the layers below the code and the modules "
        "asked), so the check adds only the walk of the entry's imports and an image inspect "
        "(the package table and the run modules load only when the check runs), and the row "
        "sits within a few ms of the one above; what is left is the same."
    ),
}

SECTION_START = "<!-- build-loop:start (python bench/run_all.py --only build-loop) -->"
SECTION_END = "<!-- build-loop:end -->"


def extra_wheel(folder: Path) -> None:
    """A one-module pure-Python wheel: the requirement a round adds."""
    dist = EXTRA.replace("-", "_")
    files = {
        f"{dist}.py": b"VALUE = 1\n",
        f"{dist}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {EXTRA}\n"
        "Version: 1.0\n".encode(),
        f"{dist}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}-1.0.dist-info/RECORD,,")
    files[f"{dist}-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(folder / f"{dist}-1.0-py3-none-any.whl", "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)


def make_project(root: Path, name: str) -> Path:
    """examples/offline-cpu copied, its wheelhouse linked in, and the extra wheel beside it."""
    project = root / "offline-cpu"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("wheels", ".gpulaunch"))
    config = (project / "gpulaunch.yaml").read_text()
    (project / "gpulaunch.yaml").write_text(
        config.replace("name: example-offline-cpu", f"name: {name}").replace(
            "base: local/base:bookworm", f"base: {BASE_IMAGE}"
        )
    )
    (project / "wheels").mkdir()
    wheels = sorted(WHEELHOUSE.glob("*.whl"))
    if not any(w.name.startswith("torch-") for w in wheels):
        raise RuntimeError(f"no torch wheel in {WHEELHOUSE} (run dev/engine-setup)")
    for wheel in wheels:
        try:
            os.link(wheel, project / "wheels" / wheel.name)
        except OSError:
            shutil.copy2(wheel, project / "wheels" / wheel.name)
    extra_wheel(project / "wheels")
    (root / "hand.Dockerfile").write_text(HAND_DOCKERFILE.format(base=BASE_IMAGE))
    return project


def timed(fn: Callable[[], str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def gl_build(project: Path, *flags: str) -> Callable[[], str]:
    def go() -> str:
        out = run_checked([*GPULAUNCH, "build", *flags], project, timeout=900).stdout
        return out.strip().splitlines()[-1]

    return go


def hand_build(project: Path, tag: str, *flags: str) -> Callable[[], str]:
    dockerfile = project.parent / "hand.Dockerfile"
    argv = [DOCKER, "build", "-q", *flags, "--network", "none", "-f", str(dockerfile)]

    def go() -> str:
        run_checked([*argv, "-t", tag, str(project)], env={"DOCKER_BUILDKIT": "1"}, timeout=900)
        return tag

    return go


def image_size(tag: str) -> int:
    out = run_checked([DOCKER, "image", "inspect", "--format", "{{.Size}}", tag]).stdout
    return int(out.strip())


def history(tag: str) -> list[tuple[str, int]]:
    """(instruction, size) per layer, oldest first."""
    out = run_checked(
        [DOCKER, "history", "--no-trunc", "--format", "{{json .}}", "--human=false", tag]
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [(str(r["CreatedBy"]), int(r["Size"])) for r in reversed(rows)]


def new_bytes(old: str, new: str) -> int:
    """The bytes of `new`'s layers above those it shares with `old` (instruction and size)."""
    before, after = history(old), history(new)
    shared = 0
    while shared < min(len(before), len(after)) and before[shared] == after[shared]:
        shared += 1
    return sum(size for _, size in after[shared:])


def measure(rounds: int) -> list[Row]:
    compile_like_an_install()
    name = f"glbench-loop-{os.getpid()}"
    hand_tag = f"{name}-hand:latest"
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "cold",
            "hand_cold",
            "same",
            "hand_same",
            "edit",
            "hand_edit",
            "req",
            "hand_req",
            "edit_checked",
            "req_checked",
        )
    }
    added: list[int] = []
    changed: list[int] = []
    sizes: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="glbench-loop-") as tmp:
        project = make_project(Path(tmp), name)
        train, reqs = project / "train_ddp.py", project / "requirements.txt"
        original_reqs = reqs.read_text()
        ours, hand = gl_build(project, *OFF), hand_build(project, hand_tag)
        checked = gl_build(project)  # the default: the import check after a new image
        try:
            with engine_lock():
                tag = ours()  # warm-up: the base image and the pip cache as a user has them
                hand()
                for i in range(rounds):
                    pairs = [("cold", gl_build(project, "--no-cache", *OFF))]
                    pairs.append(("hand_cold", hand_build(project, hand_tag, "--no-cache")))
                    for key, fn in pairs if i % 2 == 0 else reversed(pairs):
                        times[key].append(timed(fn)[0])
                    tag = ours()
                    for j in range(QUICK_SAMPLES):  # sub-second rows: several samples a round
                        times["same"].append(timed(ours)[0])
                        times["hand_same"].append(timed(hand)[0])
                        train.write_text(train.read_text() + f"# edit {i}.{j} {time.time_ns()}\n")
                        changed.append(train.stat().st_size)
                        previous = tag
                        seconds, tag = timed(ours)
                        times["edit"].append(seconds)
                        times["hand_edit"].append(timed(hand)[0])
                        added.append(new_bytes(previous, tag))
                    sizes.append((image_size(tag), image_size(hand_tag)))

                    reqs.write_text(original_reqs + f"{EXTRA}  # round {i} {time.time_ns()}\n")
                    times["req"].append(timed(ours)[0])
                    times["hand_req"].append(timed(hand)[0])
                    reqs.write_text(original_reqs)

                    # a new image on this round's dependency layers (the cold build made them
                    # anew): the check runs once and its pass is remembered
                    train.write_text(train.read_text() + f"# primed {i} {time.time_ns()}\n")
                    checked()
                    for j in range(QUICK_SAMPLES):
                        edit = f"# checked {i}.{j} {time.time_ns()}\n"
                        train.write_text(train.read_text() + edit)
                        times["edit_checked"].append(timed(checked)[0])
                    reqs.write_text(original_reqs + f"{EXTRA}  # checked {i} {time.time_ns()}\n")
                    times["req_checked"].append(timed(checked)[0])
                    reqs.write_text(original_reqs)
        finally:
            with engine_lock():
                remove_images(DOCKER, name, f"{name}-hand")
    m = {k: median(v) for k, v in times.items()}
    size, hand_size = median([s for s, _ in sizes]), median([h for _, h in sizes])
    limit = median(changed) + MIB
    return [
        Row(
            "hand-written Dockerfile: cold build (--no-cache)",
            m["hand_cold"],
            "s",
            detail="baseline",
        ),
        Row("gpulaunch build: cold (--no-cache)", m["cold"], "s"),
        Row(
            "cold build vs hand-written", m["cold"] / m["hand_cold"], "x", 1.2, "hand-written cold"
        ),
        Row("hand-written: rebuild, nothing changed", m["hand_same"], "s", detail="baseline"),
        Row("gpulaunch build, nothing changed", m["same"], "s"),
        Row(
            "hand-written: rebuild after editing train_ddp.py",
            m["hand_edit"],
            "s",
            detail="baseline",
        ),
        Row("gpulaunch build after editing train_ddp.py", m["edit"], "s"),
        Row(
            "source edit vs hand-written rebuild + unchanged build",
            m["edit"] / (m["hand_edit"] + m["same"]),
            "x",
            1.5,
            f"{(m['hand_edit'] + m['same']) * 1000:.0f} ms",
        ),
        Row(
            "hand-written: rebuild after adding a requirement",
            m["hand_req"],
            "s",
            detail="baseline",
        ),
        Row("gpulaunch build after adding a requirement", m["req"], "s"),
        Row("requirement edit vs hand-written", m["req"] / m["hand_req"], "x", 1.2, "hand-written"),
        Row(
            "gpulaunch build after editing train_ddp.py, default import check",
            m["edit_checked"],
            "s",
        ),
        Row(
            "source edit, default import check, vs hand-written rebuild + unchanged build",
            m["edit_checked"] / (m["hand_edit"] + m["same"]),
            "x",
            1.5,
            f"{(m['hand_edit'] + m['same']) * 1000:.0f} ms",
        ),
        Row(
            "gpulaunch build after adding a requirement, default import check",
            m["req_checked"],
            "s",
        ),
        Row(
            "requirement edit, default import check (runs in the new image), vs hand-written",
            m["req_checked"] / m["hand_req"],
            "x",
            None,
            "hand-written",
        ),
        Row("hand-written image size", hand_size, "B", detail="baseline"),
        Row("gpulaunch image size", size, "B"),
        Row("image size vs hand-written", size / hand_size, "x", 1.05, "hand-written image"),
        Row(
            "new layer bytes per source edit (docker history)",
            median(added),
            "B",
            limit,
            f"changed {median(changed):.0f} B + 1 MiB",
        ),
    ]


def section(rows: list[Row], when: str, rounds: int) -> str:
    from benchlib import markdown_table

    failed = [row for row in rows if row.met is False]
    analysis: list[str] = []
    for row in failed:
        analysis += ["", f"### Not met: {row.name}", "", NOT_MET.get(row.name, "No analysis yet.")]
    return "\n".join(
        [
            SECTION_START,
            "## Build loop (issue 32)",
            "",
            f"`python bench/run_all.py --only build-loop`, {when}: examples/offline-cpu's layout "
            f"in a temp folder (torch from its wheels/ folder), medians of {rounds} rounds "
            f"({QUICK_SAMPLES} samples a round of the unchanged and source-edit rows), "
            "BuildKit (the daemon's, through `DOCKER_BUILDKIT=1 /usr/bin/docker build`) for both; "
            "the hand-written Dockerfile bind-mounts the wheelhouse, installs torch and "
            "requirements.txt, and copies train_ddp.py. Cold builds use `--no-cache` on both "
            "(the engine's build cache is shared and never pruned here).",
            "",
            markdown_table(rows).rstrip("\n"),
            *analysis,
            SECTION_END,
            "",
        ]
    )


def write_section(path: Path, text: str) -> None:
    """Replace the marked section of BENCHMARKS.md, or append it."""
    old = path.read_text() if path.exists() else ""
    if SECTION_START in old and SECTION_END in old:
        head, rest = old.split(SECTION_START, 1)
        tail = rest.split(SECTION_END, 1)[1].lstrip("\n")
        new = head + text + tail
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)


def main() -> None:
    from benchlib import text_table

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    sys.stdout.write(text_table(measure(parser.parse_args().rounds)))


if __name__ == "__main__":
    main()
