"""The docker CLI probe's answer kept across processes (user cache, docker-cli.json): the same
answer as probing, written only by `remember_probes` (build and run), never by a probe alone
(render, --dry-run); a changed binary, plugin or DOCKER_* variable, and a missing, corrupt,
stale or planted entry, mean probing again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpulaunch.engine import cliprobe
from gpulaunch.engine.buildspec import DockerCli
from gpulaunch.fsio import cache_dir


def _fake_docker(folder: Path, log: Path, version: str, buildx: bool = False) -> Path:
    """A `docker` that logs each call; `--version` says VERSION; `buildx` works if asked."""
    folder.mkdir(exist_ok=True)
    docker = folder / "docker"
    docker.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        + ('[ "$1" = buildx ] && echo "buildx v0.12" && exit 0\n' if buildx else "")
        + f'[ "$1" = --version ] && echo "Docker version {version}, build x" && exit 0\nexit 1\n'
    )
    docker.chmod(0o755)
    return docker


@pytest.fixture
def new_process(monkeypatch: pytest.MonkeyPatch) -> object:
    """Forget what this process probed, as a new process would."""

    def reset() -> None:
        monkeypatch.setattr(cliprobe, "_PROBED", {})
        monkeypatch.setattr(cliprobe, "_FRESH", {})

    reset()
    cache_dir().parent.mkdir()  # the XDG cache folder gpulaunch writes under
    return reset


@pytest.fixture
def setup(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    log = tmp_path / "calls.log"
    docker = _fake_docker(tmp_path / "bin", log, "20.10.24")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(docker.parent), "HOME": str(home), "DOCKER_BUILDKIT": "1"}
    return env, docker, log


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_probe_alone_writes_nothing_and_a_saved_answer_is_the_same(
    setup: tuple[dict[str, str], Path, Path], new_process: object
) -> None:
    env, docker, log = setup
    probed = cliprobe.probe_cli(env)
    assert probed == DockerCli(str(docker), "env")
    assert _calls(log) == 2
    assert not cache_dir().exists()  # render and --dry-run probe like this: nothing written
    cliprobe.remember_probes()  # build and run
    assert (cache_dir() / cliprobe.PROBE_FILE).is_file()
    new_process()  # type: ignore[operator]
    assert cliprobe.probe_cli(env) == probed  # warm: the same answer, no subprocess
    assert _calls(log) == 2


def test_no_cli_is_remembered_too(tmp_path: Path, new_process: object) -> None:
    log = tmp_path / "calls.log"
    docker = _fake_docker(tmp_path / "bin", log, "27.3.1")  # 23+ without buildx: classic
    env = {"PATH": str(docker.parent), "HOME": str(tmp_path)}
    assert cliprobe.probe_cli(env) is None
    cliprobe.remember_probes()
    new_process()  # type: ignore[operator]
    assert cliprobe.probe_cli(env) is None
    assert _calls(log) == 2


def test_a_changed_binary_is_probed_again(
    setup: tuple[dict[str, str], Path, Path], new_process: object
) -> None:
    env, docker, log = setup
    cliprobe.probe_cli(env)
    cliprobe.remember_probes()
    new_process()  # type: ignore[operator]
    _fake_docker(docker.parent, log, "27.3.1", buildx=True)  # upgraded in place
    stat = docker.stat()
    os.utime(docker, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the mtime kept
    assert cliprobe.probe_cli(env) == DockerCli(str(docker), "buildx")
    assert _calls(log) == 3  # 2 + `buildx version`


def test_a_new_buildx_plugin_or_docker_variable_is_probed_again(
    setup: tuple[dict[str, str], Path, Path], new_process: object
) -> None:
    env, _docker, log = setup
    cliprobe.probe_cli(env)
    cliprobe.remember_probes()
    plugin = Path(env["HOME"]) / ".docker" / "cli-plugins" / "docker-buildx"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("#!/bin/sh\n")
    new_process()  # type: ignore[operator]
    cliprobe.probe_cli(env)
    assert _calls(log) == 4
    cliprobe.remember_probes()
    new_process()  # type: ignore[operator]
    cliprobe.probe_cli({**env, "DOCKER_CLI_EXPERIMENTAL": "enabled"})
    assert _calls(log) == 6
    new_process()  # type: ignore[operator]
    cliprobe.probe_cli({**env, "DOCKER_HOST": "tcp://elsewhere:2375"})  # the probe drops it
    assert _calls(log) == 6


def _saved(env: dict[str, str]) -> tuple[Path, dict[str, dict[str, object]]]:
    cliprobe.probe_cli(env)
    cliprobe.remember_probes()
    path = cache_dir() / cliprobe.PROBE_FILE
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    "plant",
    [
        "not json",
        "corrupt",
        "other binary",
        "bad mode",
        "other key",
        "stale",
        "future",
        "link",
    ],
)
def test_a_corrupt_planted_or_stale_entry_is_not_used(
    setup: tuple[dict[str, str], Path, Path], new_process: object, plant: str, tmp_path: Path
) -> None:
    env, docker, log = setup
    path, data = _saved(env)
    ((digest, entry),) = data.items()
    evil = tmp_path / "evil-docker"
    if plant == "not json":
        path.write_text("{" * 10)
    elif plant == "corrupt":
        path.write_text(json.dumps({digest: {"at": "x", "key": 3, "cli": 7}}))
    elif plant == "other binary":  # a binary that is not on PATH
        path.write_text(json.dumps({digest: {**entry, "cli": [str(evil), "buildx"]}}))
    elif plant == "bad mode":
        path.write_text(json.dumps({digest: {**entry, "cli": [str(docker), "sh -c"]}}))
    elif plant == "other key":  # the right digest with another key under it
        path.write_text(json.dumps({digest: {**entry, "key": ["x"], "cli": None}}))
    elif plant in ("stale", "future"):
        at = 0 if plant == "stale" else 4e9
        path.write_text(json.dumps({digest: {**entry, "at": at, "cli": None}}))
    else:
        evil.write_text(json.dumps({digest: {**entry, "cli": None}}))
        path.unlink()
        path.symlink_to(evil)
    new_process()  # type: ignore[operator]
    assert cliprobe.probe_cli(env) == DockerCli(str(docker), "env")  # as the slow path says
    assert _calls(log) == 4  # probed again


def test_remember_keeps_other_entries_and_rewrites_a_corrupt_file(
    tmp_path: Path, new_process: object
) -> None:
    envs = []
    for name in ("a", "b"):
        docker = _fake_docker(tmp_path / name, tmp_path / f"{name}.log", "20.10.24")
        envs.append({"PATH": str(docker.parent), "HOME": str(tmp_path)})
    cache_dir().mkdir()
    (cache_dir() / cliprobe.PROBE_FILE).write_text("garbage")
    for env in envs:
        new_process()  # type: ignore[operator]
        cliprobe.probe_cli(env)
        cliprobe.remember_probes()
    data = json.loads((cache_dir() / cliprobe.PROBE_FILE).read_text())
    assert len(data) == 2
    new_process()  # type: ignore[operator]
    assert [cliprobe.probe_cli(env) for env in envs] == [
        DockerCli(str(tmp_path / "a" / "docker"), "env"),
        DockerCli(str(tmp_path / "b" / "docker"), "env"),
    ]
    assert _calls(tmp_path / "a.log") == _calls(tmp_path / "b.log") == 2


def test_a_plugin_in_a_folder_the_docker_config_names_is_probed_again(
    setup: tuple[dict[str, str], Path, Path], new_process: object, tmp_path: Path
) -> None:
    env, _docker, log = setup
    extra = tmp_path / "plugins"
    extra.mkdir()
    config = Path(env["HOME"]) / ".docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"cliPluginsExtraDirs": [str(extra)]}))
    cliprobe.probe_cli(env)
    cliprobe.remember_probes()
    new_process()  # type: ignore[operator]
    cliprobe.probe_cli(env)
    assert _calls(log) == 2  # unchanged: the saved answer
    (extra / "docker-buildx").write_text("#!/bin/sh\n")
    new_process()  # type: ignore[operator]
    cliprobe.probe_cli(env)
    assert _calls(log) == 4


def test_a_fifo_as_docker_config_is_not_waited_on(
    setup: tuple[dict[str, str], Path, Path], new_process: object
) -> None:
    env, docker, _log = setup
    config = Path(env["HOME"]) / ".docker"
    config.mkdir()
    os.mkfifo(config / "config.json")
    assert cliprobe.probe_cli(env) == DockerCli(str(docker), "env")  # returns: no open wait


def test_a_full_disk_does_not_fail_the_command_that_saves(
    setup: tuple[dict[str, str], Path, Path], new_process: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch import fsio

    def full(*args: object, **kwargs: object) -> None:
        raise fsio.DiskFull("no space left")

    env, docker, _log = setup
    monkeypatch.setattr(fsio, "write_file", full)
    assert cliprobe.probe_cli(env) == DockerCli(str(docker), "env")
    cliprobe.remember_probes()  # a cache only saves work: nothing raised
    assert not (cache_dir() / cliprobe.PROBE_FILE).exists()


def test_an_empty_path_entry_never_runs_a_docker_in_the_working_folder(
    setup: tuple[dict[str, str], Path, Path],
    new_process: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`PATH=/usr/bin:` (a stray colon) names the working folder to a shell; gpulaunch runs in
    the project, which a job can write, so a `docker` planted there is never probed."""
    env, docker, _log = setup
    project = tmp_path / "project"
    planted = _fake_docker(project, tmp_path / "planted.log", "20.10.24", buildx=True)
    monkeypatch.chdir(project)
    env = {**env, "PATH": f":{docker.parent}:"}
    assert cliprobe.probe_cli(env) == DockerCli(str(docker), "env")
    assert not (tmp_path / "planted.log").exists() and planted.is_file()


