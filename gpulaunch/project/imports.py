"""What a project's entry points import, and which of those imports nothing installs.

A new user finds a module no dependency file declares (numpy in a setup.py project,
tiktoken, mpi4py) only when the job starts, after a long build. This module finds it first:
it walks an entry point's imports through the project's own modules and packages (the
entry's folder, the root, src/ and the folders the image puts on PYTHONPATH; regular and
namespace packages; relative imports) with `ast` only, never executing anything, and names
each third-party module no declared distribution provides (the packaged import-name table,
gpulaunch/data/import_names.yaml, for names like `yaml` -> pyyaml).

The project is untrusted input: every file is read below the root through directory file
descriptors opened with O_NOFOLLOW (a link anywhere below the root is never followed, a
FIFO never opened blocking), at most MAX_FILE_BYTES a file and MAX_FILES files a walk.
Imports under `if TYPE_CHECKING:`, in a `try:` whose handler catches ImportError, or under
a test of sys.version_info / sys.platform are optional: never reported missing.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gpulaunch.errors import ConfigError
from gpulaunch.fsio import open_dir, read_back
from gpulaunch.project.model import TORCH_FAMILY, Project

DATA = "import_names.yaml"
MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 2000
ADD_MISSING = "gpulaunch init --add-missing"
_NAME = re.compile(r"[\w.+-]+")
_GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_UNREAD = {"link": "a symbolic link; not followed", "other": "not a regular file; not read"}
_SCRIPT_SKIP = frozenset({"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "manage.py"})


@dataclass(frozen=True)
class Import:
    """One module an entry point imports (as written, made absolute), and where."""

    module: str  # "sklearn.model_selection"
    where: str  # "train.py:3"
    optional: bool = False  # guarded: a failure is the project's choice, not an error


@dataclass(frozen=True)
class Missing:
    """A third-party import no dependency provides, with the distribution to add."""

    imp: Import
    suggest: str  # a distribution name ("pyyaml")

    @property
    def torch_family(self) -> bool:
        return self.suggest in TORCH_FAMILY

    @property
    def finding(self) -> str:
        return f"{self.imp.where}: import {self.imp.module} — no dependency provides it"

    @property
    def fix(self) -> str:
        if self.torch_family:
            return f"add {self.suggest} to image.torch_extras"
        return f"add '{self.suggest}' ({ADD_MISSING})"

    def line(self) -> str:
        return f"{self.finding}; {self.fix}"


@dataclass
class Walk:
    """The third-party imports of the entry points (first place each module is imported)."""

    entries: list[str] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # files not read, and why

    def required(self) -> list[Import]:
        return [i for i in self.imports if not i.optional]


class _Tree:
    """Reads below `root` without following a link anywhere below it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def kind(self, parts: tuple[str, ...]) -> str | None:
        """ "file", "dir", "link", "other" or None (absent, or below a link)."""
        if not parts:
            return "dir"
        fd = open_dir(self.root, parts[:-1])
        if fd is None:
            return None
        try:
            mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        except OSError:
            return None
        finally:
            os.close(fd)
        if stat.S_ISLNK(mode):
            return "link"
        if stat.S_ISDIR(mode):
            return "dir"
        return "file" if stat.S_ISREG(mode) else "other"

    def names(self, parts: tuple[str, ...]) -> list[str]:
        fd = open_dir(self.root, parts)
        if fd is None:
            return []
        try:
            return sorted(os.listdir(fd))
        except OSError:
            return []
        finally:
            os.close(fd)

    def read(self, parts: tuple[str, ...]) -> bytes:
        """The file's bytes; ValueError saying why it is not read."""
        fd = open_dir(self.root, parts[:-1])
        if fd is None:
            raise ValueError("is below a link or cannot be opened")
        try:
            return read_back(Path(parts[-1]), MAX_FILE_BYTES, dir_fd=fd)
        except FileNotFoundError:
            raise ValueError("is gone; not read") from None
        except ValueError as err:
            raise ValueError(f"{err}; not read") from None
        finally:
            os.close(fd)


