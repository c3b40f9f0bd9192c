"""The stdlib engine client (gpulaunch/engine/api) against a fake engine on a unix socket
(tests/engine/fake_engine.py): the run lifecycle in order, the multiplexed and raw output
streams, stdin, the engine's refusals as the SDK path worded them, unreachable and stalled
engines, and ps/logs/stop lookups. The real engine runs the same paths in tests/e2e."""

from __future__ import annotations

import io
import itertools
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from engine.fake_engine import CID, FakeEngine, frame
from gpulaunch.engine import docker_api, supervise
from gpulaunch.engine.api.containers import frames
from gpulaunch.engine.docker_api import Engine
from gpulaunch.engine.runspec import RunPlan, create_body
from gpulaunch.errors import EngineError, RlimitRefused

RUN_ID = "20261204-101500-a1b2c3"
JOB = f"gl-p-{RUN_ID}"  # the name `run` gives a job of project p
JOB_LABELS = {
    "io.gpulaunch.managed": "true",
    "io.gpulaunch.project": "p",
    "io.gpulaunch.run-id": RUN_ID,
}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeEngine]:
    engine = FakeEngine(tmp_path)
    yield engine
    engine.close()


def _engine(fake: FakeEngine, **env: str) -> Engine:
    return Engine({"DOCKER_HOST": fake.host, "PATH": "", **env})


def _plan(**changes: object) -> RunPlan:
    fields: dict[str, object] = {
        "image": "img:tag",
        "name": "gl-fake",
        "command": ["true"],
        "env": {"A": "1"},
        "mounts": [],
        "user": "1000:1000",
        "gpus": 0,
        "labels": {"io.gpulaunch.run-id": RUN_ID},
        "network": "none",
        "ulimits": {},
    }
    return RunPlan(**{**fields, **changes})  # type: ignore[arg-type]


def _run(fake: FakeEngine, plan: RunPlan) -> tuple[int, bytes, bytes]:
    out, err = io.BytesIO(), io.BytesIO()
    code = supervise.supervise(_engine(fake), plan, out=out, err=err, warn=lambda _m: None)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


# -- the stream format ------------------------------------------------------------------------


def _reader(data: bytes, step: int) -> object:
    view = memoryview(data)
    pos = 0

    def read(size: int) -> bytes:
        nonlocal pos
        chunk = bytes(view[pos : pos + min(size, step)])
        pos += len(chunk)
        return chunk

    return read


@pytest.mark.parametrize("step", [1, 3, 8, 65536])
def test_frames_are_demultiplexed_however_the_bytes_arrive(step: int) -> None:
    big = bytes(range(256)) * 600  # larger than one read
    data = (
        frame(1, b"out\n") + frame(2, b"err\n") + frame(1, b"") + frame(1, big) + frame(2, b"\xff")
    )
    got: dict[int, bytes] = {1: b"", 2: b""}
    for number, chunk in frames(_reader(data, step), tty=False):  # type: ignore[arg-type]
        got[number] += chunk
    assert got == {1: b"out\n" + big, 2: b"err\n\xff"}


def test_a_cut_frame_ends_the_stream_with_what_arrived() -> None:
    data = frame(1, b"whole") + struct.pack(">BxxxL", 2, 10) + b"part"
    assert list(frames(_reader(data, 4), tty=False)) == [(1, b"whol"), (1, b"e"), (2, b"part")]  # type: ignore[arg-type]


def test_a_terminal_stream_is_raw_stdout() -> None:
    data = b"\x01\x00\x00\x00raw bytes, no headers"
    assert b"".join(c for n, c in frames(_reader(data, 5), tty=True) if n == 1) == data  # type: ignore[arg-type]


# -- the run lifecycle ----------------------------------------------------------------------


