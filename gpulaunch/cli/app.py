"""The typer app (usage errors as one line, the words after `--`, the root options) and the
options commands share, each declared once (the launch options of run, shell, smoke and
export among them). Every other error is mapped in `common.handle_errors`.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path, PosixPath
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpulaunch import __version__
from gpulaunch.cli.common import echo_err, handle_errors
from gpulaunch.errors import ConfigError, ExitCode


class _Group(TyperGroup):
    """Usage errors (bad flag values, missing arguments) as one `gpulaunch: error:` line with
    exit 2, like every other bad input, instead of click's multi-line box; every command's
    domain errors mapped once, around `invoke` (common.handle_errors). Commands are built on
    demand and the top-level help is printed from a table (gpulaunch/cli/__init__.py)."""

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

        root_help(self, ctx)

    def invoke(self, ctx: Any) -> Any:
        with handle_errors(debug=ctx.params.get("debug", False)):
            return super().invoke(ctx)

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = rv if isinstance(rv, int) else 0
        except typer.TyperException as err:  # click's ClickException (typer vendors click)
            if type(err).__name__ == "NoArgsIsHelpError":
                err.show()  # type: ignore[attr-defined]
            else:
                reason = " ".join(err.format_message().split())
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


app = typer.Typer(
    name="gpulaunch",
    cls=_Group,
    help="Build checked PyTorch GPU images and launch training in them.",
    no_args_is_help=True,
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


def job_words(ctx: Any, script: str | None, args: list[str] | None) -> tuple[list[str], list[str]]:
    """(SCRIPT's arguments, the raw command) of `run`/`smoke`: `CMD -- COMMAND ...` is a
    command, never re-read as SCRIPT; `CMD SCRIPT [ARGS] -- MORE` gives SCRIPT more arguments."""
    tail: list[str] | None = ctx.meta.get(AFTER_DASHDASH)
    rest = list(args or [])
    if tail is None or script is not None:
        return rest + list(tail or []), []
    if not tail:
        name = ctx.info_name
        raise ConfigError(f"{name}: nothing after --; give a command ({name} -- python -m x)")
    return rest, list(tail)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"gpulaunch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[  # read from ctx.params by _Group.invoke
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


NetworkOpt = Annotated[
    str | None, typer.Option("--network", help="default | host | none (overrides the config).")
]

# The launch options, declared once: run, shell, smoke and export take these as they are
# (an option whose meaning differs in a command, such as smoke's `--gpus auto` or export's
# per-node counts, is that command's own).
ScriptArg = Annotated[
    str | None, typer.Argument(help="Python script in the project (or use -- COMMAND).")
]
ArgsArg = Annotated[list[str] | None, typer.Argument(help="Arguments for the script.")]
GpusOpt = Annotated[
    str | None, typer.Option(help='GPUs: N, "all", "0,2" or 0 for CPU (default: config).')
]
NprocOpt = Annotated[
    int | None, typer.Option(help="Processes (torchrun); default: one per GPU.", min=1, max=1024)
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
PrecisionOpt = Annotated[
    str | None, typer.Option(help="fp32, tf32, fp16 or bf16 (sets the env contract).")
]
NcclOpt = Annotated[
    str | None,
    typer.Option(help="NCCL preset: auto, nvlink, pcie, ib-gdr, tcp, debug, safe, none."),
]
NumaOpt = Annotated[
    str | None, typer.Option(help="NUMA binding per rank: auto, node, socket, off.")
]
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


def _plain(annotation: Any) -> Any:
    """The type without `| None`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if union and len(args) == 1 else annotation


def fast_value(annotation: Any, info: Any, value: Any) -> tuple[bool, Any]:
    """(True, converted) when the simple rules convert `value` as typer's adapter would
    (`info`: the parameter's typer ParameterInfo; a ranged int is converted inside its range
    only, so every refusal and clamp stays typer's)."""
    kind = _plain(annotation)
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
