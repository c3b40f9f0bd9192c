"""pyproject.toml with `tomllib`: PEP 621 (`[project]`), poetry (`[tool.poetry]` and its
sources), uv (`[[tool.uv.index]]`, `[tool.uv.sources]`) and PDM (`[[tool.pdm.source]]`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from gpulaunch.errors import ConfigError
from gpulaunch.project.model import TORCH_FAMILY, LocalInstall, Project, variant_of_url
from gpulaunch.project.requirements import (
    read_extra,
    read_requirement_texts,
    read_text,
    refuse_credential,
)

# uv's resolution settings: pip constraints when the pyproject is what the image installs
UV_PINS = ("override-dependencies", "constraint-dependencies")


def load_toml(path: Path, shown: str) -> tuple[str, dict[str, Any]]:
    """The file's text (which gives each dependency its line) and its tables."""
    text = read_text(path, shown)
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{shown}: cannot parse: {err}") from None


def toml_table(data: Any, *keys: str) -> dict[str, Any]:
    """data[k1][k2]... as a table; {} where a key is missing or its value is not a table (a
    `tool = 1` says nothing about poetry, uv or PDM)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def source_urls(tables: Any) -> dict[Any, str]:
    """name -> URL of each `[[source]]` table that has one (poetry, Pipfile)."""
    return {
        table.get("name"): table["url"]
        for table in (tables if isinstance(tables, list) else [])
        if isinstance(table, dict) and isinstance(table.get("url"), str)
    }


def poetry_spec(text: str) -> str | None:
    """A poetry version constraint as a PEP 440 specifier ("^1.2" -> ">=1.2,<2.0")."""
    text = text.strip()
    if text in ("", "*"):
        return ""
    if "||" in text:
        return None
    if text[0] in "^~" and not text.startswith("~="):
        base = text[1:].strip()
        nums = base.split(".")
        if not all(n.isdigit() for n in nums):
            return None
        ints = [int(n) for n in nums]
        if text[0] == "^":
            i = next((k for k, n in enumerate(ints) if n != 0), len(ints) - 1)
        else:
            i = 0 if len(ints) == 1 else 1
        upper = [*ints[:i], ints[i] + 1]
        return f">={base},<{'.'.join(map(str, upper))}"
    if text[0].isdigit():
        return f"=={text}"
    spec = ",".join(text.replace(",", " ").split())
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        return None
    return spec


def read_pyproject(root: Path, rel: str, project: Project, entry: bool) -> None:
    """Record what `rel` says; when it is the entry, its dependencies are installed."""
    source, data = load_toml(root / rel, rel)
    pep621 = toml_table(data, "project")
    poetry = toml_table(data, "tool", "poetry")
    uv = toml_table(data, "tool", "uv")
    kinds = [k for k, t in (("PEP 621", pep621), ("poetry", poetry), ("uv", uv)) if t]
    if toml_table(data, "tool", "pdm"):
        kinds.append("PDM")
    project.sources.append(f"{rel} ({', '.join(kinds) or 'no dependencies'})")
    if "build-system" in data and entry and "/" not in rel:  # the root's own pyproject
        project.install_project = True
    requires = pep621.get("requires-python")
    if isinstance(requires, str):
        project.set_python(requires, f"{rel} requires-python")
    deps = pep621.get("dependencies")
    texts = [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
    if entry:
        read_requirement_texts(texts, rel, project, source)
        optional = toml_table(pep621, "optional-dependencies")
        picked = read_extra(rel, optional, project, source, "optional group")
        groups = sorted(g for g in optional if g != picked)
        if groups:
            project.notes.append(
                f"{rel}: optional dependency groups not installed: {', '.join(groups)}"
            )
        _overrides(rel, uv, project)
    elif keys := [k for k in UV_PINS if uv.get(k)]:
        installed = project.entry or "no dependency file (image.requirements is not set)"
        project.notes.append(
            f"{rel} [tool.uv] {' and '.join(keys)} not applied: the image installs "
            f"{installed}, not {rel} (set image.requirements: {rel} to apply them)"
        )
    if poetry:
        _poetry(rel, poetry, project, entry, source)
    _indexes(rel, data, project)


def _poetry(rel: str, poetry: dict[str, Any], project: Project, entry: bool, source: str) -> None:
    sources = source_urls(poetry.get("source"))
    for name, url in sources.items():
        refuse_credential(url, f"{rel} [tool.poetry.source] {name}", project)
    texts: list[str] = []
    for name, value in toml_table(poetry, "dependencies").items():
        where = f"{rel} [tool.poetry.dependencies] {name}"
        table = value if isinstance(value, dict) else {"version": value}
        if name == "python":
            spec = poetry_spec(str(table.get("version", "")))
            if spec is None:
                project.not_understood.append(f"{where}: {value!r} is not understood")
            elif spec:
                project.set_python(spec, where)
            continue
        if "path" in table:
            project.add_local(LocalInstall(str(table["path"]), bool(table.get("develop")), where))
            continue
        if "git" in table:
            ref = f"@{table['rev']}" if "rev" in table else ""
            texts.append(f"{name} @ git+{table['git']}{ref}")
            continue
        if "url" in table:
            texts.append(f"{name} @ {table['url']}")
            continue
        spec = poetry_spec(str(table.get("version", "*")))
        if spec is None:
            project.not_understood.append(f"{where}: {value!r} is not understood")
            continue
        extras = table.get("extras")
        extra = f"[{','.join(extras)}]" if isinstance(extras, list) and extras else ""
        texts.append(f"{name}{extra}{spec}")
        index = sources.get(table.get("source"))
        if canonicalize_name(name) == "torch" and index:
            project.set_variant(variant_of_url(index), f"{where} (source {index})")
    if entry:
        read_requirement_texts(texts, f"{rel} [tool.poetry]", project, source)
    groups = sorted(toml_table(poetry, "group"))
    if groups:
        project.notes.append(f"{rel}: poetry groups not installed: {', '.join(groups)}")


def _indexes(rel: str, data: dict[str, Any], project: Project) -> None:
    """uv indexes and sources, PDM sources: the index torch comes from names its variant."""
    uv = toml_table(data, "tool", "uv")
    named: dict[str, str] = {}
    local_names: set[str] = set()  # installed from the tree, not from an index
    tables = [("tool.uv.index", i) for i in uv.get("index", [])]
    tables += [("tool.pdm.source", s) for s in toml_table(data, "tool", "pdm").get("source", [])]
    for table, index in tables:
        if isinstance(index, dict) and isinstance(index.get("url"), str):
            refuse_credential(index["url"], f"{rel} [[{table}]] {index.get('name', '')}", project)
            named[str(index.get("name", ""))] = index["url"]
    for name, value in toml_table(uv, "sources").items():
        where = f"{rel} [tool.uv.sources] {name}"
        if isinstance(value, dict) and ("path" in value or "workspace" in value):
            local_names.add(canonicalize_name(name))
        entries = value if isinstance(value, list) else [value]
        for source in entries:
            if not isinstance(source, dict) or not _on_linux(source.get("marker")):
                continue
            for key in ("url", "git"):
                if isinstance(source.get(key), str):
                    refuse_credential(source[key], where, project)
            if "path" in source:
                project.add_local(
                    LocalInstall(str(source["path"]), bool(source.get("editable")), where)
                )
            elif "index" in source and canonicalize_name(name) == "torch":
                url = named.get(str(source["index"]))
                if url is None:
                    project.not_understood.append(f"{where}: index {source['index']!r} not defined")
                    continue
                project.set_variant(variant_of_url(url), f"{where} ({url})")
            elif "workspace" in source:
                project.not_understood.append(f"{where}: uv workspace member not installed")
    for url in named.values():
        project.set_variant(variant_of_url(url), f"{rel} index {url}")
    if local_names:
        project.deps = [d for d in project.deps if d.name not in local_names]
        project.inline = [t for t in project.inline if name_of(t) not in local_names]


def _on_linux(marker: object) -> bool:
    """Does a uv source's marker hold inside a Linux x86_64 container?"""
    if not isinstance(marker, str):
        return True
    from packaging.markers import InvalidMarker, Marker

    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
    try:
        return Marker(marker).evaluate(env)
    except InvalidMarker:
        return True


