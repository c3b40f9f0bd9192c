"""Find every dependency source in a project, pick the one that is installed (the entry),
and read it with everything it pulls in (includes, local packages and their own deps)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from gpulaunch.errors import ConfigError
from gpulaunch.planreads import lacks
from gpulaunch.project.layout import SKIP_DIRS, find_builds, find_import_paths
from gpulaunch.project.model import LocalInstall, Project
from gpulaunch.project.others import (
    read_conda,
    read_pipfile,
    read_script,
    read_setup_cfg,
    read_setup_py,
    script_block,
)
from gpulaunch.project.pyproject import UV_PINS, load_toml, name_of, read_pyproject, toml_table
from gpulaunch.project.requirements import is_requirements_name, read_requirements

Reader = Callable[[Path, str, Project, bool], None]
_PLAIN = re.compile(r"[\w.+/-]+")  # no control character or line separator in a shown path
_FOLDER_ENTRIES = (
    "base.txt",
    "main.txt",
    "common.txt",
    "prod.txt",
    "requirements.txt",
    "runtime.txt",
)
_CONDA = ("environment.yml", "environment.yaml", "conda.yml", "conda.yaml")


# the files that describe a package (a local install's own dependencies), in that order
_PACKAGE: dict[str, tuple[str, Reader]] = {
    "pyproject.toml": ("pyproject", read_pyproject),
    "setup.cfg": ("setup.cfg", read_setup_cfg),
    "setup.py": ("setup.py", read_setup_py),
}
_NAMED = {**_PACKAGE, "Pipfile": ("pipfile", read_pipfile)}


def _reader_for(rel: str) -> tuple[str, Reader] | None:
    name = Path(rel).name
    if name in _NAMED:
        return _NAMED[name]
    if name.endswith((".yml", ".yaml")):  # a conda environment file, whatever its name
        return "conda", read_conda
    if name.endswith(".py"):
        return "script", read_script
    return None


def _pyproject_kind(root: Path, rel: str) -> str | None:
    """ "installs" (dependencies or a build backend), "metadata" ([project] only), or None."""
    _, data = load_toml(root / rel, rel)
    project, poetry = toml_table(data, "project"), toml_table(data, "tool", "poetry")
    if project.get("dependencies") or poetry.get("dependencies") or "build-system" in data:
        return "installs"
    pins = any(toml_table(data, "tool", "uv").get(k) for k in UV_PINS)  # named when not applied
    return "metadata" if project or poetry or pins else None


def _is_setuptools_cfg(path: Path) -> bool:
    """A setup.cfg that holds only tool settings ([flake8], [tool:pytest]) says nothing about
    the package, and must not hide setup.py's install_requires."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    heads = {line.strip().lower() for line in text.splitlines() if line.startswith("[")}
    return bool(heads & {"[metadata]", "[options]"})


SCRIPT_MARK = "# /// script"


def candidates(root: Path) -> tuple[list[str], list[str]]:
    """Dependency files in the order one is chosen as the entry, and those of them that can
    be the entry (a pyproject with only metadata installs nothing)."""
    found: list[str] = []
    if (root / "requirements.txt").is_file():
        found.append("requirements.txt")
    kind = _pyproject_kind(root, "pyproject.toml") if (root / "pyproject.toml").is_file() else None
    if kind:
        found.append("pyproject.toml")
    # an environment file describes what the project runs in, setup.py only the package
    # (`conda env create` then `pip install -e .`): the environment's pins come first
    found += [n for n in _CONDA if (root / n).is_file()]
    if (root / "setup.cfg").is_file() and _is_setuptools_cfg(root / "setup.cfg"):
        found.append("setup.cfg")
    found += [n for n in ("setup.py", "Pipfile") if (root / n).is_file()]
    folder = root / "requirements"
    if folder.is_dir():
        found += [f"requirements/{n}" for n in _FOLDER_ENTRIES if (folder / n).is_file()][:1]
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if SCRIPT_MARK not in text:
            lacks(path, SCRIPT_MARK)  # all a plan learned of this file (a rebuild checks that)
        elif script_block(text) is not None:
            found.append(path.name)
            break
    return found, [rel for rel in found if rel != "pyproject.toml" or kind == "installs"]


def _unused(root: Path, entry: str | None, read: set[str]) -> list[str]:
    """Requirements files found but neither the entry nor included by it."""
    names = [p.name for p in root.glob("requirements*.txt")]
    names += [f"requirements/{p.name}" for p in (root / "requirements").glob("*.txt")]
    return sorted(n for n in names if n != entry and n not in read)


def nested_requirements(root: Path, project: Project) -> list[str]:
    """init's line for each requirements file in a sub-folder (an example's own, a
    component's) that the image does not install, with how to add it: a project that needs
    examples/foo/requirements.txt learns it before a long build, not at the first import."""
    read = {f.path for f in project.files}
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        where = Path(folder).relative_to(root)
        level = len(where.parts)  # three folders deep at most
        dirs[:] = sorted(d for d in dirs if level < 3 and d[0] != "." and d not in SKIP_DIRS)
        if level == 0 or where.parts == ("requirements",):
            continue  # the root's and requirements/'s own are weighed as candidates
        found += [
            (where / name).as_posix()
            for name in sorted(files)
            if is_requirements_name(name) and name.startswith("requirements")
        ]
    lines = []
    for rel in (r for r in found if r not in read and _PLAIN.fullmatch(r)):
        if project.entry_kind == "requirements":
            how = f"add `-r {rel}` to {project.entry}"
        elif project.entry is not None:
            how = f"add its packages to {project.entry}, or `-r {rel}` to a requirements file"
        else:
            how = f"set image.requirements: {rel}"
        lines.append(f"{rel}: pip requirements the image does not install; to install them, {how}")
    return lines


