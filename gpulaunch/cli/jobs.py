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
    ConfigOpt,
    NetworkOpt,
    RunCommand,
    SetOpt,
    app,
    check_single_line,
    echo_err,
    handle_errors,
    load_project,
    make_engine,
)
from gpulaunch.cli.common import exit_with, print_warnings, run_line, status_line
from gpulaunch.cli.image import ProgressOpt, build_with_progress, builder_choice, check_progress
from gpulaunch.errors import ConfigError

InteractiveOpt = Annotated[
    bool | None,
    typer.Option(
        "--interactive/--no-interactive",
        "-i",
        help="Pass stdin to the job (default: when stdin is a terminal, a pipe or a file).",
    ),
]
TtyOpt = Annotated[
    bool | None,
    typer.Option(
        "--tty/--no-tty",
        "-t",
        help="Give the job a terminal (default: when stdin and stdout are terminals).",
    ),
]


# Options `run` and `shell` share (the same flags, the same words).
GpusOpt = Annotated[
    str | None, typer.Option(help='GPUs: N, "all", "0,2" or 0 for CPU (default: config).')
]
ProfileOpt = Annotated[str | None, typer.Option(help="Launch profile (see `gpulaunch profiles`).")]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")]
MountOpt = Annotated[list[str] | None, typer.Option("--mount", help="HOST:CONTAINER[:ro].")]
UnsafeMountsOpt = Annotated[
    bool,
    typer.Option(
        "--allow-unsafe-mounts",
        help="Let a mount reach gpulaunch's state, the engine socket, your credentials or /etc, "
        "/proc, /sys, /dev (refused otherwise: the job could read or take them).",
    ),
]
ImageOpt = Annotated[
    str | None, typer.Option(help="Run this pushed image (REGISTRY/NAME@sha256:...); no build.")
]
RebuildOpt = Annotated[bool, typer.Option(help="Rebuild the image first.")]


@app.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
@handle_errors
def run(
    ctx: typer.Context,
    script: Annotated[
        str | None, typer.Argument(help="Python script in the project (or use -- COMMAND).")
    ] = None,
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the script.")] = None,
    config: ConfigOpt = None,
    gpus: GpusOpt = None,
    nproc: Annotated[
        int | None,
        typer.Option(help="Processes (torchrun); default: one per GPU.", min=1, max=1024),
    ] = None,
    profile: ProfileOpt = None,
    nccl: Annotated[
        str | None,
        typer.Option(help="NCCL preset: auto, nvlink, pcie, ib-gdr, tcp, debug, safe, none."),
    ] = None,
    nccl_ifname: Annotated[
        str | None, typer.Option(help="Network interface(s) for NCCL/gloo sockets (tcp).")
    ] = None,
    numa: Annotated[
        str | None, typer.Option(help="NUMA binding per rank: auto, node, socket, off.")
    ] = None,
    precision: Annotated[
        str | None, typer.Option(help="fp32, tf32, fp16 or bf16 (sets the env contract).")
    ] = None,
    expandable_segments: Annotated[
        bool | None,
        typer.Option(
            "--expandable-segments/--no-expandable-segments",
            help="PYTORCH_ALLOC_CONF=expandable_segments:True (less fragmentation).",
        ),
    ] = None,
    env: EnvOpt = None,
    mount: MountOpt = None,
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
    from gpulaunch.jobs.execute import JobIO, JobSpec, plan_job, standard_observers
    from gpulaunch.jobs.options import check_options, check_price
    from gpulaunch.launch.plan import RunOptions

    check_single_line({"--price": price})
    check_progress(progress)
    if detach and (interactive or tty):
        flag = "--interactive" if interactive else "--tty"
        raise ConfigError(f"{flag}: not available with --detach")
    tail: list[str] | None = ctx.meta.get(AFTER_DASHDASH)
    rest = list(args or [])
    command: list[str] = []
    if script is None and tail is not None:
        command = list(tail)  # `run -- CMD ...`: a raw command, never re-read as SCRIPT
        if not command:
            raise ConfigError("run: nothing after --; give a command (run -- python -m x)")
    elif tail is not None:
        rest += tail  # `run SCRIPT [ARGS] -- MORE ARGS`
    opts = RunOptions(
        script=script,
        args=rest,
        command=command,
        gpus=gpus,
        nproc=nproc,
        env=list(env or []),
        mounts=list(mount or []),
        network=network,
        detach=detach,
        profile=profile,
        nccl=nccl,
        nccl_ifname=nccl_ifname,
        numa=numa,
        precision=precision,
        expandable_segments=expandable_segments,
        no_container=no_container,
        restarts=restarts,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        local_addr=local_addr,
        image=image,
        allow_unsafe_mounts=allow_unsafe_mounts,
    )
    check_options(opts)  # the same checks `rerun` applies to a record's options
    price = check_price(price)
    cfg, project = load_project(config, sets, write_cache=not dry_run)
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild, price=price)
    if dry_run:  # only what the flags say: a dry run's output must not depend on its stdin
        show_dry_run(spec, as_json, detach, (bool(interactive), bool(tty)))
        return
    job = plan_job(spec)  # before any build
    print_warnings(job.plan)
    if not (detach or no_container):
        from gpulaunch.engine.supervise import choose

        job.plan.run.stdin, job.plan.run.tty = choose(interactive, tty)
    shown = functools.partial(build_with_progress, progress=progress)
    io = JobIO(sys.stdout.buffer, sys.stderr.buffer, echo_err, shown)
    # host jobs and jobs with a terminal own the terminal: no status line
    status = status_line(io, no_status or detach or no_container or job.plan.run.tty)
    observers = standard_observers(spec, echo_err, on_sample=status and status.show)
    try:
        code = _start(job, io, observers, no_container, detach)
    finally:
        if status is not None:
            status.close()
    if code is None:
        return
    exit_with(code, job)


