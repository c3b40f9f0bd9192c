"""`run --no-container` runs the project's interpreter, never gpulaunch's own (a pipx install
has no torch): launch.python, else the active venv, else the project's .venv, else python3."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hostile.conftest import MINIMAL_CONFIG, Hostile


def _command(hostile: Hostile, *extra: str) -> list[str]:
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--json", "--no-container", *extra)
    assert outcome.code == 0, outcome
    command: list[str] = json.loads(outcome.stdout)["run"]["command"]
    return command


def _fake_python(folder: Path) -> Path:
    folder.mkdir(parents=True)
    python = folder / "python"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return python


@pytest.fixture
def plain(hostile: Hostile) -> Hostile:
    hostile.monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    return hostile


def test_the_active_venv_wins(plain: Hostile, tmp_path: Path) -> None:
    python = _fake_python(tmp_path / "venv" / "bin")
    plain.monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "venv"))
    assert _command(plain, "train.py")[0] == str(python)


def test_the_projects_venv_next(plain: Hostile) -> None:
    venv = plain.project / ".venv" / "bin"
    python = _fake_python(venv)
    assert _command(plain, "train.py")[0] == str(python)
    assert _command(plain, "--nproc", "2", "train.py")[:3] == [
        str(python), "-m", "torch.distributed.run",
    ]  # fmt: skip


def test_launch_python_wins_over_both(plain: Hostile, tmp_path: Path) -> None:
    _fake_python(plain.project / ".venv" / "bin")
    python = _fake_python(plain.project / "env" / "bin")
    plain.write_config(MINIMAL_CONFIG + "  python: env/bin/python\n")
    assert _command(plain, "train.py")[0] == str(python)


def test_never_gpulaunchs_own_interpreter(plain: Hostile) -> None:
    plain.monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert _command(plain, "train.py")[0] != sys.executable


@pytest.mark.parametrize("value", ["nope/python", "no-such-python-3", "''"])
def test_a_bad_launch_python_is_exit_2(plain: Hostile, value: str) -> None:
    plain.write_config(MINIMAL_CONFIG + f"  python: {value}\n")
    outcome = plain.invoke_unchanged("run", "--dry-run", "--no-container", "train.py")
    outcome.assert_clean_error(2, "launch.python")
    assert os.path.exists(plain.project / "gpulaunch.yaml")


def test_no_container_runs_on_a_read_only_project(tmp_path: Path) -> None:
    """A read-only checkout (a shared folder, a read-only bind mount): the job runs and its
    exit code is gpulaunch's; nothing is written for it (the precision helper is the installed
    package's own file, never a copy). The
    project is made read-only with a private read-only bind mount (root, as in CI)."""
    import subprocess

    source = tmp_path / "src"
    source.mkdir()
    (source / "gpulaunch.yaml").write_text(MINIMAL_CONFIG)
    (source / "train.py").write_text("import sys; print('ran'); sys.exit(7)\n")
    readonly, cache = tmp_path / "ro", tmp_path / "cache"
    readonly.mkdir()
    gl = f"{sys.executable} -m gpulaunch run --no-container train.py"
    script = (
        f"mount --bind {source} {readonly} && mount -o remount,bind,ro {readonly} && "
        f"cd {readonly} && ! touch probe 2>/dev/null && {gl}"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "VIRTUAL_ENV": sys.prefix}
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 7, proc.stderr
    assert "ran" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (cache / "gpulaunch" / "lib").exists()
    assert sorted(p.name for p in source.iterdir()) == ["gpulaunch.yaml", "train.py"]
