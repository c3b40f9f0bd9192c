"""The build loop on the real engine (issue 32): a source edit adds only the code to the image,
what a job writes leaves the tag alone, and a build shows its steps while it runs, on a pipe
and on a terminal. Without an engine: tests/image/test_build_loop.py."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import secrets
import shutil
import struct
import subprocess
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    RUN_TIMEOUT_S,
    SESSION_NAME,
    SessionImage,
    app_config,
    cli_env,
    gl,
    gl_argv,
    link_wheels,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

MIB = 1 << 20
STEP_LINE = re.compile(r"^step (\d+)/(\d+): (.+) \(\d+s\)$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def _built_tag(result: Any) -> str:
    return str(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else ""


def _layers(client: Any, tag: str) -> list[tuple[str, int]]:
    """(instruction, size) of each layer as `docker history` lists them, oldest first."""
    return [(str(h["CreatedBy"]), int(h["Size"])) for h in reversed(client.api.history(tag))]


def _new_layers(client: Any, old: str, new: str) -> list[tuple[str, int]]:
    """The layers of `new` above what it shares with `old` (by image id, bottom up)."""
    old_ids = [h["Id"] for h in reversed(client.api.history(old))]
    new_hist = list(reversed(client.api.history(new)))
    shared = 0
    while (
        shared < min(len(old_ids), len(new_hist))
        and new_hist[shared]["Id"] == old_ids[shared]
        and old_ids[shared] != "<missing>"
    ):
        shared += 1
    # BuildKit images list their layers as <missing>: compare instruction and size instead
    if shared == 0:
        old_layers, new_layers = _layers(client, old), _layers(client, new)
        while (
            shared < min(len(old_layers), len(new_layers))
            and old_layers[shared] == new_layers[shared]
        ):
            shared += 1
    return _layers(client, new)[shared:]


def _code_bytes(project: Path) -> int:
    """The bytes of the project's code as the image's /workspace holds them."""
    skip = {"wheels", ".gpulaunch"}
    return sum(
        p.stat().st_size
        for p in project.rglob("*")
        if p.is_file() and not (set(p.relative_to(project).parts) & skip)
    )


def _edit(project: Path) -> None:
    with (project / "train.py").open("a") as fh:  # unique: the layer cache must not have it
        fh.write(f'print("train: edit {secrets.token_hex(8)}")\n')


def _drop(client: Any, tag: str, keep: str = "") -> None:
    from docker.errors import APIError, ImageNotFound

    if keep:
        client.images.get(keep).tag(SESSION_NAME, "latest")
    if tag and tag != keep:
        with contextlib.suppress(ImageNotFound, APIError):
            client.images.remove(client.images.get(tag).id, force=True)


def _copy(src: str, dst: str) -> None:
    if src.endswith(".whl"):
        os.link(src, dst)  # the wheelhouse is big and never edited
    else:
        shutil.copy2(src, dst)


def test_a_source_edit_adds_only_the_code_buildkit(
    session_image: SessionImage, docker_client: Any, tmp_path: Path
) -> None:
    """The session image was built with its wheelhouse in the project: its code layer holds
    the code, not the 200 MB of wheels, and an edit's new layers are the code plus < 1 MiB."""
    code = _code_bytes(session_image.project)
    top = [s for i, s in _layers(docker_client, session_image.tag) if "/workspace" in i and s]
    assert top and max(top) <= code + MIB, _layers(docker_client, session_image.tag)

    project = tmp_path / "edited"
    shutil.copytree(
        session_image.project,
        project,
        ignore=shutil.ignore_patterns(".gpulaunch"),
        copy_function=_copy,
    )
    _edit(project)
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    new_tag = _built_tag(result)
    try:
        assert result.returncode == 0, result.describe()
        assert new_tag != session_image.tag
        added = _new_layers(docker_client, session_image.tag, new_tag)
        assert sum(size for _, size in added) <= _code_bytes(project) + MIB, added
        assert any("workspace /workspace" in instruction for instruction, _ in added), added
    finally:
        _drop(docker_client, new_tag, keep=session_image.tag)


def _copies_code(instruction: str) -> bool:
    """The project COPY: `COPY --chown=… workspace /workspace` (BuildKit's history), or
    `#(nop) COPY --chown=… dir:<hash> in /workspace` (the classic builder's)."""
    return "COPY" in instruction and instruction.rstrip().endswith("/workspace")


