"""Commands about jobs: run (in a container or on the host), shell, ps, logs, stop."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import (
    AFTER_DASHDASH,
    ArgsArg,
    ConfigOpt,
    EnvOpt,
    GpusOpt,
    ImageOpt,
    InteractiveOpt,
    MountOpt,
    NcclOpt,
    NetworkOpt,
    NprocOpt,
    NumaOpt,
    PrecisionOpt,
    ProfileOpt,
    RebuildOpt,
    RunCommand,
    ScriptArg,
    SetOpt,
    TtyOpt,
    UnsafeMountsOpt,
    app,
    job_words,
)
from gpulaunch.cli.common import (
    echo_err,
    exit_with,
    load_project,
    make_engine,
    print_table,
    print_warnings,
    run_line,
    status_line,
)
from gpulaunch.cli.image import PROGRESS, ProgressOpt, build_with_progress, builder_choice
from gpulaunch.errors import ConfigError


@app.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    script: ScriptArg = None,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    gpus: GpusOpt = None,
    nproc: NprocOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    nccl_ifname: Annotated[
        str | None, typer.Option(help="Network interface(s) for NCCL/gloo sockets (tcp).")
    ] = None,
    numa: NumaOpt = None,
    precision: PrecisionOpt = None,
    expandable_segments: Annotated[
        bool | None,
        typer.Option(
            "--expandable-segments/--no-expandable-segments",
            help="PYTORCH_ALLOC_CONF=expandable_segments:True (less fragmentation).",
        ),
    ] = None,
    env: EnvOpt = None,
    mounts: MountOpt = None,
    allow_unsafe_mounts: UnsafeMountsOpt = False,
    network: NetworkOpt = None,
    no_container: Annotated[
        bool,
        typer.Option("--no-container", help="Apply the same launch plan on this machine."),
    ] = False,
    nnodes: Annotated[
        int | None,
        typer.Option(help="Nodes of a multi-node run (torchrun c10d; host networking)."),
    ] = None,
    node_rank: Annotated[
        int | None, typer.Option(help="This node's rank, 0 to nnodes-1 (multi-node).")
    ] = None,
    rdzv_endpoint: Annotated[
        str | None, typer.Option(help="HOST:PORT of the rendezvous, the same on every node.")
    ] = None,
    rdzv_id: Annotated[
        str | None, typer.Option(help="Rendezvous id, the same on every node (default: name).")
    ] = None,
    local_addr: Annotated[
        str | None,
        typer.Option(help="This node's address in the rendezvous (torchrun; default: its FQDN)."),
    ] = None,
    image: ImageOpt = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start and return.")] = False,
    rebuild: RebuildOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and docker commands; no daemon.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --dry-run: JSON plan.")] = False,
    sets: SetOpt = None,
    restarts: Annotated[
        int,
        typer.Option(
            help="Restart a failing job up to N times (multi-process: torchrun --max-restarts).",
            min=0,
            max=100,
        ),
    ] = 0,
    price: Annotated[
        str | None,
        typer.Option(
            help="Price per GPU-hour for the run record's cost (launch.price_per_gpu_hour)."
        ),
    ] = None,
    no_status: Annotated[
        bool, typer.Option("--no-status", help="No live GPU status line on the terminal.")
    ] = False,
    interactive: InteractiveOpt = None,
    tty: TtyOpt = None,
    progress: ProgressOpt = "auto",
) -> None:
    """Build if needed, then run SCRIPT (one process per GPU via torchrun) in the container.

    gpulaunch options may come before or after SCRIPT; options the script shares with
    gpulaunch go after `--`: gpulaunch run train.py --gpus 4 -- --config exp.yaml.
    Any other command: gpulaunch run -- python -m my.module --flag
    """
    from gpulaunch.jobs.execute import JobSpec
    from gpulaunch.jobs.options import (
        check_choice,
        check_flag_lines,
        check_options,
        check_price,
        options_from_flags,
    )

    check_flag_lines({"--price": price})
    check_choice("--progress", progress, PROGRESS)
    if detach and (interactive or tty):
        flag = "--interactive" if interactive else "--tty"
        raise ConfigError(f"{flag}: not available with --detach")
    rest, command = job_words(ctx, script, args)
    opts = options_from_flags(locals(), args=rest, command=command)
    check_options(opts)  # the same checks `rerun` applies to a record's options
    price = check_price(price)
    cfg, project = load_project(config, sets, write_cache=not dry_run)
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild, price=price)
    if dry_run:  # only what the flags say: a dry run's output must not depend on its stdin
        show_dry_run(spec, as_json, (bool(interactive), bool(tty)))
        return
    _launch(spec, interactive, tty, progress, no_status=no_status)


def _launch(
    spec: Any,
    interactive: bool | None,
    tty: bool | None,
    progress: str = "auto",
    *,
    no_status: bool = False,
    record: bool = True,
) -> None:
    """Plan, then the one start sequence (jobs.execute.start_job); exit with the job's code
    (`--detach`: print the container's name). `record=False`: a shell is not a run."""
    from gpulaunch.engine.supervise import choose
    from gpulaunch.jobs.execute import JobIO, Start, plan_job, start_job
    from gpulaunch.records.record import RunRecorder

    detach, host = spec.opts.detach, spec.opts.no_container
    job = plan_job(spec)  # before any build
    print_warnings(job.plan.launch.warnings)
    if not (detach or host):
        job.plan.run.stdin, job.plan.run.tty = choose(interactive, tty)
    shown = functools.partial(build_with_progress, progress=progress)
    io = JobIO(sys.stdout.buffer, sys.stderr.buffer, echo_err, shown)
    # host jobs and jobs with a terminal own the terminal: no status line
    status = status_line(io, no_status or detach or host or job.plan.run.tty)
    on_sample = status and status.show
    observers = [RunRecorder(echo_err, price=spec.price, on_sample=on_sample)] if record else []
    try:
        job = start_job(job, io, make_engine, observers, Start(detach=detach))
    finally:
        if status is not None:
            status.close()
    exit_with(job, detach)


def show_dry_run(spec: Any, as_json: bool, interactive: tuple[bool, bool] = (False, False)) -> None:
    """Print the plan (and, for containers, the build and `docker run` lines); no daemon."""
    from gpulaunch.engine.buildspec import Builder
    from gpulaunch.image.build import BuildOptions, dry_run_text, prepare_build
    from gpulaunch.jobs.execute import plan_job
    from gpulaunch.launch.plan import dry_run_json
    from gpulaunch.masking import mask, mask_data, mask_env

    prepared = cli = None
    if spec.opts.no_container:
        job = plan_job(spec)
    else:
        kind: Builder = builder_choice(None)  # type: ignore[assignment]
        cli = make_engine().docker_cli() if kind == "buildkit" else None  # the CLI probe only
        prepared = prepare_build(
            spec.cfg, spec.project, kind, BuildOptions(builder=kind, config_file=spec.config_file)
        )
        job = plan_job(spec, spec.opts.image or spec.cfg.launch.image or prepared.tag)
        job.plan.run.stdin, job.plan.run.tty = interactive
    plan = job.plan
    print_warnings(plan.launch.warnings)
    if as_json:
        typer.echo(json.dumps(mask_data(dry_run_json(prepared, plan)), indent=2))
        return
    for line in plan.summary_lines():
        typer.echo(mask(f"# {line}"))
    typer.echo("# env:")
    shown = mask_env({k: str(item.value) for k, item in plan.launch.env.items()})
    for key, item in sorted(plan.launch.env.items()):
        typer.echo(f"#   {key}={shown[key]}  ({item.source})")
    if prepared is None:
        typer.echo("# command (host)")
    else:
        typer.echo("# build (skipped when the tag exists)")
        typer.echo(dry_run_text(prepared, cli), nl=False)
        typer.echo("# run")
    typer.echo(run_line(plan, spec.opts.detach))


@app.command()
def ps(
    all_states: Annotated[bool, typer.Option("--all", "-a", help="Include exited ones.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List containers started by `gpulaunch run` (run id, project label and name together)."""
    rows = []
    for container in make_engine().list_managed(all_states):
        _finish_record(container)
        labels = container.labels or {}
        tags = container.image.tags if container.image else []
        rows.append(
            {
                "name": container.name,
                "id": container.short_id,
                "run_id": labels.get("io.gpulaunch.run-id", ""),
                "project": labels.get("io.gpulaunch.project", ""),
                "status": container.status,
                "image": tags[0] if tags else "",
            }
        )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from gpulaunch.textcheck import shown

    keys = ("name", "project", "status", "image")
    print_table(
        [k.upper() for k in keys], ([shown(row[k]) for k in keys] for row in rows), "ellipsis"
    )


def _check_ident(ident: str) -> None:
    """A container name or id: non-empty, one line, docker's name characters."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}", ident):
        raise ConfigError(f"ID: {ident!r} is not a container name or id")


@app.command()
def logs(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Container name or id.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming.")] = False,
) -> None:
    """Show the output of a gpulaunch container."""
    _check_ident(ident)
    container = make_engine().get_managed(ident)
    if follow:
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    else:
        sys.stdout.buffer.write(container.logs())
    _finish_record(container)


@app.command()
def stop(
    ident: Annotated[str, typer.Argument(metavar="ID", help="Container name or id.")],
    timeout: Annotated[
        int, typer.Option(help="Seconds before SIGKILL (0-86400).", min=0, max=86400)
    ] = 45,
) -> None:
    """Stop (SIGTERM, then SIGKILL after the timeout) and remove a gpulaunch container."""
    _check_ident(ident)
    engine = make_engine()
    container = engine.get_managed(ident)
    container.stop(timeout=timeout)
    _finish_record(container)  # before it is removed: its exit code is in the record
    engine.discard(container)
    typer.echo(f"stopped {container.name}")


def _finish_record(container: Any) -> None:
    """A finished detached run's record is completed by whichever command sees it first."""
    from gpulaunch.records.reconcile import finish_container

    labels = container.labels or {}
    finish_container(container, labels.get("io.gpulaunch.run-id"), echo_err)


# bash when the image has it, else sh (a slim base image may lack bash)
DEFAULT_SHELL = ["sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh"]


@app.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
def shell(
    ctx: typer.Context,
    config: ConfigOpt = None,
    gpus: GpusOpt = None,
    profile: ProfileOpt = None,
    env: EnvOpt = None,
    mounts: MountOpt = None,
    allow_unsafe_mounts: UnsafeMountsOpt = False,
    network: NetworkOpt = None,
    image: ImageOpt = None,
    rebuild: RebuildOpt = False,
    sets: SetOpt = None,
    interactive: InteractiveOpt = None,
    tty: TtyOpt = None,
) -> None:
    """Open a shell in the project's image, with `run`'s mounts, GPUs and env (no torchrun).

    A command instead of the shell goes after `--`: gpulaunch shell -- nvidia-smi
    """
    from gpulaunch.jobs.execute import JobSpec
    from gpulaunch.jobs.options import check_options, options_from_flags

    command: list[str] = list(ctx.meta.get(AFTER_DASHDASH) or []) or list(DEFAULT_SHELL)
    opts = options_from_flags(locals(), command=command, nproc=1)  # one process: no torchrun
    check_options(opts)  # run's checks: one-line flags, --network, --image, mounts, env
    cfg, project = load_project(config, sets)
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild)
    _launch(spec, interactive, tty, no_status=True, record=False)
