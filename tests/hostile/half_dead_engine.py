"""A Docker engine that half answers: `/_ping` (and `/version`) reply at once, every other
request is read and then never answered. It stands for a dockerd whose API goroutines hang
(a stuck storage driver, a frozen containerd) while its ping handler still works.

Serves HTTP/1.1 on a unix socket in a thread; `stop()` releases the stalled requests.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

API_VERSION = "1.41"
_VERSION = {
    "Version": "20.10.24",
    "ApiVersion": API_VERSION,
    "MinAPIVersion": "1.12",
    "Os": "linux",
    "Arch": "amd64",
}


class HalfDeadEngine:
    def __init__(self, folder: Path, answer_version: bool = True) -> None:
        self.path = folder / "half-dead.sock"
        self.answer_version = answer_version
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buf = b""
        with conn:
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    line = head.split(b"\r\n", 1)[0].decode("latin-1")
                    self.requests.append(line)
                    length = 0
                    for header in head.split(b"\r\n")[1:]:
                        name, _, value = header.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value.strip())
                    buf = buf[length:]  # bodies are small here; good enough for a stall
                    path = line.split(" ")[1] if " " in line else ""
                    body = self._answer(path.split("?", 1)[0])
                    if body is None:
                        self._stop.wait()  # half dead: never answer
                        return
                    conn.sendall(body)

    def _answer(self, path: str) -> bytes | None:
        if path.endswith("/_ping"):
            return _reply(b"OK", "text/plain")
        if path.endswith("/version") and self.answer_version:
            return _reply(json.dumps(_VERSION).encode(), "application/json")
        return None


def _reply(body: bytes, kind: str) -> bytes:
    head = (
        "HTTP/1.1 200 OK\r\n"
        f"Content-Type: {kind}\r\n"
        f"Api-Version: {API_VERSION}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
