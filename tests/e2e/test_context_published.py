"""The build context is what the project would publish, on the real engine (issue 29 §3): in a
git checkout an ignored file is absent from the built image, a planted secret is refused
before any build starts, and a build killed with SIGKILL leaves no credential copy."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    LiveJob,
    build_logs,
    cli_env,
    gl,
    gl_argv,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

TOKEN = "hf_" + "Qw3rTy9UiOp" * 3  # a Hugging Face token's shape, made at run time


def _git(project: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(project), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _checkout(tmp_path: Path, name: str) -> Path:
    project = write_project(tmp_path / name, "tiny", tiny_config(name))
    (project / ".gitignore").write_text("*.log\noutputs/\n")
    (project / "train.log").write_text("ignored by git\n")
    (project / "outputs").mkdir()
    (project / "outputs" / "ckpt.txt").write_text("ignored by git\n")
    (project / "notes.md").write_text("untracked, not ignored\n")
    (project / "kept.log").write_text("tracked though ignored\n")
    _git(project, "init", "-q")
    _git(project, "add", "hello.py", ".gitignore")
    _git(project, "add", "-f", "kept.log")
    _git(project, "commit", "-qm", "init")
    return project


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_a_git_ignored_file_is_absent_from_the_built_image(
    docker_client: Any, tmp_path: Path, builder: str
) -> None:
    name = temp_name(f"published-{builder}")
    project = _checkout(tmp_path, name)
    result = gl("build", "--builder", builder, cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    tag = result.stdout.strip().splitlines()[-1]
    out = docker_client.containers.run(
        tag, ["ls", "-a", "/workspace"], remove=True, network_mode="none"
    )
    names = set(bytes(out).decode().split())
    assert {"hello.py", "notes.md", "kept.log"} <= names
    assert not names & {"train.log", "outputs", ".git"}


def test_a_planted_secret_is_refused_before_any_build_starts(
    docker_client: Any, tmp_path: Path
) -> None:
    name = temp_name("planted")
    project = _checkout(tmp_path, name)
    (project / "config").mkdir()
    (project / "config" / "settings.py").write_text(f"import os\n\nHF = '{TOKEN}'\n")
    result = gl("build", "--builder", "buildkit", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 2, result.describe()
    assert "config/settings.py:3" in result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert not build_logs(project)  # the engine was never asked to build
    assert docker_client.images.list(name=name) == []


def test_a_build_killed_with_sigkill_leaves_no_credential_copy(
    docker_client: Any, tmp_path: Path
) -> None:
    name = temp_name("sigkill")
    step = f"echo gl-slow-step {name} && sleep 60"  # unique: BuildKit caches RUN steps
    config = tiny_config(name, run=[step])
    config["image"]["pip"] = {"extra_index_urls": [f"https://u:{TOKEN}@pkgs.invalid/simple"]}
    project = write_project(tmp_path / name, "tiny", config)
    temp_before = set(Path(tempfile.gettempdir()).glob("gpulaunch-build-*"))
    job = LiveJob(gl_argv("build", "--builder", "buildkit"), project, cli_env())
    children: list[int] = []
    try:
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        log_dir = project / ".gpulaunch" / "logs"
        while time.monotonic() < deadline:
            logs = list(log_dir.glob("*.log")) if log_dir.is_dir() else []
            if logs and "gl-slow-step" in logs[0].read_text():
                break
            assert job.proc.poll() is None, job.describe()
            time.sleep(0.5)
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(job.proc.pid)], capture_output=True, text=True
        )
        children = [int(p) for p in out.stdout.split()]
        assert children, "no docker child while building"
        job.send(signal.SIGKILL)
        assert job.finish(60) == -signal.SIGKILL
    finally:
        job.kill()
        for pid in children:  # the orphaned docker CLI: its build can no longer read a secret
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    left = set(Path(tempfile.gettempdir()).glob("gpulaunch-build-*")) - temp_before
    try:
        assert left, "SIGKILL leaves the build's temp folder (nothing can remove it)"
        places = [*left, project]
        for place in places:
            for path in place.rglob("*"):
                if path.is_symlink() or not path.is_file() or path.name == "gpulaunch.yaml":
                    continue
                assert TOKEN.encode() not in path.read_bytes(), f"a credential copy in {path}"
        for folder in left:
            links = [p for p in folder.iterdir() if p.is_symlink()]
            assert links and not any(p.exists() for p in links)  # into a dead process
    finally:
        for folder in left:
            subprocess.run(["rm", "-rf", str(folder)], check=False)
