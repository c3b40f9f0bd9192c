"""The Dockerfile templates' compiled copy (templates/compiled.json, dev/compile-templates):
current with the templates and jinja2, used instead of compiling, the same Dockerfiles as
compiling; a template edited after the copy was made, or a copy that is corrupt or made by
another jinja2 or with other options, is compiled as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, REPO
from jinja2 import Environment

from gpulaunch.config import load_config
from gpulaunch.image import render
from gpulaunch.image.render import COMPILED, plan_image, render_dockerfile, render_dockerignore

EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/gpulaunch.yaml"))


def _outputs() -> list[str]:
    texts = [render_dockerignore()]
    for example in EXAMPLE_DIRS:
        cfg = load_config(example / "gpulaunch.yaml")
        for builder in ("buildkit", "classic"):
            texts.append(render_dockerfile(plan_image(cfg, example, builder)))  # type: ignore[arg-type]
    return texts


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


@pytest.fixture
def slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "_compiled_copies", lambda options: {})


def test_the_copy_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "dev" / "compile-templates"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"run dev/compile-templates: {proc.stdout}{proc.stderr}"


def test_the_copy_is_used_and_renders_what_compiling_renders(
    compiles: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _outputs()
    assert compiles == []  # nothing compiled: every template came from the copy
    monkeypatch.setattr(render, "_compiled_copies", lambda options: {})
    assert _outputs() == fast
    assert "Dockerfile.j2" in compiles and "partials/os.j2" in compiles


def _templates_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "templates"
    shutil.copytree(render.template_root(), root)
    monkeypatch.setattr(render, "template_root", lambda: root)
    return root


def test_a_template_edited_after_the_copy_is_compiled_from_its_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str]
) -> None:
    before = _outputs()
    root = _templates_copy(tmp_path, monkeypatch)
    user = root / "partials" / "user.j2"
    user.write_text("# edited after the copy was made\n" + user.read_text())
    after = _outputs()
    assert set(compiles) == {"partials/user.j2"}  # the others still come from the copy
    assert [t for t in after[1:] if "# edited after the copy was made" not in t] == []
    assert after[0] == before[0]


@pytest.mark.parametrize("damage", ["garbage", "other jinja2", "wrong shape", "wrong code"])
def test_a_corrupt_or_foreign_copy_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, compiles: list[str]
) -> None:
    with monkeypatch.context() as m:
        m.setattr(render, "_compiled_copies", lambda options: {})
        expected = _outputs()
    compiles.clear()
    root = _templates_copy(tmp_path, monkeypatch)
    doc = json.loads((root / COMPILED).read_text())
    if damage == "garbage":
        (root / COMPILED).write_bytes(b"\x00{not json")
    elif damage == "other jinja2":
        doc["options"] = doc["options"].replace("'3.", "'0.", 1)
        (root / COMPILED).write_text(json.dumps(doc))
    elif damage == "wrong shape":
        (root / COMPILED).write_text(json.dumps({"options": doc["options"], "templates": [1]}))
    else:  # the right options, a copy whose hash names another text
        for copy in doc["templates"].values():
            copy["sha256"] = "0" * 64
            copy["code"] = "raise SystemExit('a stale copy ran')"
        (root / COMPILED).write_text(json.dumps(doc))
    assert _outputs() == expected
    assert "Dockerfile.j2" in compiles


def test_options_name_the_jinja2_version_and_lexer_settings() -> None:
    env = render._environment()
    import jinja2

    options = render.compile_options(env)
    assert repr(jinja2.__version__) in options
    env.trim_blocks = True
    assert render.compile_options(env) != options


def test_the_default_dockerignore_is_the_template_text_without_jinja(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.image import build, tagcache

    assert build.templates_dir().resolve() == render.template_root().resolve()
    assert build.templates_dir().resolve() == tagcache.templates().resolve()
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