def _start(job: Any, io: Any, observers: Any, no_container: bool, detach: bool) -> int | None:
    from gpulaunch.jobs.execute import build_image, run_attached, run_on_this_host, start_detached

    if no_container:
        code = run_on_this_host(job, io, observers)
    else:
        engine = make_engine()  # one client for the build check and the run
        build_image(job, engine, io)
        if detach:
            typer.echo(start_detached(job, engine, io, observers))
            return None
        code = run_attached(job, engine, io, observers)
    return code


def show_dry_run(
    spec: Any, as_json: bool, detach: bool, interactive: tuple[bool, bool] = (False, False)
) -> None:
    """Print the plan (and, for containers, the build and `docker run` lines); no daemon."""
    from gpulaunch.engine.buildspec import Builder
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.image.build import BuildOptions, prepare_build
    from gpulaunch.jobs.execute import plan_job

    if spec.opts.no_container:
        job = plan_job(spec)
        print_warnings(job.plan)
        _print_dry_run(job.plan, None, None, as_json)
        return
    kind: Builder = builder_choice(None)  # type: ignore[assignment]
    cli = Engine().docker_cli() if kind == "buildkit" else None
    prepared = prepare_build(
        spec.cfg, spec.project, kind, BuildOptions(builder=kind, config_file=spec.config_file)
    )
    job = plan_job(spec, spec.opts.image or spec.cfg.launch.image or prepared.tag)
    job.plan.run.stdin, job.plan.run.tty = interactive
    print_warnings(job.plan)
    _print_dry_run(job.plan, prepared, cli, as_json, detach)


def _print_dry_run(plan: Any, prepared: Any, cli: Any, as_json: bool, detach: bool = False) -> None:
    from gpulaunch.image.build import dry_run_text
    from gpulaunch.launch.plan import dry_run_json
    from gpulaunch.masking import mask, mask_data, mask_env

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
        typer.echo(run_line(plan, detach))
        return
    typer.echo("# build (skipped when the tag exists)")
    typer.echo(dry_run_text(prepared, cli), nl=False)
    typer.echo("# run")
    typer.echo(run_line(plan, detach))


@app.command()
@handle_errors
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
    from rich.console import Console
    from rich.table import Table

    from gpulaunch.textcheck import shown

    table = Table("NAME", "PROJECT", "STATUS", "IMAGE", box=None)
    for row in rows:
        table.add_row(*(shown(row[k]) for k in ("name", "project", "status", "image")))
    # Off a terminal nothing may be cut or wrapped: scripts read these names.
    wide = not sys.stdout.isatty()
    for column in table.columns:
        column.no_wrap = wide
        column.overflow = "ignore" if wide else "ellipsis"
    Console(width=100_000 if wide else None, markup=False).print(table, crop=not wide)


def _check_ident(ident: str) -> None:
    """A container name or id: non-empty, one line, docker's name characters."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}", ident):
        raise ConfigError(f"ID: {ident!r} is not a container name or id")


@app.command()
@handle_errors
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
@handle_errors
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
@handle_errors
def shell(
    ctx: typer.Context,
    config: ConfigOpt = None,
    gpus: GpusOpt = None,
    profile: ProfileOpt = None,
    env: EnvOpt = None,
    mount: MountOpt = None,
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
    from gpulaunch.engine.supervise import choose
    from gpulaunch.jobs.execute import JobIO, JobSpec, build_image, plan_job, run_attached
    from gpulaunch.jobs.options import check_options
    from gpulaunch.launch.plan import RunOptions

    command: list[str] = list(ctx.meta.get(AFTER_DASHDASH) or []) or list(DEFAULT_SHELL)
    opts = RunOptions(
        command=command,
        nproc=1,  # one process, as typed: never torchrun
        gpus=gpus,
        env=list(env or []),
        mounts=list(mount or []),
        allow_unsafe_mounts=allow_unsafe_mounts,
        network=network,
        profile=profile,
        image=image,
    )
    check_options(opts)  # run's checks: one-line flags, --network, --image, mounts, env
    cfg, project = load_project(config, sets)
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild)
    job = plan_job(spec)
    print_warnings(job.plan)
    job.plan.run.stdin, job.plan.run.tty = choose(interactive, tty)
    io = JobIO(sys.stdout.buffer, sys.stderr.buffer, echo_err, build_with_progress)
    engine: Any = make_engine()
    build_image(job, engine, io)
    exit_with(run_attached(job, engine, io), job)  # no run record: a shell is not a run