def test_a_run_creates_attaches_starts_waits_and_removes_in_order(fake: FakeEngine) -> None:
    fake.script.output = [(1, b"out\n"), (2, b"err\n"), (1, b"\xffbinary")]
    fake.script.exit_code = 3
    plan = _plan()

    code, out, err = _run(fake, plan)

    assert (code, out, err) == (3, b"out\n\xffbinary", b"err\n")
    calls = [r.split("?")[0] for r in fake.requests]
    assert calls[0] == "GET /version"  # the reachability check, as the SDK's
    assert calls.count("GET /version") == 1  # its answer also says which engine this is
    created = calls.index("POST /containers/create")
    assert calls[created:] == [
        "POST /containers/create",
        f"GET /containers/{CID}/json",
        f"POST /containers/{CID}/attach",
        f"POST /containers/{CID}/attach",
        f"POST /containers/{CID}/start",
        f"POST /containers/{CID}/wait",
        f"DELETE /containers/{CID}",
    ]
    body = create_body(plan)
    assert fake.requests[created] == "POST /containers/create?name=gl-fake"
    assert fake.bodies[created] == {k: v for k, v in body.items() if k != "name"}
    assert fake.requests[-1].endswith("force=1")


def test_a_terminal_job_streams_raw_output_and_takes_stdin(fake: FakeEngine) -> None:
    import time

    fake.script.tty = True
    fake.script.exit_on_start = False
    fake.script.output = [(1, b"\x01\x00\x00\x00looks like a header\r\n")]
    engine = _engine(fake)
    container = engine.create_container(create_body(_plan(tty=True, stdin=True)))
    sock = container.attach_socket({"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    sock.sendall(b"typed\n")
    sock.shutdown_write()
    deadline = time.monotonic() + 10
    while bytes(fake.script.stdin) != b"typed\n" and time.monotonic() < deadline:
        time.sleep(0.01)
    fake.exited.set()
    got = b"".join(c for _n, c in frames(sock.read, True))
    sock.close()
    assert got == b"\x01\x00\x00\x00looks like a header\r\n"
    assert bytes(fake.script.stdin) == b"typed\n"


def test_stop_and_kill_and_resize_reach_the_engine(fake: FakeEngine) -> None:
    fake.script.exit_on_start = False
    engine = _engine(fake)
    container = engine.create_container(create_body(_plan()))
    container.resize(height=40, width=120)
    container.kill(signal="SIGTERM")
    assert f"POST /containers/{CID}/resize?h=40&w=120" in fake.requests
    assert fake.kills == ["SIGTERM"]
    container.stop(timeout=7)
    assert f"POST /containers/{CID}/stop?t=7" in fake.requests


# -- the engine's refusals, worded as before -------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "status", "message", "expected"),
    [
        (
            "/containers/create",
            404,
            "No such image: img:tag",
            "image img:tag not found; run `gpulaunch build`",
        ),
        (
            "/start",
            500,
            'could not select device driver "" with capabilities: [[gpu]]',
            "the Docker engine has no NVIDIA GPU runtime (could not select device driver "
            '"" with capabilities [[gpu]])',
        ),
        (
            "/start",
            500,
            "OCI runtime create failed: "
            + "x" * 500
            + " nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, "
            "please update",
            "the NVIDIA runtime refused to start the container: "
            "requirement error: unsatisfied condition: cuda>=12.8",
        ),
        (
            "/start",
            500,
            "oci: something else\nbroke",
            "docker refused to start the container: oci: something else broke",
        ),
    ],
)
def test_refusals_are_one_line_and_a_created_container_is_removed(
    fake: FakeEngine, suffix: str, status: int, message: str, expected: str
) -> None:
    fake.script.errors[suffix] = (status, message)
    with pytest.raises(EngineError) as caught:
        _engine(fake).create_container(create_body(_plan(gpus=1)))
    assert caught.value.message == expected
    assert fake.removed == fake.created  # created, then refused at start: removed


def test_a_refused_ulimit_is_an_rlimit_refusal(fake: FakeEngine) -> None:
    fake.script.errors["/start"] = (
        500,
        "OCI runtime create failed: error setting rlimit type 8: operation not permitted",
    )
    with pytest.raises(RlimitRefused) as caught:
        _engine(fake).create_container(create_body(_plan()))
    assert caught.value.rlimit == "memlock"


# -- unreachable and stalled engines -----------------------------------------------------------


def test_no_engine_behind_the_socket_is_cannot_reach(tmp_path: Path) -> None:
    engine = Engine({"DOCKER_HOST": f"unix://{tmp_path}/none.sock", "PATH": ""})
    with pytest.raises(EngineError) as caught:
        engine.list_managed()
    assert caught.value.message == (
        f"cannot reach the Docker engine at unix://{tmp_path}/none.sock: No such file or directory"
    )
    assert caught.value.hint


def test_an_engine_that_never_answers_the_ping_fails_fast(
    fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(docker_api, "PING_TIMEOUT_S", 0.3)
    fake.script.hang.add("/version")
    with pytest.raises(EngineError) as caught:
        _engine(fake).identity()
    assert (
        caught.value.message
        == f"cannot reach the Docker engine at {fake.host}: no answer within 0.3 s"
    )


def test_the_engine_identity_is_the_first_contact_s_version(fake: FakeEngine) -> None:
    """What caches of an engine's limits are keyed on: its address, version and kernel from
    the /version the ping asked; no /info, which a run would otherwise pay every time."""
    engine = _engine(fake)
    assert engine.identity() == f"{fake.host}|20.10.24|None"
    assert engine.kind().name == "docker"
    assert [r.split("?")[0] for r in fake.requests] == ["GET /version"]


def test_an_engine_that_stops_answering_after_the_ping_is_named(fake: FakeEngine) -> None:
    fake.script.hang.add("/info")
    with pytest.raises(EngineError) as caught:
        _engine(fake, GPULAUNCH_ENGINE_TIMEOUT="0.3").api().call("GET", "/info")
    assert caught.value.message == (
        f"the Docker engine at {fake.host} stopped answering: no answer within 0.3 s"
    )
    assert "GPULAUNCH_ENGINE_TIMEOUT" in (caught.value.hint or "")


@pytest.mark.parametrize("path", ["/attach", "/logs"])
def test_a_stream_whose_answer_never_comes_fails_within_the_timeout(
    fake: FakeEngine, path: str
) -> None:
    """The head of a streamed answer (attach before start, logs) is waited for as long as any
    call, as the SDK waits: an engine that never answers it is named, not waited on forever
    (`run` would hang there with Ctrl-C caught). The container is removed."""
    fake.script.hang.add(path)
    engine = _engine(fake, GPULAUNCH_ENGINE_TIMEOUT="0.3")
    stalled = f"the Docker engine at {fake.host} stopped answering: no answer within 0.3 s"
    if path == "/attach":
        with pytest.raises(EngineError) as caught:
            supervise.supervise(engine, _plan(), out=io.BytesIO(), err=io.BytesIO(), warn=print)  # type: ignore[arg-type]
        assert fake.removed and not fake.started.is_set()
    else:
        fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
        engine.create_container(create_body(_plan()))
        with pytest.raises(EngineError) as caught:
            engine.get_managed(JOB).logs()
    assert caught.value.message == stalled


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + frame(1, b"a\n"),  # cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # no chunk size
    ],
    ids=["cut", "bad-chunk"],
)
def test_a_log_stream_that_breaks_is_the_engines_failure(fake: FakeEngine, answer: bytes) -> None:
    """Not an OSError (the CLI would call it "cannot write output", exit 2) nor a ValueError
    (an internal error): the engine stopped answering, exit 3."""
    fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
    engine = _engine(fake)
    engine.create_container(create_body(_plan()))
    fake.script.raw["/logs"] = lambda out: out.write(answer)
    with pytest.raises(EngineError) as caught:
        b"".join(engine.get_managed(JOB).logs(stream=True, follow=True))
    assert caught.value.message == (
        f"the Docker engine at {fake.host} stopped answering: the connection failed"
    )


