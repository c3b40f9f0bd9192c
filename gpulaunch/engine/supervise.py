"""Supervise one training container: stream output, forward signals, always clean up.

Ctrl-C / SIGTERM / SIGHUP -> the container gets SIGTERM (its init forwards it to torchrun, which
forwards it to the ranks), SIGKILL after the stop timeout; a second Ctrl-C kills at once.
The container is removed on every path and the exit code is the job's, or 129 / 130 / 143.

Interactive jobs: gpulaunch's stdin to the container (`docker run -i`) and a terminal for
it (`-t`), so `breakpoint()` / pdb / `input()` work and `echo hi | gpulaunch run -- cat`
prints hi.

When: stdin is passed when it is a terminal gpulaunch reads in the foreground, or a pipe, a
file or a socket (never /dev/null or a closed descriptor: the job then reads end-of-file at
once, as without -i); a terminal is allocated when stdin and stdout are both terminals.
`--interactive/--no-interactive` and `--tty/--no-tty` decide instead. With a terminal, the
local one is put in raw mode (keys, Ctrl-C included, go to the job as typed) and always
restored; its size follows the local window (SIGWINCH).

Detach keys: with a terminal, the engine watches stdin for a detach sequence (Ctrl-P Ctrl-Q
unless the attach names another; it cannot be turned off) and on it drops the attach while
the job runs on. gpulaunch names a sequence nobody types (DETACH_KEYS), so Ctrl-P and Ctrl-Q
reach the job as typed; should the attach still end while the job runs, the job is stopped
as by Ctrl-C, with one line saying why, instead of waiting blind on a raw terminal.

torchrun: when one of its ranks fails, torchrun exits 1 whatever the rank's code was, after
a summary of its own (ChildFailedError, the "Root Cause (first observed failure)" block).
The job's exit code is the failed rank's (a signal as 128+N, the shell's convention), read
from that block at the end of the output (`rank_failure`): the code a job could choose
anyway, so the job's own text decides nothing it could not decide by exiting.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO

from gpulaunch.engine.docker_api import Engine
from gpulaunch.engine.runspec import RunPlan, create_body
from gpulaunch.errors import ConfigError, EngineError, ExitCode, RlimitRefused, RunError

if TYPE_CHECKING:
    from gpulaunch.engine.api.containers import Container
    from gpulaunch.engine.api.http import Stream

# What a container call raises when the engine, or the connection to it, went away: the
# engine's answer (EngineError, ApiError) or the socket's. Anything else is a bug, raised as one.
LOST = (EngineError, OSError)

SIGNAL_EXIT = {  # SIGHUP (a closed terminal or ssh session) stops the job as SIGTERM does
    signal.SIGHUP: ExitCode.HANGUP,
    signal.SIGINT: ExitCode.INTERRUPTED,
    signal.SIGTERM: ExitCode.TERMINATED,
}


class _Stopper:
    """Signal handler state: first signal asks for a graceful stop, the second forces."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self.event = threading.Event()

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = self.signum or signum
        self.count += 1
        self.event.set()


class OutputTail:
    """The last `limit` bytes of a job's output (both streams, as they arrive) and how its
    container ended: what the failure explainer reads. Never the whole output in memory."""

    def __init__(self, limit: int = 64 * 1024) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._lock = threading.Lock()
        self.oom_killed = False
        self.exit_code: int | None = None

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._buf += chunk
            if len(self._buf) > self.limit:
                del self._buf[: len(self._buf) - self.limit]

    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", "replace")

    def read_state(self, container: Container) -> None:
        """OOMKilled and the exit code from the engine (before the container is removed);
        nothing when the engine no longer answers or its answer has no such state."""
        try:
            container.reload()
        except LOST:
            return
        state = container.attrs.get("State") if isinstance(container.attrs, dict) else None
        if isinstance(state, dict):
            self.oom_killed = bool(state.get("OOMKilled"))
            if isinstance(state.get("ExitCode"), int):
                self.exit_code = state["ExitCode"]


# -- torchrun's error summary -------------------------------------------------------------
_ROOT_CAUSE = "Root Cause (first observed failure)"
_SUMMARY_RANK = re.compile(
    r"\s{0,16}rank\s{0,8}:\s{0,8}(\d{1,9})\s{0,8}\(local_rank:\s{0,8}(\d{1,9})\)"
)
_SUMMARY_EXIT = re.compile(r"\s{0,16}exitcode\s{0,8}:\s{0,8}(-?\d{1,9})\b")
_SUMMARY_END = re.compile(r"[=*]{20,}\s{0,8}")
_SUMMARY_LINES = 16  # the root cause block's fields come within this many lines


