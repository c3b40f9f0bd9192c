"""The same two calls through the docker SDK's HTTP session, for engines `http.py` does not
reach itself (ssh://, https://, npipe://): the SDK connects to those as it always has."""

from __future__ import annotations

import json
from typing import Any

from gpulaunch.engine.api.http import Query, SocketStream, Stream, api_error, stalled, unreachable


class SdkTransport:
    def __init__(self, host: str, timeout: float) -> None:
        self.host = host
        self.timeout = timeout
        self._api: Any = None

    def ping(self, timeout: float) -> None:
        import docker
        import requests
        from docker.errors import DockerException

        try:  # version=None asks the engine's /version: the reachability check
            self._api = docker.APIClient(base_url=self.host, timeout=timeout)
        except (DockerException, requests.RequestException) as err:
            timed_out = isinstance(err, requests.Timeout) or "timed out" in str(err)
            reason = f"no answer within {timeout:g} s" if timed_out else " ".join(str(err).split())
            raise unreachable(self.host, reason[:400]) from None
        self._api.timeout = self.timeout

    def _send(self, method: str, path: str, limit: Any, **kwargs: Any) -> Any:
        import requests

        url = f"{self._api.base_url}/v{self._api._version}{path}"
        try:
            response = self._api.request(method, url, timeout=limit, **kwargs)
        except requests.RequestException as err:
            raise stalled(self.host, isinstance(err, requests.Timeout), limit) from None
        if response.status_code >= 400:
            raise api_error(response.status_code, response.content)
        return response

    def call(
        self, method: str, path: str, query: Query = None, body: Any = None, timeout: Any = ...
    ) -> Any:
        limit = self.timeout if timeout is ... else timeout
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        response = self._send(method, path, limit, params=query, data=data, headers=headers)
        return response.json() if response.content.strip() else None

    def stream(self, method: str, path: str, query: Query = None, upgrade: bool = False) -> Stream:
        headers = {"Connection": "Upgrade", "Upgrade": "tcp"} if upgrade else {}
        response = self._send(method, path, None, params=query, headers=headers, stream=True)
        if upgrade:
            sock = self._api._get_raw_response_socket(response)
            return SocketStream(getattr(sock, "_sock", sock))
        return _Chunks(response)


class _Chunks:
    def __init__(self, response: Any) -> None:
        self.response = response
        self.chunks = response.iter_content(chunk_size=None)
        self.pending = b""

    def read(self, size: int) -> bytes:
        if not self.pending:
            self.pending = next(self.chunks, b"")
        data, self.pending = self.pending[:size], self.pending[size:]
        return bytes(data)

    def sendall(self, data: bytes) -> None:
        raise OSError("not an attach stream")

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        self.response.close()
