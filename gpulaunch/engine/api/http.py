"""The engine's HTTP API over a local unix socket: HTTP/1.1 on a plain socket. Every other
engine (tcp://, TLS or not, ssh://) goes through the docker SDK (`sdk.py`) and its TLS.

Two calls: `call` (one request, its JSON answer) and `stream` (an answer read as it comes:
logs, and attach, upgraded to the raw connection). Each connection is made for one request
(a unix socket connects in microseconds) so threads never share one. Failures read as the
SDK path's did: before the first answer "cannot reach the Docker engine at HOST: ..."; after
it "the Docker engine at HOST stopped answering: ..."; an error status is an `ApiError`
carrying the engine's own message.

A call's limit is a deadline for the whole call (connect, send, every read of the answer),
not a wait per read: an engine that drips one byte a second still ends it on time. A call's
answer is at most `BODY_LIMIT` bytes; streams (logs, attach) are bounded by neither, they
last as long as the job, but their answer's head is.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from gpulaunch.errors import EngineError

TIMEOUT_ENV = "GPULAUNCH_ENGINE_TIMEOUT"
UNREACHABLE_HINT = "start dockerd, or set DOCKER_HOST to a running engine"
_HEAD_LIMIT = 64 * 1024
BODY_LIMIT = 64 * 1024 * 1024  # a call's answer (JSON); the engine's largest are inspect lists
_CLOSE = "Connection: close\r\n"  # one request per connection
Query = dict[str, Any] | None


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

    def ping(self, timeout: float) -> None: ...
    def call(
        self, method: str, path: str, query: Query = None, body: Any = None, timeout: Any = ...
    ) -> Any: ...
    def stream(
        self, method: str, path: str, query: Query = None, upgrade: bool = False
    ) -> Stream: ...


def path_of(template: str, *args: str) -> str:
    """'/containers/{}/json' with each argument quoted as one path segment."""
    return template.format(*(quote(arg, safe=":") for arg in args))


def unreachable(host: str, reason: str) -> EngineError:
    return EngineError(f"cannot reach the Docker engine at {host}: {reason}", hint=UNREACHABLE_HINT)


def stalled(host: str, timed_out: bool, limit: float | None, why: str = "") -> EngineError:
    reason = f"no answer within {limit:g} s" if timed_out and limit else "the connection failed"
    reason = why or reason
    return EngineError(
        f"the Docker engine at {host} stopped answering: {reason}",
        hint=f"check dockerd (its ping answers, its API does not); {TIMEOUT_ENV} sets the wait",
    )


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


def connect(path: str, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


class BadReply(OSError):
    """An answer that is not HTTP, or cut short: read as a failed connection."""


class TooLarge(BadReply):
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


class _Reader:
    """Buffered reads from a socket (the answer's head line by line, then its body), each
    within what is left of the call's deadline."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.deadline = deadline

    def _fill(self) -> bool:
        if self.deadline.end is not None:
            self.sock.settimeout(self.deadline.left())
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def readline(self) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > _HEAD_LIMIT or not self._fill():
                raise BadReply("the engine's answer was cut short")
        end = self.buf.index(b"\n") + 1
        line = bytes(self.buf[:end])
        del self.buf[:end]
        return line

    def read_some(self, size: int) -> bytes:
        if not self.buf and not self._fill():
            return b""
        data = bytes(self.buf[:size])
        del self.buf[:size]
        return data


class Body:
    """An answer's body as it arrives: by Content-Length, chunked, or up to the close."""

    def __init__(self, reader: _Reader, length: int | None, chunked: bool) -> None:
        self.reader = reader
        self.length = length
        self.chunked = chunked
        self.left = 0  # of the current chunk
        self.done = length == 0

    def read(self, size: int) -> bytes:
        if self.done:
            return b""
        if self.chunked and self.left == 0:
            try:
                self.left = int(self.reader.readline().split(b";")[0].strip() or b"x", 16)
            except ValueError:
                raise BadReply("a chunk without its size") from None
            if self.left == 0:
                while self.reader.readline().strip():
                    pass  # trailers
                self.done = True
                return b""
        limit = self.left if self.chunked else self.length
        data = self.reader.read_some(size if limit is None else min(size, limit))
        if not data:
            if limit is not None:
                raise BadReply("the engine's answer was cut short")
            self.done = True
        elif self.chunked:
            self.left -= len(data)
            if self.left == 0 and self.reader.readline().strip():
                raise BadReply("a chunk without its end")
        elif self.length is not None:
            self.length -= len(data)
            self.done = self.length == 0
        return data

    def read_all(self, limit: int = BODY_LIMIT) -> bytes:
        parts, size = [], 0
        while chunk := self.read(65536):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"an answer over {limit:,} bytes")
            parts.append(chunk)
        return b"".join(parts)


