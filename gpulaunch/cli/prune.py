"""`gpulaunch prune`: remove the project's older gpulaunch images; and the notice `build`
prints when those grow past GPULAUNCH_PRUNE_NOTICE (`prune_notice`). The rules are in
`gpulaunch/image/prune.py`; this module parses the flags, reads the run records and prints."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import ConfigOpt, app
from gpulaunch.cli.common import echo_err, load_project, make_engine


@app.command()
def prune(
    config: ConfigOpt = None,
    keep: Annotated[
        int,
        typer.Option("--keep", min=0, max=1_000_000, help="Keep each project's newest N images."),
    ] = 3,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    all_projects: Annotated[
        bool,
        typer.Option(
            "--all-projects",
            help="Every project's gpulaunch images, not only this one's (only this project's "
            "run records are read).",
        ),
    ] = False,
    include_recorded: Annotated[
        bool,
        typer.Option(
            "--include-recorded",
            help="Also remove images that only recent run records name (`rerun` then rebuilds).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Remove the project's older gpulaunch images; never one in use or a recent run's.

    Candidates: images with io.gpulaunch.managed=true and a NAME:gl-<hash> tag.
    Kept, with the reason: used by a container (any state), named by a run
    record of the last 30 days, among the newest N, NAME:latest, tagged by
    someone else. Removal is by image id, never forced."""
    from datetime import UTC, datetime, timedelta
    from pathlib import Path

    from gpulaunch.configcache import find_config
    from gpulaunch.image.prune import RECENT_RECORD_DAYS
    from gpulaunch.image.prune import prune as prune_images

    project_name, recorded = None, {}
    found = config is not None or find_config(None, Path.cwd()).exists()
    if not (found or all_projects):
        from gpulaunch.errors import ConfigError

        raise ConfigError(
            "gpulaunch.yaml: none here; prune needs the project's name",
            hint="run it in the project folder, pass --config, or use --all-projects",
        )
    if found:  # with --all-projects too: this project's records still keep their images
        cfg, folder = load_project(config, write_cache=not dry_run)
        project_name = cfg.name
        if not include_recorded:
            from gpulaunch.records.history import recorded_images, select
            from gpulaunch.records.store import load_all

            loaded = load_all(folder)
            for warning in loaded.warnings:
                echo_err(warning)
            since = datetime.now(UTC) - timedelta(days=RECENT_RECORD_DAYS)
            recorded = recorded_images(select(loaded.records, None, since))
    report = prune_images(
        make_engine(),
        project=None if all_projects else project_name,
        keep=keep,
        recorded=recorded,
        dry_run=dry_run,
    )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    _show(report)


def _show(report: Any) -> None:
    from gpulaunch.image.prune import human_size
    from gpulaunch.textcheck import shown

    for decision in [*report.removed, *report.kept]:
        image = decision.image
        name = ", ".join(image.tags)
        why = f": {'; '.join(decision.reasons)}" if decision.reasons else ""
        typer.echo(shown(f"{decision.outcome} {name} ({human_size(image.size)}){why}"))
    if not report.removed and not report.kept:
        where = ", ".join(report.projects) or "any project"
        typer.echo(shown(f"no gpulaunch images of {where}"))
        return
    done = "would remove" if report.dry_run else "removed"
    typer.echo(
        f"{done} {len(report.removed)} image(s), up to {human_size(report.removed_bytes)}"
        f" (layers shared with a kept image stay); kept {len(report.kept)}"
    )


def prune_notice(project: str, tag: str, engine: Any = None) -> None:
    """After a build: one line on stderr when the project's older gpulaunch images together
    pass GPULAUNCH_PRUNE_NOTICE (default 10 GiB; "off" turns it off). Never fails the build:
    an unreadable setting is a warning, an engine that does not answer is silence."""
    from gpulaunch.errors import ConfigError, EngineError
    from gpulaunch.image.prune import older_images_notice

    try:
        line = older_images_notice(engine or make_engine(), project, tag, os.environ)
    except ConfigError as err:
        echo_err(f"warning: {err.message}; no prune notice")
        return
    except EngineError:
        return
    if line is not None:
        echo_err(line)
