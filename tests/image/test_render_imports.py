"""What `render` and `run --dry-run` import for a project without requirements: not the
requirement parser (packaging.requirements, paid only by projects whose local packages build
with torch or that pin requirements), not the pyproject reader (tomllib), and no compiled
jinja2 template is compiled again (see test_template_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import atexit, json, sys
def report():
    mods = sorted(m for m in sys.modules if m.startswith(PREFIXES))
    sys.stderr.write("MODULES=" + json.dumps(mods) + "\\n")
atexit.register(report)
from gpulaunch.cli import main
sys.argv = ["gpulaunch", *ARGS]
main()
"""

PREFIXES = ("packaging.requirements", "packaging.markers", "gpulaunch.project.pyproject", "tomllib")
CONFIG = """version: 1
name: imports
image:
  python: "3.11"
  torch: "2.4.1"
  cuda: "12.1"
launch:
  gpus: 4
"""


def _modules(project: Path, args: list[str]) -> list[str]:
    script = f"PREFIXES = {PREFIXES!r}\nARGS = {args!r}\n" + SCRIPT
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [x for x in proc.stderr.splitlines() if x.startswith("MODULES=")][-1]
    return list(json.loads(line.removeprefix("MODULES=")))


@pytest.mark.parametrize(
    "args", [["render"], ["run", "train.py", "--dry-run"]], ids=lambda a: " ".join(a)
)
def test_no_requirement_parser_for_a_project_without_requirements(
    tmp_path: Path, args: list[str]
) -> None:
    (tmp_path / "gpulaunch.yaml").write_text(CONFIG)
    (tmp_path / "train.py").write_text("import torch.distributed\n")
    assert _modules(tmp_path, args) == []


def test_the_check_sees_the_parser_where_requirements_are_read(tmp_path: Path) -> None:
    (tmp_path / "gpulaunch.yaml").write_text(
        CONFIG.replace('  cuda: "12.1"\n', '  cuda: "12.1"\n  requirements: pyproject.toml\n')
    )
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\nversion = "0"\ndependencies = ["numpy>=1"]\n'
    )
    assert "gpulaunch.project.pyproject" in _modules(tmp_path, ["render"])
