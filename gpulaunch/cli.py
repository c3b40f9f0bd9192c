"""Thin typer commands: parse, call one core function, map domain errors in one place.

Heavy modules (docker, jinja2, pydantic, NVML) are imported inside the commands that need
them so `gpulaunch --help` starts as fast as a bare typer app.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from gpulaunch import __version__
from gpulaunch.errors import ConfigError, ExitCode, GpulaunchError


class _Group(TyperGroup):
    """Usage errors (bad flag values, missing arguments) as one `gpulaunch: error:` line with
    exit 2, like every other bad input, instead of click's multi-line box."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        click_exception = _click_exception()
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = rv if isinstance(rv, int) else 0
        except click_exception as err:
            if type(err).__name__ == "NoArgsIsHelpError":
                err.show()  # type: ignore[attr-defined]
            else:
                reason = " ".join(err.format_message().split())  # type: ignore[attr-defined]
                _err(f"gpulaunch: error: {reason}")
                ctx = getattr(err, "ctx", None)
                if ctx is not None:
                    _err(f"hint: see `{ctx.command_path} --help`")
            code = int(getattr(err, "exit_code", ExitCode.USAGE))
        except typer.Abort:
            _err("gpulaunch: interrupted")
            code = int(ExitCode.INTERRUPTED)
        if not standalone_mode:
            return code
        sys.exit(code)


def _click_exception() -> type[Exception]:
    """click's ClickException: typer >= 0.24 vendors click as typer._click."""
    import importlib

    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found: type[Exception] = importlib.import_module(module).ClickException
        except ImportError:
            continue
        return found
    raise RuntimeError("neither typer._click nor click is importable")  # pragma: no cover


