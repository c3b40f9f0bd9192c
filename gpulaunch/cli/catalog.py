"""`gpulaunch catalog update` (PyPI -> a user overlay) and the catalog staleness warning the
image commands print."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Annotated

import typer

from gpulaunch.cli.app import _err, app, handle_errors

catalog_app = typer.Typer(
    help="The version catalog: refresh it from PyPI into a user overlay.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


def warn_if_stale() -> None:
    """One stderr line, at most once a day, when the catalog's facts are ~90+ days old.
    Never fails the command it is part of."""
    from gpulaunch.catalog.staleness import due_warning
    from gpulaunch.errors import GpulaunchError
    from gpulaunch.image.catalog_data import load_catalog

    try:
        cat = load_catalog()
        message = due_warning(cat.research_date, [Path(p) for p in cat.overlays], date.today())
    except (GpulaunchError, OSError):
        return
    if message:
        _err(f"warning: {message}")


@catalog_app.command("update")
@handle_errors
def update(
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Overlay file to write (default: $XDG_CONFIG_HOME/gpulaunch/catalog.d/pypi.yaml).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for each PyPI answer.", min=1, max=300)
    ] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
) -> None:
    """Read torch / torchvision / torchaudio releases from PyPI's JSON API (and the PyTorch
    wheel index and Docker Hub where reachable) and write what the packaged catalog lacks as
    an overlay, with confidence levels and the sources it could not reach."""
    from gpulaunch.catalog.overlay import overlay_dir
    from gpulaunch.catalog.update import OVERLAY_NAME, Sources, run_update
    from gpulaunch.image.catalog_data import check_overlay

    target = output.absolute() if output else overlay_dir() / OVERLAY_NAME
    report = run_update(
        output=target,
        today=date.today(),
        check=lambda data: check_overlay(data, str(target)),  # replaces the file it rewrites
        sources=Sources(timeout=timeout),
    )
    if as_json:
        data = {
            "path": str(report.path),
            "added": report.added,
            "unconfirmed": report.unconfirmed,
            "not_reached": report.unreachable,
        }
        typer.echo(json.dumps(data, indent=2))
        return
    for line in report.added:
        typer.echo(f"added: {line}")
    if not report.added:
        typer.echo("nothing new on PyPI: the catalog knows every torch release")
    for line in report.unconfirmed:
        typer.echo(f"unconfirmed: {line}")
    for line in report.unreachable:
        typer.echo(f"not reached: {line}")
    typer.echo(f"wrote {report.path}")
