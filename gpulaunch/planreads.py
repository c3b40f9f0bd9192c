"""What the image plan read of the project, so a rebuild after a code-only edit can reuse it.

`plan_image` reads many project files (dependency files, root scripts for PEP 723 blocks,
setup.py, wheelhouse listings) through many readers. None of them reports itself: while the
plan is made, Python's own audit events ("open", "os.listdir", "os.scandir") name every path
opened or listed, and those below the project are kept. A reader that looks at a file only
for a marker (discover's search of root scripts for `# /// script`) says so with `lacks`:
what the plan learned of that file is then only that the marker is absent.

The record is checked by content, never by time stamps: each file read hashes the same,
each file that lacked its marker still lacks it, each folder listed holds the same names,
each path that was missing still is. Files are read as fsio reads project input (never
blocking on a FIFO, at most READ_LIMIT bytes); one it cannot read so leaves no record to
keep. What no audit event shows (a stat: `is_file()`) is covered by the tag cache, which
reuses a plan only when no context entry was added, removed or changed kind
(tagcache.lookup).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulaunch.fsio import read_back

_EVENTS = {"open": "file", "os.listdir": "folder", "os.scandir": "folder"}
READ_LIMIT = 16 << 20  # a plan that read a bigger file is not kept
STATE_DIR = ".gpulaunch"  # never read by a plan, created by the first build


@dataclass(eq=False)  # one recording is one object: _active removes this one, not an equal one
class Recording:
    """What `recording` yields: the paths below the project that code opened or listed while
    it was active; `reads()` once the plan is made."""

    project: Path
    roots: tuple[str, ...]
    opened: Counter[str] = field(default_factory=Counter)
    lacking: dict[str, str] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)

    def rel(self, raw: object) -> str | None:
        """The project-relative path of an audited path; None outside the project (or an fd:
        its path was seen when it was opened)."""
        if isinstance(raw, int) or raw is None:
            return None
        path = os.path.abspath(os.fsdecode(raw))  # type: ignore[arg-type]
        for root in self.roots:
            if path == root or path.startswith(root + os.sep):
                return os.path.relpath(path, root).replace(os.sep, "/")
        return None

    def reads(self) -> PlanReads | None:
        """What the plan read, as it is now; None when a path cannot be vouched for."""
        full = sorted(rel for rel, count in self.opened.items() if count > 0)
        lacks = {rel: marker for rel, marker in self.lacking.items() if self.opened[rel] <= 0}
        return _snapshot(self.project, full, lacks, sorted(self.listed))


_active: list[Recording] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _active and event in _EVENTS:
        for recorder in _active:
            rel = recorder.rel(args[0] if args else None)
            if rel is not None and _EVENTS[event] == "file":
                recorder.opened[rel] += 1
            elif rel is not None:
                recorder.listed.add(rel)


@functools.cache
def _install_hook() -> None:
    sys.addaudithook(_hook)  # for the process's life: idle unless a recording is active


@dataclass(frozen=True)
class PlanReads:
    """Files by the sha256 of their bytes (None: missing), files by the marker they lacked,
    folders by their sorted names (None: not a folder)."""

    files: dict[str, str | None]
    lacks: dict[str, str]
    folders: dict[str, list[str] | None]

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "lacks": self.lacks, "folders": self.folders}

    @classmethod
    def from_json(cls, data: object) -> PlanReads | None:
        """None for anything but what to_json wrote."""
        if not isinstance(data, dict) or set(data) != {"files", "lacks", "folders"}:
            return None
        files, lacks, folders = data["files"], data["lacks"], data["folders"]
        if not (
            _values(files, lambda v: v is None or isinstance(v, str))
            and _values(lacks, lambda v: isinstance(v, str))
            and _values(folders, lambda v: v is None or _names(v))
        ):
            return None
        return cls(files, lacks, folders)

    def still_true(self, project: Path) -> bool:
        """Whether the project still holds what the plan read."""
        return _snapshot(project, self.files, self.lacks, self.folders) == self


def _values(value: object, ok: Callable[[object], bool]) -> bool:
    return isinstance(value, dict) and all(ok(v) for v in value.values())


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _snapshot(
    project: Path, files: Iterable[str], lacks: dict[str, str], folders: Iterable[str]
) -> PlanReads | None:
    """These paths as they are now; None when a path cannot be vouched for (`_read`) or a file
    no longer lacks its marker."""
    try:
        digests = {rel: _digest(project / rel) for rel in files}
        for rel, marker in lacks.items():
            data = _read(project / rel)
            if data is None or marker.encode() in data:
                return None
    except (ValueError, OSError):
        return None
    return PlanReads(digests, dict(lacks), {rel: _listing(project / rel) for rel in folders})


def _read(path: Path) -> bytes | None:
    """The file's bytes (a link followed, as the plan's readers follow it); None: missing.
    ValueError or OSError for a path the record cannot vouch for: a FIFO, a folder, a link
    loop, a file over READ_LIMIT or one that cannot be read."""
    try:
        return read_back(path, READ_LIMIT, follow=True)
    except FileNotFoundError:
        return None


def _digest(path: Path) -> str | None:
    data = _read(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


def _listing(path: Path) -> list[str] | None:
    """A folder's names but gpulaunch's own state (`.gpulaunch/`, which a build creates)."""
    try:
        return sorted(name for name in os.listdir(path) if name != STATE_DIR)
    except OSError:
        return None


@contextmanager
def recording(project: Path) -> Iterator[Recording]:
    """Record what the code run inside reads below `project` (this thread's and any other's
    opens: more reads only make the record stricter)."""
    _install_hook()
    roots = tuple(dict.fromkeys((os.path.abspath(project), os.path.realpath(project))))
    recorder = Recording(project, roots)
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)


def lacks(path: Path, marker: str) -> None:
    """The reader that just opened `path` learned only that `marker` is not in it."""
    for recorder in _active:
        rel = recorder.rel(path)
        if rel is not None:
            recorder.opened[rel] -= 1  # that open: what it learned is the marker's absence
            recorder.lacking[rel] = marker
