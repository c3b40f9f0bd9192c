"""Host mode (`gpulaunch run --no-container`): the same launch plan, started on this machine.

For clusters without Docker, runs already inside a container (a Kubernetes pod, an NGC
shell), and GPU machines without a container engine. Signals behave as in a container:
the first SIGINT/SIGTERM/SIGHUP is forwarded as SIGTERM, a second one kills.

With a `tail`, the job's stderr passes through gpulaunch (byte for byte to gpulaunch's own
stderr, the last 64 KiB kept for the failure explainer): through a pseudo-terminal when that
stderr is a terminal, so the job still sees one (colours, progress bars), else a pipe. stdin and
stdout stay the job's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from gpulaunch.engine.runspec import RunPlan
from gpulaunch.engine.supervise import SIGNAL_EXIT, OutputTail, job_exit_code
from gpulaunch.errors import RunError


def _open_err(err_fd: int) -> tuple[int, int]:
    """(read end for gpulaunch, write end for the job): a pty when stderr is a terminal."""
    if not os.isatty(err_fd):
        return os.pipe()
    import fcntl
    import termios

    master, slave = os.openpty()
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(err_fd, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    return master, slave


def _pump(read_fd: int, err_fd: int, tail: OutputTail) -> None:
    """Copy the job's stderr to ours and into the tail; a failed write (a closed reader)
    stops the copying, never the reading, so the job is never blocked on a full pipe."""
    writing = True
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except OSError:  # EIO: every writer of the pty is gone
            return
        if not chunk:
            return
        tail.add(chunk)
        view = memoryview(chunk)
        while writing and view:
            try:
                view = view[os.write(err_fd, view) :]
            except OSError:
                writing = False


def run_on_host(
    plan: RunPlan, cwd: Path, tail: OutputTail | None = None, err_fd: int | None = None
) -> int:
    """With `tail` and `err_fd` (gpulaunch's stderr), the job's stderr passes through both."""
    env = {**os.environ, **plan.env}
    received: list[int] = []
    err_fd = err_fd if tail is not None else None
    read_fd, write_fd = _open_err(err_fd) if err_fd is not None else (None, None)
    try:
        proc = subprocess.Popen(
            plan.command, env=env, cwd=cwd, start_new_session=True, stderr=write_fd
        )
    except OSError as err:
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.close(fd)
        raise RunError(f"cannot start {plan.command[0]}: {err.strerror}") from None
    pump = None
    if read_fd is not None and write_fd is not None and err_fd is not None:
        os.close(write_fd)  # the job holds it now: EOF (or EIO) when the job tree is gone
        pump = threading.Thread(target=_pump, args=(read_fd, err_fd, tail), daemon=True)
        pump.start()

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if len(received) > 1 else signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in SIGNAL_EXIT}
    try:
        try:
            code = proc.wait(timeout=None)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if received:
            # graceful shutdown may still be running in the group: wait for it
            return int(SIGNAL_EXIT[signal.Signals(received[0])])
        if pump is not None:
            pump.join(timeout=5)  # torchrun's summary is the last thing the job writes
        code = code if code >= 0 else 128 - code
        return job_exit_code(plan.command, code, tail.text() if tail is not None else "")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pump is not None and read_fd is not None:
            pump.join(timeout=5)  # a daemon left holding stderr must not hold gpulaunch
            if not pump.is_alive():
                os.close(read_fd)
