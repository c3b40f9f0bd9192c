"""Shell completion: the console script answers bash/zsh completion requests through the lazy
root group (command names, a command's options, a group's subcommands), `--show-completion`
prints the script to source, and `--install-completion` does not exist (it would edit the
user's shell start-up file outside gpulaunch's one writer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "gpulaunch"

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="no gpulaunch console script")


def _complete(tmp_path: Path, **env: str) -> list[str]:
    proc = subprocess.run(
        [str(SCRIPT)],
        env={**os.environ, "HOME": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completes_command_names(tmp_path: Path) -> None:
    words = _complete(
        tmp_path, _GPULAUNCH_COMPLETE="complete_bash", COMP_WORDS="gpulaunch r", COMP_CWORD="1"
    )
    assert words == ["render", "run", "rerun"]


def test_bash_completes_a_commands_options(tmp_path: Path) -> None:
    words = _complete(
        tmp_path,
        _GPULAUNCH_COMPLETE="complete_bash",
        COMP_WORDS="gpulaunch run --gp",
        COMP_CWORD="2",
    )
    assert words == ["--gpus"]


def test_zsh_completes_a_groups_subcommands(tmp_path: Path) -> None:
    words = _complete(
        tmp_path, _GPULAUNCH_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="gpulaunch export "
    )
    text = " ".join(words)
    assert '"k8s"' in text and '"slurm"' in text


def test_show_completion_prints_the_script_for_the_calling_shell(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", "-c", f"{SCRIPT} --show-completion; true"],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "_GPULAUNCH_COMPLETE=complete_bash" in proc.stdout
    assert "complete -o default -F _gpulaunch_completion gpulaunch" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_install_completion_is_not_an_option(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(SCRIPT), "--install-completion", "bash"],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "No such option: --install-completion" in proc.stderr
    assert list(tmp_path.iterdir()) == []
