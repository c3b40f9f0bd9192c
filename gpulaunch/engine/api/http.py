"""The engine's HTTP API over a unix socket or plain tcp://, with http.client.

Two calls: `call` (one request, its JSON answer) and `stream` (an answer read as it comes:
logs, and attach, upgraded to the raw connection). Each connection is made for one request
(a unix socket connects in microseconds) so threads never share one. Failures read as the
SDK path's did: before the first answer "cannot reach the Docker engine at HOST: ..."; after
it "the Docker engine at HOST stopped answering: ..."; an error status is an `ApiError`
carrying the engine's own message.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from gpulaunch.errors import EngineError

TIMEOUT_ENV = "GPULAUNCH_ENGINE_TIMEOUT"
UNREACHABLE_HINT = "start dockerd, or set DOCKER_HOST to a running engine"
_HEAD_LIMIT = 64 * 1024
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


def stalled(host: str, timed_out: bool, limit: float | None) -> EngineError:
    reason = f"no answer within {limit:g} s" if timed_out and limit else "the connection failed"
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


def native_address(host: str) -> str | tuple[str, int] | None:
    """The socket path (unix://) or (host, port) (tcp://, http://) this client can reach
    itself, or None: another scheme, left to the SDK."""
    if host.startswith("unix://"):
        return host[len("unix://") :] or None
    for scheme in ("tcp://", "http://"):
        if host.startswith(scheme):
            name, _, port = host[len(scheme) :].rstrip("/").rpartition(":")
            if name and port.isdigit() and not set("/@") & set(name):
                return (name.strip("[]"), int(port))
    return None


class _Connection(http.client.HTTPConnection):
    def __init__(self, address: str | tuple[str, int], connect_s: float) -> None:
        super().__init__("localhost" if isinstance(address, str) else address[0], timeout=connect_s)
        self.address = address

    def connect(self) -> None:
        self.sock = connect(self.address, self.timeout)


def connect(address: str | tuple[str, int], timeout: float | None) -> socket.socket:
    if isinstance(address, tuple):
        return socket.create_connection(address, timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpTransport:
    """The engine at `host` (unix:// or tcp://); `timeout` bounds each call (not streams)."""

    def __init__(self, host: str, address: str | tuple[str, int], timeout: float) -> None:
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
        return stalled(self.host, timed_out, limit)

    def _open(self, read_s: float | None) -> _Connection:
        conn = _Connection(self.address, self.timeout if read_s is None else read_s)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(read_s)
        return conn

    def ping(self, timeout: float) -> None:
        """The first contact, with a short limit: a hung engine must fail fast."""
        try:
            self.call("GET", "/_ping", timeout=timeout)
        except ApiError as err:
            raise unreachable(self.host, err.explanation) from None
        self.reached = True

    def call(
        self, method: str, path: str, query: Query = None, body: Any = None, timeout: Any = ...
    ) -> Any:
        """One request; its JSON answer (None when empty). `timeout` None: no read limit."""
        limit = self.timeout if timeout is ... else timeout
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        target = path + ("?" + urlencode(query) if query else "")
        try:
            conn = self._open(limit)
            try:
                conn.request(method, target, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            finally:
                conn.close()
        except (OSError, http.client.HTTPException) as err:
            raise self._failure(err, limit) from None
        return decode(response.status, raw)

    def stream(self, method: str, path: str, query: Query = None, upgrade: bool = False) -> Stream:
        """An answer to read as it comes, without a read limit (it lasts as long as the job)."""
        target = path + ("?" + urlencode(query) if query else "")
        try:
            if upgrade:
                return self._upgraded(method, target)
            conn = self._open(None)
            conn.request(method, target)
            response = conn.getresponse()
            if response.status >= 400:
                raw = response.read()
                conn.close()
                raise api_error(response.status, raw)
        except (OSError, http.client.HTTPException) as err:
            raise self._failure(err, None) from None
        return _ResponseStream(conn, response)

    def _upgraded(self, method: str, target: str) -> Stream:
        """attach: the request by hand, so no byte after the answer's head is buffered away."""
        sock = connect(self.address, self.timeout)
        try:
            sock.sendall(
                f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n"
                "Upgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode()
            )
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                if not chunk or len(head) > _HEAD_LIMIT:
                    raise http.client.BadStatusLine(head[:80].decode("latin-1"))
                head += chunk
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            if status >= 400:
                raise api_error(status, rest + _read_rest(sock, lines, len(rest)))
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return SocketStream(sock, rest)


def _read_rest(sock: socket.socket, lines: list[str], have: int) -> bytes:
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    data = b""
    while have + len(data) < min(length, _HEAD_LIMIT):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


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


class _ResponseStream:
    def __init__(self, conn: _Connection, response: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.response = response

    def read(self, size: int) -> bytes:
        return self.response.read1(size)

    def sendall(self, data: bytes) -> None:
        raise OSError("not an attach stream")

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        self.response.close()
        self.conn.close()
