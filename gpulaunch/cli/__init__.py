"""The command line: the typer app (`app.py`: usage errors, shared options), the context every
command works in (`common.py`: error mapping, config load, engine, job output) and the commands
grouped by topic (`image.py`: init / render / versions / schema / build / catalog update;
`jobs.py`: run / shell / ps / logs / stop; `ci.py`: smoke / doctor; `records.py`: history /
rerun / explain; `cluster.py`: export / submit; `profiles.py`). Views (`views.py`) turn
results into rich tables. This file is the index of the root's commands.

The only layer that may import typer, print or exit. Each command parses its flags, calls
one core function from `image`, `launch` or `engine`, and prints; every domain error is
mapped to its exit code in `common.handle_errors`. A new command goes into the module of its
topic (or a new one beside them) and gets a row in `COMMANDS` below, which names the module
that registers it: only the module of the command being run is imported (`LazyCommands`).

`root_help` prints `gpulaunch --help` as typer's rich help does, from `COMMANDS` and with
rich's console, table and panel only: typer.rich_utils would also import rich's markdown,
syntax, traceback and pretty modules (tests/cli/test_lazy_group.py compares the two outputs).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, ClassVar

from typer.main import get_command_from_info, get_command_name, get_group_from_info

from gpulaunch.cli.app import app, main

__all__ = ["COMMANDS", "LazyCommands", "app", "main", "root_help"]

# The root's commands: name -> (the cli module that registers it, its help's first paragraph).
# Only the command being run is imported and built (`LazyCommands`); `gpulaunch --help` prints
# these lines (root_help). tests/cli/test_lazy_group.py keeps this table equal to the commands
# the modules register, in typer's order.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("image", "Write a validated gpulaunch.yaml (and a .dockerignore) for a project."),
    "render": ("image", "Print the Dockerfile for gpulaunch.yaml."),
    "versions": ("image", "Show the catalog: valid torch / CUDA / Python / driver combinations."),
    "schema": ("image", "Print the JSON Schema of gpulaunch.yaml (for editors)."),
    "build": (
        "image",
        "Build the image (tagged NAME:gl-<hash>); skipped when that tag already exists.",
    ),
    "run": (
        "jobs",
        "Build if needed, then run SCRIPT (one process per GPU via torchrun) in the container.",
    ),
    "ps": (
        "jobs",
        "List containers started by `gpulaunch run` (run id, project label and name together).",
    ),
    "logs": ("jobs", "Show the output of a gpulaunch container."),
    "stop": (
        "jobs",
        "Stop (SIGTERM, then SIGKILL after the timeout) and remove a gpulaunch container.",
    ),
    "shell": (
        "jobs",
        "Open a shell in the project's image, with `run`'s mounts, GPUs and env (no torchrun).",
    ),
    "smoke": (
        "ci",
        "Build if needed and run the job briefly for CI: GPULAUNCH_SMOKE=1 and\n"
        "GPULAUNCH_SMOKE_STEPS=N in its environment, a timeout, JUnit XML, a GitHub step summary.",
    ),
    "doctor": (
        "ci",
        "Check this machine for GPU training: engine, BuildKit, NVIDIA runtime, driver, GPUs,\n"
        "shared memory, disk, NUMA. A fix on every line that is not ✓; exit 1 on any ✗.",
    ),
    "history": (
        "records",
        "The project's runs (.gpulaunch/runs/): command, image, GPUs, exit, GPU-hours, cost.",
    ),
    "rerun": (
        "records",
        "Run a recorded run again: its command, flags and profile on its image, with its code.",
    ),
    "explain": (
        "records",
        "Why a run failed: its output matched against known failures (cause and fix).",
    ),
    "prune": (
        "prune",
        "Remove the project's older gpulaunch images; never one in use or a recent run's.",
    ),
    "catalog": ("image", "The version catalog: refresh it from PyPI into a user overlay."),
    "export": (
        "cluster",
        "Write the job for another engine: Kubernetes manifests or a Slurm batch script.",
    ),
    "submit": ("cluster", "Export and hand the job to the cluster (kubectl apply, sbatch)."),
    "profiles": (
        "profiles",
        "Launch profiles: list them, or show one resolved with the source of each value.",
    ),
}


class LazyCommands(MutableMapping[str, Any]):
    """The root group's `commands`: every name of COMMANDS, each command imported and built by
    typer the first time it is asked for, so a command pays for itself only (typer builds every
    command's parameters up front). Everything click and typer do with `commands` (resolve,
    suggest a close name, complete, list) works on it unchanged."""

    def __init__(self, built: Mapping[str, Any]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the root's commands are fixed by COMMANDS")

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._built

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._built]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*COMMANDS, *self._built]))


def _build(name: str) -> Any:
    """The click command `name` as typer's own group build makes it (KeyError: not a command)."""
    importlib.import_module(f"gpulaunch.cli.{COMMANDS[name][0]}")
    short, mode = app.pretty_exceptions_short, app.rich_markup_mode
    for info in app.registered_commands:
        if info.callback and (info.name or get_command_name(info.callback.__name__)) == name:
            return get_command_from_info(info, pretty_exceptions_short=short, rich_markup_mode=mode)
    for group in app.registered_groups:
        if group.name == name:
            return get_group_from_info(
                group,
                pretty_exceptions_short=short,
                suggest_commands=app.suggest_commands,
                rich_markup_mode=mode,
            )
    raise KeyError(name)


