"""Every input of the tag cache's key, perturbed one at a time, misses (issue 30.4): a second
user of the same checkout (another uid or gid: the GL_UID/GL_GID build arguments) never gets
the first user's image, and no other input the tag depends on is left out. The same for the
content digests' stat key (engine.context.stat_key)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.config import load_config
from gpulaunch.engine.context import stat_key
from gpulaunch.image import build as build_mod
from gpulaunch.image import tagcache
from gpulaunch.image.build import BuildOptions, prepare_build, run_build

CONFIG = """version: 1
name: key
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
"""


class Engine:
    def __init__(self, builder_key: tuple[object, ...] = ("fake-cli",)) -> None:
        self.key = builder_key
        self.exists: set[str] = set()

    def builder_kind(self) -> str:
        return "buildkit"

    def builder_key(self) -> tuple[object, ...]:
        return self.key

    def image_exists(self, ref: str) -> bool:
        return ref in self.exists

    def tag(self, source: str, target: str) -> None:
        pass

    def image_id(self, ref: str) -> None:
        return None

    def build(self, req: Any, on_line: Any, builder: Any) -> None:
        self.exists.add(req.tags[0])

    def api(self) -> object:
        from gpulaunch.errors import EngineError

        raise EngineError("no engine API here")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "gpulaunch.yaml").write_text(CONFIG)
    (root / "train.py").write_text("print(1)\n")
    return root


Perturb = Callable[[Path, pytest.MonkeyPatch, dict[str, Any]], None]


def _package_copy(p: Path, m: pytest.MonkeyPatch, args: dict[str, Any]) -> None:
    copy = p.parent / "pkg-copy"
    shutil.copytree(tagcache._PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    m.setattr(tagcache, "_PACKAGE", copy)
    args["before"] = True  # the key below is taken from the copy before it is changed
    args["after"] = lambda: (copy / "errors.py").write_text((copy / "errors.py").read_text() + "#")


def _templates_copy(p: Path, m: pytest.MonkeyPatch, args: dict[str, Any]) -> None:
    copy = p.parent / "templates-copy"
    shutil.copytree(build_mod.templates_dir(), copy)
    m.setattr(build_mod, "templates_dir", lambda: copy)
    args["before"] = True
    args["after"] = lambda: (copy / "Dockerfile.j2").write_text(
        (copy / "Dockerfile.j2").read_text() + "# x\n"
    )


def _overlay(p: Path, m: pytest.MonkeyPatch, args: dict[str, Any]) -> None:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True)
    (folder / "extra.yaml").write_text("version: 1\n")


def _overlay_swapped(p: Path, m: pytest.MonkeyPatch, args: dict[str, Any]) -> None:
    """An overlay replaced by rename with the same size and mtime (cp -p, rsync -t, tar)."""
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True)
    (folder / "extra.yaml").write_text("version: 1\n# AAAA\n")

    def swap() -> None:
        old = os.stat(folder / "extra.yaml")
        (folder / "new.tmp").write_text("version: 1\n# BBBB\n")
        os.utime(folder / "new.tmp", ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(folder / "new.tmp", folder / "extra.yaml")

    args.update(before=True, after=swap)


def _moved(p: Path, m: pytest.MonkeyPatch, args: dict[str, Any]) -> None:
    other = p.parent / "other-checkout"
    shutil.copytree(p, other)
    args["project"] = other


# (what changes, how): each must change the key
PERTURBATIONS: dict[str, Perturb] = {
    "uid (a second user)": lambda p, m, a: m.setattr(os, "getuid", lambda: 4242),
    "gid": lambda p, m, a: m.setattr(os, "getgid", lambda: 4242),
    "config": lambda p, m, a: a.update(sets=("image.python=3.12",)),
    "--config file": lambda p, m, a: a.update(config_file=p / "gpulaunch.yaml"),
    "--builder": lambda p, m, a: a.update(builder="classic"),
    "docker CLI": lambda p, m, a: a.update(engine=Engine(("other-cli",))),
    ".dockerignore": lambda p, m, a: (p / ".dockerignore").write_text("*.md\n"),
    "GPULAUNCH_* environment": lambda p, m, a: m.setenv("GPULAUNCH_BUILDER", "buildkit"),
    "gpulaunch version": lambda p, m, a: m.setattr(tagcache, "__version__", "0.0.0-other"),
    "gpulaunch's code": _package_copy,
    "templates": _templates_copy,
    "catalog overlay": _overlay,
    "catalog overlay replaced, same size and mtime": _overlay_swapped,
    "project folder": _moved,
}


def _key(project: Path, args: dict[str, Any]) -> str:
    cfg = load_config(project / "gpulaunch.yaml", args.get("sets", ()))
    opts = BuildOptions(builder=args.get("builder"), config_file=args.get("config_file"))
    engine = args.get("engine", Engine())
    return tagcache.key(cfg, project, engine, opts)  # type: ignore[arg-type]


@pytest.mark.parametrize("change", list(PERTURBATIONS), ids=list(PERTURBATIONS))
def test_each_input_of_the_key_misses(
    project: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    args: dict[str, Any] = {}
    base = _key(project, args)
    assert _key(project, args) == base  # stable while nothing changes
    PERTURBATIONS[change](project, monkeypatch, args)
    if args.pop("before", False):  # a copy made: its own key first, then the change
        base = _key(project, args)
        args.pop("after")()
    assert _key(args.pop("project", project), args) != base


def test_a_second_user_of_the_checkout_builds_their_own_image(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tagcache, "RACY_S", 0.0)
    old = os.path.getmtime(project / "train.py") - 60
    for path in project.iterdir():
        os.utime(path, (old, old))
    engine = Engine()
    cfg = load_config(project / "gpulaunch.yaml")
    first = run_build(cfg, project, engine, BuildOptions())  # type: ignore[arg-type]
    assert run_build(cfg, project, engine, BuildOptions()).cached  # type: ignore[arg-type]
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    second = run_build(cfg, project, engine, BuildOptions())  # type: ignore[arg-type]
    assert not second.cached and second.tag != first.tag
    truth = prepare_build(cfg, project, "buildkit", BuildOptions())
    assert second.tag == truth.tag and truth.request.build_args["GL_UID"] == "4242"


STAT_FIELDS = ["st_dev", "st_ino", "st_size", "st_mtime_ns", "st_ctime_ns"]


@pytest.mark.parametrize("field", ["name", *STAT_FIELDS])
def test_each_input_of_the_content_digest_key_misses(tmp_path: Path, field: str) -> None:
    path = tmp_path / "w.whl"
    path.write_bytes(b"x" * 10)
    st = os.stat(path)
    base = stat_key("w.whl", st)
    assert stat_key("w.whl", os.stat(path)) == base
    if field == "name":
        assert stat_key("v.whl", st) != base
        return
    values = {f: getattr(st, f) for f in STAT_FIELDS}
    values[field] += 1
    fake = type("St", (), values)()
    assert stat_key("w.whl", fake) != base  # type: ignore[arg-type]