def test_a_source_edit_adds_only_the_code_classic(docker_client: Any, tmp_path: Path) -> None:
    """The classic builder: the wheelhouse has its own early layer, never the code's."""
    name = temp_name("loop-classic")
    project = write_project(tmp_path / "classic", "app", app_config(name))
    link_wheels(project)
    first = gl("build", "--builder", "classic", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert first.returncode == 0, first.describe()
    code_layer = [s for i, s in _layers(docker_client, _built_tag(first)) if _copies_code(i)]
    assert code_layer and code_layer[-1] <= _code_bytes(project) + MIB

    _edit(project)
    again = gl("build", "--builder", "classic", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert again.returncode == 0, again.describe()
    added = _new_layers(docker_client, _built_tag(first), _built_tag(again))
    assert sum(size for _, size in added) <= _code_bytes(project) + MIB, added
    assert added and _copies_code(added[0][0]), added  # only the COPY re-ran


JOB = """\
import pathlib
for rel in ("ckpt/step-1.pt", "wandb/run-1/files/config.yaml",
            "lightning_logs/version_0/hparams.yaml", "runs/events.out.tfevents.1"):
    path = pathlib.Path(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("written by the job\\n")
print("job wrote its outputs")
"""


def test_what_a_job_writes_leaves_the_tag_alone(docker_client: Any, tmp_path: Path) -> None:
    """The project's own .dockerignore names none of the output folders: gpulaunch leaves them
    out itself, and launch.checkpoint_dir with them."""
    name = temp_name("outputs")
    config = tiny_config(name)
    config["launch"]["checkpoint_dir"] = "ckpt"
    project = write_project(tmp_path / "outputs", "tiny", config)
    (project / "job.py").write_text(JOB)
    (project / ".dockerignore").write_text(".git\n")

    first = gl("run", "job.py", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert first.returncode == 0, first.describe()
    assert "job wrote its outputs" in first.stdout
    built = re.search(rf"^built ({re.escape(name)}:gl-[0-9a-f]{{12}}) with ", first.stderr, re.M)
    assert built, first.describe()
    assert (project / "wandb" / "run-1" / "files" / "config.yaml").is_file()

    again = gl("run", "job.py", cwd=project, timeout=RUN_TIMEOUT_S)
    assert again.returncode == 0, again.describe()
    assert f"image {built.group(1)} is up to date" in again.stderr, again.describe()
    assert "built " not in again.stderr


def _sleepy_project(tmp_path: Path, what: str, steps: int, seconds: float) -> tuple[Path, str]:
    name = temp_name(what)
    token = secrets.token_hex(6)  # the first step is new to the layer cache: all of them run
    run = [f"echo {token} {i} && sleep {seconds}" for i in range(steps)]
    project = write_project(tmp_path / what, "tiny", tiny_config(name, run=run))
    return project, token


def test_a_pipe_sees_one_line_per_step_while_the_build_runs(tmp_path: Path) -> None:
    project, token = _sleepy_project(tmp_path, "pipe", 4, 1.5)
    stamped: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        gl_argv("build"),
        cwd=project,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stamped.append((time.monotonic(), line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait(timeout=BUILD_TIMEOUT_S)
    ended = time.monotonic()
    reader.join(10)
    text = "\n".join(line for _, line in stamped)
    assert code == 0, text

    steps = [(at, STEP_LINE.match(line)) for at, line in stamped if STEP_LINE.match(line)]
    sleeps = [(at, m) for at, m in steps if m and token in m.group(3)]
    assert len(sleeps) == 4, text  # each step once, though BuildKit names some again
    assert len({m.group(1) for _, m in steps if m}) == len(steps), text
    # each sleeping step was shown when it started, not when the build ended
    assert sleeps[-1][0] - sleeps[0][0] >= 3.0, text
    assert ended - sleeps[0][0] >= 4.0, text
    assert re.search(r"^built \S+ with buildkit in [0-9.]+s, [0-9.]+ [kMG]?B; log: ", text, re.M)


def test_a_terminal_shows_the_step_number_and_name_for_twelve_steps(tmp_path: Path) -> None:
    project, token = _sleepy_project(tmp_path, "pty", 9, 0.8)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 220, 0, 0))
    env = cli_env(TERM="xterm-256color", COLUMNS="220")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        gl_argv("build"), cwd=project, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    code = proc.wait(timeout=BUILD_TIMEOUT_S)
    os.close(master)
    screen = ANSI.sub("\n", b"".join(chunks).decode(errors="replace"))
    assert code == 0, screen[-3000:]

    shown = re.findall(rf"step (\d+)/(\d+): (RUN \[[^\n]*?echo {token} \d)", screen)
    numbers = {int(step) for step, _, _ in shown}
    totals = {int(total) for _, total, _ in shown}
    assert totals and min(totals) >= 12, screen[-3000:]
    assert any(n < 10 for n in numbers) and any(n >= 10 for n in numbers), sorted(numbers)
    assert len({name for _, _, name in shown}) >= 6, shown  # the names, not just numbers
