"""A fake Docker engine on a unix socket: the HTTP API calls gpulaunch's stdlib client makes,
answered from a script, every request logged. Attach is upgraded to the raw connection and
sends the multiplexed frames (or raw bytes with a terminal) the script gives, as the engine
does: only once the container is started, and closed when it exits. A script can also write
any answer by hand, bytes as they go on the wire (`raw`), to stand for a broken engine."""

from __future__ import annotations

import json
import re
import socketserver
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import parse_qs, unquote, urlsplit

CID = "c0ffee" * 10 + "abcd"  # 64 hex characters, as the engine's ids


@dataclass
class Script:
    """What the fake engine answers; tests change it before (or while) calling."""

    # (stream 1/2, bytes) sent on attach after start; tty: raw bytes, stream ignored
    output: list[tuple[int, bytes]] = field(default_factory=list)
    exit_code: int = 0
    exit_on_start: bool = True  # the job ends right after its output
    errors: dict[str, tuple[int, str]] = field(default_factory=dict)  # "/start" -> answer
    hang: set[str] = field(default_factory=set)  # "/info": never answer (paths ending so)
    labels: dict[str, str] = field(default_factory=dict)
    image_labels: dict[str, str] = field(default_factory=dict)
    tty: bool = False
    logs: bytes = b""  # the stored log, already framed
    stdin: bytearray = field(default_factory=bytearray)
    chunked: int = 0  # answer bodies in chunks of this many bytes (Go's way without a length)
    # paths ending so: the whole answer written by hand (head and body), then the close
    raw: dict[str, Callable[[BinaryIO], object]] = field(default_factory=dict)
    name: str = "gl-fake"  # the container's name (`run` gives gl-PROJECT-RUNID)
    attach_status: int = 101  # 200: an old engine's attach, the raw stream without an upgrade
    attach_first: bytes = b""  # sent in the same write as attach's head (logs=1 replays so)


