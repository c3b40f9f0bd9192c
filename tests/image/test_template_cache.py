"""The templates as jinja2 compiles them, kept by jinja2's own bytecode cache in the user cache
(render._template_cache): written by builds, never by a dry run or a plain render; used
instead of compiling and renders what compiling renders; a template edited after it was
cached, or an entry that is corrupt, planted as a link or made by another jinja2 or with
other options, is compiled again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES
from jinja2 import Environment

from gpulaunch.config import load_config
from gpulaunch.fsio import cache_dir
from gpulaunch.image import render
from gpulaunch.image.render import TEMPLATE_CACHE, plan_image, render_dockerfile

EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/gpulaunch.yaml"))


def _outputs(remember: bool = False) -> list[str]:
    texts = []
    for example in EXAMPLE_DIRS:
        cfg = load_config(example / "gpulaunch.yaml")
        for builder in ("buildkit", "classic"):
            plan = plan_image(cfg, example, builder)  # type: ignore[arg-type]
            texts.append(render_dockerfile(plan, remember))
    return texts


def _entries() -> list[Path]:
    folder = cache_dir() / TEMPLATE_CACHE
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the templates jinja2 compiles from their text."""
    seen: list[str] = []
    original = Environment.compile

    def counting(self: Environment, source: str, name: str | None = None, *a: Any) -> Any:
        seen.append(str(name))
        return original(self, source, name, *a)

    monkeypatch.setattr(Environment, "compile", counting)
    return seen


def test_a_plain_render_writes_nothing_and_a_build_s_render_is_reused(
    compiles: list[str],
) -> None:
    compiled = _outputs()
    assert _entries() == [] and "Dockerfile.j2" in compiles  # no remember: nothing kept
    assert _outputs(remember=True) == compiled
    assert len(_entries()) >= 2
    for entry in _entries():
        assert entry.stat().st_mode & 0o777 == 0o600
    compiles.clear()
    assert _outputs() == compiled  # the same Dockerfiles, and nothing compiled
    assert compiles == []


def _templates_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "templates"
    shutil.copytree(render.template_root(), root)
    monkeypatch.setattr(render, "template_root", lambda: root)
    return root


def test_a_template_edited_after_it_was_cached_is_compiled_from_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]
) -> None:
    root = _templates_copy(tmp_path, monkeypatch)
    _outputs(remember=True)
    user = root / "partials" / "user.j2"
    user.write_text("# edited after it was cached\n" + user.read_text())
    compiles.clear()
    after = _outputs()
    assert set(compiles) == {"partials/user.j2"}  # the others still come from the cache
    assert [t for t in after if "# edited after it was cached" not in t] == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "link", "other jinja2", "options"])
def test_a_corrupt_planted_or_foreign_entry_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, compiles: list[str]
) -> None:
    expected = _outputs(remember=True)
    entries = _entries()
    if damage == "garbage":
        for entry in entries:
            entry.write_bytes(b"\x00{not bytecode")
    elif damage == "truncated":
        for entry in entries:
            entry.write_bytes(entry.read_bytes()[:40])
    elif damage == "link":  # a link is never followed, even to a good entry
        for entry in entries:
            kept = tmp_path / entry.name
            entry.rename(kept)
            entry.symlink_to(kept)
    elif damage == "other jinja2":
        import jinja2

        monkeypatch.setattr(jinja2, "__version__", "0.0.1")
    else:  # options that change jinja2's code (trim_blocks)
        real = render.compile_options
        monkeypatch.setattr(render, "compile_options", lambda env: real(env) + "trim")
    compiles.clear()
    assert _outputs() == expected
    assert "Dockerfile.j2" in compiles


def test_options_name_the_jinja2_version_and_lexer_settings() -> None:
    import jinja2

    env = render._environment()
    options = render.compile_options(env)
    assert repr(jinja2.__version__) in options
    env.trim_blocks = True
    assert render.compile_options(env) != options


def test_a_dry_run_build_writes_no_template(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpulaunch.cli import app

    example = next(d for d in EXAMPLE_DIRS if d.name == "offline-cpu")
    project = tmp_path / "p"
    shutil.copytree(example, project, ignore=shutil.ignore_patterns("wheels", ".gpulaunch"))
    (project / "wheels").mkdir()
    cwd = os.getcwd()
    os.chdir(project)
    try:
        result = CliRunner().invoke(app, ["build", "--dry-run"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    assert _entries() == []


def test_the_default_dockerignore_is_the_template_text_without_jinja(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.image import build
    from gpulaunch.image.render import render_dockerignore

    assert build.templates_dir().resolve() == render.template_root().resolve()
    assert build.render_dockerignore() == render_dockerignore()  # the same rules either way
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from gpulaunch.image.build import render_dockerignore"
         "\nrender_dockerignore(); print(sorted(m for m in sys.modules if m.startswith("
         "('jinja2', 'gpulaunch.image.render', 'gpulaunch.image.tagcache', "
         "'gpulaunch.catalog'))))"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.stdout.strip() == "[]", proc.stderr
    root = _templates_copy(tmp_path, monkeypatch)
    monkeypatch.setattr(build, "templates_dir", lambda: root)
    ignore = root / "dockerignore.j2"
    ignore.write_text("{# a Jinja comment #}" + ignore.read_text())  # markup: Jinja renders it
    assert build.render_dockerignore() == render_dockerignore()
    assert "Jinja comment" not in build.render_dockerignore()