def _endless_head(out: BinaryIO) -> None:
    """A head that never ends: header lines as fast as the client takes them, until it
    hangs up."""
    out.write(b"HTTP/1.1 200 OK\r\n")
    for n in itertools.count():
        out.write(b"X-Filler-%d: x\r\n" % n)


def _dripping_head(out: BinaryIO) -> None:
    """A head that comes a line every 0.25 s (each read well within any timeout)."""
    out.write(b"HTTP/1.1 200 OK\r\n")
    for n in range(60):
        time.sleep(0.25)
        out.write(b"X-Slow-%d: x\r\n" % n)


def _ask(fake: FakeEngine, path: str, timeout: str) -> tuple[EngineError, float]:
    """/info (a call) or /logs (a stream) against the script; the error and how long."""
    fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
    engine = _engine(fake, GPULAUNCH_ENGINE_TIMEOUT=timeout)
    engine.create_container(create_body(_plan()))
    start = time.monotonic()
    with pytest.raises(EngineError) as caught:
        engine.api().call("GET", "/info") if path == "/info" else engine.get_managed(JOB).logs()
    return caught.value, time.monotonic() - start


@pytest.mark.parametrize("path", ["/info", "/logs"])
def test_an_answer_head_that_never_ends_stops_at_the_size_bound_not_the_deadline(
    fake: FakeEngine, path: str
) -> None:
    """The head is bounded in size too (http.client: 100 header lines of at most 64 KiB), for
    calls and streams alike: an engine that sends header lines forever is stopped at once,
    not after GPULAUNCH_ENGINE_TIMEOUT."""
    fake.script.raw[path] = _endless_head
    error, took = _ask(fake, path, "20")
    assert took < 5, took
    assert (
        error.message
        == f"the Docker engine at {fake.host} stopped answering: the connection failed"
    )


