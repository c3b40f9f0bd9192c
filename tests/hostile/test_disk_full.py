"""A full disk (ENOSPC, EDQUOT) is exit 1 with one line, not exit 2 (it is not bad input),
and leaves no temp file behind."""

from __future__ import annotations

import errno
import os

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


# stdout to a full disk (`> /dev/full`): tests/hostile/test_flags.py
