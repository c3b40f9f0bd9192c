"""The typer app, its error mapping and the options every command shares.

Every `GpulaunchError` becomes one `gpulaunch: error:` line and its exit code here, and
only here; OS and engine errors are mapped too; tracebacks only with `--debug`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

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
    """Every message gpulaunch writes to stderr, masked (URL credentials, secret values), with
    control characters from labels, records or engine replies shown as escapes."""
    from gpulaunch.masking import mask
    from gpulaunch.textcheck import shown

    typer.echo(mask(shown(message)), err=True)


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
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk is no usage error
            _quiet_stdout()
            return (
                f"{err.filename or 'cannot write output'}: {reason} (the disk or quota is full)",
                ExitCode.FAILURE,
            )
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


SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="PATH=VALUE",
        help="Override a gpulaunch.yaml value, e.g. --set image.torch=2.5.1 (repeatable).",
    ),
]


def _load(config: Path | None, sets: list[str] | None = None) -> tuple[Any, Path]:
    from gpulaunch.config import find_config, load_config

    path = find_config(config, Path.cwd())
    if config is not None and not path.exists():
        from gpulaunch.errors import ConfigError

        raise ConfigError(
            f"--config: {str(config)!r} not found; if that option was meant for your script, "
            "put it after `--` (gpulaunch run train.py -- -c ...)"
        )
    return load_config(path, sets or ()), path.resolve().parent


def _engine() -> Any:
    from gpulaunch.engine.docker_api import Engine

    return Engine()


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


def main() -> None:
    app()