def test_the_builder_key_changes_with_what_the_probe_reads(
    setup: tuple[dict[str, str], Path, Path], new_process: object
) -> None:
    """One key for the probe's answer in memory, on disk and in the tag cache (cli_key): a
    docker-buildx plugin installed, a config naming plugin folders, a replaced binary or a
    DOCKER_* variable each change it; the same inputs give the same key."""
    env, docker, log = setup
    home = Path(env["HOME"])
    key = cliprobe.cli_key(env)
    assert cliprobe.cli_key(dict(env)) == key
    keys = [key]
    plugins = home / ".docker" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-buildx").write_text("#!/bin/sh\n")
    keys.append(cliprobe.cli_key(env))
    (home / ".docker" / "config.json").write_text('{"cliPluginsExtraDirs": ["/opt/x"]}')
    keys.append(cliprobe.cli_key(env))
    docker.write_text(docker.read_text() + "\n")  # replaced in place
    keys.append(cliprobe.cli_key(env))
    keys.append(cliprobe.cli_key({**env, "DOCKER_CLI_EXPERIMENTAL": "enabled"}))
    keys.append(cliprobe.cli_key({**env, "GPULAUNCH_BUILDER": "buildkit"}))
    assert len(set(keys)) == len(keys)
    assert _calls(log) == 0  # a key probes nothing
