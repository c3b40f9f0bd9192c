"""Commands for CI and new machines: smoke (a short checked run with reports) and doctor."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import (
    ArgsArg,
    ConfigOpt,
    EnvOpt,
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
    app,
    job_words,
)
from gpulaunch.cli.common import echo_err, load_project, make_engine, print_table
from gpulaunch.cli.image import build_with_progress
from gpulaunch.errors import ExitCode


@app.command(cls=RunCommand, context_settings={"ignore_unknown_options": True})
def smoke(
    ctx: typer.Context,
    script: ScriptArg = None,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    steps: Annotated[
        int, typer.Option(help="GPULAUNCH_SMOKE_STEPS for the job (>= 1).", min=1, max=1_000_000)
    ] = 2,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds the job may run; then SIGTERM, SIGKILL after --grace, exit 124.",
            max=7 * 86400,
        ),
    ] = 600.0,
    grace: Annotated[
        int | None,
        typer.Option(help="Seconds from SIGTERM to SIGKILL (default 45).", min=0, max=3600),
    ] = None,
    gpus: Annotated[
        str,
        typer.Option(help='auto (every GPU, else the CPU), N, "all", "0,2" or 0.'),
    ] = "auto",
    require_gpu: Annotated[
        bool, typer.Option("--require-gpu", help="No GPU is a failure (exit 3), not the CPU.")
    ] = False,
    nproc: NprocOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    numa: NumaOpt = None,
    precision: PrecisionOpt = None,
    env: EnvOpt = None,
    mounts: MountOpt = None,
    network: NetworkOpt = None,
    rebuild: RebuildOpt = False,
    imports: Annotated[
        bool,
        typer.Option(
            "--imports",
            help="Only import the entry point's third-party modules in the image (no "
            "training) and name each that fails.",
        ),
    ] = False,
    junit: Annotated[
        str | None, typer.Option("--junit", metavar="FILE", help="Write JUnit XML here.")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Let --junit replace a file that is not a JUnit report.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the plan and docker commands; nothing built or run."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON result on stdout; all else on stderr.")
    ] = False,
) -> None:
    """Build if needed and run the job briefly for CI: GPULAUNCH_SMOKE=1 and
    GPULAUNCH_SMOKE_STEPS=N in its environment, a timeout, JUnit XML, a GitHub step summary.

    Exit codes: 0 passed; the job's own code when it failed; 124 timeout; 3 no GPU with
    --require-gpu (or no engine); 4 build failed; 2 bad input.
    """
    from gpulaunch.ci.report import (
        SUMMARY_ENV,
        append_summary,
        check_junit_file,
        check_output_file,
        check_summary_file,
        write_junit,
    )
    from gpulaunch.ci.smoke import SmokeOptions, log_file, prepare, run_smoke
    from gpulaunch.fsio import open_stream
    from gpulaunch.jobs.execute import JobIO, JobSpec
    from gpulaunch.jobs.options import check_flag_lines, check_options, options_from_flags
    from gpulaunch.records.record import RunRecorder

    rest, command = job_words(ctx, script, args)
    # --gpus as typed (`auto` included): prepare() resolves it
    opts = options_from_flags(locals(), args=rest, command=command)
    check_options(opts)  # run's checks on the flags smoke shares with it
    check_flag_lines({"--junit": junit})
    junit_path = check_output_file(junit, "--junit") if junit is not None else None
    summary = os.environ.get(SUMMARY_ENV)
    summary_path = check_output_file(summary, f"${SUMMARY_ENV}") if summary else None
    cfg, project = load_project(config, sets, write_cache=not dry_run)
    junit_to = check_junit_file(junit_path, project, force) if junit_path else None
    summary_to = check_summary_file(summary_path, project) if summary_path else None
    smoke_opts = SmokeOptions(steps, timeout, grace, gpus, require_gpu, imports)
    spec = JobSpec(cfg, project, Path.cwd(), opts, config_file=config, rebuild=rebuild)
    job = prepare(spec, smoke_opts)  # bad flags fail here: nothing built or written yet
    if dry_run:  # as `run --dry-run`: no daemon, no log, no record, no report
        from gpulaunch.cli.jobs import show_dry_run

        if gpus == "auto" and not as_json:
            typer.echo("# smoke: --gpus auto picks the GPUs at run time; shown: the CPU fallback")
        show_dry_run(spec, as_json)
        return
    out = sys.stderr.buffer if as_json else sys.stdout.buffer
    jobio = JobIO(out, sys.stderr.buffer, echo_err, build_with_progress)
    log_path = log_file(project, job.plan.run.run_id)
    with open_stream(log_path, root=project) as log:
        recorder = RunRecorder(echo_err, kind="smoke")  # smoke runs get records too
        result = run_smoke(job, smoke_opts, make_engine(), jobio, log, log_path, [recorder])
    if junit_to is not None:
        write_junit(result, *junit_to)
    if summary_to is not None:
        append_summary(result, summary_to)
    _finish(result, as_json, junit_path)


def _finish(result: Any, as_json: bool, junit_path: Path | None) -> None:
    """Say how it went (stderr), print the JSON result, exit with the documented code."""
    if result.error is not None and result.error.hint:
        echo_err(f"hint: {result.error.hint}")
    if result.outcome == "passed":
        echo_err(f"smoke passed in {result.duration:.1f} s")
    else:
        echo_err(f"gpulaunch: smoke {result.outcome}: {result.message}")
    echo_err(f"log: {result.log_path}")
    if junit_path is not None:
        echo_err(f"junit: {junit_path}")
    if as_json:
        from gpulaunch.masking import mask_data

        typer.echo(json.dumps(mask_data(result.to_json()), indent=2))
    raise typer.Exit(int(ExitCode.TIMEOUT) if result.outcome == "timeout" else result.exit_code)


_MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


@app.command()
def doctor(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check this machine for GPU training: engine, BuildKit, NVIDIA runtime, driver, GPUs,
    shared memory, disk, NUMA. A fix on every line that is not ✓; exit 1 on any ✗.

    With a gpulaunch.yaml (./ or --config) the driver and GPUs are checked against its image,
    and its entry points' imports against what the image installs.
    """
    from gpulaunch.ci.doctor import run_doctor

    cfg = project = None
    if config is not None or (Path.cwd() / "gpulaunch.yaml").is_file():
        cfg, project = load_project(config, sets)
    report = run_doctor(make_engine(), cfg, project=project)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        rows = ((_MARKS[c.status], c.name, c.detail, c.fix) for c in report.checks)
        print_table(("", "check", "status", "fix"), rows, "fold")
    raise typer.Exit(1 if report.failed else 0)