def name_of(text: str) -> str:
    return canonicalize_name(Requirement(text).name)


def _overrides(rel: str, uv: dict[str, Any], project: Project) -> None:
    """uv's override- and constraint-dependencies, applied as pip constraints. pip has no
    overrides: a dependency that asks otherwise fails the build, naming both. What cannot be
    a pip constraint (extras, URLs) is refused; torch* stay gpulaunch's to pin."""
    for key in UV_PINS:
        texts = uv.get(key)
        for text in texts if isinstance(texts, list) else []:
            where = f"{rel} [tool.uv] {key}"
            try:
                req = Requirement(str(text))
            except InvalidRequirement:
                req = None
            if req is None or req.extras or req.url:
                reason = f"{where}: {text!r} cannot be applied as a pip constraint"
                project.not_understood.append(reason)
                project.invalid.append(reason)
            elif canonicalize_name(req.name) in TORCH_FAMILY:
                project.notes.append(f"{where}: {text!r} not applied: gpulaunch pins torch*")
            else:
                project.constraints.append((str(req), where))
    if project.constraints:
        shown = ", ".join(text for text, _ in project.constraints)
        project.notes.append(
            f"{rel}: uv overrides applied as pip constraints: {shown} (pip has no overrides: "
            "a dependency that requires otherwise fails the build)"
        )


def strict_dependencies(path: Path) -> list[str]:
    """[project].dependencies as render needs them: a list of single-line strings."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"image.requirements: cannot read {path.name}: {err}") from None
    table = data.get("project", {})
    deps = table.get("dependencies", []) if isinstance(table, dict) else None
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ConfigError(f"image.requirements: {path.name} [project].dependencies is not a list")
    from gpulaunch.textcheck import bad_char

    for dep in deps:
        if bad_char(dep) is not None:
            raise ConfigError(
                f"image.requirements: dependency {dep!r} contains a line break or control character"
            )
    return list(deps)
