"""What the project tree itself holds, beyond its dependency files: how its own packages
build (a setup.py importing torch cannot build in pip's isolated environment; C++/CUDA
extensions need a compiler and headers), where its packages import from (a `src/` layout
that nothing installs), and which folders its code imports (so no ignore rule drops them).

Files are read with `ast`, never run.
"""

from __future__ import annotations

import ast
import posixpath
import shlex
from collections.abc import Iterator
from pathlib import Path

from gpulaunch.project.model import TORCH_FAMILY, Build, Project

# setuptools with its own bdist_wheel (70.1): an editable build without isolation then
# needs no `wheel` package in the image
SETUPTOOLS = "setuptools>=70.1"
_CPP = ("CppExtension", "Extension", "Pybind11Extension", "cythonize")
_CUDA = ("CUDAExtension",)
# folders that hold none of the project's own source (discover skips any dot-folder too)
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".gpulaunch", "site-packages"}
_MAX_FILES = 3000  # Python files scanned for imports; big trees are sampled, not walked whole
_MAX_BYTES = 1_000_000


def _parse(path: Path) -> ast.Module | None:
    """The module in `path`; None when it is not a regular file, too big, or not Python."""
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        return ast.parse(path.read_bytes().decode("utf-8-sig", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None


def _setup_py(path: Path, shown: str) -> tuple[str, str, str]:
    """(torch, compiles, cuda) reasons from a setup.py, each "" when absent."""
    tree = _parse(path)
    torch = compiles = cuda = ""
    for node in ast.walk(tree) if tree is not None else ():
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            imported = [a.name for a in node.names]
            if not cuda and any(n in _CUDA for n in imported):
                cuda = f"{shown}:{node.lineno} imports CUDAExtension"
        line = getattr(node, "lineno", 0)
        hit = next((n for n in names if n == "torch" or n.startswith("torch.")), None)
        if hit and not torch:
            torch = f"{shown}:{line} imports {hit}"
        word = getattr(node, "id", getattr(node, "attr", ""))  # a Name's or an Attribute's
        if word in _CUDA and not cuda:
            cuda = f"{shown}:{line} CUDAExtension"
        if word in _CPP and not compiles:
            compiles = f"{shown}:{line} {word}"
        if isinstance(node, ast.keyword) and node.arg == "ext_modules" and not compiles:
            compiles = f"{shown}:{getattr(node.value, 'lineno', 0)} ext_modules"
    return torch, compiles or cuda, cuda


def _build_requires(path: Path, shown: str) -> tuple[list[str], str]:
    """pyproject [build-system].requires (texts other than torch*, setuptools at least 70.1)
    and why torch is among them; nothing without a pyproject or its build-system table."""
    from packaging.requirements import InvalidRequirement

    from gpulaunch.project.pyproject import load_toml, toml_table
    from gpulaunch.project.requirements import parse_requirement

    texts: list[str] = []
    torch = ""
    if not path.is_file():
        return texts, torch
    requires = toml_table(load_toml(path, shown)[1], "build-system").get("requires")
    for text in requires if isinstance(requires, list) else []:
        try:
            dep = parse_requirement(str(text))
        except InvalidRequirement:
            continue
        if dep.name in TORCH_FAMILY:
            torch = torch or f"{shown} [build-system] requires {text}"
        elif dep.name == "setuptools":
            texts.append(f"setuptools{dep.specifier},>=70.1" if dep.specifier else SETUPTOOLS)
        else:
            texts.append(str(text))
    return texts, torch


def find_builds(root: Path, project: Project) -> None:
    """A Build for each local package that needs torch, a compiler or nvcc to build."""
    root = root.resolve()
    for local in project.locals:
        folder = root / local.path
        shown = posixpath.normpath(posixpath.join(local.path, "setup.py"))
        torch, compiles, cuda = _setup_py(folder / "setup.py", shown)
        shown = posixpath.normpath(posixpath.join(local.path, "pyproject.toml"))
        requires, why = _build_requires(folder / "pyproject.toml", shown)
        torch = torch or why
        if not (torch or compiles):
            continue
        build = Build(local.path, torch, compiles, cuda)
        project.builds.append(build)
        if torch:
            from gpulaunch.project.pyproject import name_of

            requires = requires or [SETUPTOOLS]
            known = project.dist_names()
            project.inline += [text for text in requires if name_of(text) not in known]
            project.notes.append(
                f"{build.shown}: its build imports torch ({torch}): installed with "
                "--no-build-isolation after torch, with its build requirements "
                f"({', '.join(requires)}) in the requirements layer"
            )


def _packages_in(folder: Path, namespace: bool = False) -> list[str]:
    """The packages in `folder`; `namespace`: a folder of modules without `__init__.py`
    (PEP 420) counts too, as in `src/` where nothing else lives."""
    if not folder.is_dir():
        return []
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and (
            (p / "__init__.py").is_file()
            or (namespace and p.name.isidentifier() and _holds_modules(p))
        )
    )


def _holds_modules(folder: Path) -> bool:
    return any(True for pattern in ("*.py", "*/*.py") for _ in folder.glob(pattern))


def _setup_package_dir(root: Path) -> str | None:
    """`package_dir={"": "lib"}` in the root setup.py -> "lib"."""
    tree = _parse(root / "setup.py")
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.keyword) and node.arg == "package_dir":
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if isinstance(value, dict) and isinstance(value.get(""), str):
                return posixpath.normpath(str(value[""]))
    return None


