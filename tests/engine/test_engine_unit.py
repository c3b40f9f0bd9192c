"""Engine seam and build bookkeeping without a daemon: docker context, CLI argv, progress
parsing, and the content hash that decides whether a build is needed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.config import validate_data
from gpulaunch.engine.buildspec import BuildRequest, DockerCli
from gpulaunch.engine.docker_api import Engine
from gpulaunch.errors import EngineError
from gpulaunch.image.build import BuildOptions, Progress, context_entries, image_hash, prepare_build
from gpulaunch.image.render import render_dockerignore


def _context(home: Path, name: str, host: str) -> dict[str, str]:
    config = home / ".docker"
    meta = config / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Endpoints": {"docker": {"Host": host}}}))
    (config / "config.json").write_text(json.dumps({"currentContext": name}))
    return {"DOCKER_CONFIG": str(config), "PATH": ""}


def test_docker_host_wins_over_context(tmp_path: Path) -> None:
    env = _context(tmp_path, "remote", "ssh://gpu-box")
    assert Engine(env).host == "ssh://gpu-box"
    assert Engine({**env, "DOCKER_HOST": "unix:///x.sock"}).host == "unix:///x.sock"
    assert Engine({"PATH": "", "DOCKER_CONFIG": str(tmp_path / "none")}).host == (
        "unix:///var/run/docker.sock"
    )


def test_broken_context_is_an_engine_error(tmp_path: Path) -> None:
    env = _context(tmp_path, "remote", "x")
    meta = next((tmp_path / ".docker" / "contexts" / "meta").iterdir())
    (meta / "meta.json").write_text("{}")
    with pytest.raises(EngineError, match="docker context 'remote'"):
        _ = Engine(env).host


def test_unreachable_engine_is_one_line() -> None:
    engine = Engine({"DOCKER_HOST": "unix:///nonexistent/docker.sock", "PATH": ""})
    for ask in (engine.client, engine.api):  # the SDK (build, push) and the stdlib client
        with pytest.raises(EngineError) as info:
            ask()
        assert info.value.message.startswith(
            "cannot reach the Docker engine at unix:///nonexistent"
        )
        assert "\n" not in info.value.message


def test_cli_build_argv(tmp_path: Path) -> None:
    req = BuildRequest(
        dockerfile="FROM x\n",
        context=tmp_path,
        tags=("p:gl-1", "p:latest"),
        build_args={"GL_UID": "1000"},
        network="none",
        no_cache=True,
        labels={"io.gpulaunch.managed": "true"},
    )
    assert DockerCli("/usr/bin/docker", "env").build_argv(req, Path("/tmp/D")) == [
        "/usr/bin/docker",
        "build",
        "--progress=plain",
        "-f",
        "/tmp/D",
        "-t",
        "p:gl-1",
        "-t",
        "p:latest",
        "--build-arg",
        "GL_UID=1000",
        "--label",
        "io.gpulaunch.managed=true",
        "--network",
        "none",
        "--no-cache",
        str(tmp_path),
    ]
    buildx = DockerCli("docker", "buildx").build_argv(req, Path("/tmp/D"))
    assert buildx[:4] == ["docker", "buildx", "build", "--load"]


def test_classic_builder_forced_by_env() -> None:
    assert Engine({"GPULAUNCH_BUILDER": "classic", "PATH": "/usr/bin"}).builder_kind() == "classic"


def _fake_docker(folder: Path, log: Path, version: str) -> Path:
    """A `docker` that logs each call; `buildx` is missing, `--version` says VERSION."""
    folder.mkdir(exist_ok=True)
    docker = folder / "docker"
    docker.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        f'[ "$1" = --version ] && echo "Docker version {version}, build x" && exit 0\nexit 1\n'
    )
    docker.chmod(0o755)
    return docker


def test_the_cli_probe_runs_once_per_binary_and_again_when_it_changes(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    docker = _fake_docker(tmp_path / "bin", log, "20.10.24")
    env = {"PATH": str(docker.parent)}

    first = Engine(env).docker_cli()
    second = Engine(env).docker_cli()  # another engine in the same process: no new probe

    assert first == second == DockerCli(str(docker), "env")  # pre-23: DOCKER_BUILDKIT=1
    assert log.read_text().splitlines() == ["buildx version", "--version"]
    _fake_docker(tmp_path / "bin", log, "27.3.1-longer")  # upgraded in place: asked anew
    assert Engine(env).docker_cli() is None  # 27 without buildx: the classic builder
    assert len(log.read_text().splitlines()) == 4


@pytest.mark.parametrize(
    ("lines", "step", "total", "current"),
    [
        (["#5 [3/7] RUN pip install torch==2.4.1"], 3, 7, "RUN pip install torch==2.4.1"),
        (["Step 2/9 : RUN python3 -m venv /opt/venv"], 2, 9, "RUN python3 -m venv /opt/venv"),
        (["#1 [internal] load build definition", "#7 [stage-1 4/5] COPY . /w"], 4, 5, "COPY . /w"),
    ],
)
def test_progress_parses_both_builders(
    lines: list[str], step: int, total: int, current: str
) -> None:
    progress = Progress()
    for line in lines:
        progress.feed(line)
    assert (progress.step, progress.total, progress.current) == (step, total, current)


def test_progress_remembers_failing_step_and_tail() -> None:
    progress = Progress()
    for i in range(40):
        progress.feed(f"noise {i}")
    progress.feed("#9 [5/6] RUN exit 7")
    progress.feed('#9 ERROR: process "/bin/sh -c exit 7" did not complete successfully')
    assert progress.failed_step == "RUN exit 7"
    assert progress.error.startswith("process")
    assert len(progress.tail) == 30 and progress.tail[-1].startswith("#9 ERROR")


def test_hash_follows_context_but_not_ignored_files(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("a")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_text("x")
    ignore = "data\n.git\n"
    files = context_entries(tmp_path, ignore)
    assert [e.rel for e in files] == ["train.py"]
    first = image_hash("FROM x\n", {}, tmp_path, files)
    (tmp_path / "data" / "big.bin").write_text("changed")
    assert image_hash("FROM x\n", {}, tmp_path, context_entries(tmp_path, ignore)) == first
    (tmp_path / "train.py").write_text("b")
    assert image_hash("FROM x\n", {}, tmp_path, context_entries(tmp_path, ignore)) != first
    assert image_hash("FROM y\n", {}, tmp_path, files) != image_hash(
        "FROM x\n", {}, tmp_path, files
    )
    assert image_hash("FROM x\n", {"GL_UID": "1"}, tmp_path, files) != image_hash(
        "FROM x\n", {"GL_UID": "2"}, tmp_path, files
    )


def test_prepare_build_dry_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    cfg = validate_data({"name": "p", "image": {"torch": "2.4.1"}})
    prepared = prepare_build(cfg, tmp_path, "buildkit", BuildOptions())
    assert prepared.tag.startswith("p:gl-") and len(prepared.tag) == len("p:gl-") + 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.py"]
    (tmp_path / ".dockerignore").write_text(render_dockerignore())
    again = prepare_build(cfg, tmp_path, "buildkit", BuildOptions())
    assert again.tag == prepared.tag  # no .dockerignore = gpulaunch's default rules


def test_a_transport_error_while_starting_is_an_engine_error_and_removes_the_container() -> None:
    """A dropped connection from the SDK's HTTP layer (requests, under an ssh:// engine)
    between create and start: exit 3 with one line (and smoke's JUnit/summary), never an
    untranslated error; the created container is removed."""
    import requests

    calls: list[tuple[str, str]] = []

    class Api:
        host = "ssh://box"
        timeout = 60.0
        version = None  # a transport that kept no /version answer

        def call(self, method: str, path: str, *_args: Any, **_kwargs: Any) -> Any:
            calls.append((method, path))
            if path == "/containers/create":
                return {"Id": "c1"}
            return {"Id": "c1", "Name": "/gl-x"}

    engine = Engine({"PATH": ""})
    engine._api = Api()  # type: ignore[assignment]

    def attach(_container: Any) -> None:
        raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=60)")

    with pytest.raises(EngineError, match=r"^Docker engine: Read timed out"):
        engine.create_container({"name": "gl-x", "Image": "img:tag"}, before_start=attach)
    assert calls[-1] == ("DELETE", "/containers/c1")


def test_the_nvidia_driver_rule_refusal_is_kept_from_a_long_oci_error() -> None:
    """nvidia-container-cli's `unsatisfied condition: cuda>=X` comes after hundreds of
    characters of runc text: it must survive the 400-character cut (the explainer reads it)."""
    from gpulaunch.engine.api.http import ApiError
    from gpulaunch.records.explain import Evidence, explain

    noise = "container_linux.go:265: starting container process caused " * 12
    reply = (
        f"OCI runtime create failed: {noise}error running hook: exit status 1, stdout: , "
        "stderr: nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, "
        "please update your driver to a newer version, or use an earlier cuda container"
    )

    class Api:
        host = "unix:///x.sock"
        timeout = 60.0
        version = None  # a transport that kept no /version answer

        def call(self, *_args: Any, **_kwargs: Any) -> Any:
            raise ApiError(500, reply)

    engine = Engine({"PATH": ""})
    engine._api = Api()  # type: ignore[assignment]
    with pytest.raises(EngineError) as caught:
        engine.create_container({"name": "gl-x", "Image": "img:tag"})
    assert caught.value.message == (
        "the NVIDIA runtime refused to start the container: "
        "requirement error: unsatisfied condition: cuda>=12.8"
    )
    found = explain(Evidence(caught.value.message, host=False))
    assert found is not None and found.id == "driver-too-old"
