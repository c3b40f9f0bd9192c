"""Start-up stays fast: no command module imports pydantic, jinja2, docker or yaml (or what
they pull in) at import time. `gpulaunch --help` and every command's and group's `--help`,
found from the app itself (so commands added later are covered), run in one fresh
interpreter; afterwards none of the heavy modules may be loaded.

A command that needs one imports it inside its function body, not at the top of its
cli module (DEVELOPERS.md: "A new command stays lazy"). That only the command being
run is imported and built is tests/cli/test_lazy_group.py."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pydantic", "jinja2", "docker", "yaml", "requests", "pynvml", "packaging")

SCRIPT = """
import json, sys
import typer.main
from gpulaunch.cli import app

group = typer.main.get_command(app)

def paths(cmd, prefix):
    yield prefix
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from paths(sub, [*prefix, name])

seen = {}
for argv in paths(group, []):
    try:
        group.main(args=[*argv, "--help"], prog_name="gpulaunch", standalone_mode=False)
    except SystemExit:
        pass
    heavy = sorted(m for m in HEAVY if m in sys.modules)
    seen[" ".join(argv) or "(top)"] = heavy
print(json.dumps(seen))
"""


def test_no_help_imports_a_heavy_module() -> None:
    script = f"HEAVY = {HEAVY!r}\n" + SCRIPT
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"(top)", "run", "build", "versions", "profiles", "history", "ps"} <= set(seen)
    offenders = {cmd: heavy for cmd, heavy in seen.items() if heavy}
    assert not offenders, f"imported at --help (import them inside the command): {offenders}"


def test_the_check_catches_an_eager_import() -> None:
    """The same script sees a heavy module that a command module imports at its top."""
    script = f"HEAVY = {HEAVY!r}\nimport yaml\n" + SCRIPT
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["(top)"] == ["yaml"]
