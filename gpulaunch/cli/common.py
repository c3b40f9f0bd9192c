"""What every job command shows on the terminal, in one place: the `run`/`rerun`/`shell`
line, plan warnings, the live GPU status line, and the exit with the job's own code (a known
failure's cause and fix last). `run`, `rerun`, `shell` and `smoke` share these."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from typing import Any

import typer

from gpulaunch.cli.app import echo_err


class StatusLine:
    """The live GPU line on a terminal's stderr, redrawn in place (`\\r`, erase line).

    Job output written to the same terminal clears the line first and redraws it after, so
    the two never share a line. Off a terminal (piped, a file, TERM=dumb) there is none.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.text = ""
        self.lock = threading.RLock()

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


def exit_with(code: int, job: Any) -> None:
    """The job's exit code; a failure's known cause and fix are the last line printed."""
    if code:
        echo_err(f"gpulaunch: job exited with {code}")
    if code and job.explanation is not None:
        echo_err(f"gpulaunch: {job.explanation.text()}")
    raise typer.Exit(code)


def print_warnings(plan: Any) -> None:
    for warning in plan.launch.warnings:
        echo_err(f"warning: {warning}")


def run_line(plan: Any, detach: bool = False) -> str:
    """What a plan runs, as one shell line with secrets masked: `env ... CMD` on the host, the
    `docker run` line for a container (what --dry-run prints and `rerun` shows first)."""
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.engine.runspec import engine_run_argv, shell_line
    from gpulaunch.masking import mask, mask_env

    if plan.host_mode:
        env_args = [f"{k}={v}" for k, v in sorted(mask_env(plan.run.env).items())]
        return mask(shell_line(["env", *env_args, *plan.run.command]))
    shown = dataclasses.replace(plan.run, env=mask_env(plan.run.env))
    run_argv = engine_run_argv(shown, Engine().known_kind(), detach=detach)  # podman run there
    return mask(shell_line([mask(a) if a.count("=") else a for a in run_argv]))
