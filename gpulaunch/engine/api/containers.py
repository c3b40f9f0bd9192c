"""A container as `ps`, `logs`, `stop` and the supervisor see it: the attributes and calls of
the docker SDK's `Container` that gpulaunch uses, over a `Transport`.

Output streams use the engine's format: without a terminal each frame is an 8-byte header
(stream 1 = stdout, 2 = stderr; 3 bytes unused; big-endian length) and its bytes; with one,
the raw bytes of the terminal.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from typing import Any

from gpulaunch.engine.api.http import ApiError, Stream, Transport, path_of
from gpulaunch.engine.failures import short_text
from gpulaunch.errors import EngineError, RlimitRefused


def frames(read: Callable[[int], bytes], tty: bool) -> Iterator[tuple[int, bytes]]:
    """(1 for stdout / 2 for stderr, bytes) as they arrive; with a terminal all is stdout.
    A frame's bytes are passed on as they come, not held until the frame is whole."""
    if tty:
        while chunk := read(65536):
            yield 1, chunk
        return
    while True:
        header = _exactly(read, 8)
        if len(header) < 8:
            return
        number, size = struct.unpack(">BxxxL", header)
        while size > 0:
            chunk = read(min(size, 65536))
            if not chunk:
                return
            size -= len(chunk)
            yield number, chunk


