"""Issue 29 §2: nothing a container job can write is read back as gpulaunch's truth.

The class, stated once (gpulaunch/launch/exposure.py): `.gpulaunch/` is masked wherever a
mount shows it, and no mount may reach gpulaunch's state or cache folder, the engine, the
user's credentials or the host's system folders, however the path is spelled. The record key
is used only when it is a regular 0600 file of the user's with 32 bytes. A malformed file
where gpulaunch reads back its own is skipped with a warning, never a hang or a traceback.
On the real engine: tests/e2e/test_job_reach.py.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpulaunch.records.store import RunRecord, save
from tests.hostile.conftest import MINIMAL_CONFIG, Hostile

UNSAFE = "--allow-unsafe-mounts"


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A planted FIFO must never block a command: fail the test instead of hanging CI."""

    def stuck(*_: object) -> None:
        raise TimeoutError("a command blocked (a FIFO read?)")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _dry_json(hostile: Hostile, *args: str) -> dict[str, object]:
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--json", *args, "train.py")
    assert outcome.code == 0, outcome
    data: dict[str, object] = json.loads(outcome.stdout)
    return data


def _mounts(data: dict[str, object]) -> list[dict[str, object]]:
    run = data["run"]
    assert isinstance(run, dict)
    return list(run["options"]["mounts"])


# -- 1. the project's .gpulaunch/ is masked wherever a mount shows it ---------------------


def test_the_project_mount_hides_gpulaunch_state_under_an_empty_read_only_tmpfs(
    hostile: Hostile,
) -> None:
    data = _dry_json(hostile)
    mask = {"source": "", "target": "/workspace/.gpulaunch", "read_only": True, "kind": "tmpfs"}
    assert mask in _mounts(data)
    line = " ".join(data["run"]["docker_run"])  # type: ignore[index]
    assert "--mount type=tmpfs,target=/workspace/.gpulaunch,readonly,tmpfs-size=4096" in line


@pytest.mark.parametrize("spelling", ["parent", "parent-link", "project-again", "relative"])
def test_any_other_mount_that_shows_the_project_masks_it_there_too(
    hostile: Hostile, tmp_path: Path, spelling: str
) -> None:
    """Written from the parent-folder case; the link and `./` spellings are the same class."""
    (tmp_path / "up-link").symlink_to(tmp_path)
    source, expected = {
        "parent": (str(tmp_path), "/up/proj/.gpulaunch"),
        "parent-link": (str(tmp_path / "up-link"), "/up/proj/.gpulaunch"),
        "project-again": (str(hostile.project), "/up/.gpulaunch"),
        "relative": (".", "/up/.gpulaunch"),
    }[spelling]
    data = _dry_json(hostile, "--mount", f"{source}:/up:ro")
    masks = [m["target"] for m in _mounts(data) if m["kind"] == "tmpfs"]
    assert masks == ["/workspace/.gpulaunch", expected]


def test_a_mount_inside_gpulaunch_state_is_refused(hostile: Hostile) -> None:
    (hostile.project / ".gpulaunch" / "runs").mkdir(parents=True)
    outcome = hostile.invoke_unchanged(
        "run", "--dry-run", "--mount", ".gpulaunch/runs:/r", "train.py"
    )
    outcome.assert_clean_error(2, "--mount", "gpulaunch's own state", UNSAFE)


def test_host_mode_mounts_nothing_and_takes_its_helper_from_the_package(hostile: Hostile) -> None:
    """The precision helper on a host job's PYTHONPATH is the installed package's file; no
    file in the project (where a job could plant one) is ever imported as gpulaunch's."""
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--json", "--no-container", "train.py")
    assert outcome.code == 0, outcome
    first = json.loads(outcome.stdout)["run"]["env"]["PYTHONPATH"].split(":")[0]
    package = Path(__import__("gpulaunch").__file__).resolve().parent
    assert Path(first).is_relative_to(package), first
    modules = sorted(p.name for p in Path(first).iterdir() if p.name != "__pycache__")
    assert modules == ["gpulaunch_precision.py"]


# -- 2. no mount reaches what the job must not have ---------------------------------------