app = typer.Typer(
    name="gpulaunch",
    cls=_Group,
    help="Build checked PyTorch GPU images and launch training in them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

F = TypeVar("F", bound=Callable[..., Any])


class _State:
    debug = False


STATE = _State()


def _err(message: str) -> None:
    """Every message gpulaunch writes to stderr, masked (URL credentials, secret values)."""
    from gpulaunch.masking import mask

    typer.echo(mask(message), err=True)


def handle_errors(fn: F) -> F:
    """Map GpulaunchError to its exit code with a one-line message; tracebacks only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except GpulaunchError as err:
            if STATE.debug:
                traceback.print_exc()
            _err(f"gpulaunch: error: {err.message}")
            if err.hint:
                _err(f"hint: {err.hint}")
            raise typer.Exit(int(err.exit_code)) from None
        except BrokenPipeError:  # `gpulaunch ... | head`: the reader left; not an error
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at interpreter exit
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            _err("gpulaunch: interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except Exception as err:
            if STATE.debug:
                raise
            mapped = _outside_error(err)
            if mapped is not None:
                message, code = mapped
                _err(f"gpulaunch: error: {message}")
                raise typer.Exit(int(code)) from None
            _err(f"gpulaunch: internal error: {type(err).__name__}: {err} (rerun with --debug)")
            raise typer.Exit(int(ExitCode.FAILURE)) from None

    return wrapper  # type: ignore[return-value]


def _outside_error(err: Exception) -> tuple[str, ExitCode] | None:
    """A one-line message and exit code for errors from the OS and the Docker engine.

    Engine errors are recognised by the module of their class (docker.errors,
    requests.exceptions, urllib3), so start-up never imports docker for this.
    """
    modules = [cls.__module__ for cls in type(err).__mro__]
    if any(m.split(".")[0] in ("docker", "requests", "urllib3") for m in modules):
        detail = " ".join(str(err).split()) or type(err).__name__
        return f"Docker engine: {detail}", ExitCode.ENGINE
    if isinstance(err, OSError):
        reason = err.strerror or str(err) or type(err).__name__
        if err.filename is None:
            _quiet_stdout()
            return f"cannot write output: {reason}", ExitCode.USAGE
        return f"{err.filename}: {reason}", ExitCode.USAGE
    return None


def _quiet_stdout() -> None:
    """After a failed write to stdout, drop what is still buffered so exit stays quiet."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # stdout itself is what failed
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at interpreter exit


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gpulaunch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show Python tracebacks for errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Build checked PyTorch GPU images and launch training in them."""
    STATE.debug = debug


ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Path to gpulaunch.yaml (default: ./gpulaunch.yaml)."),
]


def _load(config: Path | None) -> tuple[Any, Path]:
    from gpulaunch.config import find_config, load_config

    path = find_config(config, Path.cwd())
    return load_config(path), path.resolve().parent


@app.command()
@handle_errors
def init(
    directory: Annotated[Path, typer.Argument(help="Project folder.")] = Path("."),
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="No prompts; use flags/detection.")
    ] = False,
    torch: Annotated[str | None, typer.Option(help='PyTorch version, or "none".')] = None,
    cuda: Annotated[str | None, typer.Option(help='CUDA version like "12.4", or "cpu".')] = None,
    python: Annotated[str | None, typer.Option(help='Python version like "3.11".')] = None,
    flavor: Annotated[
        str | None, typer.Option(help="runtime | devel | ngc | cpu (default: runtime).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Image name (default: folder name).")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing gpulaunch.yaml.")] = False,
) -> None:
    """Write a validated gpulaunch.yaml (and a .dockerignore) for a project."""
    from gpulaunch.initcmd import InitOptions, run_init

    interactive = not yes
    if interactive and not sys.stdin.isatty():
        raise ConfigError("init: stdin is not a terminal; pass --yes (with --torch/--cuda/...)")
    result = run_init(
        InitOptions(
            directory=directory,
            torch=torch,
            cuda=cuda,
            python=python,
            flavor=flavor,
            name=name,
            force=force,
            interactive=interactive,
        )
    )
    for note in result.notes:
        _err(note)
    typer.echo(f"wrote {result.config_path}")
    if result.dockerignore_written:
        typer.echo(f"wrote {result.dockerignore_path}")
    typer.echo(f"image: {result.summary}")


@app.command()
@handle_errors
def render(
    config: ConfigOpt = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", help="File to write; -, /dev/stdout or /dev/fd/1: stdout."),
    ] = "-",
    builder: Annotated[
        str | None,
        typer.Option(help="buildkit or classic (default: what `build` would use)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing output file.")] = False,
) -> None:
    """Print the Dockerfile for gpulaunch.yaml."""
    from gpulaunch.fsio import is_stdout, write_file
    from gpulaunch.render import plan_image, render_dockerfile

    kind = _builder_choice(builder)
    cfg, project = _load(config)
    plan = plan_image(cfg, project, kind)  # type: ignore[arg-type]
    text = render_dockerfile(plan)
    for warning in plan.resolved.warnings:
        _err(f"warning: {warning}")
    if is_stdout(output):
        typer.echo(text, nl=False)
    else:
        target = Path(output).absolute()
        # inside the project every folder on the way is checked too (a planted link)
        inside = target.is_relative_to(project) and target != project
        write_file(target, text, force=force, root=project if inside else None)
        _err(f"wrote {output}")


def _builder_choice(builder: str | None) -> str:
    """--builder, else the builder `build` will use: decided from the docker client binary
    alone, so render, dry runs and the real build agree whether or not a daemon answers."""
    if builder not in (None, "buildkit", "classic"):
        raise ConfigError(f"--builder: {builder!r} is not buildkit or classic")
    if builder is not None:
        return builder
    from gpulaunch.engine import Engine

    return Engine().builder_kind()


@app.command()
@handle_errors
def versions(
    torch: Annotated[str | None, typer.Option(help="Only this PyTorch version.")] = None,
    cuda: Annotated[str | None, typer.Option(help="Only this CUDA version.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the catalog: valid torch / CUDA / Python / driver combinations."""
    from gpulaunch.versions_view import matrix_json, matrix_table

    if as_json:
        typer.echo(json.dumps(matrix_json(torch, cuda), indent=2))
    else:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(matrix_table(torch, cuda))


@app.command()
@handle_errors
def schema() -> None:
    """Print the JSON Schema of gpulaunch.yaml (for editors)."""
    from gpulaunch.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


def _engine() -> Any:
    from gpulaunch.engine import Engine

    return Engine()


def _build_with_progress(cfg: Any, project: Path, opts: Any) -> Any:
    """Run a build with a live one-line status (step n/N, the step, elapsed) on stderr."""
    from rich.console import Console

    from gpulaunch.build import run_build
    from gpulaunch.errors import BuildError

    console = Console(stderr=True)
    engine = _engine()
    with console.status("building…") as status:

        def on_progress(progress: Any) -> None:
            status.update(
                f"step {progress.step}/{progress.total}: {progress.current[:90]} "
                f"({progress.elapsed:.0f}s)"
            )

        try:
            outcome = run_build(cfg, project, engine, opts, on_progress)
        except BuildError as err:
            if err.log_tail:
                console.print(err.log_tail, markup=False, highlight=False, soft_wrap=True)
            raise
    if outcome.cached:
        _err(f"image {outcome.tag} is up to date (cached; --rebuild to force)")
    else:
        _err(f"built {outcome.tag} with {outcome.builder}; log: {outcome.log_path}")
    return outcome


NetworkOpt = Annotated[
    str | None, typer.Option("--network", help="default | host | none (overrides the config).")
]


def _check_single_line(flags: dict[str, str | None]) -> None:
    """String flags are whole single lines (no newline, Unicode separator or control char)."""
    from gpulaunch.textcheck import single_line

    for flag, value in flags.items():
        if value is None:
            continue
        try:
            single_line(value)
        except ValueError as err:
            raise ConfigError(f"{flag}: {value!r} {err}") from None
        if not value.strip():
            raise ConfigError(f"{flag}: must not be empty")


def _check_network(network: str | None) -> None:
    if network is not None and network not in ("default", "host", "none"):
        raise ConfigError(f"--network: {network!r} is not default, host or none")


@app.command()
@handle_errors
def build(
    config: ConfigOpt = None,
    network: NetworkOpt = None,
    rebuild: Annotated[bool, typer.Option(help="Build even if the tag exists.")] = False,
    no_cache: Annotated[bool, typer.Option(help="Build without the layer cache.")] = False,
    builder: Annotated[
        str | None, typer.Option(help="buildkit | classic (default: what the engine offers).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the docker build command; no daemon.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --dry-run: JSON plan.")] = False,
) -> None:
    """Build the image (tagged NAME:gl-<hash>); skipped when that tag already exists."""
    from gpulaunch.build import BuildOptions, dry_run_argv, dry_run_text, prepare_build
    from gpulaunch.engine import Engine

    _check_network(network)
    kind = _builder_choice(builder)
    cfg, project = _load(config)
    opts = BuildOptions(
        network=network,
        rebuild=rebuild,
        no_cache=no_cache,
        builder=kind,  # type: ignore[arg-type]
        config_file=config,
    )
    if dry_run:
        cli = Engine().docker_cli() if kind == "buildkit" else None
        prepared = prepare_build(cfg, project, kind, opts)  # type: ignore[arg-type]
        if as_json:
            from gpulaunch.masking import mask_data

            data = {
                "tag": prepared.tag,
                "tags": list(prepared.request.tags),
                "builder": kind,
                "build_args": prepared.request.build_args,
                "network": prepared.request.network,
                "argv": dry_run_argv(prepared, cli),
                "context": [e.rel for e in prepared.request.entries],
                "dockerfile": prepared.dockerfile,
            }
            typer.echo(json.dumps(mask_data(data), indent=2))
        else:
            typer.echo(dry_run_text(prepared, cli), nl=False)
        return
    outcome = _build_with_progress(cfg, project, opts)
    typer.echo(outcome.tag)


AFTER_DASHDASH = "gpulaunch.after_dashdash"


class _RunCommand(TyperCommand):
    """Keeps what follows the first `--` out of click's parser, verbatim.

    click drops the `--` itself, so `run -- ./job.sh` and `run ./job.sh` would look the
    same; the raw tail goes to ctx.meta and `run` treats it as a command (or SCRIPT's args).
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[AFTER_DASHDASH] = args[cut + 1 :]
            args = args[:cut]
        return super().parse_args(ctx, args)


@app.command(cls=_RunCommand, context_settings={"ignore_unknown_options": True})
@handle_errors
def run(
    ctx: typer.Context,
    script: Annotated[
        str | None, typer.Argument(help="Python script in the project (or use -- COMMAND).")
    ] = None,
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the script.")] = None,
    config: ConfigOpt = None,
    gpus: Annotated[
        str | None, typer.Option(help='GPUs: N, "all", "0,2" or 0 for CPU (default: config).')
    ] = None,
    nproc: Annotated[
        int | None,
        typer.Option(help="Processes (torchrun); default: one per GPU.", min=1, max=1024),
    ] = None,
    profile: Annotated[
        str | None, typer.Option(help="Launch profile (see `gpulaunch profiles`).")
    ] = None,
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
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")
    ] = None,
    mount: Annotated[list[str] | None, typer.Option("--mount", help="HOST:CONTAINER[:ro].")] = None,
    network: NetworkOpt = None,
    no_container: Annotated[
        bool,
        typer.Option("--no-container", help="Apply the same launch plan on this machine."),
    ] = False,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Start and return.")] = False,
    rebuild: Annotated[bool, typer.Option(help="Rebuild the image first.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and docker commands; no daemon.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --dry-run: JSON plan.")] = False,
) -> None:
    """Build if needed, then run SCRIPT (one process per GPU via torchrun) in the container.

    gpulaunch options may come before or after SCRIPT; options the script shares with
    gpulaunch go after `--`: gpulaunch run train.py --gpus 4 -- --config exp.yaml.
    Any other command: gpulaunch run -- python -m my.module --flag
    """
    from gpulaunch.build import BuildOptions, prepare_build
    from gpulaunch.engine import Builder, Engine
    from gpulaunch.jobs import RunOptions, plan_run, write_run_files
    from gpulaunch.launch import shell_line

    _check_network(network)
    _check_single_line(
        {
            "--gpus": gpus,
            "--profile": profile,
            "--nccl": nccl,
            "--nccl-ifname": nccl_ifname,
            "--numa": numa,
            "--precision": precision,
        }
    )
    if detach and no_container:
        raise ConfigError("--detach: not available with --no-container")
    tail: list[str] | None = ctx.meta.get(AFTER_DASHDASH)
    rest = list(args or [])
    command: list[str] = []
    if script is None and tail is not None:
        command = list(tail)  # `run -- CMD ...`: a raw command, never re-read as SCRIPT
        if not command:
            raise ConfigError("run: nothing after --; give a command (run -- python -m x)")
    elif tail is not None:
        rest += tail  # `run SCRIPT [ARGS] -- MORE ARGS`
    cfg, project = _load(config)
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
    )
    cwd = Path.cwd()
    if no_container:
        plan = plan_run(cfg, project, cwd, opts, "(host)")
        _print_warnings(plan)
        if dry_run:
            _print_dry_run(plan, None, None, as_json)
            return
        from gpulaunch.hostrun import run_on_host

        write_run_files(plan, project)

        _err(f"running on this host: {shell_line(plan.run.command)}")
        code = run_on_host(plan.run, cwd)
        if code:
            _err(f"gpulaunch: job exited with {code}")
        raise typer.Exit(code)
    if dry_run:
        kind: Builder = _builder_choice(None)  # type: ignore[assignment]
        cli = Engine().docker_cli() if kind == "buildkit" else None
        prepared = prepare_build(cfg, project, kind, BuildOptions(builder=kind, config_file=config))
        plan = plan_run(cfg, project, cwd, opts, prepared.tag)
        _print_warnings(plan)
        _print_dry_run(plan, prepared, cli, as_json, detach)
        return
    plan = plan_run(cfg, project, cwd, opts, "(pending)")  # validate flags before building
    _print_warnings(plan)
    outcome = _build_with_progress(cfg, project, BuildOptions(rebuild=rebuild, config_file=config))
    plan.run.image = outcome.tag
    write_run_files(plan, project)
    engine = _engine()
    from gpulaunch.runner import start, supervise

    if detach:
        container = start(engine, plan.run, _err)
        typer.echo(container.name)
        return
    _err(f"running {plan.run.name}: {shell_line(plan.run.command)}")
    code = supervise(engine, plan.run, warn=_err)
    if code:
        _err(f"gpulaunch: job exited with {code}")
    raise typer.Exit(code)


def _print_warnings(plan: Any) -> None:
    for warning in plan.launch.warnings:
        _err(f"warning: {warning}")


def _print_dry_run(plan: Any, prepared: Any, cli: Any, as_json: bool, detach: bool = False) -> None:
    from gpulaunch.build import dry_run_text
    from gpulaunch.jobs import dry_run_json
    from gpulaunch.launch import docker_run_argv, shell_line
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
        env_args = [f"{k}={v}" for k, v in sorted(mask_env(plan.run.env).items())]
        typer.echo(mask(shell_line(["env", *env_args, *plan.run.command])))
        return
    typer.echo("# build (skipped when the tag exists)")
    typer.echo(dry_run_text(prepared, cli), nl=False)
    typer.echo("# run")
    run_argv = docker_run_argv(plan.run, detach=detach)
    typer.echo(mask(shell_line([mask(a) if a.count("=") else a for a in run_argv])))


@app.command()
@handle_errors
def ps(
    all_states: Annotated[bool, typer.Option("--all", "-a", help="Include exited ones.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List containers started by `gpulaunch run` (by their run-id label)."""
    rows = []
    for container in _engine().list_managed(all_states):
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

    table = Table("NAME", "PROJECT", "STATUS", "IMAGE", box=None)
    for row in rows:
        table.add_row(row["name"], row["project"], row["status"], row["image"])
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
    container = _engine().get_managed(ident)
    if follow:
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    else:
        sys.stdout.buffer.write(container.logs())


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
    engine = _engine()
    container = engine.get_managed(ident)
    container.stop(timeout=timeout)
    engine.discard(container)
    typer.echo(f"stopped {container.name}")


profiles_app = typer.Typer(
    help="Launch profiles: list them, or show one resolved with the source of each value.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(profiles_app, name="profiles")


def _optional_config(config: Path | None) -> Any:
    from gpulaunch.config import CONFIG_NAME, load_config

    path = config or Path.cwd() / CONFIG_NAME
    if config is None and not path.exists():
        return None
    return load_config(path)


@profiles_app.callback()
@handle_errors
def profiles_list(ctx: typer.Context, config: ConfigOpt = None) -> None:
    """List built-in profiles and those in gpulaunch.yaml."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from gpulaunch.profiles import list_profiles

    table = Table("PROFILE", "FROM", "DESCRIPTION", box=None)
    for name, origin, description in list_profiles(_optional_config(config)):
        table.add_row(name, origin, description)
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@profiles_app.command("show")
@handle_errors
def profiles_show(
    name: Annotated[str, typer.Argument(help="Profile name.")],
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show a profile resolved: env and docker options, and where each value came from."""
    from gpulaunch.config import validate_data
    from gpulaunch.profiles import CliOverrides, resolve_launch

    cfg = _optional_config(config) or validate_data({"name": "none"})
    resolved = resolve_launch(cfg, CliOverrides(profile=name))
    settings = {
        key: {"value": item.value, "source": item.source}
        for key, item in resolved.settings().items()
    }
    env = {k: {"value": v.value, "source": v.source} for k, v in sorted(resolved.env.items())}
    docker = {k: {"value": v.value, "source": v.source} for k, v in sorted(resolved.docker.items())}
    if as_json:
        data = {
            "profile": resolved.profile,
            "settings": settings,
            "env": env,
            "docker": docker,
            "warnings": list(resolved.warnings),
            "notes": list(resolved.notes),
        }
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    typer.echo(f"profile {resolved.profile}")
    for section, values in (("settings", settings), ("env", env), ("docker", docker)):
        typer.echo(f"{section}:")
        for key, item in values.items():
            typer.echo(f"  {key} = {item['value']}    # {item['source']}")
    for warning in resolved.warnings:
        _err(f"warning: {warning}")
    for note in resolved.notes:
        typer.echo(f"note: {note}")


def main() -> None:
    app()
