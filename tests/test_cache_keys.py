"""Every cache keyed by all its inputs: for each input of a cache's key that no other test
perturbs, one row here changes that input alone and asserts a miss (the answer is computed
again). The tag cache's own table is tests/image/test_tagcache_key.py, the config cache's
tests/test_configcache.py, the CLI probe's tests/engine/test_cli_probe_cache.py; the rows here
fill what they leave out."""

from __future__ import annotations

import json
import os
import shutil
import types
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.fsio import cache_dir

CONFIG = """version: 1
name: key
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
"""
OVERLAY = 'overlay_version: "1"\nresearch_date: "2024-01-01"\n'


def _replace_same_size_and_mtime(path: Path) -> None:
    """`path` replaced by rename with other bytes of the same size and the same mtime (cp -p,
    rsync -t, an archive, a package manager that keeps the wheel's times): only the inode and
    the ctime tell it apart."""
    old = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-1:] = b"X" if data[-1:] != b"X" else b"Y"
    new = path.with_name(path.name + ".new")
    new.write_bytes(bytes(data))
    os.chmod(new, old.st_mode & 0o7777)
    os.utime(new, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(new, path)
    now = os.stat(path)
    assert (now.st_size, now.st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    assert now.st_ino != old.st_ino


def _overlay_dir() -> Path:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "gpulaunch.yaml").write_text(CONFIG)
    (root / "train.py").write_text("print(1)\n")
    return root


# -- the tag cache (image/tagcache.key): rows test_tagcache_key.py lacks -----------------------


class _Engine:
    def builder_key(self) -> tuple[object, ...]:
        return ("fake-cli",)


def _tag_key(project: Path) -> str:
    from gpulaunch.config import load_config
    from gpulaunch.image import tagcache
    from gpulaunch.image.build import BuildOptions

    cfg = load_config(project / "gpulaunch.yaml")
    return tagcache.key(cfg, project, _Engine(), BuildOptions())  # type: ignore[arg-type]


def _package_copy(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
    from gpulaunch.image import tagcache

    copy = tmp / "pkg-copy"
    shutil.copytree(tagcache._PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    m.setattr(tagcache, "_PACKAGE", copy)
    return lambda: _replace_same_size_and_mtime(copy / "errors.py")


def _templates_copy(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
    from gpulaunch.image import build as build_mod

    copy = tmp / "templates-copy"
    shutil.copytree(build_mod.templates_dir(), copy)
    m.setattr(build_mod, "templates_dir", lambda: copy)
    return lambda: _replace_same_size_and_mtime(copy / "Dockerfile.j2")


def _catalog_path_overlay(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
    def add() -> None:
        (tmp / "extra.yaml").write_text(OVERLAY)
        m.setenv("GPULAUNCH_CATALOG_PATH", str(tmp / "extra.yaml"))

    return add


def _overlay_touched_back(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
    """An overlay edited in place, then its mtime set back (`touch -r`): same size, same
    mtime, same inode; only the ctime moved."""
    path = _overlay_dir() / "extra.yaml"
    path.write_text(OVERLAY + "# AAAA\n")
    old = os.stat(path)

    def edit() -> None:
        path.write_text(OVERLAY + "# BBBB\n")
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
        assert os.stat(path).st_ino == old.st_ino

    return edit


TAG_ROWS: dict[str, Any] = {
    "gpulaunch's code replaced, same size and mtime": _package_copy,
    "a template replaced, same size and mtime": _templates_copy,
    "an overlay named by GPULAUNCH_CATALOG_PATH": _catalog_path_overlay,
    "an overlay edited, mtime set back (touch -r)": _overlay_touched_back,
}


def test_tag_cache_a_plan_on_a_deadsnakes_series_ends_with_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's Python 3.11 on ubuntu22.04 comes from deadsnakes, which serves that series
    until a date: the day after, the remembered tag is no answer (the key holds no date, so
    the entry itself says until when it holds) and planning again refuses the Python."""
    import time

    from gpulaunch.catalog import python_install
    from gpulaunch.config import load_config
    from gpulaunch.errors import CatalogError
    from gpulaunch.image import tagcache
    from gpulaunch.image.build import BuildOptions, prepare_build

    monkeypatch.setattr(tagcache, "RACY_S", 0.0)
    old = time.time() - 60
    for path in project.iterdir():
        os.utime(path, (old, old))
    cfg = load_config(project / "gpulaunch.yaml")
    key = tagcache.key(cfg, project, _Engine(), BuildOptions())  # type: ignore[arg-type]
    prepared = prepare_build(cfg, project, "buildkit", BuildOptions())
    assert prepared.plan.resolved.python_source == "deadsnakes"
    tagcache.store(project, key, prepared, time.time())
    hit = tagcache.lookup(project, key, cfg.name)
    assert hit is not None and hit.tag == prepared.tag

    class Later(date):
        @classmethod
        def today(cls) -> Later:
            return cls(2100, 1, 1)

    monkeypatch.setattr(tagcache, "date", Later)
    monkeypatch.setattr(python_install, "date", Later)
    assert tagcache.lookup(project, key, cfg.name) is None
    with pytest.raises(CatalogError):
        prepare_build(cfg, project, "buildkit", BuildOptions())


@pytest.mark.parametrize("change", list(TAG_ROWS.values()), ids=list(TAG_ROWS))
def test_tag_cache_each_input_misses(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    after = change(tmp_path, monkeypatch)
    base = _tag_key(project)
    assert _tag_key(project) == base  # stable while nothing changes
    after()
    assert _tag_key(project) != base


# -- the merged catalog (catalog.data._load_merged, by overlay.fingerprint) --------------------


def _catalog_rows() -> dict[str, Callable[[Path, pytest.MonkeyPatch], Callable[[], None]]]:
    def added(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
        return lambda: (_overlay_dir() / "late.yaml").write_text(OVERLAY)

    def removed(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
        path = _overlay_dir() / "gone.yaml"
        path.write_text(OVERLAY)
        return path.unlink

    def swapped(tmp: Path, m: pytest.MonkeyPatch) -> Callable[[], None]:
        path = _overlay_dir() / "extra.yaml"
        path.write_text(OVERLAY + "# AAAA\n")
        return lambda: _replace_same_size_and_mtime(path)

    return {
        "an overlay added": added,
        "an overlay removed": removed,
        "an overlay replaced, same size and mtime": swapped,
        "an overlay edited, mtime set back (touch -r)": _overlay_touched_back,
        "GPULAUNCH_CATALOG_PATH": _catalog_path_overlay,
    }


CATALOG_ROWS = _catalog_rows()


@pytest.mark.parametrize("change", list(CATALOG_ROWS), ids=list(CATALOG_ROWS))
def test_merged_catalog_each_input_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from gpulaunch.catalog.data import load_catalog

    after = CATALOG_ROWS[change](tmp_path, monkeypatch)
    before = load_catalog()
    assert load_catalog() is before  # a hit while nothing changes
    after()
    assert load_catalog() is not before


# -- the config cache (configcache.cache_key): the libraries' identity -------------------------

LIBS = ("pydantic", "pydantic_core", "yaml")


@pytest.mark.parametrize("lib", LIBS)
def test_config_cache_a_library_replaced_same_size_and_mtime_misses(
    lib: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from gpulaunch import configcache

    assert set(configcache._LIBS) == set(LIBS)
    real = importlib.util.find_spec
    files = {name: tmp_path / "libs" / f"{name}.py" for name in LIBS}
    for file in files.values():
        file.parent.mkdir(exist_ok=True)
        file.write_text("# stand-in\n")

    def find_spec(name: str, *args: Any) -> Any:
        return types.SimpleNamespace(origin=str(files[name])) if name in files else real(name)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    path = tmp_path / "gpulaunch.yaml"
    path.write_text("name: keyed\n")
    base = configcache.cache_key(path.read_bytes(), path, ())
    assert configcache.cache_key(path.read_bytes(), path, ()) == base
    _replace_same_size_and_mtime(files[lib])
    assert configcache.cache_key(path.read_bytes(), path, ()) != base


# -- the docker CLI probe (engine/cliprobe.probe_key, as cli_key) ------------------------------


def _fake_docker(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    docker = folder / "docker"
    docker.write_text('#!/bin/sh\necho "Docker version 20.10.24, build x"\n')
    docker.chmod(0o755)
    return docker


Env = dict[str, str]
ProbeChange = Callable[[Env, Path, pytest.MonkeyPatch], Env]


def _probe_rows() -> dict[str, ProbeChange]:
    def explicit_cli(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        other = _fake_docker(tmp / "elsewhere")
        return {**env, "GPULAUNCH_DOCKER_CLI": str(other)}

    def another_docker_on_path(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        first = _fake_docker(tmp / "first")
        return {**env, "PATH": f"{first.parent}{os.pathsep}{env['PATH']}"}

    def home(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        other = tmp / "other-home"
        (other / ".docker").mkdir(parents=True)
        (other / ".docker" / "config.json").write_text("{}")
        return {**env, "HOME": str(other)}

    def docker_config(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        folder = tmp / "docker-config"
        folder.mkdir()
        return {**env, "DOCKER_CONFIG": str(folder)}

    def buildx_variable(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        return {**env, "BUILDX_BUILDER": "remote"}

    def version(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        m.setattr("gpulaunch.__version__", "0.0.0-other")
        return env

    def probe_format(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        from gpulaunch.engine import cliprobe

        m.setattr(cliprobe, "PROBE_FORMAT", cliprobe.PROBE_FORMAT + 1)
        return env

    def system_plugin(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        (tmp / "sys-plugins" / "docker-buildx").write_text("#!/bin/sh\n")
        return env

    def binary_swapped(env: Env, tmp: Path, m: pytest.MonkeyPatch) -> Env:
        _replace_same_size_and_mtime(tmp / "bin" / "docker")
        return env

    return {
        "GPULAUNCH_DOCKER_CLI": explicit_cli,
        "another docker earlier on PATH": another_docker_on_path,
        "HOME (another ~/.docker)": home,
        "DOCKER_CONFIG": docker_config,
        "a BUILDX_* variable": buildx_variable,
        "gpulaunch's version": version,
        "PROBE_FORMAT": probe_format,
        "a docker-buildx in a system plugin folder": system_plugin,
        "the docker binary replaced, same size and mtime": binary_swapped,
    }


PROBE_ROWS = _probe_rows()


@pytest.mark.parametrize("change", list(PROBE_ROWS), ids=list(PROBE_ROWS))
def test_cli_probe_each_input_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from gpulaunch.engine import cliprobe

    docker = _fake_docker(tmp_path / "bin")
    (tmp_path / "home").mkdir()
    (tmp_path / "sys-plugins").mkdir()
    monkeypatch.setattr(cliprobe, "PLUGIN_DIRS", (str(tmp_path / "sys-plugins"),))
    env = {"PATH": str(docker.parent), "HOME": str(tmp_path / "home")}
    base = cliprobe.cli_key(env)
    assert cliprobe.cli_key(dict(env)) == base
    env = PROBE_ROWS[change](env, tmp_path, monkeypatch)
    assert cliprobe.cli_key(env) != base


# -- what an engine refused, which engine an address had (engine/daycache) ---------------------


@pytest.mark.parametrize(
    "other",
    ["B|20.10|6.1", "A|24.0|6.1", "A|20.10|6.8"],
    ids=["the engine's address", "its version", "its kernel"],
)
def test_refused_ulimits_each_part_of_the_engine_identity_misses(other: str) -> None:
    from gpulaunch.engine import refusals

    cache_dir().mkdir(parents=True)
    refusals.remember_refused_ulimit("A|20.10|6.1", "memlock", now=1000)
    assert refusals.refused_ulimits("A|20.10|6.1", now=1001) == {"memlock"}
    assert refusals.refused_ulimits(other, now=1001) == set()


@pytest.mark.parametrize(
    ("address", "now"),
    [
        ("unix:///run/other.sock", 1001.0),
        ("unix:///run/podman.sock", 1001.0 + 86400),
        ("unix:///run/podman.sock", 999.0),
    ],
    ids=["another address", "a day later", "written in the future"],
)
def test_engine_kind_each_input_misses(address: str, now: float) -> None:
    from gpulaunch.engine.podman import EngineKind, known_kind, remember_kind

    cache_dir().mkdir(parents=True)
    remember_kind("unix:///run/podman.sock", EngineKind("podman", "4.3.1", True), now=1000)
    assert known_kind("unix:///run/podman.sock", now=1001) is not None
    assert known_kind(address, now=now) is None


# -- the secret scan's clean files (image/build.scan_context, engine/context keys) -------------

SECRET = 'password = "Tr0ub4dor&3horse"\n'


def _scan_counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import detect_secrets.core.scan

    scanned: list[str] = []
    real = detect_secrets.core.scan.scan_file

    def counting(path: str) -> Any:
        scanned.append(os.path.basename(path))
        return real(path)

    monkeypatch.setattr(detect_secrets.core.scan, "scan_file", counting)
    return scanned


@pytest.mark.parametrize(
    "change", ["the file's name (same bytes)", "detect-secrets' version", "the plugins used"]
)
def test_secret_scan_each_input_misses(
    project: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from gpulaunch.engine import context
    from gpulaunch.image.build import context_entries, scan_context

    cache_dir().parent.mkdir(parents=True, exist_ok=True)
    scanned = _scan_counting(monkeypatch)
    scan_context(project, tuple(context_entries(project, "")))
    assert "train.py" in scanned
    scanned.clear()
    scan_context(project, tuple(context_entries(project, "")))
    assert scanned == []  # all known clean: detect-secrets is not asked
    if change == "the file's name (same bytes)":
        (project / "train.py").rename(project / "main.py")
        expected = "main.py"
    elif change == "detect-secrets' version":
        monkeypatch.setattr(context, "_scanner_version", lambda: "0.0.0-other")
        expected = "train.py"
    else:
        monkeypatch.setattr(context, "_NOISY_PLUGINS", context._NOISY_PLUGINS[:1])
        expected = "train.py"
    scan_context(project, tuple(context_entries(project, "")))
    assert expected in scanned


def test_secret_scan_a_baseline_that_no_longer_allows_the_finding_misses(project: Path) -> None:
    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import default_settings

    from gpulaunch.engine.context import refuse_detected_secrets
    from gpulaunch.errors import ConfigError
    from gpulaunch.image.build import context_entries, scan_context

    cache_dir().parent.mkdir(parents=True, exist_ok=True)
    (project / "settings.py").write_text(SECRET)
    with default_settings():
        found = list(scan_file(str(project / "settings.py")))
    assert found, "detect-secrets finds the keyword secret"

    def baseline(is_secret: bool | None) -> None:
        items = [
            {"type": s.type, "hashed_secret": s.secret_hash, "line_number": s.line_number,
             "is_secret": is_secret}
            for s in found
        ]  # fmt: skip
        (project / ".secrets.baseline").write_text(json.dumps({"results": {"settings.py": items}}))

    baseline(None)  # a false positive: allowed
    scan_context(project, tuple(context_entries(project, "")))  # clean: remembered
    baseline(True)  # audited as a real secret: no longer allowed
    with pytest.raises(ConfigError, match=r"settings\.py:1: holds a secret"):
        refuse_detected_secrets(project, context_entries(project, ""))  # the answer, cold
    with pytest.raises(ConfigError, match=r"settings\.py:1: holds a secret"):
        scan_context(project, tuple(context_entries(project, "")))


# -- jinja2's compiled templates (image/render._template_cache) --------------------------------


def _render(project: Path, remember: bool = False) -> str:
    from gpulaunch.config import load_config
    from gpulaunch.image.render import plan_image, render_dockerfile

    plan = plan_image(load_config(project / "gpulaunch.yaml"), project, "buildkit")
    return render_dockerfile(plan, remember)


@pytest.mark.parametrize("change", ["the template's path (same text)", "Python (jinja2's magic)"])
def test_template_cache_each_input_misses(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from jinja2 import Environment

    from gpulaunch.image import render

    root = tmp_path / "templates-a"
    shutil.copytree(render.template_root(), root)
    monkeypatch.setattr(render, "template_root", lambda: root)
    text = _render(project, remember=True)
    seen: list[str] = []
    original = Environment.compile

    def counting(self: Environment, source: str, name: str | None = None, *a: Any) -> Any:
        seen.append(str(name))
        return original(self, source, name, *a)

    monkeypatch.setattr(Environment, "compile", counting)
    assert _render(project) == text and seen == []  # a hit while nothing changes
    if change == "the template's path (same text)":
        other = tmp_path / "templates-b"
        shutil.copytree(root, other)
        monkeypatch.setattr(render, "template_root", lambda: other)
    else:
        import jinja2.bccache

        monkeypatch.setattr(jinja2.bccache, "bc_magic", jinja2.bccache.bc_magic + b"other")
    assert _render(project) == text
    assert "Dockerfile.j2" in seen


# -- the validated copy of the built-in profiles (launch/presets.validated_inputs) -------------


@pytest.mark.parametrize("change", ["a new built-in profile", "a profile renamed (same text)"])
def test_validated_copy_each_profile_name_is_in_its_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from gpulaunch.configview import VALIDATION_CODE
    from gpulaunch.launch import presets

    source = Path(presets.__file__).resolve().parents[1]
    package = tmp_path / "gpulaunch"
    shutil.copytree(source / "data", package / "data")
    for name in VALIDATION_CODE:
        shutil.copy(source / name, package / name)
    monkeypatch.setattr(presets, "resources", types.SimpleNamespace(files=lambda name: package))
    before = presets.validated_inputs()
    profiles = package / "data" / "profiles"
    first = sorted(profiles.glob("*.yaml"))[0]
    if change == "a new built-in profile":
        (profiles / "zz-new.yaml").write_text("description: new\n")
    else:
        first.rename(profiles / ("zz-" + first.name))
    assert presets.validated_inputs() != before
