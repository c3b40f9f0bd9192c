"""The docker CLI probe's saved answer through the CLI: `render` and `run --dry-run` read it
and print what they print without it, and never write it; a build writes it; a docker client
replaced after that is probed again."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulaunch.engine import replies
from gpulaunch.engine.docker_api import RUN_ID_RE, Engine
from gpulaunch.fsio import cache_dir
from hostile.conftest import Hostile


def _fake_docker(folder: Path, log: Path, version: str, buildx: bool) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / "docker"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        f'if [ "$1" = "--version" ]; then echo "Docker version {version}, build x"; exit 0; fi\n'
        f'if [ "$1 $2" = "buildx version" ] && [ {int(buildx)} = 1 ]; then echo v0.12; exit 0; fi\n'
        'echo "Cannot connect to the Docker daemon" >&2; exit 1\n'
    )
    script.chmod(0o755)


class _BuildOnly(Engine):
    """The real seam's builder choice (and probe); images and builds faked (no daemon)."""

    def image_exists(self, ref: str) -> bool:
        return False

    def image_id(self, ref: str) -> None:
        return None

    def build(self, req: object, on_line: object, builder: object) -> None:
        return None


@pytest.fixture
def client(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = hostile.outside.parent / "calls.log"  # the fake writes it: not `outside`
    _fake_docker(hostile.outside / "bin", log, "20.10.24", buildx=False)
    monkeypatch.setenv("PATH", f"{hostile.outside / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/gpulaunch-probe-cache.sock")
    cache_dir().parent.mkdir()
    _new_process(monkeypatch)
    return log


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replies, "_PROBED", {})
    monkeypatch.setattr(replies, "_FRESH", {})


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _same_run_id(text: str) -> str:
    return RUN_ID_RE.sub("RUN-ID", text)  # each run --dry-run names a new one


COMMANDS = [("run", "--dry-run", "train.py"), ("build", "--dry-run"), ("render",)]


def test_render_and_dry_runs_read_the_answer_a_build_saved(
    hostile: Hostile, client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.config import load_config
    from gpulaunch.image.build import BuildOptions, run_build

    cold = []
    for args in COMMANDS:
        _new_process(monkeypatch)
        outcome = hostile.invoke_unchanged(*args)
        assert outcome.code == 0, outcome.stderr
        cold.append(_same_run_id(outcome.stdout))
    assert _calls(client) == 2 * len(COMMANDS)  # each probed: no answer was saved
    assert not cache_dir().exists()  # and none saved one
    assert "# Builder: buildkit." in cold[2]

    _new_process(monkeypatch)
    cfg = load_config(hostile.project / "gpulaunch.yaml")
    run_build(cfg, hostile.project, _BuildOnly(), BuildOptions())
    saved = cache_dir() / replies.PROBE_FILE
    assert saved.is_file()
    before = (saved.read_bytes(), saved.stat().st_mtime_ns)
    probes = _calls(client)

    for args, expected in zip(COMMANDS, cold, strict=True):
        _new_process(monkeypatch)
        outcome = hostile.invoke_unchanged(*args)
        assert outcome.code == 0, outcome.stderr
        assert _same_run_id(outcome.stdout) == expected  # the same Dockerfile, tag and docker lines
    assert _calls(client) == probes  # no probe: the saved answer
    assert (saved.read_bytes(), saved.stat().st_mtime_ns) == before  # and never written

    _fake_docker(hostile.outside / "bin", client, "28.2.2", buildx=True)  # client replaced
    _new_process(monkeypatch)
    outcome = hostile.invoke_unchanged("build", "--dry-run")
    assert _calls(client) == probes + 1  # probed again: `buildx version` answers
    assert "buildx build" in outcome.stdout and "DOCKER_BUILDKIT=1 " not in outcome.stdout
