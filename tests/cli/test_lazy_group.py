"""The root group builds only the command being run (gpulaunch.cli: COMMANDS, LazyCommands)
and prints `gpulaunch --help` from the COMMANDS table without typer.rich_utils
(gpulaunch.cli.root_help). The table must equal what the cli modules register, and the
fast help must equal typer's own rendering of the fully built group, byte for byte."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from gpulaunch.cli import COMMANDS, app

TOPICS = ("ci", "cluster", "image", "jobs", "profiles", "records", "prune")


REGISTERED = """
import json, typer.main
from gpulaunch.cli import app
from gpulaunch.cli import image, jobs, ci, cluster, profiles, records, prune  # typer's order
found = []
for info in app.registered_commands:
    name = info.name or typer.main.get_command_name(info.callback.__name__)
    found.append([name, [info.callback.__module__]])
for group in app.registered_groups:
    sub = group.typer_instance
    callbacks = [c.callback for c in sub.registered_commands]
    if sub.registered_callback is not None:
        callbacks.append(sub.registered_callback.callback)
    found.append([group.name, sorted({c.__module__ for c in callbacks})])
print(json.dumps(found))
"""


def test_table_names_every_command_in_typers_order_with_its_module() -> None:
    """In the order typer listed them when gpulaunch.cli imported every module up front (then
    image, jobs, ci, cluster, profiles, records); each from the module COMMANDS names."""
    proc = subprocess.run(
        [sys.executable, "-c", REGISTERED], capture_output=True, text=True, check=True, timeout=120
    )
    registered = json.loads(proc.stdout)
    assert [name for name, _ in registered] == list(COMMANDS)
    for name, modules in registered:
        assert modules == [f"gpulaunch.cli.{COMMANDS[name][0]}"], name


def test_table_help_is_each_commands_first_paragraph() -> None:
    for topic in TOPICS:
        importlib.import_module(f"gpulaunch.cli.{topic}")
    group = typer.main.get_group(app)
    for name, (_, text) in COMMANDS.items():
        command = group.commands[name]
        first = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
        assert text == first.strip(), name


HELP_SCRIPT = """
import contextlib, io, json, os, sys
import typer.main
from typer import rich_utils
import gpulaunch.cli as cli
from gpulaunch.cli import app, root_help
for topic in ("ci", "cluster", "image", "jobs", "profiles", "records", "prune"):
    __import__(f"gpulaunch.cli.{topic}")
group = typer.main.get_group(app)
out = {}
for width in ("40", "61", "80", "100", "133", "200"):
    os.environ["COLUMNS"] = width
    shown = {}
    for how in ("fast", "typer"):
        ctx = group.make_context("gpulaunch", ["--debug"], resilient_parsing=True)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            if how == "fast":
                root_help(group, ctx)
            else:
                rich_utils.rich_format_help(obj=group, ctx=ctx, markup_mode="rich")
        shown[how] = buf.getvalue()
    out[width] = shown
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "env",
    [{}, {"FORCE_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, {"TERMINAL_WIDTH": "72"}],
    ids=["plain", "color", "no-color", "terminal-width"],
)
def test_fast_root_help_equals_typers(env: dict[str, str]) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    proc = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**clean, "TERM": "xterm-256color", **env},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for width, shown in json.loads(proc.stdout).items():
        assert shown["fast"] == shown["typer"], width
        plain = re.sub(r"\x1b\[[0-9;]*m", "", shown["fast"])
        assert "profiles" in plain and "--version" in plain
        assert ("\x1b[" in shown["fast"]) == ("FORCE_COLOR" in env), width


PROBE = """
import json, sys
sys.argv = ["gpulaunch", *json.loads(sys.argv[1])]
try:
    from gpulaunch.cli import main
    main()
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.startswith("gpulaunch.cli.") or m in (
    "typer.rich_utils", "rich.markdown", "rich.console", "pydantic"))
print(json.dumps(loaded), file=sys.stderr)
"""


def _loaded(*argv: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    last = proc.stderr.strip().splitlines()[-1]
    loaded: list[str] = json.loads(last)
    return loaded


def test_top_level_help_builds_no_command_and_skips_rich_utils() -> None:
    frame = ["gpulaunch.cli.app", "gpulaunch.cli.common"]  # the app and its error mapping
    assert _loaded("--help") == [*frame, "rich.console"]
    assert _loaded() == [*frame, "rich.console"]  # no arguments: the same help
    assert _loaded("--version") == frame


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["profiles", "--help"], "gpulaunch.cli.profiles"),
        (["schema"], "gpulaunch.cli.image"),
        (["export", "k8s", "--help"], "gpulaunch.cli.cluster"),
        (["history", "--help"], "gpulaunch.cli.records"),
        (["rerun", "--help"], "gpulaunch.cli.records"),
        (["doctor", "--help"], "gpulaunch.cli.ci gpulaunch.cli.image"),
    ],
)
def test_a_command_imports_only_its_module(argv: list[str], module: str) -> None:
    cli = [m for m in _loaded(*argv) if m.startswith("gpulaunch.cli.")]
    assert cli == sorted(["gpulaunch.cli.app", "gpulaunch.cli.common", *module.split()])


def _run(*argv: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(argv))
    return result.exit_code, result.stdout, result.stderr


def test_unknown_command_and_flag_errors_are_unchanged() -> None:
    assert _run("rnu")[0] == 2
    assert _run("rnu")[2] == (
        "gpulaunch: error: No such command 'rnu'. Did you mean 'run'?\n"
        "hint: see `gpulaunch --help`\n"
    )
    assert _run("nope")[2].startswith("gpulaunch: error: No such command 'nope'.\n")
    assert _run("--nope")[:1] == (2,)
    assert "No such option: --nope" in _run("--nope")[2]
    assert "No such option: --install-completion" in _run("--install-completion")[2]


def test_commands_mapping_lists_builds_and_caches() -> None:
    group: Any = typer.main.get_command(app)
    assert list(group.commands) == list(COMMANDS) and len(group.commands) == len(COMMANDS)
    assert "run" in group.commands and "nope" not in group.commands
    assert group.get_command(None, "nope") is None
    run = group.get_command(None, "run")
    assert run is group.get_command(None, "run") and run.name == "run"
    assert {p.name for p in run.params} >= {"gpus", "dry_run"}
    with pytest.raises(TypeError):
        del group.commands["run"]
