"""The package-index seam: PyPI's JSON API and plain HTTP reads of other indexes (the PyTorch
wheel index, Docker Hub's tag list), each with a timeout and a size cap.

`gpulaunch catalog update` and `dev/catalog-check` read through here only; unit tests point
`base_url` at a local fake server, e2e tests use the real PyPI. Nothing here interprets what it
reads: that is `gpulaunch.catalog.pypi_facts`.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from typing import Any

from gpulaunch import __version__
from gpulaunch.errors import GpulaunchError

DEFAULT_PYPI = "https://pypi.org/pypi"
PYPI_ENV = "GPULAUNCH_PYPI_URL"  # another JSON API with PyPI's layout (a mirror, a test server)
TIMEOUT_S = 20.0
MAX_BYTES = 64 * 1024 * 1024  # torch's project JSON is about 1 MB; a cap, not an estimate


class Unreachable(GpulaunchError):
    """A source did not answer, or answered with something that is not what was asked."""


def pypi_url() -> str:
    """The JSON API base: $GPULAUNCH_PYPI_URL, else https://pypi.org/pypi."""
    return (os.environ.get(PYPI_ENV) or DEFAULT_PYPI).rstrip("/")


def fetch_text(url: str, *, timeout: float = TIMEOUT_S) -> str:
    """GET `url` as UTF-8 text within `timeout` seconds in all (a server that drips its
    answer a byte at a time never trips a socket timeout, so the whole read is bounded);
    every failure (DNS, refused, timeout, HTTP error status, oversize, not UTF-8) is an
    `Unreachable` naming the URL and the reason."""
    if not url.startswith(("https://", "http://")):
        raise Unreachable(f"{url}: not an http(s) URL")
    box: dict[str, object] = {}

    def read() -> None:
        try:
            box["text"] = _fetch(url, timeout)
        except BaseException as err:  # handed to the caller's thread below
            box["error"] = err

    reader = threading.Thread(target=read, name="gpulaunch-fetch", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():  # left to its socket timeout; its answer is never used
        raise Unreachable(f"{url}: no complete answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return str(box["text"])


def _fetch(url: str, timeout: float) -> str:
    request = urllib.request.Request(
        url, headers={"User-Agent": f"gpulaunch/{__version__}", "Accept": "*/*"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise Unreachable(f"{url}: HTTP {err.code}") from None
    except urllib.error.URLError as err:
        raise Unreachable(f"{url}: {_reason(err.reason)}") from None
    except (TimeoutError, OSError) as err:
        raise Unreachable(f"{url}: {_reason(err)}") from None
    if len(data) > MAX_BYTES:
        raise Unreachable(f"{url}: answer larger than {MAX_BYTES // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreachable(f"{url}: answer is not UTF-8 text") from None


def fetch_json(url: str, *, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """GET `url` and parse a JSON object."""
    text = fetch_text(url, timeout=timeout)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise Unreachable(f"{url}: answer is not JSON") from None
    if not isinstance(data, dict):
        raise Unreachable(f"{url}: answer is not a JSON object")
    return data


def release(name: str, version: str, *, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """PyPI's JSON for one release (its own `info.requires_dist`)."""
    return fetch_json(f"{pypi_url()}/{name}/{version}/json", timeout=timeout)


def _reason(err: object) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__
