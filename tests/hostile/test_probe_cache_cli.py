"""The docker CLI probe's saved answer through the CLI: `run --dry-run` and `build --dry-run`
read it and print what they print without it, and never write it; `render` and a build write
it; a docker client replaced after that is probed again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulaunch.engine import cliprobe
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
    monkeypatch.setattr(cliprobe, "_PROBED", {})
    monkeypatch.setattr(cliprobe, "_FRESH", {})


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _same_run_id(text: str) -> str:
    return RUN_ID_RE.sub("RUN-ID", text)  # each run --dry-run names a new one


DRY_RUNS = [("run", "--dry-run", "train.py"), ("build", "--dry-run")]
COMMANDS = [*DRY_RUNS, ("render",)]


def _invoke(hostile: Hostile, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]) -> str:
    _new_process(monkeypatch)
    outcome = hostile.invoke_unchanged(*args)
    assert outcome.code == 0, outcome.stderr
    return _same_run_id(outcome.stdout)


def test_dry_runs_never_save_the_answer_render_and_builds_do_and_all_read_it(
    hostile: Hostile, client: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.config import load_config
    from gpulaunch.image.build import BuildOptions, run_build

    cold = [_invoke(hostile, monkeypatch, args) for args in DRY_RUNS]
    assert _calls(client) == 2 * len(DRY_RUNS)  # each probed: no answer was saved
    assert not cache_dir().exists()  # and none saved one
    cold.append(_invoke(hostile, monkeypatch, ("render",)))
    assert "# Builder: buildkit." in cold[-1]
    saved = cache_dir() / cliprobe.PROBE_FILE
    assert saved.is_file()  # render is no dry run: it saves what it probed
    before = (saved.read_bytes(), saved.stat().st_mtime_ns)
    probes = _calls(client)

    warm = [_invoke(hostile, monkeypatch, args) for args in COMMANDS]
    assert warm == cold  # the same Dockerfile, tag and docker lines
    assert _calls(client) == probes  # no probe: the saved answer
    assert (saved.read_bytes(), saved.stat().st_mtime_ns) == before  # and nothing written

    saved.unlink()
    _new_process(monkeypatch)
    cfg = load_config(hostile.project / "gpulaunch.yaml")
    run_build(cfg, hostile.project, _BuildOnly(), BuildOptions())
    assert saved.is_file()  # a build saves it too
    assert _invoke(hostile, monkeypatch, DRY_RUNS[1]) == cold[1]
    assert _calls(client) == probes + 2

    _fake_docker(hostile.outside / "bin", client, "28.2.2", buildx=True)  # client replaced
    text = _invoke(hostile, monkeypatch, ("build", "--dry-run"))
    assert _calls(client) == probes + 3  # probed again: `buildx version` answers
    assert "buildx build" in text and "DOCKER_BUILDKIT=1 " not in text


def test_the_real_docker_client_answer_is_saved_and_read_back(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's own docker binaries (PATH as the tests run): their identity is stable
    across processes, so the second render reads what the first saved."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/gpulaunch-probe-cache.sock")
    cache_dir().parent.mkdir()
    probes: list[object] = []
    probe = cliprobe._probe

    def counting(*args: object) -> object:
        probes.append(args)
        return probe(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(cliprobe, "_probe", counting)
    first = _invoke(hostile, monkeypatch, ("render",))
    assert len(probes) == 1
    assert _invoke(hostile, monkeypatch, ("render",)) == first
    assert _invoke(hostile, monkeypatch, ("run", "--dry-run", "train.py"))
    assert len(probes) == 1


@pytest.mark.parametrize("damage", ["garbage", "foreign binary", "link"])
def test_a_corrupt_or_planted_answer_changes_no_output(
    hostile: Hostile, client: Path, monkeypatch: pytest.MonkeyPatch, damage: str, tmp_path: Path
) -> None:
    cold = [_invoke(hostile, monkeypatch, args) for args in COMMANDS]  # render saves it
    saved = cache_dir() / cliprobe.PROBE_FILE
    ((digest, entry),) = json.loads(saved.read_text()).items()
    victim = tmp_path / "victim.json"
    if damage == "garbage":
        saved.write_text("[[[")
    elif damage == "foreign binary":  # a binary that is not on PATH, claiming buildx
        evil = {**entry, "cli": [str(tmp_path / "evil"), "buildx"]}
        saved.write_text(json.dumps({digest: evil}))
    else:
        victim.write_text(json.dumps({digest: {**entry, "cli": None}}))
        saved.unlink()
        saved.symlink_to(victim)
    planted = saved.read_bytes()
    probes = _calls(client)

    for args, expected in zip(DRY_RUNS, cold[:-1], strict=True):
        assert _invoke(hostile, monkeypatch, args) == expected
        assert saved.read_bytes() == planted  # a dry run probes again and writes nothing
    assert _calls(client) == probes + 2 * len(DRY_RUNS)
    assert _invoke(hostile, monkeypatch, ("render",)) == cold[-1]
    if damage == "link":  # never written through
        assert saved.is_symlink() and json.loads(victim.read_text())[digest]["cli"] is None
    else:  # render replaced it with what it probed
        docker = str(hostile.outside / "bin" / "docker")
        assert json.loads(saved.read_text())[digest]["cli"] == [docker, "env"]