@dataclass(frozen=True)
class _Module:
    """A project file being walked: where it lies and the dotted name it is imported as."""

    base: tuple[str, ...]  # the search root it was found in
    name: tuple[str, ...]  # its path below `base` (("pkg", "mod.py"), ("pkg",) for a package)
    package: bool  # an __init__.py: relative imports start from the module itself
    script: bool = False  # run by path: it has no package, its relative imports fail

    @property
    def rel(self) -> str:
        tail = (*self.name, "__init__.py") if self.package else self.name
        return PurePosixPath(*self.base, *tail).as_posix()


def _rel_parts(text: str, flag: str) -> tuple[str, ...]:
    """A project-relative path as names, each a plain file name: what is shown and written
    (file:line in init's lines and in the requirements comments) holds no control or line
    separator character."""
    path = PurePosixPath(text)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ConfigError(f"{flag}: {text!r} is not a file inside the project")
    parts = tuple(p for p in path.parts if p != ".")
    if not all(_NAME.fullmatch(p) for p in parts):
        raise ConfigError(f"{flag}: {text!r} is not a plain path (letters, digits, . _ + -)")
    return parts


def default_entries(root: Path) -> list[str]:
    """The project's scripts: top-level .py files with an `if __name__ == "__main__":` block
    (setup.py, conftest.py and the like excluded)."""
    tree = _Tree(root)
    found = []
    for name in tree.names(()):
        if not name.endswith(".py") or name in _SCRIPT_SKIP or not _NAME.fullmatch(name):
            continue
        try:  # read refuses a link, a folder or a FIFO (ValueError), as any unreadable file
            parsed = ast.parse(tree.read((name,)))
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            continue
        if any(_is_main_guard(node) for node in parsed.body):
            found.append(name)
    return found


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def walk(
    root: Path,
    entries: Iterable[str] = (),
    modules: Iterable[str] = (),
    paths: Iterable[str] = (),
) -> Walk:
    """The third-party imports of `entries` (project-relative .py paths) and `modules`
    (dotted names run with `python -m`), following the project's own modules. `paths`: the
    project-relative folders the image puts on PYTHONPATH besides the root."""
    tree = _Tree(root)
    result = Walk()
    bases: list[tuple[str, ...]] = [()]
    for extra in [*paths, "src"]:
        try:
            parts = _rel_parts(extra, "image")
        except ConfigError:
            continue
        if parts not in bases and tree.kind(parts) == "dir":
            bases.append(parts)
    queue: list[tuple[_Module, tuple[tuple[str, ...], ...]]] = []
    for entry in entries:
        parts = _rel_parts(entry, "--entry")
        kind = tree.kind(parts)
        if kind != "file" or not parts[-1].endswith(".py"):
            shown = "a symbolic link" if kind == "link" else "not a .py file in the project"
            raise ConfigError(f"--entry: {entry!r} is {shown}")
        result.entries.append(PurePosixPath(*parts).as_posix())
        # `python dir/x.py` puts dir/ first on sys.path; the image adds the root
        here = parts[:-1]
        queue.append((_Module(here, (parts[-1],), False, True), (here, *bases)))
    for dotted in modules:
        name = tuple(dotted.split("."))
        if not all(part.isidentifier() for part in name):
            raise ConfigError(f"--entry: {dotted!r} is not a module name")
        found = _find(tree, bases, name)
        if found is None:
            raise ConfigError(f"--entry: module {dotted!r} is not in the project")
        result.entries.append(found.rel)
        queue.append((found, tuple(bases)))
        if found.package:  # `python -m pkg` runs pkg/__main__.py after pkg/__init__.py
            main = _Module(found.base, (*name, "__main__.py"), False)
            queue.append((main, tuple(bases)))
    walker = _Walker(tree, result)
    walker.run(queue)
    result.imports = list(walker.found.values())
    return result


def _find(tree: _Tree, bases: Iterable[tuple[str, ...]], name: tuple[str, ...]) -> _Module | None:
    """The project file `name` is imported from, or None when it is not the project's."""
    return next((m for base in bases if (m := _find_in(tree, base, name)) is not None), None)


def _find_in(tree: _Tree, base: tuple[str, ...], name: tuple[str, ...]) -> _Module | None:
    folder = (*base, *name)
    present = ("file", "link", "other")  # the project's name, whatever it is
    if tree.kind((*folder, "__init__.py")) in present:
        return _Module(base, name, True)
    file = (*name[:-1], name[-1] + ".py")
    if tree.kind((*base, *file)) in present:
        return _Module(base, file, False)
    kind = tree.kind(folder)
    if kind == "link":
        return _Module(base, name, False)  # the project's, but not followed
    if kind == "dir" and (len(name) > 1 or any(n.endswith(".py") for n in tree.names(folder))):
        # a namespace package (no __init__.py): the project's when it holds code; an empty
        # `wandb/` output folder does not hide the real wandb
        return _Module(base, name, False)
    return None


