"""Supervise one training container: stream output, forward signals, always clean up.

Ctrl-C / SIGTERM / SIGHUP -> the container gets SIGTERM (its init forwards it to torchrun, which
forwards it to the ranks), SIGKILL after the stop timeout; a second Ctrl-C kills at once.
The container is removed on every path and the exit code is the job's, or 129 / 130 / 143.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from gpulaunch.engine.docker_api import Engine, attach_output
from gpulaunch.engine.runspec import RunPlan, sdk_kwargs
from gpulaunch.errors import EngineError, ExitCode, RlimitRefused, RunError

_SIGNAL_EXIT = {  # SIGHUP (a closed terminal or ssh session) stops the job as SIGTERM does
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

    def __call__(self, signum: int, _frame: Any) -> None:
        self.signum = self.signum or signum
        self.count += 1
        self.event.set()


class StopRequest(threading.Event):
    """A caller's request to stop the job (a smoke run's timeout), set from any thread.
    `honoured` turns true when the job was sent SIGTERM for it: a request that comes after
    the job ended (while its output drains or its container is removed) stops nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.honoured = False


def _pump(
    chunks: Iterator[bytes], out: BinaryIO, done: threading.Event, warn: Callable[[str], None]
) -> None:
    """Copy one attached stream to `out` until the job ends.

    When `out` fails (`gpulaunch run ... | head`: the reader left), the stream is still read
    to its end and dropped, as the engine drops it when `docker run`'s CLI dies of SIGPIPE:
    the engine blocks on an attach stream nobody reads, the job with it, and every inspect of
    the container until the reader goes. The job runs on; its exit code stays the result."""
    failed = False
    try:
        for chunk in chunks:
            if failed:
                continue
            try:
                out.write(chunk)
                out.flush()
            except (OSError, ValueError) as err:  # a closed pipe or file
                failed = True
                with contextlib.suppress(Exception):
                    warn(f"warning: cannot write the job's output ({err}); dropping the rest")
    except Exception:
        pass  # the attach stream broke (engine gone): wait() reports it
    finally:
        done.set()


def start(
    engine: Engine,
    plan: RunPlan,
    warn: Callable[[str], None],
    attached: dict[str, Iterator[bytes]] | None = None,
) -> Any:
    """Create and start the container; drop a ulimit the engine may not raise, with a warning.

    With `attached`, its "stdout" and "stderr" are attached between create and start, so no
    byte the job writes is missed or goes through the engine's log driver.

    NGC recommends memlock=-1 (needed for RDMA/GPUDirect); an engine inside an unprivileged
    sandbox refuses it. Running with the engine's default beats not running at all, but the
    user must hear about it.
    """
    if plan.network in (None, "default") and "bridge" not in engine.network_names():
        plan.pin_hostname()  # the default network is no network on a bridge-less engine

    def attach(container: Any) -> None:
        if attached is not None:
            for stream in ("stdout", "stderr"):
                attached[stream] = attach_output(container, stream)

    while True:
        try:
            return engine.create_container(sdk_kwargs(plan), before_start=attach)
        except RlimitRefused as err:
            if err.rlimit not in plan.ulimits:
                raise
            del plan.ulimits[err.rlimit]
            warn(
                f"warning: the engine refused ulimit {err.rlimit} (its own limit is lower); "
                f"running with its default. InfiniBand/GPUDirect need {err.rlimit}=-1"
            )


def supervise(
    engine: Engine,
    plan: RunPlan,
    *,
    out: BinaryIO,
    err: BinaryIO,
    warn: Callable[[str], None],
    on_started: Callable[[Any], None] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run the plan's container to completion; return the exit code gpulaunch should exit with.

    The job's stdout goes to `out` and its stderr to `err`, kept apart as `docker run` keeps
    them (so `gpulaunch run ... > result.txt` holds only what the job printed to stdout).
    `stop`, when set by the caller (a smoke run's timeout), stops the job as a first signal
    would (SIGTERM, SIGKILL after the stop timeout) and the job's own exit code is returned.
    """
    stopper = _Stopper()
    previous = {sig: signal.signal(sig, stopper) for sig in _SIGNAL_EXIT}
    container = None
    try:
        attached: dict[str, Iterator[bytes]] = {}
        container = start(engine, plan, warn, attached)
        if on_started:
            on_started(container)
        exit_box: dict[str, Any] = {}
        finished = threading.Event()

        def wait() -> None:
            try:
                exit_box["result"] = container.wait()
            except Exception as err:
                exit_box["error"] = err
            finally:
                finished.set()

        streamed = [threading.Event(), threading.Event()]
        for target, done, stream in ((out, streamed[0], "stdout"), (err, streamed[1], "stderr")):
            threading.Thread(
                target=_pump, args=(attached[stream], target, done, warn), daemon=True
            ).start()
        threading.Thread(target=wait, daemon=True).start()
        graceful_sent = forced = False
        while not finished.is_set():
            stopper.event.wait(0.2)
            requested = stop is not None and stop.is_set()
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
        for done in streamed:
            done.wait(5)
        if stopper.signum is not None:
            return int(_SIGNAL_EXIT[signal.Signals(stopper.signum)])
        if "error" in exit_box:
            raise RunError(f"lost the container while waiting: {exit_box['error']}")
        return int(exit_box["result"].get("StatusCode", 1))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if container is not None:
            engine.discard(container)
        else:
            with contextlib.suppress(EngineError):
                engine.discard(engine.find_leftover(plan.name, plan.run_id))


def _signal(container: Any, name: str) -> None:
    with contextlib.suppress(Exception):
        container.kill(signal=name)
