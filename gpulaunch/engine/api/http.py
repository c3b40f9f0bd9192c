"""The engine's HTTP API over a local unix socket, through the standard library's http.client
(a connection whose `connect` opens the unix socket, as docker-py's own transport does).

Each connection carries one request (a unix socket connects in microseconds), so threads never
share one. A failure reads as on the SDK path (`failures`: "cannot reach" before the first
answer, "stopped answering" after it); an error status is an `ApiError` with the engine's
own message.

A call's limit is a deadline for the whole call (connect, send, every read of the answer's
head and body), not a wait per read: an engine that drips one byte a second still ends it on
time. A call's answer is at most `BODY_LIMIT` bytes; streams (logs, attach) are bounded by
neither, they last as long as the job, but their answer's head is (by time here, by size in
http.client: 64 KiB a line, 100 header lines).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlencode

from gpulaunch.engine.failures import stalled, unreachable
from gpulaunch.errors import EngineError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

_ERROR_LIMIT = 64 * 1024  # of an error's body, kept for its message
BODY_LIMIT = 64 * 1024 * 1024  # a call's answer (JSON); the engine's largest are inspect lists
_CLOSE = {"Connection": "close"}  # one request per connection
_UPGRADE = {"Connection": "Upgrade", "Upgrade": "tcp"}  # attach: the connection is the job's
Query = dict[str, Any] | None
Limit = float | None | EllipsisType  # a call's limit in s; None: none; ...: the transport's


class ApiError(EngineError):
    """The engine answered with an error status; `explanation` is its message. Where no
    caller words it, it reads as the SDK's errors did: exit 3, "Docker engine: ..."."""

    def __init__(self, status: int, explanation: str) -> None:
        super().__init__(f"Docker engine: {status} {' '.join(explanation.split())[:400]}")
        self.status = status
        self.explanation = explanation


class Stream(Protocol):
    """An answer read as it arrives; an attach stream also takes the job's stdin."""

    def read(self, size: int) -> bytes: ...  # b"" at the end
    def sendall(self, data: bytes) -> None: ...
    def shutdown_write(self) -> None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    host: str
    timeout: float
    version: Any  # the engine's /version answer when the ping kept it, else None

    def ping(self, timeout: float) -> None: ...
    def call(
        self, method: str, path: str, query: Query = None, body: object = None, timeout: Limit = ...
    ) -> Any: ...
    def stream(
        self, method: str, path: str, query: Query = None, upgrade: bool = False
    ) -> Stream: ...


def path_of(template: str, *args: str) -> str:
    """'/containers/{}/json' with each argument quoted as one path segment."""
    return template.format(*(quote(arg, safe=":") for arg in args))


def _target(path: str, query: Query) -> str:
    return path + ("?" + urlencode(query) if query else "")


def api_error(status: int, raw: bytes) -> ApiError:
    text = raw.decode("utf-8", "replace")
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return ApiError(status, str(message) if message else text.strip() or f"HTTP {status}")


def decode(status: int, raw: bytes) -> Any:
    if status >= 400:
        raise api_error(status, raw)
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


class TooLarge(http.client.HTTPException):
    """An answer over `BODY_LIMIT`: its reason is the error's text."""


class Deadline:
    """The end of one call: each wait on its socket gets what is left of it (None: none)."""

    def __init__(self, seconds: float | None) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        if self.end is None:
            return None
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left

    def lift(self) -> None:
        """The answer's head is in: the rest is the job's output, as long as the job runs."""
        self.end = None


class _Socket(socket.socket):
    """A unix socket whose every wait, sending or receiving, gets what is left of its call's
    deadline (a socket timeout alone is a limit per wait, which a drip never reaches)."""

    deadline: Deadline

    def sendall(self, data: ReadableBuffer, flags: int = 0, /) -> None:
        self.settimeout(self.deadline.left())
        super().sendall(data, flags)

    def recv_into(self, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0, /) -> int:
        self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)


class _Connection(http.client.HTTPConnection):
    """http.client on the engine's unix socket: only `connect` differs, as in docker-py's own
    transport (docker/transport/unixconn.py). `timeout` bounds the connect of a call that
    has no deadline (a wait)."""

    def __init__(self, path: str, timeout: float, deadline: Deadline) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path
        self.deadline = deadline

    def connect(self) -> None:
        sock = _Socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.deadline = self.deadline
        try:
            left = self.deadline.left()
            sock.settimeout(self.timeout if left is None else left)
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _body(answer: http.client.HTTPResponse) -> bytes:
    """The whole answer, at most `BODY_LIMIT` bytes; one cut short of its Content-Length is
    http.client's IncompleteRead (its own read1 would end it quietly)."""
    parts, size = [], 0
    while chunk := answer.read1(65536):
        size += len(chunk)
        if size > BODY_LIMIT:
            raise TooLarge(f"an answer over {BODY_LIMIT:,} bytes")
        parts.append(chunk)
    if answer.length:
        raise http.client.IncompleteRead(b"", answer.length)
    return b"".join(parts)


_FAILURES = (OSError, http.client.HTTPException)  # a connection that failed, or not HTTP


