"""The BuildKit context folder (`context.mirror` into docker_api's `.gpulaunch/build-context`),
kept from build to build: it holds exactly the entries sent, whatever an earlier build or a job
left in it, never follows a link planted there, and leaves the project's big files alone (no
link made or removed again, so their ctime, which the tag cache and the content digests key
on, stays)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulaunch.engine.context import KNOWN_MIN_BYTES, mirror, parse_rules, place, scan
from gpulaunch.engine.docker_api import _context_folder

BIG = b"W" * KNOWN_MIN_BYTES


def _project(root: Path) -> Path:
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "torch.whl").write_bytes(BIG)
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "train.py").write_text("print('train')\n")
    return root


def _sync(project: Path) -> Path:
    """One build's worth: the stable folder, synced to the project's entries."""
    state = project / ".gpulaunch"
    state.mkdir(exist_ok=True)
    entries = place(scan(project, parse_rules(".gpulaunch\n")), ["wheels"])
    with _context_folder(state) as folder:
        mirror(project, entries, folder)
    return folder


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


def test_a_second_build_keeps_the_big_files_links_and_their_ctime(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    wheel = project / "wheels" / "torch.whl"
    folder = _sync(project)
    assert folder == project / ".gpulaunch" / "build-context" and folder.is_dir()
    linked = folder / "inputs" / "wheels" / "torch.whl"
    assert os.path.samefile(linked, wheel)  # a hard link, no copy of the big file
    before = os.lstat(wheel).st_ctime_ns
    first = _tree(folder)
    (project / "train.py").write_text("print('edited')\n")
    _sync(project)
    assert os.lstat(wheel).st_ctime_ns == before
    assert os.path.samefile(linked, wheel)
    assert _tree(folder) == {**first, "workspace/train.py": b"print('edited')\n"}
    # a small file is a copy: the project's file is left as it was (no link made)
    assert os.lstat(project / "train.py").st_nlink == 1


def test_what_the_project_no_longer_has_goes_and_a_replaced_file_is_sent_anew(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path / "p")
    _sync(project)
    (project / "train.py").unlink()
    (project / "pkg" / "__init__.py").unlink()
    (project / "pkg").rmdir()
    (project / "pkg").write_text("now a file\n")
    wheel = project / "wheels" / "torch.whl"
    wheel.unlink()
    wheel.write_bytes(b"N" * KNOWN_MIN_BYTES)  # a new inode, same size
    folder = _sync(project)
    tree = _tree(folder)
    assert "workspace/train.py" not in tree and "workspace/pkg/__init__.py" not in tree
    assert tree["workspace/pkg"] == b"now a file\n"
    assert tree["inputs/wheels/torch.whl"] == b"N" * KNOWN_MIN_BYTES


@pytest.mark.parametrize("planted", ["code folder link", "file link", "extra file", "folder link"])
def test_what_a_job_plants_in_the_folder_is_removed_never_followed(
    tmp_path: Path, planted: str
) -> None:
    project = _project(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.py").write_text("outside\n")
    folder = _sync(project)
    expected = _tree(folder)
    if planted == "code folder link":
        os.rename(folder / "workspace", tmp_path / "moved")
        (folder / "workspace").symlink_to(outside)
    elif planted == "file link":
        (folder / "workspace" / "train.py").unlink()
        (folder / "workspace" / "train.py").symlink_to(outside / "train.py")
    elif planted == "extra file":
        (folder / "workspace" / "evil.py").write_text("import os\n")
    else:  # the whole folder replaced by a link to a folder outside
        os.rename(folder, tmp_path / "moved")
        folder.symlink_to(outside)
    _sync(project)
    assert not folder.is_symlink()
    assert _tree(folder) == expected
    assert sorted(p.name for p in outside.iterdir()) == ["train.py"]
    assert (outside / "train.py").read_text() == "outside\n"


def test_a_concurrent_build_gets_a_temp_folder_removed_after(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    state = project / ".gpulaunch"
    state.mkdir()
    with _context_folder(state) as held, _context_folder(state) as other:
        assert held == state / "build-context" and other != held
        assert other.parent == state
    assert not other.exists() and held.is_dir()
