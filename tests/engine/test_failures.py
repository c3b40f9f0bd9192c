"""How the engine's failures read (engine/failures.py) on the SDK path: the transport's own
errors (requests', urllib3's) become one line naming the engine; anything else, a bug or an
OSError that is not the connection's, is raised as itself (issue 30: no broad excepts)."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import urllib3.exceptions

from gpulaunch.engine.api.address import parse
from gpulaunch.engine.api.sdk import SdkTransport
from gpulaunch.engine.failures import stalls_raise
from gpulaunch.errors import EngineError

HOST = "tcp://engine.example:2375"
STOPPED = f"the Docker engine at {HOST} stopped answering: "


class _Bug(Exception):
    """What no transport raises."""


class _Session:
    """The SDK's session: `request` fails with `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


TRANSPORT = [
    (requests.ConnectionError("Connection aborted."), {}, "the connection failed"),
    (
        requests.ReadTimeout("Read timed out. (read timeout=5)"),
        {"timeout": 5},
        "no answer within 5 s",
    ),
    (
        urllib3.exceptions.ProtocolError("Connection broken"),
        {"timeout": 5},
        "the connection failed",
    ),
    (
        urllib3.exceptions.ReadTimeoutError(None, "/info", "Read timed out."),  # type: ignore[arg-type]
        {"timeout": (3, 7)},  # a (connect, read) pair names no one limit
        "the connection failed",
    ),
]


@pytest.mark.parametrize(("error", "kwargs", "reason"), TRANSPORT)
def test_a_transport_failure_of_the_sdk_session_names_the_engine(
    error: BaseException, kwargs: dict[str, Any], reason: str
) -> None:
    session = _Session(error)
    stalls_raise(session, HOST)
    with pytest.raises(EngineError) as caught:
        session.request("GET", "/info", **kwargs)
    assert caught.value.message == STOPPED + reason
    assert "GPULAUNCH_ENGINE_TIMEOUT" in (caught.value.hint or "")


@pytest.mark.parametrize(
    "error",
    [_Bug("bug"), FileNotFoundError(2, "no CA bundle at /nonexistent"), KeyError("x")],
    ids=["bug", "oserror-not-the-connection", "keyerror"],
)
def test_anything_else_the_sdk_session_raises_is_raised_as_itself(error: BaseException) -> None:
    session = _Session(error)
    stalls_raise(session, HOST)
    with pytest.raises(type(error)):
        session.request("GET", "/info", timeout=5)


class _Raw:
    def __init__(self, body: bytes, error: BaseException | None) -> None:
        self.body, self.error = body, error

    def read1(self, size: int) -> bytes:
        if self.error is not None:
            raise self.error
        body, self.body = self.body, b""
        return body


class _Response:
    def __init__(self, body: bytes, error: BaseException | None = None) -> None:
        self.status_code = 200
        self.raw = _Raw(body, error)
        self.closed = False

    def close(self) -> None:
        self.closed = True


class _Api:
    base_url = "http://engine.example:2375"
    _version = "1.41"

    def __init__(self, response: _Response) -> None:
        self.response = response

    def request(self, *args: Any, **kwargs: Any) -> _Response:
        return self.response


def _transport(response: _Response) -> SdkTransport:
    transport = SdkTransport(parse(HOST), 7)
    transport._api = _Api(response)
    return transport


def test_an_sdk_answer_that_is_not_json_reads_as_the_stdlib_clients_does() -> None:
    """As http.py's `decode`: the text, never a ValueError (an internal error)."""
    response = _Response(b"plain text\n")
    assert _transport(response).call("GET", "/info") == "plain text\n"
    assert response.closed
    assert _transport(_Response(b'{"ID": "x"}')).call("GET", "/info") == {"ID": "x"}
    assert _transport(_Response(b"  ")).call("GET", "/info") is None


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            urllib3.exceptions.ReadTimeoutError(None, "/info", "Read timed out."),
            "no answer within 7 s",
        ),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("Connection broken"), "the connection failed"),
        (requests.ConnectionError("reset"), "the connection failed"),
        (ConnectionResetError(104, "Connection reset by peer"), "the connection failed"),
    ],
)
def test_an_sdk_answer_cut_by_the_transport_names_the_engine(
    error: BaseException, reason: str
) -> None:
    response = _Response(b"", error)
    with pytest.raises(EngineError) as caught:
        _transport(response).call("GET", "/info")
    assert caught.value.message == STOPPED + reason
    assert response.closed


def test_a_bug_while_an_sdk_answer_is_read_is_raised_as_itself() -> None:
    response = _Response(b"", _Bug("read"))
    with pytest.raises(_Bug):
        _transport(response).call("GET", "/info")
    assert response.closed
