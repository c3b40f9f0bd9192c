"""The context every command works in, in one place: error printing and the exit-code map
(`handle_errors`, `echo_err`), the config load, the engine, the tables that must stay whole
off a terminal, and what job commands show (the run line, plan warnings, the live GPU status
line, the exit with the job's own code, a known failure's cause and fix last). The typer app
itself is `app.py`."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import typer

from gpulaunch.errors import ExitCode, GpulaunchError


def echo_err(message: str) -> None:
    """Every message gpulaunch writes to stderr, masked (URL credentials, secret values), with
    control characters from labels, records or engine replies shown as escapes."""
    from gpulaunch.masking import mask
    from gpulaunch.textcheck import shown

    typer.echo(mask(shown(message)), err=True)


@contextlib.contextmanager
def handle_errors(debug: bool) -> Iterator[None]:
    """Map GpulaunchError to its exit code with a one-line message; tracebacks only with --debug.
    Around the root group's invoke (app.py), so every command's errors are mapped here once;
    click's own (usage errors, exit, abort) pass through to the group's main."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.TyperException):
        raise
    except GpulaunchError as err:
        if debug:
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
        if debug:
            raise
        mapped = _outside_error(err)
        if mapped is not None:
            message, code = mapped
            echo_err(f"gpulaunch: error: {message}")
            raise typer.Exit(int(code)) from None
        echo_err(f"gpulaunch: internal error: {type(err).__name__}: {err} (rerun with --debug)")
        raise typer.Exit(int(ExitCode.FAILURE)) from None


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


def output_target(output: str, project: Path) -> Any:
    """Where `-o` (render, export) writes: None for stdout; else judged by where the path
    really lands, a link inside the project refused (ci/report.resolve_output)."""
    from gpulaunch.ci.report import resolve_output
    from gpulaunch.fsio import is_stdout

    return None if is_stdout(output) else resolve_output(Path(output), project, "--output")


def write_output(text: str, output: str, target: Any, force: bool) -> None:
    """`text` on stdout (`target` None) or in the file output_target found for `output`."""
    from gpulaunch.fsio import write_file

    if target is None:
        typer.echo(text, nl=False)
        return
    write_file(target.path, text, force=force, root=target.root)
    echo_err(f"wrote {output}")


def make_engine() -> Any:
    from gpulaunch.engine.docker_api import Engine

    return Engine()


def print_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    overflow: Literal["ellipsis", "fold"],
    highlight: bool = True,
) -> None:
    """A rich table on stdout; off a terminal nothing is cut or wrapped: scripts read it."""
    from rich.console import Console
    from rich.table import Table

    table = Table(*headers, box=None)
    for row in rows:
        table.add_row(*row)
    wide = not sys.stdout.isatty()
    for column in table.columns:
        column.no_wrap = wide
        column.overflow = "ignore" if wide else overflow
    console = Console(width=100_000 if wide else None, markup=False, highlight=highlight)
    console.print(table, crop=not wide)


@dataclasses.dataclass(eq=False)
class StatusLine:
    """The live GPU line on a terminal's stderr, redrawn in place (`\\r`, erase line).

    Job output written to the same terminal clears the line first and redraws it after, so
    the two never share a line. Off a terminal (piped, a file, TERM=dumb) there is none.
    """

    stream: Any
    text: str = ""
    lock: Any = dataclasses.field(default_factory=threading.RLock)

    @staticmethod
    def wanted(no_status: bool) -> bool:
        return not no_status and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"

    def show(self, samples: list[Any]) -> None:
        from gpulaunch.records.metrics import status_text

        with self.lock:
            self.text = status_text(samples)
            self._draw()

    def _draw(self) -> None:
        if self.text:
            self.stream.write(f"\r\x1b[K{self.text}".encode())
            self.stream.flush()

    def clear(self) -> None:
        with self.lock:
            if self.text:
                self.stream.write(b"\r\x1b[K")
                self.stream.flush()

    def guard(self, out: Any) -> Any:
        """`out` (a binary stream on the same terminal) that keeps off the status line."""
        line = self

        class Guarded:
            def write(self, data: bytes) -> int:
                with line.lock:
                    line.clear()
                    written = int(out.write(data))
                    out.flush()
                    if data.endswith(b"\n"):
                        line._draw()
                    return written

            def flush(self) -> None:
                out.flush()

        return Guarded()

    def close(self) -> None:
        self.clear()
        self.text = ""


def status_line(io: Any, off: bool) -> Any:
    """The live GPU line (stderr is a terminal, no --no-status); job output keeps off it."""
    if not StatusLine.wanted(off):
        return None
    status = StatusLine(sys.stderr.buffer)
    io.err = status.guard(io.err)
    if sys.stdout.isatty():
        io.out = status.guard(io.out)
    return status


def exit_with(job: Any, detach: bool) -> None:
    """Exit with the job's code, a failure's known cause and fix the last line printed
    (`--detach`: print the container's name instead)."""
    if detach:
        typer.echo(job.container.name)
        return
    code = job.code or 0
    if code:
        echo_err(f"gpulaunch: job exited with {code}")
    if code and job.explanation is not None:
        echo_err(f"gpulaunch: {job.explanation.text()}")
    raise typer.Exit(code)


def print_warnings(warnings: Iterable[str]) -> None:
    for warning in warnings:
        echo_err(f"warning: {warning}")


def run_line(plan: Any, detach: bool = False) -> str:
    """What a plan runs, as one shell line with secrets masked: `env ... CMD` on the host, the
    `docker run` line for a container (what --dry-run prints and `rerun` shows first)."""
    from gpulaunch.engine.runspec import engine_run_argv, shell_line
    from gpulaunch.masking import mask, mask_env

    if plan.host_mode:
        env_args = [f"{k}={v}" for k, v in sorted(mask_env(plan.run.env).items())]
        return mask(shell_line(["env", *env_args, *plan.run.command]))
    shown = dataclasses.replace(plan.run, env=mask_env(plan.run.env))
    run_argv = engine_run_argv(shown, make_engine().known_kind(), detach=detach)  # podman run there
    return mask(shell_line([mask(a) if a.count("=") else a for a in run_argv]))