@dataclass(frozen=True)
class RankFailure:
    """The first rank that failed, as torchrun's summary names it."""

    rank: int
    local_rank: int
    exitcode: int  # torchrun's: -N for a signal N
    start: int  # the summary's "Root Cause" line (index in the lines read)
    end: int  # its closing line (a row of = or *), or len(lines) when cut off

    @property
    def code(self) -> int:
        """The exit code a shell would show for the rank: 128+N for signal N."""
        return 128 - self.exitcode if self.exitcode < 0 else self.exitcode

    def ended(self) -> str:
        """`exited with 3` or `was killed by SIGKILL (exit 137)`."""
        try:  # valid_signals() also holds the real-time signals, which Signals does not name
            name = signal.Signals(-self.exitcode).name if self.exitcode < 0 else None
        except ValueError:
            name = None
        return f"was killed by {name} (exit {self.code})" if name else f"exited with {self.code}"


def rank_failure(lines: Sequence[str]) -> RankFailure | None:
    """The root cause of torchrun's last error summary in `lines`, or None without one.

    Reads the block torchrun prints after its ranks are gone (`rank : 1 (local_rank: 1)`,
    `exitcode : -9 (pid: ...)`), the same in torch 1.10 to 2.x."""
    start = next((i for i in range(len(lines) - 1, -1, -1) if _ROOT_CAUSE in lines[i]), None)
    if start is None:
        return None
    after = range(start + 1, len(lines))
    end = next((i for i in after if _SUMMARY_END.fullmatch(lines[i])), len(lines))
    rank = exitcode = None
    for line in lines[start + 1 : min(end, start + 1 + _SUMMARY_LINES)]:
        if rank is None and (found := _SUMMARY_RANK.match(line)):
            rank = (int(found[1]), int(found[2]))
        elif exitcode is None and (found := _SUMMARY_EXIT.match(line)):
            exitcode = int(found[1])
    if rank is None or exitcode is None or exitcode == 0 or not -64 <= exitcode <= 255:
        return None
    return RankFailure(rank[0], rank[1], exitcode, start, end)


def is_torchrun(command: Sequence[str]) -> bool:
    """Does torchrun start this job (as `torchrun` or `python -m torch.distributed.run`)?"""
    return command[:1] == ["torchrun"] or list(command[1:3]) == ["-m", "torch.distributed.run"]


def job_exit_code(command: Sequence[str], code: int, output: str) -> int:
    """The job's own exit code: under torchrun, the failed rank's instead of torchrun's 1."""
    if code != 1 or not is_torchrun(command):
        return code
    failure = rank_failure(output.splitlines())
    return code if failure is None else failure.code


