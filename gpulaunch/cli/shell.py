"""`gpulaunch shell`: a shell (or `-- CMD`) in the project's image, set up as `run` sets up a
job (mounts, GPUs, env, profile, network) but one process and no torchrun."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import (
    ConfigOpt,
    NetworkOpt,
    SetOpt,
    _check_network,
    _check_single_line,
    _engine,
    _err,
    _load,
    app,
    handle_errors,
)
from gpulaunch.cli.jobs import AFTER_DASHDASH, InteractiveOpt, TtyOpt, _RunCommand

# bash when the image has it, else sh (a slim base image may lack bash)
DEFAULT_SHELL = ["sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh"]


@app.command(cls=_RunCommand, context_settings={"ignore_unknown_options": True})
@handle_errors
def shell(
    ctx: typer.Context,
    config: ConfigOpt = None,
    gpus: Annotated[
        str | None, typer.Option(help='GPUs: N, "all", "0,2" or 0 for CPU (default: config).')
    ] = None,
    profile: Annotated[
        str | None, typer.Option(help="Launch profile (see `gpulaunch profiles`).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")
    ] = None,
    mount: Annotated[list[str] | None, typer.Option("--mount", help="HOST:CONTAINER[:ro].")] = None,
    network: NetworkOpt = None,
    image: Annotated[
        str | None,
        typer.Option(help="Use this pushed image (REGISTRY/NAME@sha256:...); no build."),
    ] = None,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the image first.")] = False,
    sets: SetOpt = None,
    interactive: InteractiveOpt = None,
    tty: TtyOpt = None,
) -> None:
    """Open a shell in the project's image, with `run`'s mounts, GPUs and env (no torchrun).

    A command instead of the shell goes after `--`: gpulaunch shell -- nvidia-smi
    """
    from gpulaunch.cli.image import _build_with_progress
    from gpulaunch.cli.jobs import _exit_with, _print_warnings
    from gpulaunch.engine.interactive import choose
    from gpulaunch.jobs.execute import JobIO, JobSpec, build_image, plan_job, run_attached
    from gpulaunch.launch.plan import RunOptions

    _check_network(network)
    _check_single_line({"--gpus": gpus, "--profile": profile})
    command: list[str] = list(ctx.meta.get(AFTER_DASHDASH) or []) or list(DEFAULT_SHELL)
    cfg, project = _load(config, sets)
    opts = RunOptions(
        command=command,
        nproc=1,  # one process, as typed: never torchrun
        gpus=gpus,
        env=list(env or []),
        mounts=list(mount or []),
        network=network,
        profile=profile,
        image=image,
    )
    if image is not None:
        from gpulaunch.export.images import parse_ref

        parse_ref(image, "--image")
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild)
    job = plan_job(spec)
    _print_warnings(job.plan)
    job.plan.run.stdin, job.plan.run.tty = choose(interactive, tty)
    io = JobIO(sys.stdout.buffer, sys.stderr.buffer, _err, _build_with_progress)
    engine: Any = _engine()
    build_image(job, engine, io)
    _exit_with(run_attached(job, engine, io), job)  # no run record: a shell is not a run
