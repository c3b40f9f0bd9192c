"""The tag cache: a run with nothing changed gets the tag without rendering or hashing, and
every change that changes the tag (a context file, the config, --set, the catalog, the
.dockerignore, the builder) misses it. Each test compares against prepare_build, the source
of truth, so a cache that returned a stale tag would fail here."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.config import load_config
from gpulaunch.image import build as build_mod
from gpulaunch.image import tagcache
from gpulaunch.image.build import BuildOptions, prepare_build, run_build

CONFIG = """version: 1
name: tc
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
  requirements: requirements.txt
"""


class Engine:
    """The seam as run_build uses it: every tag it was asked about exists."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def builder_kind(self) -> str:
        return "buildkit"

    def builder_key(self) -> tuple[object, ...]:
        return ("fake-cli",)

    def image_exists(self, ref: str) -> bool:
        self.asked.append(ref)
        return True

    def tag(self, source: str, target: str) -> None:
        pass

    def image_id(self, ref: str) -> str:
        return "sha256:same"

    def build(self, req: object, on_line: object, builder: object) -> None:
        pass

    def api(self) -> object:  # the image's size after a build: this engine does not say
        from gpulaunch.errors import EngineError

        raise EngineError("no engine API here")

    def remove_if_dangling(self, image_id: str) -> None:
        pass


def _age(project: Path) -> None:
    """Move every file's times into the past, out of the racy window (as real edits are)."""
    old = time.time() - 60
    for folder, _dirs, files in os.walk(project):
        for name in files:
            os.utime(os.path.join(folder, name), (old, old))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    # ctime cannot be moved back: a short racy window, slept out below, keeps tests quick
    monkeypatch.setattr(tagcache, "RACY_S", 0.05)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "gpulaunch.yaml").write_text(CONFIG)
    (root / "requirements.txt").write_text("numpy\n")
    (root / "train.py").write_text("print(1)\n")
    _age(root)
    time.sleep(0.1)
    return root


def _run(project: Path, sets: tuple[str, ...] = (), **opts: Any) -> tuple[str, bool]:
    """(tag, whether the cache answered) for one run_build."""
    cfg = load_config(project / "gpulaunch.yaml", sets)
    calls = []
    real = build_mod.prepare_build

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    build_mod.prepare_build = counting  # type: ignore[assignment]
    try:
        outcome = run_build(cfg, project, Engine(), BuildOptions(**opts))  # type: ignore[arg-type]
    finally:
        build_mod.prepare_build = real  # type: ignore[assignment]
    truth = prepare_build(cfg, project, "buildkit", BuildOptions(**opts)).tag
    assert outcome.tag == truth, "the cache answered a tag prepare_build would not"
    return outcome.tag, not calls


def test_nothing_changed_answers_from_the_cache_with_the_same_tag_and_versions(
    project: Path,
) -> None:
    first, cached = _run(project)
    assert not cached and (project / tagcache.CACHE_REL).is_file()
    again, cached = _run(project)
    assert cached and again == first
    cfg = load_config(project / "gpulaunch.yaml")
    hit = tagcache.lookup(
        project,
        tagcache.key(cfg, project, Engine(), BuildOptions()),
        "tc",  # type: ignore[arg-type]
    )
    truth = prepare_build(cfg, project, "buildkit", BuildOptions())
    assert hit is not None and hit.plan.builder == "buildkit"
    # what run records and smoke report, field by field
    assert vars(hit.plan.resolved) == dataclasses.asdict(truth.plan.resolved)
    assert hit.dockerfile == truth.dockerfile and hit.plan.required == truth.plan.required


@pytest.mark.parametrize(
    "change",
    [
        lambda p: (p / "train.py").write_text("print(2)\n"),  # same size, new content
        lambda p: (p / "requirements.txt").write_text("numpy\nscipy\n"),
        lambda p: (p / "new.py").write_text(""),
        lambda p: (p / "train.py").unlink(),
        lambda p: (p / ".dockerignore").write_text("*.md\n"),
        lambda p: (p / "gpulaunch.yaml").write_text(CONFIG.replace("2.4.1", "2.5.1")),
        lambda p: os.chmod(p / "train.py", 0o755),
    ],
    ids=["edit", "requirements", "added", "removed", "dockerignore", "config", "mode"],
)
def test_a_change_misses_the_cache(project: Path, change: Any) -> None:
    _run(project)
    assert _run(project)[1]
    change(project)
    time.sleep(0.1)
    assert not _run(project)[1]  # and the tag is prepare_build's, checked inside