class StopRequest(threading.Event):
    """A caller's request to stop the job (a smoke run's timeout), set from any thread.
    `honoured` turns true when the job was sent SIGTERM for it: a request that comes after
    the job ended (while its output drains or its container is removed) stops nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.honoured = False


def _pump(
    frames: Iterator[tuple[int, bytes]],
    targets: dict[int, BinaryIO],
    done: threading.Event,
    warn: Callable[[str], None],
    tail: OutputTail | None = None,
) -> None:
    """Copy attached output to its target (1: stdout, 2: stderr) until the job ends.

    When a target fails (`gpulaunch run ... | head`: the reader left), the stream is still
    read to its end and dropped, as the engine drops it when `docker run`'s CLI dies of
    SIGPIPE: the engine blocks on an attach stream nobody reads, the job with it, and every
    inspect of the container until the reader goes. The job runs on; its exit code stays the
    result."""
    failed: set[int] = set()
    try:
        for stream, chunk in frames:
            if tail is not None:
                tail.add(chunk)
            if stream in failed or stream not in targets:
                continue
            try:
                targets[stream].write(chunk)
                targets[stream].flush()
            except (OSError, ValueError) as err:  # a closed pipe or file
                failed.add(stream)
                with contextlib.suppress(OSError, ValueError):  # stderr may be gone too
                    warn(f"warning: cannot write the job's output ({err}); dropping the rest")
    except (*LOST, ValueError):  # ValueError: read after supervise closed the stream
        pass  # the attach stream broke (engine gone): wait() reports it
    finally:
        done.set()


def start(
    engine: Engine,
    plan: RunPlan,
    warn: Callable[[str], None],
    attached: dict[str, Any] | None = None,
) -> Container:
    """Create and start the container; drop a ulimit the engine may not raise, with a warning.

    With `attached`, the output is attached between create and start, so no byte the job
    writes is missed: "stdout" and "stderr", or for an interactive plan one "socket".

    NGC recommends memlock=-1 (needed for RDMA/GPUDirect); an engine inside an unprivileged
    sandbox refuses it. Running with the engine's default beats not running at all, but the
    user must hear about it.
    """
    if plan.network in (None, "default") and "bridge" not in engine.network_names():
        plan.pin_hostname()  # the default network is no network on a bridge-less engine

    def attach(container: Container) -> None:
        if attached is None:
            return
        if plan.stdin or plan.tty:
            attached["socket"] = _attach_socket(container, plan.stdin)
            return
        # not the logs: the json-file driver stores lines as JSON text, non-UTF-8 bytes as U+FFFD
        for stream in ("stdout", "stderr"):
            out = stream == "stdout"
            attached[stream] = container.attach(stdout=out, stderr=not out, stream=True, logs=False)

    def drop(name: str) -> None:
        del plan.ulimits[name]
        warn(
            f"warning: the engine refused ulimit {name} (its own limit is lower); "
            f"running with its default. InfiniBand/GPUDirect need {name}=-1"
        )

    if plan.ulimits:  # what this engine refused before is not asked again (one create)
        for name in sorted(engine.refused_ulimits() & set(plan.ulimits)):
            drop(name)
    while True:
        try:
            container: Container = engine.create_container(create_body(plan), before_start=attach)
            return container
        except RlimitRefused as err:
            if err.rlimit not in plan.ulimits:
                raise
            engine.remember_refused_ulimit(err.rlimit)
            drop(err.rlimit)


def supervise(
    engine: Engine,
    plan: RunPlan,
    *,
    out: BinaryIO,
    err: BinaryIO,
    warn: Callable[[str], None],
    on_started: Callable[[Container], None] | None = None,
    stop: threading.Event | None = None,
    tail: OutputTail | None = None,
) -> int:
    """Run the plan's container to completion; return the exit code gpulaunch should exit with.

    The job's stdout goes to `out` and its stderr to `err`, kept apart as `docker run` keeps
    them (so `gpulaunch run ... > result.txt` holds only what the job printed to stdout).
    `stop` (a smoke run's timeout) stops the job as a first signal would, and the job's own
    exit code is returned.
    """
    from gpulaunch.engine.api.containers import frames

    state = tail  # the caller's: it also wants the container's end state
    tail = tail if tail is not None else OutputTail()  # torchrun's summary names the code
    stopper = _Stopper()
    previous = {sig: signal.signal(sig, stopper) for sig in SIGNAL_EXIT}
    container = None
    attached: dict[str, Any] = {}
    try:
        container = start(engine, plan, warn, attached)
        if on_started:
            on_started(container)
        exit_box: dict[str, Any] = {}
        finished = threading.Event()

        def wait() -> None:
            try:
                exit_box["result"] = container.wait()
            except BaseException as err:  # handed to the main thread, which reads it below
                exit_box["error"] = err
            finally:
                finished.set()
                stopper.event.set()  # wake the loop now, not at its next 0.2 s tick

        sock = attached.get("socket")
        if sock is not None:  # one stream: the engine tells stdout from stderr (no terminal)
            pumps = [(frames(sock.read, plan.tty), {1: out, 2: err})]
        else:
            pumps = [
                (((1, chunk) for chunk in attached["stdout"]), {1: out}),
                (((2, chunk) for chunk in attached["stderr"]), {2: err}),
            ]
        streamed = [threading.Event() for _ in pumps]
        for (chunks, targets), done in zip(pumps, streamed, strict=True):
            threading.Thread(
                target=_pump, args=(chunks, targets, done, warn, tail), daemon=True
            ).start()
        threading.Thread(target=wait, daemon=True).start()
        if sock is not None and plan.stdin:
            threading.Thread(
                target=_forward_stdin,
                args=(sock, STDIN_FD, finished),
                daemon=True,
            ).start()
        # with a terminal, an attach that ends before the job means the engine detached it
        lost = streamed[0] if sock is not None and plan.stdin and plan.tty else None
        with _terminal(container) if plan.tty else contextlib.nullcontext():
            _watch(container, plan, stopper, stop, finished, lost, warn)
        for done in streamed:
            done.wait(5)
        if state is not None:
            state.read_state(container)
        if stopper.signum is not None:
            return int(SIGNAL_EXIT[signal.Signals(stopper.signum)])
        if "error" in exit_box:
            if not isinstance(exit_box["error"], LOST):
                raise exit_box["error"]  # a bug, as itself
            raise RunError(f"lost the container while waiting: {exit_box['error']}")
        return job_exit_code(
            plan.command, int(exit_box["result"].get("StatusCode", 1)), tail.text()
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        try:
            if "socket" in attached:
                with contextlib.suppress(OSError):
                    attached["socket"].close()
        finally:  # the container goes on every path
            if container is not None:
                engine.discard(container)
            else:
                with contextlib.suppress(EngineError):
                    engine.discard(engine.find_leftover(plan.name, plan.run_id))


def _watch(
    container: Container,
    plan: RunPlan,
    stopper: _Stopper,
    stop: threading.Event | None,
    finished: threading.Event,
    lost: threading.Event | None,
    warn: Callable[[str], None],
) -> None:
    """The module's signal rules until the job ends (`stop` counts as a first signal); `lost`
    (the terminal's attach ended) that the job outlives by DETACH_GRACE_S stops it too."""
    graceful_sent = forced = False
    lost_since: float | None = None
    while not finished.is_set():
        stopper.event.wait(0.2)
        requested = stop is not None and stop.is_set()
        if lost is not None and lost.is_set() and not graceful_sent:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since >= DETACH_GRACE_S and not finished.is_set():
                warn(
                    "warning: the engine detached the terminal while the job ran "
                    "(detach keys typed, or the engine dropped the attach); stopping the job"
                )
                stopper.count = stopper.count or 1
        if (stopper.count or requested) and not graceful_sent:
            graceful_sent = True
            if requested and isinstance(stop, StopRequest):
                stop.honoured = True
            _signal(container, "SIGTERM")
            timer = threading.Timer(plan.stop_timeout, _signal, (container, "SIGKILL"))
            timer.daemon = True
            timer.start()
        if stopper.count > 1 and not forced:
            forced = True
            _signal(container, "SIGKILL")
        stopper.event.clear()


def _signal(container: Container, name: str) -> None:
    with contextlib.suppress(*LOST):  # the job ended (409, 404) or the engine went away
        container.kill(signal=name)


# -- interactive jobs: stdin and a terminal ------------------------------------------------
STDIN_FD = 0
STDOUT_FD = 1
# Our attach's detach sequence (moby/term's key names), eight keys nobody types in this order.
# The engine matches it only on one-byte reads and holds at most the first key (Ctrl-]) until
# the next byte comes.
DETACH_KEYS = "ctrl-],ctrl-^,ctrl-@,ctrl-_,ctrl-],ctrl-^,ctrl-@,ctrl-_"
DETACH_GRACE_S = 2.0  # an attach that ends this long before the job was detached


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
    """(pass stdin, allocate a terminal) from the flags, None meaning "decide from the fds".

    A terminal for a job whose stdin comes from a pipe, a file or a background process is
    refused (ConfigError naming --tty): the job's terminal would echo the input, mangle its
    bytes and never pass end-of-file, so the job would wait for input forever."""
    terminal_in = os.isatty(stdin_fd) and _foreground(stdin_fd)
    if interactive is None:
        interactive = terminal_in or _pipe_or_file(stdin_fd)
    if tty is None:
        tty = interactive and terminal_in and os.isatty(stdout_fd)
    elif tty and interactive and not terminal_in:
        raise ConfigError(
            "--tty: stdin is not a terminal in the foreground (piped input never ends under a "
            "terminal); use --no-tty to pass it, or --no-interactive for a terminal without input"
        )
    return interactive, tty


def _attach_socket(container: Container, stdin: bool) -> Stream:
    """One attach connection for stdin (when passed), stdout and stderr, made before start."""
    params: dict[str, Any] = {"stdin": int(stdin), "stdout": 1, "stderr": 1, "stream": 1}
    if stdin:
        params["detachKeys"] = DETACH_KEYS
    return container.attach_socket(params=params)


def _forward_stdin(sock: Stream, fd: int, stop: threading.Event) -> None:
    """Copy `fd` to the job until end-of-file (then close the job's stdin, as `docker run -i`
    does) or until the job ends. Polls, so it never outlives the job by more than 0.2 s."""
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
            sock.sendall(data)
    except (OSError, ValueError):
        return  # the job ended (socket closed) or stdin went away
    if eof:
        with contextlib.suppress(OSError):
            sock.shutdown_write()


@contextlib.contextmanager
def _terminal(container: Container, fd: int = STDIN_FD, out_fd: int = STDOUT_FD) -> Iterator[None]:
    """The local terminal in raw mode, its size forwarded, restored on every way out."""
    import termios
    import tty as ttymod

    saved = None
    if os.isatty(fd):
        with contextlib.suppress(termios.error):
            saved = termios.tcgetattr(fd)
            # TCSANOW, not setraw's default TCSAFLUSH: what was typed while the job started
            # (an answer to its first prompt) is kept for the job, as docker's client keeps it
            ttymod.setraw(fd, termios.TCSANOW)

    def resize(*_: object) -> None:
        with contextlib.suppress(*LOST):  # no terminal size (OSError), or the engine's refusal
            size = os.get_terminal_size(out_fd)
            container.resize(height=size.lines, width=size.columns)

    previous = None
    if os.isatty(out_fd) and threading.current_thread() is threading.main_thread():
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
