"""Interactive jobs: gpulaunch's stdin to the container (`docker run -i`) and a terminal for
it (`-t`), so `breakpoint()` / pdb / `input()` work and `echo hi | gpulaunch run -- cat`
prints hi.

When: stdin is passed when it is a terminal gpulaunch reads in the foreground, or a pipe, a
file or a socket (never /dev/null or a closed descriptor: the job then reads end-of-file at
once, as without -i); a terminal is allocated when stdin and stdout are both terminals.
`--interactive/--no-interactive` and `--tty/--no-tty` decide instead. With a terminal, the
local one is put in raw mode (keys, Ctrl-C included, go to the job as typed) and always
restored; its size follows the local window (SIGWINCH).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import stat
import threading
from collections.abc import Iterator
from typing import Any

STDIN_FD = 0
STDOUT_FD = 1


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _foreground(fd: int) -> bool:
    """Is this process group the terminal's foreground one (`gpulaunch run ... &` is not:
    reading the terminal would stop it with SIGTTIN)?"""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False


def _pipe_or_file(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def choose(
    interactive: bool | None,
    tty: bool | None,
    stdin_fd: int = STDIN_FD,
    stdout_fd: int = STDOUT_FD,
) -> tuple[bool, bool]:
    """(pass stdin, allocate a terminal) from the flags, None meaning "decide from the fds"."""
    terminal_in = _isatty(stdin_fd) and _foreground(stdin_fd)
    if interactive is None:
        interactive = terminal_in or _pipe_or_file(stdin_fd)
    if tty is None:
        tty = interactive and terminal_in and _isatty(stdout_fd)
    return interactive, tty


def attach_socket(container: Any, stdin: bool) -> Any:
    """One attach connection for stdin (when passed), stdout and stderr, made before start."""
    params = {"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1}
    return container.attach_socket(params=params)


def frames(sock: Any, tty: bool) -> Iterator[tuple[int, bytes]]:
    """(1 for stdout / 2 for stderr, bytes) as the engine sends them; with a terminal, all
    is stdout."""
    from docker.utils.socket import frames_iter

    return iter(frames_iter(sock, tty))


def _raw_socket(sock: Any) -> Any:
    return getattr(sock, "_sock", sock)


def forward_stdin(sock: Any, fd: int, stop: threading.Event) -> None:
    """Copy `fd` to the job until end-of-file (then close the job's stdin, as `docker run -i`
    does) or until the job ends. Polls, so it never outlives the job by more than 0.2 s."""
    raw = _raw_socket(sock)
    eof = False
    try:
        while not stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            data = os.read(fd, 65536)
            if not data:
                eof = True
                break
            raw.sendall(data)
    except (OSError, ValueError):
        return  # the job ended (socket closed) or stdin went away
    if eof:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)


def close(sock: Any) -> None:
    with contextlib.suppress(Exception):
        _raw_socket(sock).close()
    with contextlib.suppress(Exception):
        sock.close()


@contextlib.contextmanager
def terminal(container: Any, fd: int = STDIN_FD, out_fd: int = STDOUT_FD) -> Iterator[None]:
    """The local terminal in raw mode, its size forwarded, restored on every way out."""
    import termios
    import tty as ttymod

    saved = None
    if _isatty(fd):
        with contextlib.suppress(termios.error):
            saved = termios.tcgetattr(fd)
            ttymod.setraw(fd)

    def resize(*_: Any) -> None:
        with contextlib.suppress(Exception):
            size = os.get_terminal_size(out_fd)
            container.resize(height=size.lines, width=size.columns)

    previous = None
    if _isatty(out_fd) and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGWINCH, resize)
    resize()
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
