"""`gpulaunch profiles` (list) and `gpulaunch profiles show NAME`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import ConfigOpt, app
from gpulaunch.cli.common import print_warnings

profiles_app = typer.Typer(
    help="Launch profiles: list them, or show one resolved with the source of each value.",
    invoke_without_command=True,
)


app.add_typer(profiles_app, name="profiles")


def _optional_config(config: Path | None) -> Any:
    """The project's config when there is one (read back from the validated-config cache when
    unchanged: gpulaunch/configcache.py)."""
    from gpulaunch.configcache import load
    from gpulaunch.yamlio import CONFIG_NAME

    path = config or Path.cwd() / CONFIG_NAME
    if config is None and not path.exists():
        return None
    return load(path, write=True)


@profiles_app.callback()
def profiles_list(ctx: typer.Context, config: ConfigOpt = None) -> None:
    """List built-in profiles and those in gpulaunch.yaml."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from gpulaunch.launch.profiles import list_profiles

    table = Table("PROFILE", "FROM", "DESCRIPTION", box=None)
    for name, origin, description in list_profiles(_optional_config(config)):
        table.add_row(name, origin, description)
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="Profile name.")],
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show a profile resolved: env and docker options, and where each value came from."""
    from gpulaunch.launch.options import RunOptions
    from gpulaunch.launch.profiles import resolve_launch

    cfg = _optional_config(config)
    if cfg is None:  # no project here: the built-in profiles alone
        from gpulaunch.config import validate_data

        cfg = validate_data({"name": "none"})
    resolved = resolve_launch(cfg, RunOptions(profile=name))
    sections = {
        section: {k: {"value": v.value, "source": v.source} for k, v in items}
        for section, items in (
            ("settings", resolved.settings().items()),
            ("env", sorted(resolved.env.items())),
            ("docker", sorted(resolved.docker.items())),
        )
    }
    if as_json:
        data = {
            "profile": resolved.profile,
            **sections,
            "warnings": list(resolved.warnings),
            "notes": list(resolved.notes),
        }
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    typer.echo(f"profile {resolved.profile}")
    for section, values in sections.items():
        typer.echo(f"{section}:")
        for key, item in values.items():
            typer.echo(f"  {key} = {item['value']}    # {item['source']}")
    print_warnings(resolved.warnings)
    for note in resolved.notes:
        typer.echo(f"note: {note}")
