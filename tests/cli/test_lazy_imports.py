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
from pathlib import Path

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


WARM = """
import json, sys
from gpulaunch.cli import app

for argv in sys.argv[1:]:
    try:
        app(args=argv.split(), prog_name="gpulaunch", standalone_mode=False)
    except SystemExit:
        pass
print(json.dumps(sorted(m for m in ("pydantic", "yaml") if m in sys.modules)))
"""


def test_a_warm_config_cache_loads_no_pydantic_or_yaml(tmp_path: Path) -> None:
    """`history` and `render` read a config validated before (gpulaunch/configcache.py)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "gpulaunch.yaml").write_text(
        'version: 1\nname: lazy\nimage: {python: "3.11", torch: "2.4.1", cuda: "12.1"}\n'
    )

    def heavy(*argv: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", WARM, *argv],
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return list(json.loads(proc.stdout.strip().splitlines()[-1]))

    assert heavy("history") == ["pydantic", "yaml"]  # cold: validated, then remembered
    assert heavy("history") == []
    assert heavy("render") == []
    assert heavy("history", "render") == []
    # run's launch plan takes the built-in profiles and NCCL presets from the validated copy
    (project / "train.py").write_text("print(1)\n")
    assert heavy("run train.py --dry-run") == []
    assert heavy("profiles", "profiles show default") == []