def _outputs(p: Path) -> None:
    for rel in ("wandb/run-1/config.yaml", "logs/nccl/nccl.h.1.log", "lightning_logs/v0/h.yaml"):
        (p / rel).parent.mkdir(parents=True, exist_ok=True)
        (p / rel).write_text("written by a job\n")


def test_what_a_job_writes_still_answers_from_the_cache(project: Path) -> None:
    (project / ".dockerignore").write_text(".git\n")  # the project's own: no output rules
    _age(project)
    time.sleep(0.1)
    first, _ = _run(project)
    _outputs(project)
    time.sleep(0.1)
    again, cached = _run(project)
    assert cached and again == first


def test_an_output_folder_that_becomes_code_misses_the_cache(project: Path) -> None:
    (project / ".dockerignore").write_text(".git\n")  # the built-in output rules decide
    _outputs(project)
    _age(project)
    time.sleep(0.1)
    _run(project)
    assert _run(project)[1]
    (project / "wandb" / "__init__.py").write_text("")  # now a package the image needs
    time.sleep(0.1)
    _tag, cached = _run(project)  # and the tag is prepare_build's, checked inside
    assert not cached


def test_an_edit_inside_the_racy_window_is_never_cached(project: Path) -> None:
    (project / "train.py").write_text("print(3)\n")  # just now
    _run(project)
    assert not (project / tagcache.CACHE_REL).exists()
    time.sleep(0.1)
    _run(project)
    assert _run(project)[1]


def test_set_overrides_and_a_catalog_overlay_change_the_key(project: Path, tmp_path: Path) -> None:
    _run(project)
    assert _run(project)[1]
    assert not _run(project, ("image.python=3.12",))[1]
    overlay = tmp_path / "config" / "gpulaunch" / "catalog.d"
    overlay.mkdir(parents=True)
    (overlay / "extra.yaml").write_text("version: 1\n")
    cfg = load_config(project / "gpulaunch.yaml")
    before = tagcache.key(cfg, project, Engine(), BuildOptions())  # type: ignore[arg-type]
    (overlay / "extra.yaml").write_text("version: 1\n# changed\n")
    after = tagcache.key(cfg, project, Engine(), BuildOptions())  # type: ignore[arg-type]
    assert before != after


def test_rebuild_and_no_cache_never_use_it(project: Path) -> None:
    _run(project)
    assert not _run(project, rebuild=True)[1]
    shutil.rmtree(project / ".gpulaunch" / "logs")  # the log name has a 1 s resolution
    assert not _run(project, no_cache=True)[1]


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"key": 1}',
        None,  # a valid entry naming another project's image
    ],
)
def test_a_corrupt_or_tampered_cache_is_a_miss(project: Path, content: str | None) -> None:
    first, _ = _run(project)
    path = project / tagcache.CACHE_REL
    if content is None:
        data = json.loads(path.read_text())
        data["tag"] = "other:gl-000000000000"
        content = json.dumps(data)
    path.write_text(content)
    tag, cached = _run(project)  # the real tag, recomputed
    assert not cached and tag == first


def test_a_planted_link_is_not_read(project: Path, tmp_path: Path) -> None:
    _run(project)
    path = project / tagcache.CACHE_REL
    data = json.loads(path.read_text())
    data["tag"] = "tc:gl-000000000000"
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps(data))
    path.unlink()
    path.symlink_to(elsewhere)
    tag, cached = _run(project)
    assert not cached and tag != "tc:gl-000000000000"
    assert json.loads(elsewhere.read_text())["tag"] == "tc:gl-000000000000"  # not written


