"""planreads: what code read below a project, from Python's audit events, checked by content."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from gpulaunch import planreads
from gpulaunch.planreads import PlanReads, lacks, recording


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "requirements.txt").write_text("numpy\n")
    (root / "train.py").write_text("print(1)\n")
    (root / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "outside.txt").write_text("not the project's\n")
    return root


def _read_like_a_plan(project: Path) -> PlanReads:
    with recording(project) as rec:
        (project / "requirements.txt").read_text()
        with open(project / "pkg" / "m.py", "rb") as fh:  # builtins.open, a Path
            os.read(fh.fileno(), 10)  # reads through the fd: no second path
        sorted(p.name for p in project.glob("*.py"))  # os.scandir
        (project / "train.py").read_text()
        lacks(project / "train.py", "# /// script")
        (project.parent / "outside.txt").read_text()
        (project / "missing.cfg").is_file()  # a stat: no audit event (the tag cache's part)
        with contextlib.suppress(FileNotFoundError):
            (project / "setup.cfg").read_text()  # opened and failed: recorded as missing
    return rec.reads()


def test_every_open_and_listing_below_the_project_is_recorded(project: Path) -> None:
    reads = _read_like_a_plan(project)
    assert sorted(reads.files) == ["pkg/m.py", "requirements.txt", "setup.cfg"]
    assert reads.files["setup.cfg"] is None
    assert reads.lacks == {"train.py": "# /// script"}
    assert reads.folders == {".": ["pkg", "requirements.txt", "train.py"]}
    assert PlanReads.from_json(reads.to_json()) == reads
    assert reads.still_true(project)


def test_a_file_read_twice_is_only_downgraded_once(project: Path) -> None:
    with recording(project) as rec:
        (project / "train.py").read_text()  # a reader that uses the whole file
        (project / "train.py").read_text()
        lacks(project / "train.py", "# /// script")  # and one that looked for a marker
    assert "train.py" in rec.reads().files and rec.reads().lacks == {}


@pytest.mark.parametrize(
    ("change", "holds"),
    [
        (lambda p: (p / "train.py").write_text("print(2)  # code only\n"), True),
        (lambda p: (p / "pkg" / "other.py").write_text(""), True),  # a folder not listed
        (lambda p: (p.parent / "outside.txt").write_text("changed\n"), True),
        (lambda p: (p / ".gpulaunch").mkdir(), True),  # gpulaunch's state, made by a build
        (lambda p: (p / "requirements.txt").write_text("numpy\nscipy\n"), False),
        (lambda p: (p / "pkg" / "m.py").write_text("x = 2\n"), False),
        (lambda p: (p / "train.py").write_text("# /// script\n# ///\n"), False),
        (lambda p: (p / "train.py").unlink(), False),
        (lambda p: (p / "setup.cfg").write_text("[metadata]\n"), False),
        (lambda p: (p / "notes.md").write_text(""), False),  # the listed root changed
    ],
    ids=["code", "unlisted-folder", "outside", "state", "read", "read-2", "marker", "gone",
         "appeared", "listing"],
)  # fmt: skip
def test_the_record_holds_until_something_the_plan_read_changes(
    project: Path, change: object, holds: bool
) -> None:
    reads = _read_like_a_plan(project)
    change(project)  # type: ignore[operator]
    assert reads.still_true(project) is holds


@pytest.mark.parametrize(
    "data",
    [None, [], {"files": {}}, {"files": {"a": 1}, "lacks": {}, "folders": {}},
     {"files": {}, "lacks": {"a": None}, "folders": {}},
     {"files": {}, "lacks": {}, "folders": {"a": "b"}}],
)  # fmt: skip
def test_anything_but_a_written_record_is_none(data: object) -> None:
    assert PlanReads.from_json(data) is None


def test_no_recording_records_nothing(project: Path) -> None:
    with recording(project) as rec:
        pass
    (project / "requirements.txt").read_text()  # after the recording: not seen
    assert rec.reads() == PlanReads({}, {}, {})


def test_a_fifo_where_the_plan_found_nothing_is_no_match_and_no_hang(project: Path) -> None:
    reads = _read_like_a_plan(project)  # setup.cfg was missing
    os.mkfifo(project / "setup.cfg")
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(reads.still_true(project)), daemon=True)
    worker.start()
    worker.join(10)
    assert done == [False]


def test_a_file_it_cannot_vouch_for_leaves_no_record(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planreads, "READ_LIMIT", 4)  # requirements.txt holds 6 bytes
    with recording(project) as rec:
        (project / "requirements.txt").read_text()
    assert rec.reads() is None
    with recording(project) as rec:
        (project / "train.py").read_text()  # 9 bytes, read before the limit shrank below
    monkeypatch.setattr(planreads, "READ_LIMIT", 16 << 20)
    reads = rec.reads()
    assert reads is not None and reads.still_true(project)
    monkeypatch.setattr(planreads, "READ_LIMIT", 4)
    assert not reads.still_true(project)  # now over the limit: not vouched for


def test_nested_recordings_of_one_project_each_record_and_end(project: Path) -> None:
    """Two recordings of the same project at once are two recorders: the inner one ending
    removes itself, not the outer one (which goes on recording), and both end cleanly."""
    with recording(project) as outer:
        with recording(project) as inner:
            (project / "train.py").read_text()
        (project / "requirements.txt").read_text()
    assert sorted(inner.reads().files) == ["train.py"]
    assert sorted(outer.reads().files) == ["requirements.txt", "train.py"]