def _reach_cases() -> list[tuple[str, Callable[[Hostile, Path], str], str]]:
    def state(h: Hostile, tmp: Path) -> str:
        folder = Path(os.environ["GPULAUNCH_STATE_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder.parent)

    def cache(h: Hostile, tmp: Path) -> str:
        folder = Path(os.environ["XDG_CACHE_HOME"]) / "gpulaunch"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder)

    def home_ssh(h: Hostile, tmp: Path) -> str:
        (tmp / "home" / ".ssh").mkdir(parents=True, exist_ok=True)
        return str(tmp / "home" / ".ssh")

    def home(h: Hostile, tmp: Path) -> str:
        return str(tmp / "home")

    def docker_config(h: Hostile, tmp: Path) -> str:
        (tmp / "home" / ".docker").mkdir(parents=True, exist_ok=True)
        (tmp / "home" / ".docker" / "config.json").write_text("{}")
        return str(tmp / "home" / ".docker" / "config.json")

    def link_to_etc(h: Hostile, tmp: Path) -> str:
        (h.project / "conf").symlink_to("/etc")
        return "conf"

    def engine_socket(h: Hostile, tmp: Path) -> str:
        (tmp / "run").mkdir()
        (tmp / "run" / "engine.sock").write_text("")
        h.monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp / 'run' / 'engine.sock'}")
        return str(tmp / "run")

    fixed = {
        "root": ("/", "root folder"),
        "proc": ("/proc/self", "/proc"),
        "sys": ("/sys", "/sys"),
        "dev": ("/dev/shm", "/dev"),
        "etc": ("/etc", "/etc"),
        "run": ("/run", "socket"),
    }
    cases = [(name, (lambda p: lambda h, t: p)(path), what) for name, (path, what) in fixed.items()]
    return [
        *cases,
        ("state-parent", state, "state folder"),
        ("cache", cache, "cache folder"),
        ("ssh", home_ssh, "~/.ssh"),
        ("home", home, "~/.ssh"),
        ("docker-config", docker_config, "~/.docker"),
        ("link-to-etc", link_to_etc, "/etc"),
        ("engine-socket-folder", engine_socket, "engine's socket"),
    ]


REACH = _reach_cases()