@pytest.mark.parametrize("path", ["/info", "/logs"])
def test_an_answer_head_that_drips_ends_at_the_deadline_of_the_whole_call(
    fake: FakeEngine, path: str
) -> None:
    """http.client's socket timeout is a limit per read; the call's deadline covers every read
    of the head as well as the body (tests/engine/test_engine_reach.py drips a body)."""
    fake.script.raw[path] = _dripping_head
    error, took = _ask(fake, path, "1")
    assert took < 1 + 1.5, took
    assert (
        error.message == f"the Docker engine at {fake.host} stopped answering: no answer within 1 s"
    )


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (b"HTTP/1.1 100 Continue\r\n\r\n"
         b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"a\": 1}", {"a": 1}),
        (b"HTTP/1.0 200 OK\r\n\r\n[1, 2]", [1, 2]),  # no length: up to the close
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"3;x=y\r\n[1,\r\n3\r\n 2]\r\n0\r\nTrailer: t\r\n\r\n", [1, 2]),
        (b"HTTP/1.1 204 No Content\r\nContent-Type: application/json\r\n\r\n", None),
    ],
    ids=["continue", "http10", "chunked-trailer", "no-content"],
)  # fmt: skip
def test_answers_in_every_framing_read_as_the_engine_meant(
    fake: FakeEngine, answer: bytes, expected: object
) -> None:
    fake.script.raw["/info"] = lambda out: out.write(answer)
    engine = _engine(fake)
    assert engine.api().call("GET", "/info") == expected


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "the engine's answer is not HTTP"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "the engine's answer was cut short"),
        (b"", "the engine closed the connection without an answer"),
    ],
    ids=["not-http", "cut", "closed"],
)
def test_a_first_answer_that_is_not_the_engines_is_cannot_reach_in_one_line(
    fake: FakeEngine, answer: bytes, reason: str
) -> None:
    """Something else listens on the socket, or the engine dies mid-answer: one line naming
    the address and why, never http.client's exception text with the raw bytes."""
    fake.script.raw["/version"] = lambda out: out.write(answer)
    with pytest.raises(EngineError) as caught:
        _engine(fake).list_managed()
    assert caught.value.message == f"cannot reach the Docker engine at {fake.host}: {reason}"


@pytest.mark.parametrize("status", [101, 200], ids=["upgraded", "old-engine-200"])
def test_output_that_arrives_with_the_attach_head_is_not_lost(
    fake: FakeEngine, status: int
) -> None:
    """http.client reads the head through a buffer that may already hold the job's first
    frames (attach with logs=1 replays the stored output at once): the stream reads through
    that buffer, never around it on the raw socket."""
    fake.script.attach_status = status
    fake.script.attach_first = frame(1, b"early\n") + frame(2, b"stored\n")
    fake.script.output = [(1, b"later\n")]
    streams: list[Iterator[bytes]] = []

    def attach(container: Any) -> None:
        streams.append(container.attach(stdout=True, stderr=True, stream=True, logs=True))

    _engine(fake).create_container(create_body(_plan()), before_start=attach)
    assert b"".join(streams[0]) == b"early\nstored\nlater\n"