class _Walker:
    def __init__(self, tree: _Tree, result: Walk) -> None:
        self.tree = tree
        self.result = result
        self.seen_files: set[str] = set()
        self.found: dict[str, Import] = {}  # module -> the first place it is imported
        self.stdlib = frozenset(sys.stdlib_module_names) | {"__future__", "__main__"}

    def run(self, queue: list[tuple[_Module, tuple[tuple[str, ...], ...]]]) -> None:
        while queue:
            module, bases = queue.pop(0)
            if module.rel in self.seen_files:
                continue
            if len(self.seen_files) >= MAX_FILES:
                self.result.notes.append(
                    f"imports: stopped after {MAX_FILES} project files; the rest not read"
                )
                return
            self.seen_files.add(module.rel)
            queue += ((found, bases) for found in self._visit(module, bases))

    def _visit(self, module: _Module, bases: tuple[tuple[str, ...], ...]) -> Iterator[_Module]:
        rel = module.rel
        parts = tuple(rel.split("/"))
        kind = self.tree.kind(parts)
        if kind in _UNREAD:  # the project's name, but never read through
            self.result.notes.append(f"imports: {rel} is {_UNREAD[kind]}")
            return
        if kind != "file":
            return  # a namespace package's folder
        try:
            parsed = ast.parse(self.tree.read(parts), filename=rel)
        except ValueError as err:
            self.result.notes.append(f"imports: {rel} {err}")
            return
        except (SyntaxError, RecursionError, MemoryError) as err:
            line = getattr(err, "lineno", None)
            where = f"{rel}:{line}" if line else rel
            self.result.notes.append(f"imports: {where}: not parsed ({type(err).__name__})")
            return
        for node, optional in _imports(parsed.body):
            for name, how in self._targets(module, node):
                where = f"{rel}:{node.lineno}"
                yield from self._resolve(name, how, where, optional, (module.base, *bases))

    def _targets(self, module: _Module, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
        """(absolute dotted name, how): "import" (a module to find), "sub" (`from X import
        y`: X.y, a submodule only when X is the project's), "own" (a relative import: the
        project's or nothing)."""
        if isinstance(node, ast.Import):
            return [(alias.name, "import") for alias in node.names]
        subs = [a.name for a in node.names if a.name != "*"]
        if node.level == 0:
            base = node.module or ""
            return [(base, "import"), *[(f"{base}.{s}", "sub") for s in subs]] if base else []
        if module.script:
            return []  # a script run by path has no package: the import fails at run time
        package = module.name if module.package else module.name[:-1]
        if node.level - 1 > len(package):
            return []  # beyond the top-level package: fails at run time
        package = package[: len(package) - (node.level - 1)]
        base = ".".join((*package, *(node.module.split(".") if node.module else ())))
        names = [base] if base else []
        return [(n, "own") for n in [*names, *(f"{base}.{s}".lstrip(".") for s in subs)]]

    def _resolve(
        self,
        name: str,
        how: str,
        where: str,
        optional: bool,
        bases: tuple[tuple[str, ...], ...],
    ) -> Iterator[_Module]:
        parts = tuple(name.split("."))
        if not all(p.isidentifier() for p in parts):
            return
        searched = bases[:1] if how == "own" else bases
        owner = _find(self.tree, searched, parts[:1])
        if owner is None and len(parts) > 1:  # a namespace package holding only folders
            owner = _find(self.tree, searched, parts)
        if owner is None:
            if how != "import" or parts[0] in self.stdlib:
                return
            known = self.found.get(name)
            if known is None or (known.optional and not optional):
                self.found[name] = Import(name, where, optional)  # keeps its place when known
            return
        # the project's own: each package on the way runs its __init__.py
        for depth in range(1, len(parts) + 1):
            found = _find_in(self.tree, owner.base, parts[:depth])
            if found is not None:
                yield found


def _imports(
    nodes: Iterable[ast.AST], optional: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, with whether it is guarded (optional)."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, optional
        elif isinstance(node, ast.If):
            yield from _imports(node.body, optional or _optional_test(node.test))
            yield from _imports(node.orelse, optional or _platform_test(node.test))
        elif isinstance(node, ast.Try | ast.TryStar):
            catches = any(_catches_import_error(h.type) for h in node.handlers)
            yield from _imports(node.body, optional or catches)
            for handler in node.handlers:
                yield from _imports(handler.body, optional)
            yield from _imports(node.orelse, optional)
            yield from _imports(node.finalbody, optional)
        else:
            yield from _imports(ast.iter_child_nodes(node), optional)


def _optional_test(test: ast.expr) -> bool:
    words = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(test)}  # Name, Attribute
    return "TYPE_CHECKING" in words or _platform_test(test)


def _platform_test(test: ast.expr) -> bool:
    attrs = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    return bool(attrs & {"version_info", "platform", "system", "python_version"})


def _catches_import_error(kind: ast.expr | None) -> bool:
    if kind is None:
        return True
    items = kind.elts if isinstance(kind, ast.Tuple) else [kind]
    return any(getattr(item, "attr", getattr(item, "id", "")) in _GUARDS for item in items)


# -- which distribution provides a module ------------------------------------------------


@dataclass(frozen=True)
class Table:
    """gpulaunch/data/import_names.yaml: import names -> distributions, and what a few
    distributions always install with them."""

    imports: dict[str, tuple[str, ...]]
    brings: dict[str, tuple[str, ...]]

    def candidates(self, module: str) -> tuple[str, ...]:
        """Distributions that provide `module`, the one to suggest first: the longest
        dotted prefix in the table (google.protobuf -> protobuf), else the name itself."""
        from packaging.utils import canonicalize_name

        parts = module.split(".")
        for n in range(len(parts), 0, -1):
            row = self.imports.get(".".join(parts[:n]))
            if row:
                return row
        return (canonicalize_name(parts[0]),)

    def closure(self, names: Iterable[str]) -> set[str]:
        """`names` and everything the table says they always install."""
        out: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            if name not in out:
                out.add(name)
                stack += self.brings.get(name, ())
        return out


def load_table() -> Table:
    from gpulaunch.yamlio import read_packaged

    data = read_packaged(DATA)
    shown = f"gpulaunch/data/{DATA}"
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}: not a mapping")

    def rows(key: str) -> dict[str, tuple[str, ...]]:
        value = data.get(key)
        if not isinstance(value, dict) or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in value.values()
        ):
            raise ConfigError(f"{shown}: {key} is not a mapping of lists of names")
        return {str(k): tuple(v) for k, v in value.items()}

    return Table(rows("imports"), rows("brings"))