def find_import_paths(root: Path, project: Project) -> None:
    """The project's own package in a folder below the root (`src/`, setup.py's
    `package_dir`) that nothing installs: that folder goes on PYTHONPATH."""
    if any(local.path == "." for local in project.locals):
        return
    root = root.resolve()
    mapped = _setup_package_dir(root)
    for folder, why in ((mapped, "setup.py package_dir"), ("src", "a src/ layout")):
        if folder is None or folder == "." or folder.startswith(".."):
            continue
        packages = _packages_in(root / folder, namespace=True)
        if packages:
            shown = ", ".join(packages[:3]) + (", ..." if len(packages) > 3 else "")
            project.import_paths.append((folder, f"{why}: {shown}"))
            return
    packaged = [n for n in ("setup.py", "pyproject.toml") if (root / n).is_file()]
    if packaged and _packages_in(root):
        project.notes.append(
            f"the project itself is not installed ({packaged[0]} is not what "
            f"{project.entry or 'the image'} installs): its packages "
            f"({', '.join(_packages_in(root)[:3])}) import from /workspace on PYTHONPATH"
        )


def _python_files(root: Path) -> Iterator[Path]:
    count = 0
    stack = [root]
    while stack and count < _MAX_FILES:
        folder = stack.pop()
        try:
            children = sorted(folder.iterdir())
        except OSError:
            continue
        for child in children:
            if child.is_symlink():
                continue
            if child.is_dir() and child.name not in SKIP_DIRS:
                stack.append(child)
            elif child.suffix == ".py" and child.is_file():
                count += 1
                yield child


def imported_names(root: Path) -> set[str]:
    """Top-level module names the project's Python files import (`import data.loader` ->
    "data"), relative imports excluded."""
    names: set[str] = set()
    for path in _python_files(root):
        tree = _parse(path)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def code_folders(root: Path, names: list[str]) -> dict[str, str]:
    """Of the top-level folders `names`, those that are Python code: a package
    (`__init__.py`) or a folder of modules the project imports. Name -> why."""
    kept: dict[str, str] = {}
    imported: set[str] | None = None
    for name in names:
        folder = root / name
        if not folder.is_dir() or folder.is_symlink():
            continue
        if (folder / "__init__.py").is_file():
            kept[name] = f"a Python package ({name}/__init__.py)"
            continue
        if not _holds_modules(folder):
            continue  # no modules: the project's imports need not be read at all
        if imported is None:
            imported = imported_names(root)
        if name in imported:
            kept[name] = f"Python modules the project imports (import {name})"
    return kept


# What jobs write into the project, and who writes it: outside the build context (and the
# image tag) by default, so a run that writes a checkpoint or a log does not make the next
# run rebuild. launch.checkpoint_dir is added by the build itself (it knows the config).
OUTPUT_FOLDERS = {
    "logs/nccl": "gpulaunch's NCCL debug logs (--nccl debug)",
    "lightning_logs": "PyTorch Lightning's default log and checkpoint folder",
    "outputs": "Hydra's run folder, and a common Trainer output_dir",
    "multirun": "Hydra's multirun folder",
    "runs": "TensorBoard's default log folder (the HF Trainer's logging_dir)",
    "trainer_output": "the HF Trainer's default output_dir",
    "wandb": "Weights & Biases' local run folder",
    "mlruns": "MLflow's default tracking folder",
}


def output_folders(root: Path) -> tuple[list[str], dict[str, str]]:
    """(the OUTPUT_FOLDERS left out of this project's build context, those kept because they
    are its Python code: name -> why). A missing folder is left out too: the first run
    creates it, and the tag must not change then."""
    kept = code_folders(root, [n for n in OUTPUT_FOLDERS if (root / n).is_dir()])
    return [n for n in OUTPUT_FOLDERS if n not in kept], kept


def output_notes(root: Path) -> list[str]:
    """init's words on the output folders present: which are left out of the build context
    and why, and which are kept as code."""
    left_out, kept = output_folders(root)
    present = [n for n in left_out if (root / n).exists()]
    notes = [
        f"{n}/ is left out of the build context and the image tag: {OUTPUT_FOLDERS[n]}, "
        "written by jobs (a '!' rule in .dockerignore brings it back)"
        for n in present
    ]
    return notes + [f"{n}/ stays in the build context: {why}" for n, why in kept.items()]


def keep_code(ignore_text: str, root: Path) -> tuple[str, dict[str, str], list[str]]:
    """Default ignore rules with the top-level folders that are the project's Python code
    commented out (ignored, an import of them would fail in the image): the text, the folders
    kept (name -> why), and the plain-name rules that match something present here."""
    names = [
        line
        for line in ignore_text.splitlines()
        if line and line[0] not in "#!" and "/" not in line and "*" not in line
    ]
    kept = code_folders(root, names)
    lines = [
        f"# {line}  (kept: {kept[line]})" if line in kept else line
        for line in ignore_text.splitlines()
    ]
    present = [n for n in names if n not in kept and (root / n).exists()]
    return "\n".join(lines) + "\n", kept, present


def build_env(archs: tuple[str, ...] | None, cuda: bool) -> str:
    """For a CUDA extension built with no GPU in sight (`archs`: the image torch build's, None
    for a CPU image): TORCH_CUDA_ARCH_LIST (else torch's cpp_extension guesses) and FORCE_CUDA
    (setup.py files that check torch.cuda.is_available() would skip the extension)."""
    if not cuda or archs is None:
        return ""
    arch = f"TORCH_CUDA_ARCH_LIST={shlex.quote(';'.join(archs))} " if archs else ""
    return f"{arch}FORCE_CUDA=1 "


def constraint_lines(project: Project) -> list[str]:
    """The shell step that adds uv's overrides to the image's pip constraints, if any."""
    if not project.constraints:
        return []
    lines = " ".join(shlex.quote(text) for text, _ in project.constraints)
    return [f"printf '%s\\n' {lines} >> /opt/gpulaunch/constraints.txt"]