def _reason(err: BaseException) -> str:
    """A failure in words: the system's, or what was wrong with the answer."""
    if isinstance(err, http.client.RemoteDisconnected):
        return "the engine closed the connection without an answer"
    if isinstance(err, http.client.IncompleteRead):
        return "the engine's answer was cut short"
    if isinstance(err, http.client.HTTPException) and not isinstance(err, TooLarge):
        return "the engine's answer is not HTTP"
    return str(getattr(err, "strerror", None) or err)


class HttpTransport:
    """The engine on the unix socket `address`; `timeout` bounds each call (not streams)."""

    def __init__(self, host: str, address: str, timeout: float) -> None:
        self.host = host
        self.address = address
        self.timeout = timeout
        self.reached = False
        self.version: Any = None

    def _failure(self, err: BaseException, limit: float | None) -> EngineError:
        timed_out = isinstance(err, TimeoutError)
        if not self.reached:
            reason = f"no answer within {limit:g} s" if timed_out and limit else _reason(err)
            return unreachable(self.host, reason)
        return stalled(self.host, timed_out, limit, str(err) if isinstance(err, TooLarge) else "")

    def _open(
        self, method: str, target: str, data: bytes | None, deadline: Deadline, upgrade: bool
    ) -> tuple[http.client.HTTPResponse, socket.socket]:
        """Send one request on a new connection; its answer once the head is in, and the
        socket under it (http.client lets go of it on "Connection: close"), all within
        `deadline`."""
        conn = _Connection(self.address, self.timeout, deadline)
        headers = {"User-Agent": "gpulaunch", **(_UPGRADE if upgrade else _CLOSE)}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.connect()
            sock = conn.sock
            conn.request(method, target, data, headers)
            return conn.getresponse(), sock
        except BaseException:
            conn.close()
            raise

    def ping(self, timeout: float) -> None:
        """The first contact, with a short limit: /version, as the SDK asks it, so an engine
        whose /_ping answers and whose API hangs is "cannot reach" here too."""
        try:
            self.version = self.call("GET", "/version", timeout=timeout)
        except ApiError as err:
            raise unreachable(self.host, err.explanation) from None
        self.reached = True

    def call(
        self, method: str, path: str, query: Query = None, body: object = None, timeout: Limit = ...
    ) -> Any:
        """One request; its JSON answer (None when empty). `timeout` None: no read limit."""
        limit = self.timeout if timeout is ... else timeout
        data = None if body is None else json.dumps(body).encode()
        try:
            answer, sock = self._open(method, _target(path, query), data, Deadline(limit), False)
            with sock, answer:
                raw = _body(answer)
        except _FAILURES as err:
            raise self._failure(err, limit) from None
        return decode(answer.status, raw)

    def stream(self, method: str, path: str, query: Query = None, upgrade: bool = False) -> Stream:
        """An answer to read as it comes: its head (and an error's body) within the call
        timeout, as the SDK waits for it, then without a read limit (it lasts as long as the
        job). `upgrade`: attach, the connection then carries the job's streams both ways."""
        deadline = Deadline(self.timeout)
        try:
            answer, sock = self._open(method, _target(path, query), None, deadline, upgrade)
            if answer.status >= 400:
                with sock, answer:
                    raise api_error(answer.status, _body(answer)[:_ERROR_LIMIT])
        except _FAILURES as err:
            raise self._failure(err, self.timeout) from None
        deadline.lift()
        if upgrade:  # 101 (or 200 from an old engine): the raw connection follows the head
            return SocketStream(sock, answer)
        return _BodyStream(sock, answer, self.host)


class SocketStream:
    """A raw connection (an upgraded attach). `answer`: the answer whose head came first on
    it; its buffer may already hold the job's first bytes, so reads go through it."""

    def __init__(self, sock: socket.socket, answer: http.client.HTTPResponse | None = None) -> None:
        self.sock = sock
        self.answer = answer  # held: a collected answer closes the file it reads from
        self._read = sock.recv if answer is None else answer.fp.read1

    def read(self, size: int) -> bytes:
        return bytes(self._read(size))

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown_write(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Also while another thread waits in `read` (supervise's pump of a silent job): the
        shutdown wakes that read, which holds the buffered file a close would wait for."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self.answer is not None:
            self.answer.close()
        self.sock.close()


class AnswerStream:
    """A streamed answer that is not an attach: it takes no input."""

    def sendall(self, data: bytes) -> None:
        raise OSError("not an attach stream")

    def shutdown_write(self) -> None:
        pass


class _BodyStream(AnswerStream):
    """A streamed answer (logs): a connection that breaks is the engine's failure, never an
    OSError a caller would take for its own ("cannot write output")."""

    def __init__(self, sock: socket.socket, answer: http.client.HTTPResponse, host: str) -> None:
        self.sock = sock
        self.answer = answer
        self.host = host

    def read(self, size: int) -> bytes:
        try:
            data = self.answer.read1(size)
        except _FAILURES:  # no read limit here: a failed connection, never a timeout
            raise stalled(self.host, False, None) from None
        if not data and self.answer.length:  # cut short of its Content-Length
            raise stalled(self.host, False, None)
        return data

    def close(self) -> None:
        self.answer.close()
        self.sock.close()