class HttpTransport:
    """The engine on the unix socket `address`; `timeout` bounds each call (not streams).

    HTTP/1.1 by hand, one connection per request: http.client (with email and ssl under it)
    would cost more to import than all the calls of a run take."""

    def __init__(self, host: str, address: str, timeout: float) -> None:
        self.host = host
        self.address = address
        self.timeout = timeout
        self.reached = False

    def _failure(self, err: BaseException, limit: float | None) -> EngineError:
        timed_out = isinstance(err, TimeoutError)
        if not self.reached:
            reason = (
                f"no answer within {limit:g} s"
                if timed_out and limit
                else str(getattr(err, "strerror", None) or err)
            )
            return unreachable(self.host, reason)
        return stalled(self.host, timed_out, limit, str(err) if isinstance(err, TooLarge) else "")

    def _send(
        self, method: str, target: str, data: bytes | None, deadline: Deadline, upgrade: bool
    ) -> tuple[int, Body, socket.socket, _Reader]:
        """Send one request; (status, body, socket, reader) once the answer's head is in, all
        within `deadline`."""
        left = deadline.left()
        sock = connect(self.address, self.timeout if left is None else left)
        try:
            sock.settimeout(deadline.left())
            head = f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: gpulaunch\r\n"
            head += "Connection: Upgrade\r\nUpgrade: tcp\r\n" if upgrade else _CLOSE
            if data is not None:
                head += "Content-Type: application/json\r\n"
            head += f"Content-Length: {len(data or b'')}\r\n\r\n"
            sock.sendall(head.encode() + (data or b""))
            reader = _Reader(sock, deadline)
            status = 100
            while status == 100:  # a "100 Continue" comes before the answer
                try:
                    status = int(reader.readline().split()[1])
                except (IndexError, ValueError):
                    raise BadReply("the engine's answer is not HTTP") from None
                fields: dict[str, str] = {}
                while line := reader.readline().strip():
                    name, _, value = line.decode("latin-1").partition(":")
                    fields[name.strip().lower()] = value.strip()
            length = fields.get("content-length", "")
            no_body = status in (101, 204, 304) or method == "HEAD"
            body = Body(
                reader,
                0 if no_body else int(length) if length.isdigit() else None,
                "chunked" in fields.get("transfer-encoding", "").lower(),
            )
        except BaseException:
            sock.close()
            raise
        return status, body, sock, reader

    def ping(self, timeout: float) -> None:
        """The first contact, with a short limit: a hung engine must fail fast. /version,
        as the SDK asks it: an engine whose /_ping answers and whose API hangs is "cannot
        reach" here too."""
        try:
            self.call("GET", "/version", timeout=timeout)
        except ApiError as err:
            raise unreachable(self.host, err.explanation) from None
        self.reached = True

    def call(
        self, method: str, path: str, query: Query = None, body: Any = None, timeout: Any = ...
    ) -> Any:
        """One request; its JSON answer (None when empty). `timeout` None: no read limit."""
        limit = self.timeout if timeout is ... else timeout
        data = None if body is None else json.dumps(body).encode()
        target = path + ("?" + urlencode(query) if query else "")
        try:
            status, reply, sock, _ = self._send(method, target, data, Deadline(limit), False)
            try:
                raw = reply.read_all()
            finally:
                sock.close()
        except OSError as err:
            raise self._failure(err, limit) from None
        return decode(status, raw)

    def stream(self, method: str, path: str, query: Query = None, upgrade: bool = False) -> Stream:
        """An answer to read as it comes: its head (and an error's body) within the call
        timeout, as the SDK waits for it, then without a read limit (it lasts as long as the
        job). `upgrade`: attach, the connection then carries the job's streams both ways."""
        target = path + ("?" + urlencode(query) if query else "")
        deadline = Deadline(self.timeout)
        try:
            status, reply, sock, reader = self._send(method, target, None, deadline, upgrade)
            try:
                if status >= 400:
                    raise api_error(status, reply.read_all()[:_HEAD_LIMIT])
                sock.settimeout(None)
                reader.deadline = Deadline(None)  # the job's output: as long as the job
            except BaseException:
                sock.close()
                raise
        except OSError as err:
            raise self._failure(err, self.timeout) from None
        if upgrade:  # 101 (or 200 from an old engine): the raw connection follows the head
            return SocketStream(sock, bytes(reader.buf))
        return _BodyStream(sock, reply, self.host)


class SocketStream:
    """A raw connection (an upgraded attach), with what came after the answer's head."""

    def __init__(self, sock: Any, pending: bytes = b"") -> None:
        self.sock = sock
        self.pending = pending

    def read(self, size: int) -> bytes:
        if self.pending:
            data, self.pending = self.pending[:size], self.pending[size:]
            return bytes(data)
        return bytes(self.sock.recv(size))

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown_write(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()


class _BodyStream:
    """A streamed answer (logs): a connection that breaks is the engine's failure, never an
    OSError a caller would take for its own ("cannot write output")."""

    def __init__(self, sock: socket.socket, body: Body, host: str) -> None:
        self.sock = sock
        self.body = body
        self.host = host

    def read(self, size: int) -> bytes:
        try:
            return self.body.read(size)
        except OSError:  # no read limit here: a failed connection, never a timeout
            raise stalled(self.host, False, None) from None

    def sendall(self, data: bytes) -> None:
        raise OSError("not an attach stream")

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        self.sock.close()
