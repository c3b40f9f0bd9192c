"""A full disk (ENOSPC, EDQUOT) is exit 1 with one line, not exit 2 (it is not bad input),
and leaves no temp file behind: files through the one writer, and stdout (`> /dev/full`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from hostile.conftest import Hostile


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
@pytest.mark.parametrize("args", [("render", "-o", "Dockerfile.out"), ("init", "--force", "--yes")])
def test_a_full_disk_while_writing_a_file_is_exit_1(
    hostile: Hostile, code: int, args: tuple[str, ...]
) -> None:
    import gpulaunch.fsio as fsio

    def full(_fd: int) -> None:
        raise OSError(code, os.strerror(code))

    hostile.monkeypatch.setattr(fsio.os, "fsync", full)
    outcome = hostile.invoke_unchanged(*args)
    outcome.assert_clean_error(1, os.strerror(code), "full")


def test_a_full_stdout_is_exit_1(hostile: Hostile) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing (Linux has it)")
    before = hostile.state()
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "gpulaunch", "render"],
            cwd=hostile.project,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert hostile.state() == before
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