def test_dry_run_writes_no_cache(project: Path) -> None:
    from typer.testing import CliRunner

    from gpulaunch.cli import app

    cwd = os.getcwd()
    os.chdir(project)
    try:
        result = CliRunner().invoke(app, ["run", "train.py", "--dry-run"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    assert not (project / ".gpulaunch").exists()


def test_the_templates_folder_is_renders() -> None:
    from gpulaunch.image.render import template_root

    assert build_mod.templates_dir().resolve() == template_root().resolve()


def test_the_default_rules_are_part_of_the_key(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a .dockerignore the key holds the default rules as rendered for this project
    (whatever they come to depend on), not a marker."""
    cfg = load_config(project / "gpulaunch.yaml")
    before = tagcache.key(cfg, project, Engine(), BuildOptions())  # type: ignore[arg-type]
    monkeypatch.setattr(build_mod, "render_dockerignore", lambda: "*.md\n")
    after = tagcache.key(cfg, project, Engine(), BuildOptions())  # type: ignore[arg-type]
    assert before != after
    (project / ".dockerignore").write_text("*.md\n")
    assert tagcache.key(cfg, project, Engine(), BuildOptions()) == after  # type: ignore[arg-type]


# -- a code edit reuses the plan: what the plan read still holds --------------------------------
def _planned(project: Path) -> tuple[str, bool, bool]:
    """(tag, whether the cache answered, whether the plan was made again) for one run_build;
    the tag is checked against a fresh prepare_build inside `_run`."""
    from gpulaunch.image import render

    made: list[int] = []
    real = render.plan_image

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return real(*args, **kwargs)

    render.plan_image = counting  # type: ignore[assignment]
    try:
        tag, cached = _run(project)
    finally:
        render.plan_image = real  # type: ignore[assignment]
    return tag, cached, len(made) > 1  # the last one is _run's own prepare_build


def test_a_code_edit_reuses_the_plan_and_hashes_the_context_again(project: Path) -> None:
    first, _ = _run(project)
    (project / "train.py").write_text("print(2)  # a code edit\n")
    tag, cached, replanned = _planned(project)
    assert (tag != first, cached, replanned) == (True, False, False)
    data = json.loads((project / tagcache.CACHE_REL).read_text())
    assert data["reads"]["lacks"] == {"train.py": "# /// script"}  # all the plan learned of it
    assert "requirements.txt" in data["reads"]["files"]


@pytest.mark.parametrize(
    "change",
    [
        lambda p: (p / "requirements.txt").write_text("numpy\nscipy\n"),  # a file it read
        lambda p: (p / "train.py").write_text(  # the marker it lacked
            '# /// script\n# dependencies = ["rich"]\n# ///\nprint(1)\n'
        ),
        lambda p: (p / "new.py").write_text(""),  # its folder changed
        lambda p: os.replace(p / "train.py", p / "main.py"),
    ],
    ids=["read-file", "pep723-block", "added", "renamed"],
)
def test_an_edit_that_may_change_the_plan_makes_it_again(project: Path, change: Any) -> None:
    _run(project)
    change(project)
    _tag, cached, replanned = _planned(project)  # the tag: prepare_build's
    assert (cached, replanned) == (False, True)


def test_a_plan_with_build_secrets_is_never_kept_for_reuse(project: Path) -> None:
    text = CONFIG + "  pip:\n    index_url: https://user:tok3n@pypi.internal/simple\n"
    (project / "gpulaunch.yaml").write_text(text)
    _age(project)
    time.sleep(0.1)
    _run(project)
    data = json.loads((project / tagcache.CACHE_REL).read_text())
    assert "reads" not in data and "tok3n" not in json.dumps(data)


def test_a_reused_plan_is_kept_for_the_next_code_edit(project: Path) -> None:
    _run(project)
    for text in ("print(2)\n", "print(3)  # and again\n"):
        (project / "train.py").write_text(text)
        time.sleep(0.1)  # out of the racy window: this build's cache is stored
        _tag, cached, replanned = _planned(project)
        assert (cached, replanned) == (False, False)
    assert "reads" in json.loads((project / tagcache.CACHE_REL).read_text())
