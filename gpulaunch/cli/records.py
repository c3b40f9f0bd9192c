"""Commands about run records: history and rerun."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import AFTER_DASHDASH, ConfigOpt, RunCommand, app
from gpulaunch.cli.common import echo_err, load_project, make_engine, print_table


class _LazyEngine:
    """History must work without a daemon: running records are then left as they are. The
    engine is reached only when a running record needs checking (most histories have
    none, and connecting imports the docker SDK)."""

    @functools.cached_property
    def engine(self) -> Any:
        """The engine, or None (said once) when it does not answer."""
        from gpulaunch.errors import GpulaunchError

        try:
            engine = make_engine()
            engine.client()
        except GpulaunchError as err:
            echo_err(f"warning: cannot check running records against the engine: {err.message}")
            return None
        return engine

    def find_leftover(self, name: str, run_id: str) -> Any:
        from gpulaunch.errors import EngineError

        if self.engine is None:
            raise EngineError("no engine")
        return self.engine.find_leftover(name, run_id)


@app.command()
def history(
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    limit: Annotated[
        int | None, typer.Option("-n", help="Only the newest N runs.", min=1, max=1_000_000)
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Runs started since a date (2026-12-01), a UTC time or an age (3d)."),
    ] = None,
) -> None:
    """The project's runs (.gpulaunch/runs/): command, image, GPUs, exit, GPU-hours, cost."""
    from gpulaunch.records.history import parse_since, row, select, totals
    from gpulaunch.records.reconcile import reconcile

    _, project = load_project(config)
    after = parse_since(since) if since is not None else None
    records = reconcile(project, _LazyEngine(), echo_err)
    chosen = select(records, limit, after)
    summary = totals(chosen)
    if as_json:
        runs = [record.to_json() for record in chosen]
        typer.echo(json.dumps({"runs": runs, "totals": dataclasses.asdict(summary)}, indent=2))
        return
    from gpulaunch.textcheck import shown

    columns = ("id", "start", "state", "command", "image", "gpus", "duration", "exit")
    headers = [*(c.upper() for c in columns), "GPU-H", "COST"]
    lines = (row(record) for record in chosen)
    cells = ([shown(line[c]) for c in (*columns, "gpu_hours", "cost")] for line in lines)
    print_table(headers, cells, "ellipsis", highlight=False)
    cost = f", cost {summary.cost}" if summary.cost is not None else ""
    typer.echo(
        f"total: {summary.runs} run(s), {summary.gpu_hours:.4f} GPU-hours"
        f", {summary.duration_s:.1f} s{cost}"
    )


@app.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
def rerun(
    ctx: typer.Context,
    ident: Annotated[str, typer.Argument(metavar="ID", help="Run id (see `gpulaunch history`).")],
    config: ConfigOpt = None,
    rebuild: Annotated[
        bool,
        typer.Option(
            help="Rebuild a gone image from the recorded config (only when this tree gives "
            "the run's image tag; with --current-code, from today's tree)."
        ),
    ] = False,
    current_code: Annotated[
        bool,
        typer.Option(
            "--current-code",
            help="Mount today's tree over /workspace instead of running the recorded code.",
        ),
    ] = False,
) -> None:
    """Run a recorded run again: its command, flags and profile on its image, with its code.

    The image's own /workspace runs, not today's tree (--current-code mounts that).
    Extra arguments for the job go after `--`: gpulaunch rerun ID -- --epochs 2
    """
    from gpulaunch.cli.common import exit_with, print_warnings, run_line
    from gpulaunch.cli.image import build_with_progress
    from gpulaunch.jobs.execute import JobIO, Start, start_job
    from gpulaunch.jobs.rerun import recorded_image, rerun_job, tree_difference
    from gpulaunch.records.record import RunRecorder
    from gpulaunch.records.store import load

    current, project = load_project(config)
    record = load(project, ident)
    extra: list[str] = list(ctx.meta.get(AFTER_DASHDASH) or [])
    job = rerun_job(record, current, extra, project, rebuild=rebuild, current_code=current_code)
    spec, host = job.spec, job.spec.opts.no_container
    print_warnings(job.plan.launch.warnings)
    _note_changed_command(ident, record.command, job.plan, extra)
    io = JobIO(sys.stdout.buffer, sys.stderr.buffer, echo_err, build_with_progress)
    observers = [RunRecorder(echo_err, price=spec.price, rerun_of=ident)]
    if spec.mount_project:
        differs = tree_difference(record, project)
        what = "this host runs" if host else "--current-code: the job runs"
        echo_err(
            f"note: {what} today's tree; "
            + (f"it differs from the run's: {differs}" if differs else "git sees no change")
        )
    else:
        echo_err(
            f"note: rerun of {ident} runs the recorded code (the image's own /workspace); "
            "outputs reach the host only through launch.checkpoint_dir and mounts"
        )
    where, detach = (" on this host" if host else ""), spec.opts.detach
    how = Start(
        detach=detach,
        image=functools.partial(recorded_image, record),
        ready=lambda job, _: echo_err(f"rerun of {ident}{where}: {run_line(job.plan, detach)}"),
    )
    exit_with(start_job(job, io, make_engine, observers, how), detach)


def _note_changed_command(ident: str, command: list[str], plan: Any, extra: list[str]) -> None:
    """History shows the recorded command; when this host makes another one (fewer GPUs, a
    moved checkout), say so before the line that runs."""
    from gpulaunch.engine.runspec import shell_line
    from gpulaunch.masking import mask

    recorded = [str(part) for part in command]
    now = [mask(str(part)) for part in plan.run.command]
    if not extra and recorded != now:
        echo_err(f"note: {ident} recorded `{shell_line(recorded)}`; this host runs the line below")


@app.command()
def explain(
    target: Annotated[
        str, typer.Argument(metavar="RUN_ID|LOGFILE", help="A run id or a job's log file.")
    ],
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Why a run failed: its output matched against known failures (cause and fix).

    A run id shows what was found when the run ended (and reads a smoke run's log); a log
    file is read from its end (the last 64 KiB). Exit 1 when no known cause matches.
    """
    from pathlib import Path

    from gpulaunch.records.explain import explain_target

    found, label = explain_target(target, Path.cwd(), lambda: load_project(config)[1])
    if as_json:
        typer.echo(json.dumps({"target": label, "explanation": found}, indent=2))
    elif found is not None:
        typer.echo(f"cause: {found['cause']}")
        typer.echo(f"fix: {found['fix']}")
        if found.get("doc"):
            typer.echo(f"see: {found['doc']}")
    else:
        echo_err(f"{label}: no known cause found")
    if found is None:
        raise typer.Exit(1)
