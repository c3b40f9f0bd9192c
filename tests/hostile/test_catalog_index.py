"""`catalog update` against an index that answers slowly or with something hostile.

A slow server (one byte at a time, or headers and then nothing) must not hold the update past
`--timeout` (the whole update's budget); a hostile answer (not JSON, nested past the parser's
recursion limit, the right JSON with wrong types, huge) is one line and no overlay. Nothing
inside the project or outside it (the overlay folder included) changes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hostile.conftest import Hostile, tree_state

CLOSED = "http://127.0.0.1:1"


class SlowServer:
    """HTTP on loopback: `mode` "drip" sends a valid answer's head then one body byte a
    second; "silent" reads the request and answers nothing."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            if self.mode == "drip":
                body = json.dumps({"info": {}, "releases": {}}).encode() + b" " * 1000
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
                for byte in body:
                    if self.stop.wait(0.5):
                        return
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        return
            else:
                self.stop.wait()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def config_home(hostile: Hostile, tmp_path: Path) -> Path:
    home = tmp_path / "outside" / "config"
    home.mkdir()
    hostile.monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    hostile.monkeypatch.setenv("GPULAUNCH_TORCH_INDEX_URL", f"{CLOSED}/whl")
    hostile.monkeypatch.setenv("GPULAUNCH_DOCKER_HUB_URL", CLOSED)
    return home


@pytest.mark.parametrize("mode", ["drip", "silent"])
def test_a_slow_index_ends_within_the_timeout(
    hostile: Hostile, config_home: Path, mode: str
) -> None:
    server = SlowServer(mode)
    hostile.monkeypatch.setenv("GPULAUNCH_PYPI_URL", server.url)
    try:
        start = time.monotonic()
        outcome = hostile.invoke_unchanged("catalog", "update", "--timeout", "3")
        took = time.monotonic() - start
    finally:
        server.close()
    outcome.assert_clean_error(1, server.url, "3 s")
    assert took < 3 + 2, took
    assert not list(config_home.rglob("*.yaml"))


def _serve_json(body: bytes) -> Iterator[str]:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # the client hangs up at its cap (what the test is about); socketserver would print
            # the reset into the command's own stderr
            with contextlib.suppress(ConnectionError):
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


HOSTILE_ANSWERS = {
    "not-json": b"<html>maintenance</html>",
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "deep-object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "list": b"[1, 2, 3]",
    "releases-list": json.dumps({"info": {}, "releases": [1]}).encode(),
    "release-str": json.dumps({"info": {}, "releases": {"2.99.0": "x"}}).encode(),
    "file-str": json.dumps({"info": {}, "releases": {"2.99.0": ["x", 5, None]}}).encode(),
    "file-types": json.dumps(
        {
            "info": {"version": 7, "requires_dist": "torch"},
            "releases": {
                "2.99.0": [
                    {
                        "filename": 5,
                        "requires_python": [">=3"],
                        "upload_time_iso_8601": {"x": 1},
                        "yanked": "no",
                    }
                ]
            },
        }
    ).encode(),
    "info-str": json.dumps({"info": "x", "releases": {}}).encode(),
    "bad-version": json.dumps({"info": {}, "releases": {"2.99.0\n": [], "9" * 5000: []}}).encode(),
    "not-utf8": b'{"info": "\xff\xfe"}',
    "nan": b'{"info": {}, "releases": {"2.99.0": [{"size": NaN}]}}',
    "huge-number": b'{"info": {}, "releases": {}, "n": ' + b"9" * 100_000 + b"}",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ANSWERS))
def test_a_hostile_index_is_one_line_and_no_overlay(
    hostile: Hostile, config_home: Path, case: str
) -> None:
    gen = _serve_json(HOSTILE_ANSWERS[case])
    url = next(gen)
    hostile.monkeypatch.setenv("GPULAUNCH_PYPI_URL", url)
    try:
        before = tree_state(config_home)
        outcome = hostile.invoke_unchanged("catalog", "update", "--timeout", "5")
    finally:
        gen.close()
    outcome.assert_clean_error(1, url)
    assert tree_state(config_home) == before


def test_a_huge_index_answer_is_cut_at_the_cap(hostile: Hostile, config_home: Path) -> None:
    from gpulaunch.outside import pypi

    hostile.monkeypatch.setattr(pypi, "MAX_BYTES", 1024 * 1024)  # the real cap is 64 MiB
    gen = _serve_json(b'{"info": {}, "releases": {}, "pad": "' + b"x" * (3 * 1024 * 1024) + b'"}')
    url = next(gen)
    hostile.monkeypatch.setenv("GPULAUNCH_PYPI_URL", url)
    try:
        outcome = hostile.invoke_unchanged("catalog", "update", "--timeout", "5")
    finally:
        gen.close()
    outcome.assert_clean_error(1, url, "larger than 1 MiB")
