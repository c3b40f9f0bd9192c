"""The build context on the real engine: the engine receives exactly the hashed entries,
files the Dockerfile reads are sent whatever .dockerignore says, the config never is, and
builds leave nothing behind (no Dockerfile in the project or the image, no dangling image,
no temp folder or docker child after SIGTERM)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    PROJECT_LABEL,
    LiveJob,
    cli_env,
    gl,
    gl_argv,
    temp_name,
    tiny_config,
    write_project,
)
from gpulaunch.image.build import context_entries

pytestmark = pytest.mark.docker

BUILDERS = ["buildkit", "classic"]


def _build(project: Path, builder: str, *extra: str) -> str:
    result = gl("build", "--builder", builder, *extra, cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    tag = result.stdout.strip().splitlines()[-1]
    dry = gl("build", "--builder", builder, "--dry-run", "--json", cwd=project)
    assert dry.returncode == 0, dry.describe()
    assert json.loads(dry.stdout)["tag"] == tag  # the dry run names the tag that was built
    return tag


def _in_image(client: Any, tag: str, script: str) -> str:
    out = client.containers.run(
        tag, ["sh", "-c", script], remove=True, network_mode="none", user="0"
    )
    return bytes(out).decode()


def _rich_project(tmp_path: Path, name: str) -> Path:
    project = write_project(tmp_path / name, "tiny", tiny_config(name))
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "run.sh").chmod(0o755)
    (project / "private.py").write_text("")
    (project / "private.py").chmod(0o600)
    (project / "link.py").symlink_to("hello.py")
    (project / "dangling").symlink_to("/nonexistent/target")
    (project / "sub" / "empty").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "data" / "big.bin").write_text("ignored")
    (project / "keep.log").write_text("kept")
    (project / "drop.log").write_text("dropped")
    (project / "secret.pem").write_text("ignored by default")
    (project / ".gpulaunch").mkdir()
    (project / ".gpulaunch" / "state").write_text("never sent")
    (project / ".dockerignore").write_text("data\n*.log\n!keep.log\n*.pem\n")
    return project


@pytest.mark.parametrize("builder", BUILDERS)
def test_engine_receives_exactly_the_hashed_entries(
    docker_client: Any, tmp_path: Path, builder: str
) -> None:
    name = temp_name(f"ctx-{builder}")
    project = _rich_project(tmp_path, name)
    tag = _build(project, builder)

    listing = _in_image(
        docker_client, tag, "cd /workspace && find . -mindepth 1 -printf '%P %y %m\\n'"
    )
    received = {tuple(line.split()) for line in listing.splitlines()}
    ignore = (project / ".dockerignore").read_text()
    kinds = {"file": "f", "dir": "d", "link": "l"}
    hashed = {
        (e.rel, kinds[e.kind], "777" if e.kind == "link" else f"{e.mode:o}")
        for e in context_entries(project, ignore)
    }
    assert received == hashed
    names = {rel for rel, _, _ in received}
    assert {"run.sh", "link.py", "dangling", "sub/empty", "keep.log"} <= names
    assert not names & {"gpulaunch.yaml", ".dockerignore", "data", "drop.log", "secret.pem"}
    assert not any(n.startswith(".gpulaunch") for n in names)  # no state, no Dockerfile


@pytest.mark.parametrize("builder", BUILDERS)
def test_config_is_never_in_the_image(docker_client: Any, tmp_path: Path, builder: str) -> None:
    from docker.errors import ContainerError

    name = temp_name(f"noconf-{builder}")
    project = write_project(tmp_path / name, "tiny", tiny_config(name))
    (project / ".dockerignore").write_text("!gpulaunch.yaml\n")  # even when asked for
    tag = _build(project, builder)
    with pytest.raises(ContainerError):
        _in_image(docker_client, tag, "cat /workspace/gpulaunch.yaml")


def test_ca_cert_is_sent_and_trusted(docker_client: Any, tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl CLI to make a throwaway certificate")
    name = temp_name("cacert")
    config = tiny_config(name)
    config["image"]["ca_cert"] = "corp.pem"
    project = write_project(tmp_path / name, "tiny", config)
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-subj", "/CN=gltest corp CA", "-keyout", str(tmp_path / "key.pem")),
            *("-out", str(project / "corp.pem")),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    (project / ".dockerignore").write_text("*.pem\n")
    tag = _build(project, "buildkit")
    body = (project / "corp.pem").read_text().splitlines()[1]
    bundle = _in_image(docker_client, tag, "cat /etc/ssl/certs/ca-certificates.crt")
    assert body in bundle
    installed = _in_image(docker_client, tag, "ls /etc/ssl/certs")
    assert "gpulaunch-extra.pem" in installed


def test_classic_build_leaves_no_litter(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("litter")
    project = write_project(tmp_path / name, "tiny", tiny_config(name))
    before = sorted(p.name for p in project.iterdir())
    tag = _build(project, "classic")
    tag_again = _build(project, "classic", "--rebuild", "--no-cache")
    assert tag_again == tag
    assert sorted(p.name for p in project.iterdir()) == sorted([*before, ".gpulaunch"])
    assert sorted(p.name for p in (project / ".gpulaunch").iterdir()) == ["logs"]
    dangling = docker_client.images.list(
        filters={"dangling": True, "label": f"{PROJECT_LABEL}={name}"}
    )
    assert dangling == []
    listing = _in_image(docker_client, tag, "ls -a /workspace")
    assert "Dockerfile" not in listing and ".dockerignore" not in listing


def test_sigterm_during_buildkit_build_cleans_up(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("sigterm")
    step = f"echo gl-slow-step {name} && sleep 60"  # unique: BuildKit caches RUN across labels
    project = write_project(tmp_path / name, "tiny", tiny_config(name, run=[step]))
    temp_before = set(Path(tempfile.gettempdir()).glob("gpulaunch-build-*"))
    job = LiveJob(gl_argv("build", "--builder", "buildkit"), project, cli_env())
    try:
        log_dir = project / ".gpulaunch" / "logs"
        deadline = time.monotonic() + BUILD_TIMEOUT_S
        while time.monotonic() < deadline:
            logs = list(log_dir.glob("*.log")) if log_dir.is_dir() else []
            if logs and "gl-slow-step" in logs[0].read_text():
                break
            assert job.proc.poll() is None, job.describe()
            time.sleep(0.5)
        children = _children(job.proc.pid)
        assert children, "no docker child while building"
        job.send(signal.SIGTERM)
        assert job.finish(60) == 143, job.describe()
    finally:
        job.kill()
    for pid in children:
        assert not _alive(pid), f"docker child {pid} outlived gpulaunch"
    assert set(Path(tempfile.gettempdir()).glob("gpulaunch-build-*")) == temp_before
    assert not list((project / ".gpulaunch").glob("build-context-*/"))  # no temp folder left


def _children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return " Z " not in stat  # a zombie is gone