_THEME = {
    "option": "bold cyan",
    "switch": "bold green",
    "negative_option": "bold magenta",
    "negative_switch": "bold red",
    "types": "bold yellow",
    "types_sep": "dim",
    "usage": "yellow",
}


def root_help(group: Any, ctx: Any) -> None:
    """typer.rich_utils.rich_format_help for the root group, its commands from COMMANDS. It
    renders only what the root uses (rich markup, one panel of plain options: no arguments,
    shown defaults, env vars or epilog); the root is fixed when gpulaunch is built, and
    tests/cli/test_lazy_group.py holds this output byte-equal to typer's."""
    params = [p for p in group.get_params(ctx) if not getattr(p, "hidden", False)]
    from rich.align import Align
    from rich.columns import Columns
    from rich.console import Console, Group
    from rich.highlighter import RegexHighlighter
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from rich.theme import Theme

    class Highlighter(RegexHighlighter):
        highlights: ClassVar[list[str]] = [
            r"(^|\W)(?P<switch>\-\w+)(?![a-zA-Z0-9])",
            r"(^|\W)(?P<option>\-\-[\w\-]+)(?![a-zA-Z0-9])",
            r"(?P<types>\<[^\>]+\>)",
            r"(?P<usage>Usage: )",
        ]

    class TypesHighlighter(RegexHighlighter):
        highlights: ClassVar[list[str]] = [
            r"^(?P<types_sep>(\[|<))",
            r"(?P<types_sep>\|)",
            r"(?P<types_sep>(\]|>))(\.\.\.)?$",
        ]

    highlight, types = Highlighter(), TypesHighlighter()
    force = os.getenv("GITHUB_ACTIONS") or os.getenv("FORCE_COLOR") or os.getenv("PY_COLORS")
    width = os.getenv("TERMINAL_WIDTH")
    console = Console(
        theme=Theme(_THEME),
        highlighter=highlight,
        color_system="auto",
        force_terminal=False
        if os.getenv("_TYPER_FORCE_DISABLE_TERMINAL")
        else (True if force else None),
        width=int(width) if width else None,
    )

    def rich_text(text: str, style: str = "") -> Text:
        return highlight(Text.from_markup(inspect.cleandoc(text), style=style))

    def panel(table: Table, title: str) -> None:
        console.print(Panel(table, border_style="dim", title=title, title_align="left"))

    def grid(**extra: Any) -> Table:
        return Table(show_header=False, expand=True, box=None, pad_edge=False, **extra)

    console.print(Padding(highlight(group.get_usage(ctx)), 1), style="bold")
    if group.help:
        first, *rest = inspect.cleandoc(group.help).partition("\f")[0].split("\n\n")
        if not first.startswith("\b"):
            first = first.replace("\n", " ")
        parts = [rich_text(first.strip())]
        if rest:
            parts += [Text(""), rich_text("\n\n".join(rest), style="dim")]
        console.print(Padding(Align(Group(*parts), pad=False), (0, 1, 1, 1)))
    if params:
        options = grid(highlight=True)
        for param in params:
            kind = Text(style="bold yellow", overflow="fold")
            kind.append(param.display_type_rich(ctx=ctx) or "")
            paragraphs = (param.help or "").split("\n\n")
            text = "\n".join(
                x.replace("\n", " ").strip() if not x.startswith("\b") else x.strip("\b\n") + "\n"
                for x in paragraphs
            ).strip()
            options.add_row(
                highlight(",".join(o for o in param.opts if "--" in o)),
                highlight(",".join(o for o in param.opts if "--" not in o)),
                Text(""),
                Text(""),
                types(kind),
                Columns([rich_text(text)] if param.help else []),
            )
        panel(options, "Options")
    commands = grid(highlight=False)
    commands.add_column(style="bold cyan", no_wrap=True, width=max(map(len, COMMANDS)))
    commands.add_column("Description", justify="left", no_wrap=False, ratio=10)
    for name, (_, text) in COMMANDS.items():
        commands.add_row(Text(name), rich_text(text.strip()))
    panel(commands, "Commands")