def missing(found: Walk, project: Project, image: Iterable[str]) -> list[Missing]:
    """The required imports that no distribution provides: not one the project declares
    (project.deps, as the project readers read them), nor one the image installs itself
    (`image`: torch and its extras), nor what those always install (the table's `brings`)."""
    table = load_table()
    provided = table.closure([*project.dist_names(), *image])
    out = []
    for imp in found.required():
        options = table.candidates(imp.module)
        if not provided.intersection(options):
            out.append(Missing(imp, options[0]))
    return out


def entry_gaps(
    root: Path, project: Project, image: Iterable[str], entries: Iterable[str] | None = None
) -> tuple[Walk, list[Missing]]:
    """What `init` and `doctor` say: the walk of `entries` (default: the project's scripts)
    through the folders the image puts on PYTHONPATH, and the imports nothing provides."""
    chosen = list(entries) if entries is not None else default_entries(root)
    found = walk(root, chosen, paths=[folder for folder, _ in project.import_paths])
    return found, missing(found, project, image)


NO_ENTRY = (
    'no entry point found (a top-level script with `if __name__ == "__main__":`); '
    "pass --entry FILE to check what one imports"
)


def requirement_lines(found: list[Missing]) -> list[str]:
    """One requirement a distribution (first place it is imported as its comment); the torch
    family is image.torch_extras' business, never a requirement line."""
    seen: dict[str, str] = {}
    for item in found:
        if not item.torch_family:
            seen.setdefault(item.suggest, item.imp.where)
    return [f"{name}  # {where}" for name, where in seen.items()]