def test_an_attach_stream_closed_from_another_thread_wakes_its_reader(fake: FakeEngine) -> None:
    """supervise closes the attach stream (its `finally`) while a pump thread may still wait
    in a read of a silent job: the close must not wait for that read (a buffered file's close
    does), or `run` hangs before it removes the container; and the reader ends then, instead
    of waiting on a stream nobody reads any more."""
    import threading

    fake.script.exit_on_start = False  # the job runs on, silent
    container = _engine(fake).create_container(create_body(_plan()))
    sock = container.attach_socket({"stdout": 1, "stderr": 1, "stream": 1})
    read: list[bytes | str] = []

    def reader() -> None:
        try:
            read.append(sock.read(65536))
        except Exception as err:  # a closed file: the pump takes it as the stream's end
            read.append(type(err).__name__)

    pump = threading.Thread(target=reader, daemon=True)
    pump.start()
    time.sleep(0.2)  # the reader now waits on the job
    closer = threading.Thread(target=sock.close, daemon=True)
    closer.start()
    closer.join(5)
    pump.join(5)
    fake.exited.set()
    assert not closer.is_alive(), "close() waited for the job"
    assert not pump.is_alive() and read in ([b""], ["ValueError"], ["OSError"])


def test_removing_a_container_of_an_engine_that_went_away_is_quiet(fake: FakeEngine) -> None:
    """`discard` (the end of every run) must not replace the run's own outcome with an
    engine error when dockerd went away meanwhile."""
    engine = _engine(fake)
    container = engine.create_container(create_body(_plan()))
    fake.close()
    engine.discard(container)  # no EngineError
    with pytest.raises(EngineError, match="stopped answering"):
        container.remove(force=True)  # the same call, not through discard: the engine is gone


def test_the_wait_has_no_read_limit(fake: FakeEngine) -> None:
    """A job runs longer than GPULAUNCH_ENGINE_TIMEOUT: its wait and output must not time out."""
    import threading

    fake.script.exit_on_start = False
    fake.script.exit_code = 0
    timer = threading.Timer(0.8, fake.exited.set)
    timer.start()
    out, err = io.BytesIO(), io.BytesIO()
    engine = _engine(fake, GPULAUNCH_ENGINE_TIMEOUT="0.2")
    code = supervise.supervise(engine, _plan(), out=out, err=err, warn=lambda _m: None)  # type: ignore[arg-type]
    assert code == 0


# -- ps / logs / stop lookups --------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [0, 1, 3, 7000], ids=lambda n: f"chunked{n}")
def test_ps_logs_and_stop_see_only_our_containers(fake: FakeEngine, chunked: int) -> None:
    """Answers with a length and chunked ones (how the engine streams logs and long JSON)."""
    fake.script.chunked = chunked
    fake.script.exit_on_start = False
    fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
    fake.script.logs = frame(1, b"a\n") + frame(2, b"b\n")
    engine = _engine(fake)
    assert engine.list_managed(True) == []
    container = engine.create_container(create_body(_plan()))
    (found,) = engine.list_managed(True)
    assert (found.name, found.id, found.short_id, found.status) == (
        JOB,
        CID,
        CID[:12],
        "running",
    )
    assert found.image is not None and found.image.tags == ["img:tag"]
    assert engine.get_managed(JOB).logs() == b"a\nb\n"
    assert b"".join(engine.get_managed(JOB).logs(stream=True, follow=True)) == b"a\nb\n"
    assert engine.find_leftover(JOB, RUN_ID) is not None
    assert engine.find_leftover(JOB, "20261204-101500-ffffff") is None
    engine.discard(container)
    with pytest.raises(EngineError, match=rf"^no container '{JOB}'$"):
        engine.get_managed(JOB)


def test_a_container_whose_image_carries_the_run_id_is_not_ours(fake: FakeEngine) -> None:
    fake.script.labels = fake.script.image_labels = {"io.gpulaunch.run-id": RUN_ID}
    engine = _engine(fake)
    engine.create_container(create_body(_plan()))
    assert engine.list_managed(True) == []
    with pytest.raises(EngineError, match="not started by `gpulaunch run`"):
        engine.get_managed("gl-fake")