@pytest.fixture
def home(hostile: Hostile, tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    hostile.monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.mark.parametrize(("make", "what"), [pytest.param(m, w, id=n) for n, m, w in REACH])
def test_a_mount_that_reaches_protected_ground_is_refused(
    hostile: Hostile, home: Path, tmp_path: Path, make: Callable[[Hostile, Path], str], what: str
) -> None:
    source = make(hostile, tmp_path)
    outcome = hostile.invoke_unchanged(
        "run", "--dry-run", "--mount", f"{source}:/host:ro", "train.py"
    )
    outcome.assert_clean_error(2, "--mount", what, UNSAFE)


@pytest.mark.parametrize(("make", "what"), [pytest.param(m, w, id=n) for n, m, w in REACH])
def test_the_flag_that_names_the_risk_lets_it_through_with_a_warning(
    hostile: Hostile, home: Path, tmp_path: Path, make: Callable[[Hostile, Path], str], what: str
) -> None:
    source = make(hostile, tmp_path)
    outcome = hostile.invoke_unchanged(
        "run", "--dry-run", UNSAFE, "--mount", f"{source}:/host:ro", "train.py"
    )
    assert outcome.code == 0, outcome
    warned = [line for line in outcome.stderr.splitlines() if UNSAFE in line]
    assert len(warned) == 1 and what in warned[0], outcome.stderr


@pytest.mark.parametrize("where", ["launch.mounts", "launch.checkpoint_dir"])
def test_config_mounts_are_the_same_class(hostile: Hostile, home: Path, where: str) -> None:
    (home / ".ssh").mkdir()
    if where == "launch.mounts":
        hostile.write_config(MINIMAL_CONFIG + f'  mounts: ["{home}:/h"]\n')
    else:
        hostile.write_config(MINIMAL_CONFIG + f"  checkpoint_dir: {home}\n")
    outcome = hostile.invoke_unchanged("run", "--dry-run", "train.py")
    outcome.assert_clean_error(2, where, "~/.ssh")


def test_a_project_that_is_the_home_folder_is_refused(hostile: Hostile) -> None:
    (hostile.project / ".ssh").mkdir()
    hostile.monkeypatch.setenv("HOME", str(hostile.project))
    outcome = hostile.invoke_unchanged("run", "--dry-run", "train.py")
    outcome.assert_clean_error(2, "the project", "~/.ssh", UNSAFE)


@pytest.mark.parametrize("folder", ["GPULAUNCH_STATE_DIR", "XDG_CACHE_HOME"])
def test_a_project_that_holds_the_state_or_cache_folder_is_refused(
    hostile: Hostile, folder: str
) -> None:
    hostile.monkeypatch.setenv(folder, str(hostile.project / "user-folder"))
    outcome = hostile.invoke_unchanged("run", "--dry-run", "train.py")
    outcome.assert_clean_error(2, "the project", "gpulaunch's")


# -- 3. the record key ---------------------------------------------------------------------


def _sealed_history(hostile: Hostile) -> Path:
    record = {"schema_version": 1, "id": "20261205-101500-a1b2c3", "status": "exited"}
    assert save(hostile.project, RunRecord.from_json(record), lambda message: None)
    return Path(os.environ["GPULAUNCH_STATE_DIR"]) / "record-key"


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        ("mode-0644", "mode 0644"),
        ("mode-0640", "mode 0640"),
        ("empty", "holds 0 bytes"),
        ("short", "holds 16 bytes"),
        ("long", "holds 33 bytes"),
        ("link", "symbolic link"),
        ("fifo", "not a regular file"),
        ("folder", "not a regular file"),
        ("other-owner", "not to you"),
    ],
)
def test_a_key_that_is_not_the_users_own_secret_is_refused(
    hostile: Hostile, spoil: str, why: str
) -> None:
    key = _sealed_history(hostile)
    data = key.read_bytes()
    key.unlink()
    if spoil.startswith("mode"):
        key.write_bytes(data)
        key.chmod(int(spoil[-4:], 8))
    elif spoil in ("empty", "short", "long"):
        key.write_bytes({"empty": b"", "short": data[:16], "long": data + b"x"}[spoil])
        key.chmod(0o600)
    elif spoil == "link":
        (key.parent / "real-key").write_bytes(data)
        key.symlink_to(key.parent / "real-key")
    elif spoil == "fifo":
        os.mkfifo(key, 0o600)
    elif spoil == "folder":
        key.mkdir()
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the key another owner")
        key.write_bytes(data)
        key.chmod(0o600)
        os.chown(key, 4242, 4242)
    outcome = hostile.invoke_unchanged("history")
    outcome.assert_clean_error(2, str(key), why)


# -- 4. malformed files where gpulaunch reads back its own ---------------------------------


def _plant(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "not-utf8":
        path.write_bytes(b"\xff\xfe{\x00")
    elif kind == "link":
        path.symlink_to("/etc/passwd")
    else:
        path.write_text(kind)


KINDS = ["fifo", "folder", "deep", "not-utf8", "link", '{"id": "\u202e"}']
READ_BACK = [
    (".gpulaunch/runs/20261205-101500-a1b2c3.json", ("history",)),
    (".gpulaunch/tag-cache.json", ("run", "--dry-run", "train.py")),
    (".gpulaunch/pushed.json", ("history",)),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("rel", "argv"), READ_BACK, ids=lambda v: str(v).split("/")[-1])
def test_a_malformed_file_of_ours_is_skipped_never_a_hang_or_a_traceback(
    hostile: Hostile, rel: str, argv: tuple[str, ...], kind: str
) -> None:
    _plant(hostile.project / rel, kind)
    outcome = hostile.invoke_unchanged(*argv)
    text = outcome.stdout + outcome.stderr
    assert outcome.code == 0, text
    assert "Traceback" not in text and "internal error" not in text, text
    if rel.endswith(".json") and "runs/" in rel:
        assert sum("skipped" in line for line in outcome.stderr.splitlines()) == 1, text


@pytest.mark.parametrize("kind", ["fifo", "folder", "deep", "not-utf8", "link"])
def test_a_malformed_push_record_is_one_line_not_a_hang(hostile: Hostile, kind: str) -> None:
    _plant(hostile.project / ".gpulaunch" / "pushed.json", kind)
    outcome = hostile.invoke_unchanged("export", "k8s", "train.py")
    outcome.assert_clean_error(2, "pushed.json")
