"""The package layout keeps its shape (DEVELOPERS.md, "Architecture").

Import rules between layers are checked by import-linter (`lint-imports`, contracts in
pyproject.toml, run by ./dev/test); this file checks what import rules cannot see: the core
never prints or exits, modules stay small, subpackages stay few.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "gpulaunch"
# Stdlib-only scripts that run inside the container as programs of their own.
SCRIPTS = {
    PACKAGE / "launch" / "numa_bind.py",
    PACKAGE / "launch" / "pythonpath" / "gpulaunch_precision.py",
}
CORE = sorted(
    p
    for p in PACKAGE.rglob("*.py")
    if PACKAGE / "cli" not in p.parents and p not in SCRIPTS and p.name != "__main__.py"
)
# Smoke alarms far above today's sizes, not limits: cohesion decides where code goes
# (STYLE.md). A module or subpackage this big has grown a second idea; the alarm asks to look.
SMOKE_LINES = 1500
SMOKE_MODULES = 25


def _prints_or_exits(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("print", "exit", "quit", "input"):
                found.append(f"line {node.lineno}: {func.id}()")
            if isinstance(func, ast.Attribute) and ast.unparse(func) in ("sys.exit", "os._exit"):
                found.append(f"line {node.lineno}: {ast.unparse(func)}()")
        if isinstance(node, ast.Attribute) and ast.unparse(node) in ("sys.stdout", "sys.stderr"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Name) and node.id == "print":
            found.append(f"line {node.lineno}: print")
    return found


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_never_prints_or_exits(path: Path) -> None:
    assert _prints_or_exits(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_check_sees_a_print() -> None:
    code = "import sys\ndef f(warn=print):\n    sys.stdout.write('x')\n    sys.exit(1)\n"
    assert len(_prints_or_exits(ast.parse(code))) == 3


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_has_grown_a_second_idea(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= SMOKE_LINES


def test_subpackages_stay_few_and_documented() -> None:
    packages = [p.parent for p in PACKAGE.glob("*/__init__.py")]
    assert {p.name for p in packages} >= {"cli", "image", "launch", "engine"}
    for package in packages:
        modules = [p for p in package.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= SMOKE_MODULES, package.name
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert docstring and "import" in docstring, f"{package.name}: say what it may import"


def _private_imports(tree: ast.AST) -> list[str]:
    """`from gpulaunch.x import _name`: a module reaching into another's private names."""
    return [
        f"line {node.lineno}: {node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpulaunch")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    """What a module shares has a public name; its `_private` names are its own (issue 30)."""
    assert _private_imports(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_private_import_check_sees_one() -> None:
    code = "from gpulaunch.cli.app import _err, app\nfrom gpulaunch import __version__\n"
    assert _private_imports(ast.parse(code)) == ["line 1: gpulaunch.cli.app._err"]