def _exactly(read: Callable[[int], bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = read(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def repo_tags(attrs: dict[str, Any]) -> list[str]:
    """An image's tags (its `RepoTags`), without the engine's `<none>:<none>` for none."""
    return [t for t in attrs.get("RepoTags") or [] if isinstance(t, str) and t != "<none>:<none>"]


class Image:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.attrs = attrs
        self.id = str(attrs.get("Id", ""))
        self.tags = repo_tags(attrs)
        self.labels = dict((attrs.get("Config") or {}).get("Labels") or {})
        layers = (attrs.get("RootFS") or {}).get("Layers")
        self.layers = [str(layer) for layer in layers] if isinstance(layers, list) else []


def inspect_image(api: Transport, ref: str) -> Image | None:
    """The image `ref` (a name:tag, id or digest), or None when the engine has none."""
    try:
        return Image(api.call("GET", path_of("/images/{}/json", ref)))
    except ApiError as err:
        if err.status == 404:
            return None
        raise


class Container:
    """One container, its inspect answer in `attrs` (`reload` asks again)."""

    def __init__(self, api: Transport, attrs: dict[str, Any]) -> None:
        self.api = api
        self.attrs = attrs
        self._image: Any = False  # not asked yet

    @classmethod
    def get(cls, api: Transport, ident: str) -> Container:
        """ApiError 404 when there is no such container."""
        return cls(api, api.call("GET", path_of("/containers/{}/json", ident)))

    @property
    def id(self) -> str:
        return str(self.attrs.get("Id", ""))

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def name(self) -> str:
        return str(self.attrs.get("Name", "")).lstrip("/")

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.attrs.get("Config") or {}).get("Labels") or {})

    @property
    def status(self) -> str:
        return str((self.attrs.get("State") or {}).get("Status", ""))

    @property
    def image(self) -> Image | None:
        """Its image, asked once (None when it is gone or the engine's answer is an error)."""
        if self._image is False:
            image_id = str(self.attrs.get("Image") or "")
            try:
                self._image = inspect_image(self.api, image_id) if image_id else None
            except ApiError:
                self._image = None
        return self._image  # type: ignore[no-any-return]

    @property
    def tty(self) -> bool:
        return bool((self.attrs.get("Config") or {}).get("Tty"))

    def _path(self, action: str) -> str:
        return path_of("/containers/{}/" + action, self.id)

    def reload(self) -> None:
        self.attrs = self.api.call("GET", self._path("json"))

    def start(self) -> None:
        self.api.call("POST", self._path("start"))

    def wait(self) -> dict[str, Any]:
        """{"StatusCode": N, ...} when the job ends: no read limit, it lasts as long."""
        return dict(self.api.call("POST", self._path("wait"), timeout=None))

    def kill(self, signal: str = "SIGKILL") -> None:
        self.api.call("POST", self._path("kill"), {"signal": signal})

    def stop(self, timeout: int = 10) -> None:
        """SIGTERM, SIGKILL after `timeout` s; the call may take that long and then some."""
        limit = self.api.timeout + timeout
        self.api.call("POST", self._path("stop"), {"t": timeout}, timeout=limit)

    def remove(self, force: bool = False) -> None:
        query = {"v": 0, "link": 0, "force": int(force)}
        self.api.call("DELETE", path_of("/containers/{}", self.id), query)

    def resize(self, height: int, width: int) -> None:
        self.api.call("POST", self._path("resize"), {"h": height, "w": width})

    def logs(self, stream: bool = False, follow: bool = False) -> Any:
        """Both output streams as stored by the log driver: the bytes, or an iterator."""
        query = {"stdout": 1, "stderr": 1, "follow": int(follow), "timestamps": 0, "tail": "all"}
        chunks = self._output(self.api.stream("GET", self._path("logs"), query))
        return chunks if stream else b"".join(chunks)

    def attach(self, *, stdout: bool, stderr: bool, stream: bool, logs: bool) -> Iterator[bytes]:
        """The raw bytes the job writes to the streams asked for, from now on."""
        del stream  # always streamed
        query = {"stdout": int(stdout), "stderr": int(stderr), "stream": 1, "logs": int(logs)}
        return self._output(self.api.stream("POST", self._path("attach"), query, upgrade=True))

    def _output(self, reply: Stream) -> Iterator[bytes]:
        """The bytes of an output stream as they come (both streams as one); closed after."""
        try:
            yield from (chunk for _, chunk in frames(reply.read, self.tty))
        finally:
            reply.close()

    def attach_socket(self, params: dict[str, Any]) -> Stream:
        """One upgraded attach connection (stdin goes in with `sendall`)."""
        return self.api.stream("POST", self._path("attach"), params, upgrade=True)


def create(api: Transport, name: str, body: dict[str, Any]) -> str:
    """POST /containers/create; the new container's id."""
    return str(api.call("POST", "/containers/create", {"name": name}, body)["Id"])


_RLIMIT_REFUSED = re.compile(r"error setting rlimit type (\d+)")
_RLIMIT_NAMES = {"3": "stack", "8": "memlock", "7": "nofile"}  # Linux RLIMIT_* numbers
# the NVIDIA runtime's refusal, deep in a long OCI error: kept whole, the rest is cut to 400
_NVIDIA_REQUIREMENT = re.compile(r"requirement error: unsatisfied condition: [^,\n\"\\]+")
NVIDIA_MISSING_HINT = (
    "install the NVIDIA Container Toolkit (nvidia-container-toolkit) and restart dockerd, "
    "or run on the CPU with --gpus 0"
)
# the engine's 404 texts that mean the image (not the container) is missing, as the SDK reads them
_NO_IMAGE = ("no such image", "does not exist or no pull access", "repository does not exist")


def refusal(err: Any, image: str) -> EngineError:
    """The engine's refusal to create or start a container, as one line (and a hint)."""
    text = short_text(err)
    if err.status == 404 and any(part in text.lower() for part in _NO_IMAGE):
        return EngineError(f"image {image} not found; run `gpulaunch build`")
    if "could not select device driver" in text:
        return EngineError(
            "the Docker engine has no NVIDIA GPU runtime (could not select device driver "
            '"" with capabilities [[gpu]])',
            hint=NVIDIA_MISSING_HINT,
        )
    requirement = _NVIDIA_REQUIREMENT.search(str(err.explanation or err))
    if requirement:
        return EngineError(f"the NVIDIA runtime refused to start the container: {requirement[0]}")
    rlimit = _RLIMIT_REFUSED.search(text)
    if rlimit:
        name = _RLIMIT_NAMES.get(rlimit.group(1), rlimit.group(1))
        return RlimitRefused(f"the engine may not set ulimit {name}: {text}", rlimit=name)
    return EngineError(f"docker refused to start the container: {text}")
