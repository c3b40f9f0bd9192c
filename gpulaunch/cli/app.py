"""The typer app, its error mapping and the options every command shares.

Every `GpulaunchError` becomes one `gpulaunch: error:` line and its exit code here, and
only here; OS and engine errors are mapped too; tracebacks only with `--debug`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import sys
import traceback
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PosixPath
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from gpulaunch import __version__
from gpulaunch.errors import ExitCode, GpulaunchError


class _Group(TyperGroup):
    """Usage errors (bad flag values, missing arguments) as one `gpulaunch: error:` line with
    exit 2, like every other bad input, instead of click's multi-line box. Commands are built
    on demand and the top-level help is printed from a table (gpulaunch/cli/__init__.py)."""

    def __init__(self, **attrs: Any) -> None:
        from gpulaunch.cli import LazyCommands

        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands)

    def get_params(self, ctx: Any) -> list[Any]:
        # typer's `--install-completion` edits the user's shell start-up file (following a
        # symlink, outside gpulaunch's one writer); `--show-completion` prints the script.
        return [p for p in super().get_params(ctx) if p.name != "install_completion"]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from gpulaunch.cli import root_help

        if not root_help(self, ctx):
            super().format_help(ctx, formatter)

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
                echo_err(f"gpulaunch: error: {reason}")
                ctx = getattr(err, "ctx", None)
                if ctx is not None:
                    echo_err(f"hint: see `{ctx.command_path} --help`")
            code = int(getattr(err, "exit_code", ExitCode.USAGE))
        except typer.Abort:
            echo_err("gpulaunch: interrupted")
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
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# Where `RunCommand` keeps the words after `--` (ctx.meta): run, shell, smoke and rerun.
AFTER_DASHDASH = "gpulaunch.after_dashdash"


class RunCommand(TyperCommand):
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


F = TypeVar("F", bound=Callable[..., Any])


class _State:
    debug = False


STATE = _State()


def echo_err(message: str) -> None:
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
            echo_err(f"gpulaunch: error: {err.message}")
            if err.hint:
                echo_err(f"hint: {err.hint}")
            raise typer.Exit(int(err.exit_code)) from None
        except BrokenPipeError:  # `gpulaunch ... | head`: the reader left; not an error
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - flushed at interpreter exit
            raise typer.Exit(0) from None
        except KeyboardInterrupt:
            echo_err("gpulaunch: interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except Exception as err:
            if STATE.debug:
                raise
            mapped = _outside_error(err)
            if mapped is not None:
                message, code = mapped
                echo_err(f"gpulaunch: error: {message}")
                raise typer.Exit(int(code)) from None
            echo_err(f"gpulaunch: internal error: {type(err).__name__}: {err} (rerun with --debug)")
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


def load_project(
    config: Path | None, sets: list[str] | None = None, *, write_cache: bool = True
) -> tuple[Any, Path]:
    """The validated config (from the config cache when the file is unchanged, without
    pydantic) and the project folder; `write_cache=False` for --dry-run (it writes nothing)."""
    from gpulaunch.configcache import find_config, load

    path = find_config(config, Path.cwd())
    if config is not None and not path.exists():
        from gpulaunch.errors import ConfigError

        raise ConfigError(
            f"--config: {str(config)!r} not found; if that option was meant for your script, "
            "put it after `--` (gpulaunch run train.py -- -c ...)"
        )
    return load(path, sets or (), write=write_cache), path.resolve().parent


def make_engine() -> Any:
    from gpulaunch.engine.docker_api import Engine

    return Engine()


NetworkOpt = Annotated[
    str | None, typer.Option("--network", help="default | host | none (overrides the config).")
]


def check_single_line(flags: dict[str, str | None]) -> None:
    from gpulaunch.jobs.options import check_flag_lines

    check_flag_lines(dict(flags))


def check_network_flag(network: str | None) -> None:
    from gpulaunch.jobs.options import check_network

    check_network(network)


def main() -> None:
    app()


# -- flag values without pydantic ----------------------------------------------------------
# typer (0.29+) coerces every parameter through a pydantic TypeAdapter, built the first time
# the parameter is processed, even for an option left at its default. That import and the
# schema build are ~40 % of a short command's time. `_install_fast_params()` makes typer's
# parameter build its coercion lazily: an option left unset (None) needs none; a `str`,
# `bool`, `int` (inside its range), `Path` or `list[str]` value is converted here exactly as the
# adapter would; anything else (choices, floats, a value the simple rules do not
# accept) goes to typer's own adapter, built then, so its error messages stay typer's.
# tests/cli/test_fastparams.py compares both on every command's parameters. A no-op when
# typer's internals differ from what it expects (then typer works as shipped). Kept because
# it pays: `gpulaunch history` took 120 ms with it and 199 ms without (median of 15 runs,
# typer 0.29.2, 2026-12-05); pyproject.toml pins typer to the range it is tested on.


_INT = re.compile(r"[+-]?[0-9]+")


def _plain(annotation: Any) -> tuple[Any, bool]:
    """(the type without `| None`, whether None was allowed)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def fast_value(annotation: Any, info: Any, value: Any) -> tuple[bool, Any]:
    """(True, converted) when the simple rules convert `value` as typer's adapter would
    (`info`: the parameter's typer ParameterInfo; a ranged int is converted inside its range
    only, so every refusal and clamp stays typer's)."""
    kind, _ = _plain(annotation)
    if kind is str and type(value) is str:
        return True, value
    if kind is bool and type(value) is bool:
        return True, value
    if kind is int:
        number = value if type(value) is int else None
        if type(value) is str and _INT.fullmatch(value) and len(value) < 20:
            number = int(value)
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        if (
            number is not None
            and (low is None or low <= number)
            and (high is None or number <= high)
        ):
            return True, number
    if kind is Path and type(value) in (str, PosixPath) and "\0" not in str(value):
        return True, Path(value)
    listed = typing.get_origin(kind) is list and typing.get_args(kind) == (str,)
    if listed and isinstance(value, list | tuple) and all(type(v) is str for v in value):
        return True, list(value)
    return False, None


def _install_fast_params() -> None:
    try:
        from typer import _coercion, core

        base = _coercion.RuntimeParam
        build = _coercion.build_runtime_param
        param_cls = core._TyperParameter
        if not hasattr(param_cls, "get_runtime_param"):
            return
    except (ImportError, AttributeError):
        return

    @dataclass(frozen=True)
    class LazyRuntimeParam(base):  # type: ignore[misc,valid-type]
        descriptor: Any = None
        real: list[Any] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done, converted = fast_value(self.annotation, self.parameter_info, value)
            if done:
                return converted
            if not self.real:
                self.real.append(build(self.descriptor))
            return self.real[0]._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            if desc.file_annotation is not None:
                self._runtime_param = build(desc)
            else:
                self._runtime_param = LazyRuntimeParam(
                    parameter_info=desc.parameter_info, annotation=desc.annotation, descriptor=desc
                )
        return self._runtime_param

    param_cls.get_runtime_param = get_runtime_param  # type: ignore[method-assign]


_install_fast_params()
