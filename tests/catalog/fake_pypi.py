"""A local fake of PyPI's JSON API, the PyTorch wheel index and Docker Hub's tag list
(http.server on 127.0.0.1, a free port), serving what a test puts in `pages`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def wheel(name: str, version: str, tag: str, requires_python: str, day: str) -> dict[str, Any]:
    """One file entry of PyPI's `releases` (the fields gpulaunch reads, and a few it does not)."""
    return {
        "filename": f"{name}-{version}-{tag}.whl",
        "requires_python": requires_python,
        "upload_time": f"{day}T12:00:00",
        "yanked": False,
        "packagetype": "bdist_wheel",
        "size": 1,
    }


def project(
    name: str, releases: dict[str, list[dict[str, Any]]], latest: str, requires_dist: list[str]
) -> dict[str, Any]:
    return {
        "info": {"name": name, "version": latest, "requires_dist": requires_dist},
        "releases": releases,
        "urls": [],
    }


def torch_files(version: str, pythons: list[str], floor: str, day: str) -> list[dict[str, Any]]:
    files = []
    for py in pythons:
        cp = "cp3" + py.split(".")[1]
        files.append(wheel("torch", version, f"{cp}-{cp}-manylinux_2_28_x86_64", floor, day))
        files.append(wheel("torch", version, f"{cp}-{cp}-win_amd64", floor, day))
        files.append(wheel("torch", version, f"{cp}-{cp}t-manylinux_2_28_x86_64", floor, day))
    return files


class FakeIndex:
    """`pages` maps a path (`/pypi/torch/json`) to a JSON-able object or text; other paths
    answer 404. `hits` lists the paths asked for."""

    def __init__(self) -> None:
        self.pages: dict[str, Any] = {}
        self.hits: list[str] = []
        self.url = ""


@contextmanager
def serve(fake: FakeIndex) -> Iterator[FakeIndex]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.hits.append(self.path)
            page = fake.pages.get(self.path)
            if page is None:
                self.send_error(404)
                return
            body = page.encode() if isinstance(page, str) else json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
