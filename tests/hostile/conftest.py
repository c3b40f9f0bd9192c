"""Hostile-input corpus: shared helpers.

Every case asserts four things: the exit code, a one-line message naming the field or flag,
no traceback, and that no file inside or outside the project changed. `TreeState` snapshots
trees without following symlinks (a link is recorded as its target; the file a planted link
points at is snapshotted through its own root), so a write through a link, a replaced FIFO or
a new file anywhere shows up as a difference.

Each module of this folder covers one class of defect; the cases are tables, so a new variant
is one row.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.cli.app import app

MINIMAL_CONFIG = """\
version: 1
name: hostile
image:
  base: local/base:bookworm
  python: "3.11"
  torch: none
launch:
  gpus: 0
"""


def tree_state(root: Path) -> dict[str, tuple[str, int, bytes | str]]:
    """Every entry under `root` (root included) by lstat: kind, permission bits, content.

    Regular files carry their bytes, links their target text, other nodes only their kind.
    Nothing is followed, so a planted link's target must be snapshotted as its own root.
    """
    state: dict[str, tuple[str, int, bytes | str]] = {}
    if not os.path.lexists(root):
        return state
    paths = [root]
    if root.is_dir() and not root.is_symlink():
        paths += sorted(root.rglob("*"))
    for path in paths:
        info = path.lstat()
        key = str(path.relative_to(root)) if path != root else "."
        perms = stat.S_IMODE(info.st_mode)
        if stat.S_ISLNK(info.st_mode):
            state[key] = ("link", 0, os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            state[key] = ("file", perms, path.read_bytes())
        elif stat.S_ISDIR(info.st_mode):
            state[key] = ("dir", perms, "")
        else:
            state[key] = ("node", perms, stat.S_IFMT(info.st_mode).__str__())
    return state


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def assert_clean_error(self, code: int, *names: str) -> str:
        """Exit `code`, one `gpulaunch: error:` line naming every string in `names`, no traceback.

        An optional `hint:` line may follow the error line. Returns the error line.
        """
        text = self.stdout + self.stderr
        assert "Traceback" not in text, text
        assert "internal error" not in text, text
        assert self.code == code, (self.code, text)
        lines = [line for line in self.stderr.splitlines() if line.startswith("gpulaunch: error:")]
        assert len(lines) == 1, self.stderr
        extra = [
            line
            for line in self.stderr.splitlines()
            if line and not line.startswith(("gpulaunch: error:", "hint:", "warning:"))
        ]
        assert not extra, self.stderr
        for name in names:
            assert name in lines[0], (name, lines[0])
        return lines[0]


@dataclass
class Hostile:
    """A project folder, a folder outside it, and a CLI runner that runs in the project."""

    project: Path
    outside: Path
    monkeypatch: pytest.MonkeyPatch

    def write_config(self, text: str = MINIMAL_CONFIG) -> Path:
        path = self.project / "gpulaunch.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    def state(self) -> tuple[dict[str, tuple[str, int, bytes | str]], ...]:
        return tree_state(self.project), tree_state(self.outside)

    def invoke(self, *args: str, cwd: Path | None = None) -> Outcome:
        self.monkeypatch.chdir(cwd or self.project)
        result = CliRunner().invoke(app, list(args), catch_exceptions=False)
        return Outcome(result.exit_code, result.stdout, result.stderr)

    def invoke_unchanged(self, *args: str, cwd: Path | None = None) -> Outcome:
        """Invoke and assert that nothing inside or outside the project changed."""
        before = self.state()
        outcome = self.invoke(*args, cwd=cwd)
        after = self.state()
        assert after[0] == before[0], "the project changed"
        assert after[1] == before[1], "a file outside the project changed"
        return outcome


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    project = tmp_path / "proj"
    outside = tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "train.py").write_text("print('ok')\n")
    h = Hostile(project, outside, monkeypatch)
    h.write_config()
    yield h
