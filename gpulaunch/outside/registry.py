"""A container registry's HTTP API (v2), asked directly: is it there, and which digest does
it hold for a tag. Credentials stay with docker (config and credential helpers); this
asks only what an anonymous client may, with a short timeout on every call.
"""

from __future__ import annotations

import ipaddress
import urllib.error
import urllib.request

from gpulaunch.errors import EngineError

PING_TIMEOUT_S = 5.0
_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def _scheme(registry: str) -> str:
    """Docker talks plain HTTP only to loopback registries (without extra daemon settings)."""
    if registry.startswith("["):  # [IPv6]:port
        host = registry[1 : registry.find("]")]
    else:
        host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    if host == "localhost":
        return "http"
    try:
        return "http" if ipaddress.ip_address(host).is_loopback else "https"
    except ValueError:
        return "https"


def _open(request: urllib.request.Request, timeout: float) -> tuple[int, dict[str, str]]:
    try:
        # loopback registries are never reached through a proxy
        loopback = request.full_url.startswith("http://")
        opener = urllib.request.build_opener(
            *([urllib.request.ProxyHandler({})] if loopback else [])
        )
        with opener.open(request, timeout=timeout) as answer:
            return int(answer.status), dict(answer.headers.items())
    except urllib.error.HTTPError as err:
        return int(err.code), dict(err.headers.items())


def ping(registry: str, timeout: float = PING_TIMEOUT_S) -> None:
    """GET /v2/: any HTTP answer (401 included) means a registry is there; else exit 3."""
    url = f"{_scheme(registry)}://{registry}/v2/"
    try:
        _open(urllib.request.Request(url, method="GET"), timeout)
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        text = "no answer" if "timed out" in str(reason) else str(reason)
        raise EngineError(
            f"registry {registry} does not answer at {url} ({text} within {timeout:.0f} s)",
            hint="start the registry or check REGISTRY[:PORT] in --push",
        ) from None


def manifest_digest(registry: str, path: str, tag: str, timeout: float = PING_TIMEOUT_S) -> str:
    """The digest the registry reports for path:tag (Docker-Content-Digest), or ''."""
    url = f"{_scheme(registry)}://{registry}/v2/{path}/manifests/{tag}"
    request = urllib.request.Request(url, method="HEAD", headers={"Accept": _MANIFEST_TYPES})
    try:
        status, headers = _open(request, timeout)
    except (urllib.error.URLError, OSError, ValueError):
        return ""
    if status != 200:
        return ""
    lowered = {k.lower(): v for k, v in headers.items()}
    return lowered.get("docker-content-digest", "")
