"""The container supervisor (gpulaunch/runner.py) and host mode (hostrun.py), signals scripted.

The Docker seam is a fake container (`wait` / `kill` / `attach`) driven by a script: which
signals gpulaunch receives, when, and how the "job" answers SIGTERM. Assertions are on what
the supervisor sent to the container, in order, and on the exit code; never on elapsed time.
A job that was never stopped ends on its own after a guard and exits 99, which fails them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.engine import supervise as runner
from gpulaunch.engine.host import run_on_host
from gpulaunch.engine.runspec import RunPlan
from gpulaunch.errors import EngineError, RlimitRefused, RunError

GUARD_S = 20  # a job nobody stopped gives up after this and exits 99 (a failing value)


class FakeContainer:
    """A running job: exits when killed with SIGKILL, or on SIGTERM when `obeys_sigterm`."""

    def __init__(self, *, obeys_sigterm: bool, output: bytes = b"", code: int | None = None):
        self.name = "gl-fake"
        self.obeys_sigterm = obeys_sigterm
        self.output = output
        self.kills: list[str] = []
        self.exit_code: int | None = code
        self.exited = threading.Event()
        if code is not None:
            self.exited.set()
        self.on_kill: dict[str, Any] = {}  # signal name -> callable run after recording it
        self.created_only = False  # between create and start

    def wait(self) -> dict[str, int]:
        if not self.exited.wait(GUARD_S):
            self.exit_code = 99
        return {"StatusCode": self.exit_code if self.exit_code is not None else 99}

    def kill(self, signal: str) -> None:
        self.kills.append(signal)
        if signal == "SIGKILL" or (signal == "SIGTERM" and self.obeys_sigterm):
            self.exit_code = 137 if signal == "SIGKILL" else 143
            self.exited.set()
        action = self.on_kill.get(signal)
        if action is not None:
            action()

    def attach(self, *, stdout: bool, stderr: bool, stream: bool, logs: bool) -> Iterator[bytes]:
        assert stream and not logs and stdout != stderr  # one raw stream, nothing replayed
        assert self.created_only, "attached after start: early output would be lost"
        chunks = [self.output] if stdout and self.output else []
        return iter(chunks + ([b"err-line\n"] if stderr else []))


class FakeEngine:
    def __init__(self, container: FakeContainer, refuse: list[str] | None = None) -> None:
        self.container = container
        self.refuse = list(refuse or [])
        self.created: list[dict[str, Any]] = []
        self.discarded: list[Any] = []
        self.leftover: Any = None
        self.networks = {"bridge", "host", "none"}
        self.remembered: set[str] = set()  # the engine's capability cache, in memory

    def network_names(self) -> set[str]:
        return set(self.networks)

    def refused_ulimits(self) -> set[str]:
        return set(self.remembered)

    def remember_refused_ulimit(self, name: str) -> None:
        self.remembered.add(name)

    def create_container(self, kwargs: dict[str, Any], before_start: Any = None) -> FakeContainer:
        self.created.append(kwargs)
        if self.refuse:
            raise RlimitRefused("refused", rlimit=self.refuse.pop(0))
        self.container.created_only = True
        if before_start is not None:
            before_start(self.container)
        self.container.created_only = False  # started
        return self.container

    def discard(self, container: Any) -> None:
        self.discarded.append(container)

    def find_leftover(self, name: str, run_id: str) -> Any:
        return self.leftover if run_id == "abc123" else None


def _plan(stop_timeout: int = 3600) -> RunPlan:
    return RunPlan(
        image="img:tag",
        name="gl-fake",
        command=["python", "train.py"],
        env={},
        mounts=[],
        user="1000:1000",
        gpus=0,
        labels={"io.gpulaunch.run-id": "abc123"},
        stop_timeout=stop_timeout,
    )


def _send(signum: int) -> None:
    os.kill(os.getpid(), signum)


class Captured:
    def __init__(self) -> None:
        import io

        self.out = io.BytesIO()
        self.err = io.BytesIO()
        self.warnings: list[str] = []


def _supervise(engine: FakeEngine, plan: RunPlan, first: int | None = None) -> tuple[int, Captured]:
    cap = Captured()
    started = (lambda _c: _send(first)) if first is not None else None
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    code = runner.supervise(
        engine,  # type: ignore[arg-type]
        plan,
        out=cap.out,  # type: ignore[arg-type]
        err=cap.err,  # type: ignore[arg-type]
        on_started=started,
        warn=cap.warnings.append,
    )
    # the caller's handlers are back
    assert {s: signal.getsignal(s) for s in before} == before
    return code, cap


class _ClosedPipe:
    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass


def test_a_closed_output_pipe_still_drains_the_stream_and_the_job_runs_on() -> None:
    """`gpulaunch run ... | head`: the engine must never block on an unread attach stream."""
    read: list[int] = []

    class Chatty(FakeContainer):
        def attach(self, *, stdout: bool, stderr: bool, stream: bool, logs: bool) -> Any:
            def chunks() -> Iterator[bytes]:
                for i in range(1000):
                    read.append(i)
                    yield b"x" * 100
                self.exit_code = 0
                self.exited.set()  # the job ends only once its output was all read

            return chunks() if stdout else iter([b"err-line\n"])

    container = Chatty(obeys_sigterm=True)
    pipe = _ClosedPipe()
    err = Captured()

    code = runner.supervise(
        FakeEngine(container),  # type: ignore[arg-type]
        _plan(),
        out=pipe,  # type: ignore[arg-type]
        err=err.err,  # type: ignore[arg-type]
        warn=err.warnings.append,
    )

    assert code == 0 and len(read) == 1000 and pipe.writes == 1
    assert err.err.getvalue() == b"err-line\n"
    (warning,) = err.warnings
    assert warning.startswith("warning: cannot write the job's output") and "Broken pipe" in warning


def test_a_stop_request_is_honoured_only_while_the_job_runs() -> None:
    """Smoke's timeout: SIGTERM for a running job marks the request honoured; a request that
    comes after the job ended (its output draining, its container being removed) does not."""
    running = FakeContainer(obeys_sigterm=True)
    request = runner.StopRequest()
    request.set()
    code = runner.supervise(
        FakeEngine(running),  # type: ignore[arg-type]
        _plan(),
        out=Captured().out,  # type: ignore[arg-type]
        err=Captured().err,  # type: ignore[arg-type]
        warn=print,
        stop=request,
    )
    assert (code, running.kills, request.honoured) == (143, ["SIGTERM"], True)

    ended = FakeContainer(obeys_sigterm=True, code=0)
    late = runner.StopRequest()
    engine = FakeEngine(ended)
    engine.discard = lambda _c: late.set()  # type: ignore[method-assign]  # expires at removal
    code = runner.supervise(
        engine,  # type: ignore[arg-type]
        _plan(),
        out=Captured().out,  # type: ignore[arg-type]
        err=Captured().err,  # type: ignore[arg-type]
        warn=print,
        stop=late,
    )
    assert (code, ended.kills, late.is_set(), late.honoured) == (0, [], True, False)


# -- a job that ends by itself -------------------------------------------------------------
@pytest.mark.parametrize("code", [0, 3])
def test_the_jobs_exit_code_and_streams_pass_through(code: int) -> None:
    container = FakeContainer(obeys_sigterm=True, output=b"hello\n", code=code)
    engine = FakeEngine(container)
    got, cap = _supervise(engine, _plan())
    assert got == code
    assert cap.out.getvalue() == b"hello\n"  # stdout and stderr kept apart
    assert cap.err.getvalue() == b"err-line\n"
    assert container.kills == []
    assert engine.discarded == [container]


def test_a_lost_wait_is_a_run_error_and_the_container_is_still_removed() -> None:
    container = FakeContainer(obeys_sigterm=True)

    def broken() -> dict[str, int]:
        raise ConnectionError("engine went away")

    container.wait = broken  # type: ignore[method-assign]
    engine = FakeEngine(container)
    with pytest.raises(RunError, match="lost the container while waiting: engine went away"):
        _supervise(engine, _plan())
    assert engine.discarded == [container]


# -- signals ------------------------------------------------------------------------------
def test_sigterm_asks_the_container_to_stop_and_exits_143() -> None:
    container = FakeContainer(obeys_sigterm=True)
    engine = FakeEngine(container)
    code, _ = _supervise(engine, _plan(), first=signal.SIGTERM)
    assert code == 143
    assert container.kills == ["SIGTERM"]  # graceful: no SIGKILL while the job obeys
    assert engine.discarded == [container]


def test_ctrl_c_asks_the_container_to_stop_and_exits_130() -> None:
    container = FakeContainer(obeys_sigterm=True)
    code, _ = _supervise(FakeEngine(container), _plan(), first=signal.SIGINT)
    assert code == 130
    assert container.kills == ["SIGTERM"]


def test_sigkill_follows_when_the_job_ignores_sigterm_past_the_stop_timeout() -> None:
    container = FakeContainer(obeys_sigterm=False)
    engine = FakeEngine(container)
    code, _ = _supervise(engine, _plan(stop_timeout=0), first=signal.SIGTERM)
    assert code == 143
    assert container.kills == ["SIGTERM", "SIGKILL"]
    assert container.exit_code == 137  # killed, not the guard's 99
    assert engine.discarded == [container]


def test_a_second_ctrl_c_kills_at_once() -> None:
    """The stop timeout is an hour: only the second Ctrl-C can end this job before the guard."""
    container = FakeContainer(obeys_sigterm=False)
    container.on_kill["SIGTERM"] = lambda: _send(signal.SIGINT)
    code, _ = _supervise(FakeEngine(container), _plan(stop_timeout=3600), first=signal.SIGINT)
    assert container.kills == ["SIGTERM", "SIGKILL"]
    assert container.exit_code == 137
    assert code == 130


def test_sigint_then_sigterm_keeps_the_first_signals_exit_code() -> None:
    container = FakeContainer(obeys_sigterm=False)
    container.on_kill["SIGTERM"] = lambda: _send(signal.SIGTERM)
    code, _ = _supervise(FakeEngine(container), _plan(), first=signal.SIGINT)
    assert container.kills == ["SIGTERM", "SIGKILL"]  # any second signal forces
    assert code == 130  # Ctrl-C came first


def test_sigterm_then_sigint_keeps_the_first_signals_exit_code() -> None:
    container = FakeContainer(obeys_sigterm=False)
    container.on_kill["SIGTERM"] = lambda: _send(signal.SIGINT)
    code, _ = _supervise(FakeEngine(container), _plan(), first=signal.SIGTERM)
    assert container.kills == ["SIGTERM", "SIGKILL"]
    assert code == 143


# -- start: the memlock fallback, and cleanup when creating fails -------------------------
def test_a_refused_memlock_is_dropped_with_a_warning_and_the_job_runs() -> None:
    container = FakeContainer(obeys_sigterm=True, code=0)
    engine = FakeEngine(container, refuse=["memlock"])
    plan = _plan()
    assert "memlock" in plan.ulimits
    code, cap = _supervise(engine, plan)
    assert code == 0
    limits = [[u["Name"] for u in kw["HostConfig"]["Ulimits"]] for kw in engine.created]
    assert "memlock" in limits[0] and "memlock" not in limits[1], limits
    assert "stack" in limits[1]  # only the refused limit went
    assert cap.warnings == [
        "warning: the engine refused ulimit memlock (its own limit is lower); running with its "
        "default. InfiniBand/GPUDirect need memlock=-1"
    ]


def test_a_refusal_is_remembered_and_the_next_run_creates_once_with_the_same_warning() -> None:
    container = FakeContainer(obeys_sigterm=True, code=0)
    engine = FakeEngine(container, refuse=["memlock"])
    _supervise(engine, _plan())
    assert engine.remembered == {"memlock"} and len(engine.created) == 2
    engine.created.clear()
    code, cap = _supervise(engine, _plan())  # the engine still refuses; it is not asked
    assert code == 0
    assert len(engine.created) == 1, "created twice although the refusal was known"
    assert [u["Name"] for u in engine.created[0]["HostConfig"]["Ulimits"]] == ["stack"]
    assert cap.warnings == [
        "warning: the engine refused ulimit memlock (its own limit is lower); running with its "
        "default. InfiniBand/GPUDirect need memlock=-1"
    ]


def test_a_refused_ulimit_the_plan_does_not_set_is_an_error() -> None:
    container = FakeContainer(obeys_sigterm=True, code=0)
    engine = FakeEngine(container, refuse=["nofile"])
    engine.leftover = "half-made"
    with pytest.raises(RlimitRefused):
        _supervise(engine, _plan())
    assert engine.discarded == ["half-made"]  # what create left behind, found by name


def test_start_failure_removes_a_leftover_by_name() -> None:
    class Failing(FakeEngine):
        def create_container(self, kwargs: dict[str, Any], before_start: Any = None) -> Any:
            raise EngineError("no such image")

    engine = Failing(FakeContainer(obeys_sigterm=True))
    engine.leftover = None
    with pytest.raises(EngineError):
        _supervise(engine, _plan())
    assert engine.discarded == [None]


# -- host mode (--no-container) ----------------------------------------------------------
JOB = """
import signal, sys, time
def on_term(signum, frame):
    print("got SIGTERM", flush=True)
    sys.exit(int(sys.argv[1]))