class FakeEngine:
    def __init__(self, folder: Path, script: Script | None = None) -> None:
        self.script = script or Script()
        self.path = folder / "engine.sock"
        self.requests: list[str] = []  # "METHOD /path?query"
        self.bodies: list[Any] = []
        self.started = threading.Event()
        self.exited = threading.Event()
        self.created = False
        self.removed = False
        self.kills: list[str] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_GET(self) -> None:
                engine.handle(self)

            do_POST = do_DELETE = do_GET

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer (a timeout test): nothing to report

        self.server = Server(str(self.path), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def close(self) -> None:
        self.exited.set()
        self.server.shutdown()
        self.server.server_close()

    # -- answers ----------------------------------------------------------------------
    def attrs(self) -> dict[str, Any]:
        running = self.started.is_set() and not self.exited.is_set()
        return {
            "Id": CID,
            "Name": "/" + self.script.name,
            "Image": "sha256:" + "1" * 64,
            "Config": {"Labels": self.script.labels, "Tty": self.script.tty},
            "State": {
                "Status": "running"
                if running
                else ("exited" if self.started.is_set() else "created"),
                "Running": running,
                "ExitCode": self.script.exit_code,
                "OOMKilled": False,
            },
            "Mounts": [],
        }

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        path = re.sub(r"^/v1\.[0-9]+/", "/", unquote(url.path))  # the SDK's versioned paths
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length)) if length else None
        self.requests.append(h.command + " " + h.path)
        self.bodies.append(body)
        parts = path.strip("/").split("/")
        if any(path.endswith(suffix) for suffix in self.script.hang):
            self.exited.wait(30)
            return None
        for suffix, write in self.script.raw.items():
            if path.endswith(suffix):
                write(h.wfile)  # type: ignore[arg-type]
                h.wfile.flush()
                h.close_connection = True
                return None
        for suffix, (status, message) in self.script.errors.items():
            if path.endswith(suffix):
                return self.reply(h, status, {"message": message})
        route = (h.command, parts[0], parts[-1] if len(parts) > 1 else "")
        if path == "/_ping":
            return self.reply(h, 200, b"OK")
        if path == "/version":
            return self.reply(h, 200, {"ApiVersion": "1.41", "Version": "20.10.24"})
        if route == ("GET", "info", ""):
            return self.reply(
                h, 200, {"ID": "fake", "ServerVersion": "20.10", "KernelVersion": "6"}
            )
        if route == ("GET", "networks", ""):
            return self.reply(h, 200, [{"Name": "none"}, {"Name": "host"}])
        if parts[0] == "images":
            if parts[1].startswith("sha256:1") or parts[1] in ("img:tag", "p:gl-1"):
                return self.reply(
                    h,
                    200,
                    {
                        "Id": "sha256:" + "1" * 64,
                        "RepoTags": ["img:tag"],
                        "Config": {"Labels": self.script.image_labels},
                    },
                )
            return self.reply(h, 404, {"message": f"No such image: {parts[1]}"})
        if route == ("POST", "containers", "create"):
            self.created = True
            return self.reply(h, 201, {"Id": CID, "Warnings": []})
        if route == ("GET", "containers", "json") and len(parts) == 2 and parts[1] == "json":
            return self.reply(h, 200, [{"Id": CID}] if self.created and not self.removed else [])
        if parts[0] == "containers" and (
            not self.created or self.removed or parts[1] not in (CID, self.script.name)
        ):
            return self.reply(h, 404, {"message": f"No such container: {parts[1]}"})
        action = parts[2] if len(parts) > 2 else ""
        if h.command == "GET" and action == "json":
            return self.reply(h, 200, self.attrs())
        if action == "attach":
            return self.attach(h, query)
        if action == "start":
            self.started.set()
            return self.reply(h, 204, None)
        if action == "wait":
            self.exited.wait(30)
            return self.reply(h, 200, {"StatusCode": self.script.exit_code, "Error": None})
        if action in ("kill", "stop"):
            self.kills.append(query.get("signal", "stop"))
            self.exited.set()
            return self.reply(h, 204, None)
        if action == "logs":
            return self.reply(h, 200, self.script.logs, "application/vnd.docker.raw-stream")
        if action == "resize":
            return self.reply(h, 200, None)
        if h.command == "DELETE":
            self.removed = True
            return self.reply(h, 204, None)
        return self.reply(h, 404, {"message": "page not found"})

    def reply(
        self, h: BaseHTTPRequestHandler, status: int, body: Any, kind: str = "application/json"
    ) -> None:
        data = (
            body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        )
        h.send_response(status)
        h.send_header("Content-Type", kind)
        size = self.script.chunked
        if size and status != 204:
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for at in range(0, len(data), size):
                part = data[at : at + size]
                h.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(part), part))
                h.wfile.flush()
            h.wfile.write(b"0\r\nTrailer: x\r\n\r\n")
        else:
            if status != 204:
                h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        h.wfile.flush()

    def attach(self, h: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        if self.script.attach_status == 101:
            head = b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
        else:
            head = b"HTTP/1.1 %d OK\r\n" % self.script.attach_status
        kind = "raw-stream" if self.script.tty else "multiplexed-stream"
        head += b"Content-Type: application/vnd.docker.%s\r\n\r\n" % kind.encode()
        h.wfile.write(head + self.script.attach_first)  # one write: they arrive together
        h.wfile.flush()
        if query.get("stdin") == "1":
            threading.Thread(target=self._read_stdin, args=(h,), daemon=True).start()
        self.started.wait(30)
        wanted = {1} if query.get("stdout") == "1" else set()
        wanted |= {2} if query.get("stderr") == "1" else set()
        for number, data in self.script.output:
            if self.script.tty:
                h.wfile.write(data)
            elif number in wanted:
                h.wfile.write(struct.pack(">BxxxL", number, len(data)) + data)
            h.wfile.flush()
        if self.script.exit_on_start:
            self.exited.set()
        self.exited.wait(30)
        h.close_connection = True

    def _read_stdin(self, h: BaseHTTPRequestHandler) -> None:
        while chunk := h.rfile.read1(65536):
            self.script.stdin += chunk


def frame(number: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", number, len(data)) + data