def test_a_listing_error_is_one_line(fake: FakeEngine) -> None:
    fake.script.errors["/containers/json"] = (500, "boom\nagain")
    with pytest.raises(EngineError, match=r"^cannot list containers: boom again$"):
        _engine(fake).list_managed()


def test_image_lookups_and_tagging(fake: FakeEngine) -> None:
    engine = _engine(fake)
    assert engine.image_exists("img:tag") and not engine.image_exists("other:tag")
    assert engine.image_id("img:tag") == "sha256:" + "1" * 64
    engine.tag("img:tag", "p:latest")
    assert "POST /images/img:tag/tag?repo=p&tag=latest&force=0" in fake.requests


def test_an_error_no_caller_words_is_exit_3_docker_engine(fake: FakeEngine) -> None:
    """`gpulaunch stop` of a container removed meanwhile: one line, exit 3, as the SDK's
    errors were mapped (cli.app._outside_error), never an internal error."""
    from gpulaunch.errors import ExitCode

    fake.script.exit_on_start = False
    engine = _engine(fake)
    container = engine.create_container(create_body(_plan()))
    engine.discard(container)
    with pytest.raises(EngineError) as caught:
        container.stop(timeout=1)
    assert caught.value.message == f"Docker engine: 404 No such container: {CID}"
    assert caught.value.exit_code == ExitCode.ENGINE


def test_engines_the_sdk_reaches_run_the_same_lifecycle_through_its_session(
    fake: FakeEngine,
) -> None:
    """tcp:// (TLS or not) and ssh:// engines go through the SDK's HTTP session (api/sdk.py):
    the same calls, streams and refusals. Proven here over the fake's unix socket."""
    from gpulaunch.engine.api.address import parse
    from gpulaunch.engine.api.sdk import SdkTransport

    fake.script.output = [(1, b"out\n"), (2, b"err\n")]
    fake.script.exit_code = 5
    fake.script.logs = frame(1, b"logged\n")
    fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
    engine = _engine(fake)
    engine._api = SdkTransport(parse(fake.host), 60)
    engine._api.ping(5)
    out, err = io.BytesIO(), io.BytesIO()
    code = supervise.supervise(engine, _plan(), out=out, err=err, warn=lambda _m: None)  # type: ignore[arg-type]
    assert (code, out.getvalue(), err.getvalue()) == (5, b"out\n", b"err\n")
    assert fake.removed
    assert fake.bodies[fake.requests.index("POST /v1.41/containers/create?name=gl-fake")] == {
        k: v for k, v in create_body(_plan()).items() if k != "name"
    }
    fake.removed = False
    assert engine.get_managed(JOB).logs() == b"logged\n"
    fake.script.errors["/start"] = (500, 'could not select device driver "" with capabilities')
    with pytest.raises(EngineError, match="no NVIDIA GPU runtime"):
        engine.create_container(create_body(_plan()))


def test_ps_against_an_engine_imports_no_docker_sdk(fake: FakeEngine, tmp_path: Path) -> None:
    """`gpulaunch ps` in a fresh interpreter, answered by the fake engine: it lists our
    container and never loads docker, requests or urllib3 (the real-engine check of `run` is
    tests/e2e/test_lean_imports.py)."""
    import json
    import os
    import subprocess
    import sys

    fake.script.exit_on_start = False
    fake.script.labels, fake.script.name = dict(JOB_LABELS), JOB
    _engine(fake).create_container(create_body(_plan()))
    script = (
        "import json, runpy, sys\n"
        "sys.argv = ['gpulaunch', 'ps', '--json']\n"
        "try:\n"
        "    runpy.run_module('gpulaunch', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "stack = {'docker', 'requests', 'urllib3'}\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & stack)\n"
        "print('HEAVY', json.dumps(heavy))\n"
    )
    env = {**os.environ, "DOCKER_HOST": fake.host, "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    lines = proc.stdout.splitlines()
    assert lines[-1] == "HEAVY []", proc.stdout + proc.stderr
    rows = json.loads("\n".join(lines[:-1]))
    assert [(r["name"], r["run_id"], r["image"]) for r in rows] == [(JOB, RUN_ID, "img:tag")]