if sys.argv[2] == "obey":
    signal.signal(signal.SIGTERM, on_term)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
print("not stopped", flush=True)
"""


def _host_plan(tmp_path: Path, *args: str) -> RunPlan:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    plan = _plan()
    plan.command = [sys.executable, str(script), *args]
    plan.env = {"PYTHONUNBUFFERED": "1"}
    return plan


def _host(tmp_path: Path, mode: str, *signals: int) -> tuple[int, str]:
    out = tmp_path / "out.txt"
    plan = _host_plan(tmp_path, "7", mode)
    plan.command = ["sh", "-c", 'exec "$@" > "$0"', str(out), *plan.command]

    def deliver() -> None:
        for _ in range(GUARD_S * 20):
            if out.exists() and "ready" in out.read_text():
                break
            threading.Event().wait(0.05)
        for signum in signals:
            _send(signum)
            threading.Event().wait(0.2)

    thread = threading.Thread(target=deliver, daemon=True)
    thread.start()
    code = run_on_host(plan, tmp_path)
    thread.join(GUARD_S)
    return code, out.read_text()


def test_host_mode_passes_the_jobs_exit_code(tmp_path: Path) -> None:
    plan = _host_plan(tmp_path)
    plan.command = [sys.executable, "-c", "import sys; sys.exit(5)"]
    assert run_on_host(plan, tmp_path) == 5


def test_host_mode_forwards_sigterm_and_exits_143(tmp_path: Path) -> None:
    code, out = _host(tmp_path, "obey", signal.SIGTERM)
    assert code == 143
    assert "got SIGTERM" in out
    assert "not stopped" not in out


def test_host_mode_ctrl_c_exits_130(tmp_path: Path) -> None:
    code, out = _host(tmp_path, "obey", signal.SIGINT)
    assert code == 130
    assert "got SIGTERM" in out  # Ctrl-C is forwarded as SIGTERM, as in a container


def test_host_mode_second_signal_kills(tmp_path: Path) -> None:
    code, out = _host(tmp_path, "ignore", signal.SIGINT, signal.SIGTERM)
    assert code == 130  # the first signal decides
    assert "not stopped" not in out and "got SIGTERM" not in out


def test_host_mode_a_job_killed_by_a_signal_reports_128_plus_it(tmp_path: Path) -> None:
    plan = _host_plan(tmp_path)
    plan.command = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"]
    assert run_on_host(plan, tmp_path) == 137


def test_host_mode_a_missing_program_is_a_run_error(tmp_path: Path) -> None:
    plan = _host_plan(tmp_path)
    plan.command = [str(tmp_path / "nope")]
    with pytest.raises(RunError, match="cannot start"):
        run_on_host(plan, tmp_path)


def test_the_output_tail_keeps_only_the_end_and_the_container_state() -> None:
    """The explainer's input: the last bytes of both streams and OOMKilled, read before the
    container is removed; the output itself still reaches its streams whole."""

    class OomKilled(FakeContainer):
        attrs: dict[str, Any] | None = None

        def reload(self) -> None:
            assert self not in engine.discarded, "state read after the container was removed"
            self.attrs = {"State": {"OOMKilled": True, "ExitCode": 137}}

    container = OomKilled(obeys_sigterm=True, output=b"a" * 100 + b"THE END\n", code=137)
    engine = FakeEngine(container)
    cap = Captured()
    tail = runner.OutputTail(limit=20)
    code = runner.supervise(
        engine,  # type: ignore[arg-type]
        _plan(),
        out=cap.out,  # type: ignore[arg-type]
        err=cap.err,  # type: ignore[arg-type]
        warn=cap.warnings.append,
        tail=tail,
    )
    assert code == 137 and cap.out.getvalue() == b"a" * 100 + b"THE END\n"
    assert len(tail.text()) == 20 and "THE END\n" in tail.text() and "err-line\n" in tail.text()
    assert (tail.oom_killed, tail.exit_code) == (True, 137)


class _Sized:
    """A container that takes terminal sizes."""

    def __init__(self) -> None:
        self.sizes: list[tuple[int, int]] = []

    def resize(self, height: int, width: int) -> None:
        self.sizes.append((height, width))


def test_raw_mode_keeps_what_was_typed_before_it() -> None:
    """A line typed while the job starts (before the terminal goes raw) still reaches the job:
    raw mode is entered without flushing pending input (as docker's own client does). With a
    flush, a quick answer to the job's first prompt was lost and the job waited forever."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        before = termios.tcgetattr(slave)
        os.write(master, b"hello\r")  # typed on the canonical terminal: a whole line
        assert select.select([slave], [], [], 10)[0], "the line never reached the terminal"
        container = _Sized()
        with runner._terminal(container, fd=slave, out_fd=slave):
            assert not termios.tcgetattr(slave)[3] & termios.ICANON  # raw now
            assert select.select([slave], [], [], 2)[0], "the typed line was flushed"
            assert os.read(slave, 100) == b"hello\n"
        assert container.sizes == [(24, 80)]
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


# -- the engine gone is handled; a bug is raised as itself (issue 30: no broad excepts) -----
class _Bug(Exception):
    """What no engine or socket raises: a programming error in gpulaunch or its seams."""


class _Lost(FakeContainer):
    """A job whose engine fails one call (`failing`) with `error`."""

    def __init__(self, failing: str, error: BaseException, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failing, self.error = failing, error
        self.attrs: Any = {"State": {"OOMKilled": True, "ExitCode": 137}}

    def reload(self) -> None:
        if self.failing == "reload":
            raise self.error

    def wait(self) -> dict[str, int]:
        if self.failing == "wait":
            raise self.error
        return super().wait()

    def kill(self, signal: str) -> None:
        super().kill(signal)
        if self.failing == "kill":
            raise self.error

    def resize(self, height: int, width: int) -> None:
        if self.failing == "resize":
            raise self.error


GONE = [
    EngineError("the Docker engine at unix:///x stopped answering: the connection failed"),
    ConnectionResetError(104, "Connection reset by peer"),
]


@pytest.mark.parametrize("error", GONE, ids=["engine", "socket"])
def test_an_engine_gone_while_the_state_is_read_leaves_the_state_unknown(
    error: BaseException,
) -> None:
    container = _Lost("reload", error, obeys_sigterm=True, code=3)
    tail = runner.OutputTail()
    code = runner.supervise(
        FakeEngine(container),  # type: ignore[arg-type]
        _plan(),
        out=Captured().out,  # type: ignore[arg-type]
        err=Captured().err,  # type: ignore[arg-type]
        warn=print,
        tail=tail,
    )
    assert (code, tail.oom_killed, tail.exit_code) == (3, False, None)


def test_a_bug_while_the_state_is_read_is_raised_and_the_container_still_removed() -> None:
    container = _Lost("reload", _Bug("reload"), obeys_sigterm=True, code=3)
    engine = FakeEngine(container)
    with pytest.raises(_Bug):
        runner.supervise(
            engine,  # type: ignore[arg-type]
            _plan(),
            out=Captured().out,  # type: ignore[arg-type]
            err=Captured().err,  # type: ignore[arg-type]
            warn=print,
            tail=runner.OutputTail(),
        )
    assert engine.discarded == [container]


@pytest.mark.parametrize("attrs", [None, "not json", {"State": "running"}, {"State": None}])
def test_an_inspect_answer_without_a_state_leaves_it_unknown(attrs: Any) -> None:
    container = _Lost("", _Bug(), obeys_sigterm=True)
    container.attrs = attrs
    tail = runner.OutputTail()
    tail.read_state(container)
    assert (tail.oom_killed, tail.exit_code) == (False, None)


@pytest.mark.parametrize("error", GONE, ids=["engine", "socket"])
def test_a_lost_wait_of_either_kind_is_a_run_error(error: BaseException) -> None:
    container = _Lost("wait", error, obeys_sigterm=True)
    engine = FakeEngine(container)
    with pytest.raises(RunError, match=r"^lost the container while waiting: "):
        _supervise(engine, _plan())
    assert engine.discarded == [container]


def test_a_bug_in_the_wait_is_raised_as_itself_not_as_a_lost_container() -> None:
    container = _Lost("wait", _Bug("wait"), obeys_sigterm=True)
    engine = FakeEngine(container)
    with pytest.raises(_Bug, match=r"^wait$"):
        _supervise(engine, _plan())
    assert engine.discarded == [container]


def test_a_kill_the_engine_refuses_still_ends_the_job_with_the_signals_code() -> None:
    """SIGTERM to a job that ended meanwhile: the engine answers 409; Ctrl-C still exits 143."""
    from gpulaunch.engine.api.http import ApiError

    container = _Lost("kill", ApiError(409, "container is not running"), obeys_sigterm=True)
    code, _ = _supervise(FakeEngine(container), _plan(), first=signal.SIGTERM)
    assert code == 143 and container.kills == ["SIGTERM"]


def test_a_bug_in_a_kill_is_raised_and_the_container_still_removed() -> None:
    container = _Lost("kill", _Bug("kill"), obeys_sigterm=True)
    engine = FakeEngine(container)
    with pytest.raises(_Bug, match=r"^kill$"):
        _supervise(engine, _plan(), first=signal.SIGTERM)
    assert container.kills == ["SIGTERM"] and engine.discarded == [container]


def _broken_stream(error: BaseException) -> Iterator[bytes]:
    yield b"before\n"
    raise error


@pytest.mark.parametrize("error", GONE, ids=["engine", "socket"])
def test_an_output_stream_that_breaks_keeps_what_came_and_the_jobs_code(
    error: BaseException,
) -> None:
    class Broken(FakeContainer):
        def attach(self, *, stdout: bool, stderr: bool, stream: bool, logs: bool) -> Any:
            return _broken_stream(error) if stdout else iter([])

    container = Broken(obeys_sigterm=True, code=5)
    code, cap = _supervise(FakeEngine(container), _plan())
    assert (code, cap.out.getvalue(), cap.warnings) == (5, b"before\n", [])


def test_a_bug_in_an_output_stream_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pump runs in a thread: its bug reaches threading's hook (printed), not silence."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))

    class Buggy(FakeContainer):
        def attach(self, *, stdout: bool, stderr: bool, stream: bool, logs: bool) -> Any:
            return _broken_stream(_Bug("pump")) if stdout else iter([])

    code, cap = _supervise(FakeEngine(Buggy(obeys_sigterm=True, code=0)), _plan())
    assert (code, cap.out.getvalue()) == (0, b"before\n")
    assert [type(e) for e in seen] == [_Bug]


class _Closing:
    """An attach socket whose close fails with `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def read(self, size: int) -> bytes:
        return b""

    def sendall(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        raise self.error


def _interactive(monkeypatch: pytest.MonkeyPatch, sock: _Closing) -> tuple[FakeEngine, RunPlan]:
    class Attached(FakeContainer):
        def attach_socket(self, params: dict[str, Any]) -> _Closing:
            return sock

    monkeypatch.setattr(runner, "_forward_stdin", lambda *_: None)
    plan = _plan()
    plan.stdin = True
    return FakeEngine(Attached(obeys_sigterm=True, code=0)), plan


def test_an_attach_socket_that_fails_to_close_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, plan = _interactive(monkeypatch, _Closing(OSError(9, "Bad file descriptor")))
    assert _supervise(engine, plan)[0] == 0
    assert engine.discarded == [engine.container]


def test_a_bug_closing_the_attach_socket_is_raised_and_the_container_still_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, plan = _interactive(monkeypatch, _Closing(_Bug("close")))
    with pytest.raises(_Bug, match=r"^close$"):
        _supervise(engine, plan)
    assert engine.discarded == [engine.container]


@pytest.mark.parametrize(
    ("error", "raised"), [(GONE[0], None), (GONE[1], None), (_Bug("resize"), _Bug)]
)
def test_a_terminal_size_the_engine_refuses_is_ignored_and_a_bug_is_not(
    error: BaseException, raised: type[BaseException] | None
) -> None:
    import pty

    master, slave = pty.openpty()
    read, write = os.pipe()  # stdin not a terminal: no raw mode
    try:
        container = _Lost("resize", error, obeys_sigterm=True)
        terminal = runner._terminal(container, fd=read, out_fd=slave)
        if raised is None:
            with terminal:
                pass
        else:
            with pytest.raises(raised), terminal:
                pass
    finally:
        for fd in (master, slave, read, write):
            os.close(fd)
