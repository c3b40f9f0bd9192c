"""The same two calls through the docker SDK's HTTP session, for every engine that is not a
local unix socket (tcp://, with TLS or without, ssh://, npipe://): the SDK's own TLS
(`docker.tls.TLSConfig`) and, for ssh://, the system `ssh` client (`use_ssh_client`, as the
docker CLI does; paramiko is not needed).

A call is bounded as `http.py`'s are: the whole answer within the call's limit (each read
waits at most what is left of it, checked again between reads) and at most BODY_LIMIT
bytes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from gpulaunch.engine.api.address import Address
from gpulaunch.engine.api.http import (
    BODY_LIMIT,
    AnswerStream,
    Limit,
    Query,
    SocketStream,
    Stream,
    api_error,
    decode,
)
from gpulaunch.engine.failures import short_text, stalled, unreachable


def client_kwargs(address: Address) -> dict[str, Any]:
    """base_url, tls and use_ssh_client for docker.APIClient / DockerClient: the one place
    the SDK learns how to reach the engine. A tcp:// address with TLS gets TLSConfig (the SDK
    then speaks https://); without it, plain http:// only when nothing asked for TLS."""
    from docker.tls import TLSConfig

    kwargs: dict[str, Any] = {"base_url": address.url}
    if address.tls is not None:
        tls = address.tls
        kwargs["tls"] = TLSConfig(client_cert=tls.cert, ca_cert=tls.ca, verify=tls.verify)
    if address.scheme == "ssh":
        kwargs["use_ssh_client"] = True
    return kwargs


def connected(make: Callable[..., Any], address: Address, timeout: float) -> Any:
    """`make` (docker.APIClient or docker.DockerClient) connected to `address`, its API
    version asked of the engine (/version) as the SDK's version=None asks it: the
    reachability check, "cannot reach the Docker engine at ..." when it fails or takes more
    than `timeout`.

    With TLS each request names the address's CA itself: requests would otherwise put
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE from the environment in place of the session's CA
    (its merge of environment settings), trusting a public CA list for a private engine, or
    refusing the engine's own CA. So the version is asked only once that is in place."""
    import requests
    from docker.constants import MINIMUM_DOCKER_API_VERSION
    from docker.errors import DockerException

    try:
        made = make(version=MINIMUM_DOCKER_API_VERSION, timeout=timeout, **client_kwargs(address))
        api = getattr(made, "api", made)
        if address.tls is not None:
            send, verify = api.request, api.verify

            def request(*args: Any, **kwargs: Any) -> Any:
                kwargs.setdefault("verify", verify)
                return send(*args, **kwargs)

            api.request = request
        api._version = api._retrieve_server_version()  # what version=None does in __init__
    except (DockerException, requests.RequestException) as err:
        timed_out = isinstance(err, requests.Timeout) or "timed out" in str(err)
        reason = f"no answer within {timeout:g} s" if timed_out else short_text(err)
        raise unreachable(address.url, reason) from None
    return made


class SdkTransport:
    def __init__(self, address: Address, timeout: float) -> None:
        self.address = address
        self.host = address.url
        self.timeout = timeout
        self.version: Any = None  # the SDK keeps only the API version of its /version answer
        self._api: Any = None

    def ping(self, timeout: float) -> None:
        import docker

        self._api = connected(docker.APIClient, self.address, timeout)
        self._api.timeout = self.timeout

    def _send(self, method: str, path: str, limit: float | None, **kwargs: Any) -> Any:
        """The answer as it comes (its head read); an error status is ApiError with the
        first 64 KiB of its body."""
        import requests

        url = f"{self._api.base_url}/v{self._api._version}{path}"
        try:
            response = self._api.request(method, url, timeout=limit, stream=True, **kwargs)
            if response.status_code >= 400:
                with response:
                    raise api_error(response.status_code, response.raw.read(64 * 1024))
        except requests.RequestException as err:
            raise stalled(self.host, isinstance(err, requests.Timeout), limit) from None
        return response

    def call(
        self, method: str, path: str, query: Query = None, body: object = None, timeout: Limit = ...
    ) -> Any:
        import urllib3.exceptions

        limit = self.timeout if timeout is ... else timeout
        end = None if limit is None else time.monotonic() + limit
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        response = self._send(method, path, limit, params=query, data=data, headers=headers)
        parts, size = [], 0
        read = getattr(response.raw, "read1", None) or response.raw.read  # read1: what came
        try:
            while chunk := read(65536):
                size += len(chunk)
                if size > BODY_LIMIT:
                    raise stalled(self.host, False, limit, f"an answer over {BODY_LIMIT:,} bytes")
                if end is not None and time.monotonic() > end:
                    raise stalled(self.host, True, limit)
                parts.append(chunk)
        # the connection's (requests' are OSErrors too) and urllib3's own: a read timeout,
        # a broken chunk
        except (OSError, urllib3.exceptions.HTTPError) as err:
            raise stalled(self.host, "timed out" in str(err).lower(), limit) from None
        finally:
            response.close()
        return decode(response.status_code, b"".join(parts))

    def stream(self, method: str, path: str, query: Query = None, upgrade: bool = False) -> Stream:
        headers = {"Connection": "Upgrade", "Upgrade": "tcp"} if upgrade else {}
        response = self._send(method, path, None, params=query, headers=headers)
        if upgrade:
            sock = self._api._get_raw_response_socket(response)
            return SocketStream(getattr(sock, "_sock", sock))
        return _Chunks(response)


class _Chunks(AnswerStream):
    def __init__(self, response: Any) -> None:
        self.response = response
        self.chunks = response.iter_content(chunk_size=None)
        self.pending = b""

    def read(self, size: int) -> bytes:
        if not self.pending:
            self.pending = next(self.chunks, b"")
        data, self.pending = self.pending[:size], self.pending[size:]
        return bytes(data)

    def close(self) -> None:
        self.response.close()
