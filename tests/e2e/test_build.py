"""`gpulaunch build` on the real engine: content-addressed tags, layer cache, both builders,
and what a failing build step tells the user."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    PROJECT_LABEL,
    SESSION_NAME,
    SessionImage,
    build_logs,
    cli_env,
    gl,
    managed_containers,
    project_containers,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

TAG = re.compile(rf"^{SESSION_NAME}:gl-[0-9a-f]{{12}}$")
_BUILDKIT_STEP = re.compile(r"^#(\d+) \[(?:[\w.-]+ )?(\d+)/(\d+)\] (.*)$")
_BUILDKIT_STATE = re.compile(r"^#(\d+) (CACHED|DONE|ERROR)\b")


def buildkit_steps(log: str) -> list[tuple[str, str]]:
    """(instruction, CACHED | RAN | ERROR) for each Dockerfile step of a BuildKit plain log.

    A step is `#N [k/T] INSTRUCTION` followed later by `#N CACHED` (reused from the cache)
    or `#N DONE 1.2s` (executed); lines of different steps may interleave.
    """
    titles: dict[str, str] = {}
    states: dict[str, set[str]] = {}
    for line in log.splitlines():
        if step := _BUILDKIT_STEP.match(line):
            titles[step.group(1)] = step.group(4)
        elif state := _BUILDKIT_STATE.match(line):
            states.setdefault(state.group(1), set()).add(state.group(2))
    out = []
    for vertex, title in titles.items():
        seen = states.get(vertex, set())
        status = "ERROR" if "ERROR" in seen else "CACHED" if "CACHED" in seen else "RAN"
        out.append((title, status))
    return out


def test_second_build_is_a_cache_hit(session_image: SessionImage, docker_client: Any) -> None:
    first = session_image.build
    tag = session_image.tag
    assert TAG.match(tag), first.describe()
    # A fresh engine builds; a rerun of the suite finds the kept session image.
    assert f"built {tag} with buildkit" in first.stderr or f"{tag} is up to date" in first.stderr

    again = gl("build", cwd=session_image.project, timeout=BUILD_TIMEOUT_S)

    assert again.returncode == 0, again.describe()
    assert again.stdout.strip() == tag
    assert f"image {tag} is up to date (cached; --rebuild to force)" in again.stderr
    assert build_logs(session_image.project) == session_image.logs_after_build  # no new log
    image = docker_client.images.get(tag)
    assert {tag, f"{SESSION_NAME}:latest"} <= set(image.tags)


def _copy_linking_wheels(src: str, dst: str) -> None:
    # Wheels are hard-linked (they are big and never edited); sources are real copies,
    # so editing the copy cannot touch the session project.
    if src.endswith(".whl"):
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


def test_source_edit_makes_a_new_tag_and_reruns_only_the_copy(
    session_image: SessionImage, docker_client: Any, tmp_path: Path
) -> None:
    project = tmp_path / "edited"
    shutil.copytree(
        session_image.project,
        project,
        ignore=shutil.ignore_patterns(".gpulaunch", "outputs"),
        copy_function=_copy_linking_wheels,
    )
    with (project / "train.py").open("a") as fh:
        # Unique per run: BuildKit keeps the COPY of an earlier run's edit in its cache.
        fh.write(f'print("train: edit {secrets.token_hex(8)}")\n')

    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    new_tag = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    try:
        assert result.returncode == 0, result.describe()
        assert TAG.match(new_tag), result.describe()
        assert new_tag != session_image.tag
        (log_path,) = build_logs(project)
        assert re.search(
            rf"^built {re.escape(new_tag)} with buildkit in [0-9.]+s, [0-9.]+ [kMG]?B; "
            rf"log: {re.escape(str(log_path))}$",
            result.stderr,
            re.M,
        ), result.stderr

        steps = buildkit_steps(log_path.read_text())
        by_status = {status: [t for t, s in steps if s == status] for status in ("RAN", "CACHED")}
        torch_steps = [t for t, _ in steps if "pip install torch==2.13.0" in t]
        assert torch_steps, steps
        assert all(t in by_status["CACHED"] for t in torch_steps), steps
        assert all(t in by_status["CACHED"] for t, _ in steps if t.startswith("RUN")), steps
        executed = [t for t in by_status["RAN"] if not t.startswith("FROM")]
        assert len(executed) == 1, steps
        assert executed[0].startswith("COPY ") and executed[0].endswith(" /workspace"), steps
    finally:
        _drop_edited_image(docker_client, new_tag, session_image.tag)


def _drop_edited_image(client: Any, new_tag: str, session_tag: str) -> None:
    """Remove the edited build and point NAME:latest back at the session image."""
    from docker.errors import ImageNotFound

    client.images.get(session_tag).tag(SESSION_NAME, "latest")
    if not TAG.match(new_tag) or new_tag == session_tag:
        return
    try:
        image = client.images.get(new_tag)
    except ImageNotFound:
        return
    client.images.remove(image.id, force=True)


def test_classic_builder_builds_a_runnable_image(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("classic")
    project = write_project(tmp_path / "classic", "tiny", tiny_config(name))

    result = gl("build", "--builder", "classic", cwd=project, timeout=BUILD_TIMEOUT_S)

    assert result.returncode == 0, result.describe()
    tag = result.stdout.strip().splitlines()[-1]
    assert re.match(rf"^{name}:gl-[0-9a-f]{{12}}$", tag), result.describe()
    (log_path,) = build_logs(project)
    assert re.search(
        rf"^built {re.escape(tag)} with classic in [0-9.]+s, [0-9.]+ [kMG]?B; "
        rf"log: {re.escape(str(log_path))}$",
        result.stderr,
        re.M,
    ), result.stderr
    log = log_path.read_text()
    assert re.search(r"^Step 1/\d+ : FROM ", log, re.M), log[-2000:]
    assert "Successfully built" in log
    assert not (project / ".gpulaunch-Dockerfile").exists()  # the SDK build's temporary file
    image = docker_client.images.get(tag)
    assert {tag, f"{name}:latest"} <= set(image.tags)
    assert image.labels[PROJECT_LABEL] == name
    assert project_containers(docker_client, name) == []  # intermediate containers removed

    # The same builder choice finds the same tag, and the image runs the project's code.
    again = gl("run", "hello.py", cwd=project, env=cli_env(GPULAUNCH_BUILDER="classic"))
    assert again.returncode == 0, again.describe()
    assert f"image {tag} is up to date" in again.stderr
    assert f"hello uid={os.getuid()} gid={os.getgid()}" in again.stdout


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_failing_step_exits_4_with_the_step_and_the_log_tail(
    docker_client: Any, tmp_path: Path, builder: str
) -> None:
    name = temp_name(f"fail-{builder}")
    step = "echo about-to-fail-marker && exit 7"
    project = write_project(tmp_path / "fail", "tiny", tiny_config(name, run=[step]))

    result = gl("build", "--builder", builder, cwd=project, timeout=BUILD_TIMEOUT_S)

    assert result.returncode == 4, result.describe()
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("gpulaunch: error:")]
    assert len(error) == 1, result.describe()
    assert re.match(r"gpulaunch: error: build failed at step \d+/\d+: RUN ", error[0]), error
    assert "exit 7" in error[0]
    tail = result.stderr.split(error[0])[0]  # printed before the error line
    assert "about-to-fail-marker" in tail, result.describe()
    hint = re.search(r"^hint: full log: (.+)$", result.stderr, re.M)
    assert hint, result.describe()
    log_path = Path(hint.group(1))
    assert log_path.parent == project / ".gpulaunch" / "logs"
    assert log_path.is_file()
    assert "exit 7" in log_path.read_text()
    assert project_containers(docker_client, name) == []
    assert managed_containers(docker_client, name) == []
    assert not docker_client.images.list(name=name)  # nothing tagged


def test_a_build_saves_the_cli_probe_answer_and_a_dry_run_reads_it(tmp_path: Path) -> None:
    """The real docker CLI's answer, saved by `build` in the user cache: a dry run in another
    process names the same builder and tag, and leaves the saved answer as it was."""
    project = write_project(tmp_path / "probe", "tiny", tiny_config(temp_name("probe")))
    (tmp_path / "xdg").mkdir()
    env = cli_env(XDG_CACHE_HOME=str(tmp_path / "xdg"))
    built = gl("build", cwd=project, env=env, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    saved = tmp_path / "xdg" / "gpulaunch" / "docker-cli.json"
    assert saved.is_file()
    before = (saved.read_bytes(), saved.stat().st_mtime_ns)

    dry = gl("build", "--dry-run", "--json", cwd=project, env=env)

    assert dry.returncode == 0, dry.describe()
    assert f'"tag": "{built.stdout.strip()}"' in dry.stdout
    assert '"builder": "buildkit"' in dry.stdout
    assert (saved.read_bytes(), saved.stat().st_mtime_ns) == before