def read_project(
    root: Path,
    entry: str | None = None,
    gpu: bool | None = None,
    image_torch: frozenset[str] = frozenset(),
) -> Project:
    """The project model of `root`; `entry` (image.requirements) or the first candidate.
    `gpu` and `image_torch` are Project's fields of those names (model.py says what they do)."""
    project = Project(gpu=gpu, image_torch=image_torch)
    found, installs = candidates(root)
    chosen = entry if entry is not None else (installs[0] if installs else None)
    project.entry = chosen
    if chosen is not None:
        if not (root / chosen).is_file():
            raise ConfigError(f"image.requirements: {chosen!r} not found in the project")
        _read_entry(root, chosen, project)
    for rel in found:
        if rel != chosen and rel not in {f.path for f in project.files}:
            reader = _reader_for(rel)
            if reader is not None and reader[0] == "script":
                _script_too(root, rel, project)
            elif reader is not None:
                reader[1](root, rel, project, False)
            else:  # requirements.txt or requirements/*.txt
                project.sources.append(f"{rel} (pip requirements, not installed)")
    for rel in _unused(root, chosen, {f.path for f in project.files}):
        if rel not in found:
            project.sources.append(f"{rel} (pip requirements, not installed)")
    _local_dependencies(root, project)
    _locked_torch(root, project)
    find_builds(root, project)
    find_import_paths(root, project)
    if image_torch:  # whichever reader put them there (requirement files drop their lines)
        project.inline = [t for t in project.inline if name_of(t) not in image_torch]
    return project


def _locked_torch(root: Path, project: Project) -> None:
    """The torch a lock file (uv.lock, poetry.lock, pdm.lock) resolved binds init's choice:
    the other locked packages were resolved against it."""
    for name in ("uv.lock", "poetry.lock", "pdm.lock"):
        path = root / name
        if not path.is_file():
            continue
        try:
            text, data = load_toml(path, name)
        except ConfigError as err:
            project.not_understood.append(err.message)
            continue
        packages = data.get("package")
        versions = {
            str(package.get("version", "")).split("+", 1)[0]
            for package in (packages if isinstance(packages, list) else [])
            if isinstance(package, dict) and package.get("name") == "torch"
        } - {""}
        if len(versions) == 1:
            (version,) = versions
            line = next(
                (i for i, raw in enumerate(text.splitlines(), 1) if raw == 'name = "torch"'), 0
            )
            where = f"{name}:{line}" if line else name
            project.torch_constraints.append((f"=={version}", f"{where} (locks torch {version})"))
        elif versions:
            project.notes.append(
                f"{name}: locks several torch versions ({', '.join(sorted(versions))}); "
                "none is taken as the project's"
            )
        return


def _script_too(root: Path, rel: str, project: Project) -> None:
    """A script with a PEP 723 block is run as an entry point: its dependencies are installed
    beside the entry's (those the entry names already keep the entry's version)."""
    sub = Project()
    read_script(root, rel, sub, True)
    project.sources += sub.sources
    project.not_understood += sub.not_understood
    project.set_python(sub.python_spec or "", sub.python_where or "")
    seen = project.dist_names()
    added = [d for d in sub.deps if d.name not in seen]
    project.deps += added
    project.inline += [d.text for d in added]
    if added:
        project.notes.append(
            f"{rel}: its PEP 723 dependencies are installed too (an entry point): "
            + ", ".join(d.text for d in added)
        )


def _read_entry(root: Path, rel: str, project: Project) -> None:
    reader = _reader_for(rel)
    if reader is None:
        project.entry_kind = "requirements"
        read_requirements(root, rel, project)
        included = [f.path for f in project.files[1:]]
        suffix = f", includes {', '.join(included)}" if included else ""
        project.sources.insert(0, f"{rel} (pip requirements{suffix})")
        return
    project.entry_kind = reader[0]
    reader[1](root, rel, project, True)
    if project.install_project and not any(loc.path == "." for loc in project.locals):
        project.add_local(LocalInstall(".", True, rel))


def _local_dependencies(root: Path, project: Project) -> None:
    """A local package installed with --no-deps still needs its own dependencies: read them
    from its pyproject / setup.cfg / setup.py and install them with the third-party layer."""
    seen = {d.name for d in project.deps}
    for local in list(project.locals):
        folder = (root / local.path).resolve()
        if not folder.is_relative_to(root.resolve()):
            project.not_understood.append(f"{local.where}: {local.path!r} is outside the project")
            project.locals.remove(local)
            continue
        sub = Project()
        for name, (_, reader) in _PACKAGE.items():
            if (folder / name).is_file():
                rel = (folder / name).relative_to(root.resolve()).as_posix()
                reader(root, rel, sub, True)
                break
        else:
            project.not_understood.append(
                f"{local.where}: {local.path!r} has no pyproject.toml, setup.cfg or setup.py"
            )
            continue
        project.set_python(sub.python_spec or "", sub.python_where or "")
        project.set_variant(sub.variant, sub.variant_where or "")
        for dep in sub.deps:
            if dep.name not in seen:
                seen.add(dep.name)
                project.deps.append(dep)
                project.inline.append(dep.text)
        project.not_understood += sub.not_understood
