"""Where the engine is and how to reach it: the one reading of DOCKER_HOST, the docker context
and docker's TLS settings that every command, and every client under them, goes by.

The address follows the docker CLI's rules (docker/cli opts.ParseHost): spaces around it are
dropped, an address without a scheme is tcp://, an empty one (or a bare `unix://`) is the
default socket, and the scheme is one of `unix`, `tcp`, `ssh`, `npipe`, spelled in lower case
(`TCP://` is not an address to the docker CLI, so it is not one here either: the SDK, which
would read it, and the CLI, which builds, must never disagree on where the job goes).

TLS is the CLI's too: for a tcp:// address DOCKER_TLS_VERIFY (verify), DOCKER_TLS or
DOCKER_CERT_PATH (encrypt) ask for it, with ca.pem, cert.pem and key.pem from DOCKER_CERT_PATH
(default ~/.docker); a context brings its own TLS material (contexts/tls/<sha256>/docker)
and SkipTLSVerify. Whatever asks for TLS gets it: `tls` is never None for a tcp:// engine
the user reaches with TLS, so no client can speak plain HTTP to it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulaunch.errors import ConfigError, EngineError

DEFAULT_SOCKET = "/var/run/docker.sock"
SCHEMES = ("unix", "tcp", "ssh", "npipe")
TLS_VARIABLES = ("DOCKER_TLS_VERIFY", "DOCKER_TLS", "DOCKER_CERT_PATH")
_BAD = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u2028\u2029]")  # inside an address: never docker's
_CA, _CERT, _KEY = "ca.pem", "cert.pem", "key.pem"


@dataclass(frozen=True)
class Tls:
    """TLS to a tcp:// engine: `folder` holds what exists of ca.pem, cert.pem and key.pem."""

    verify: bool
    folder: str
    ca: str | None = None
    cert: tuple[str, str] | None = None  # (cert.pem, key.pem), both present

    @classmethod
    def from_folder(cls, folder: Path, verify: bool) -> Tls:
        ca, cert, key = (folder / name for name in (_CA, _CERT, _KEY))
        return cls(
            verify=verify,
            folder=str(folder),
            ca=str(ca) if ca.is_file() else None,
            cert=(str(cert), str(key)) if cert.is_file() and key.is_file() else None,
        )


@dataclass(frozen=True)
class Address:
    """An engine address as docker reads it. `url` is how it is shown and handed on."""

    scheme: str
    url: str
    tls: Tls | None = None

    def __str__(self) -> str:
        return self.url

    @property
    def socket(self) -> str | None:
        """The unix socket's path: the one kind of engine the stdlib client dials."""
        return self.url[len("unix://") :] if self.scheme == "unix" else None

    @property
    def remote(self) -> bool:
        """On another machine (tcp://, ssh://): this machine's GPUs are not its GPUs."""
        return self.scheme not in ("unix", "npipe")


def parse(text: str, source: str = "DOCKER_HOST") -> Address:
    """`text` as docker reads an engine address (no TLS yet); ConfigError naming `source`
    when docker would not take it."""
    address = text.strip()
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if not address or (scheme == "unix" and not rest):
        return Address("unix", "unix://" + DEFAULT_SOCKET)
    if scheme not in SCHEMES or not rest or "://" in rest or _BAD.search(address):
        raise ConfigError(
            f"{source}: {address!r} is not an engine address",
            hint="docker's forms: unix:///PATH, tcp://HOST:PORT, ssh://[USER@]HOST, npipe://"
            "PATH, schemes in lower case",
        )
    return Address(scheme, f"{scheme}://{rest}")


def resolve(env: Mapping[str, str]) -> Address:
    """The engine this environment names: DOCKER_HOST, else the active docker context's
    endpoint, else the default socket; with the TLS docker would use to reach it."""
    home = Path(env.get("HOME") or Path.home())
    config = Path(env.get("DOCKER_CONFIG") or home / ".docker")
    tls = _env_tls(env, home)
    if env.get("DOCKER_HOST"):
        address = parse(env["DOCKER_HOST"])
    else:
        found = _context(env, config)
        if found is None:
            return parse("")
        address, context_tls = found
        tls = context_tls or tls
    return Address(address.scheme, address.url, tls if address.scheme == "tcp" else None)


def _env_tls(env: Mapping[str, str], home: Path) -> Tls | None:
    if not any(env.get(name) for name in TLS_VARIABLES):
        return None
    folder = Path(env.get("DOCKER_CERT_PATH") or home / ".docker")
    return Tls.from_folder(folder, verify=bool(env.get("DOCKER_TLS_VERIFY")))


def _context(env: Mapping[str, str], config: Path) -> tuple[Address, Tls | None] | None:
    """The active context's endpoint and TLS material (`docker context use`), or None for the
    default context. EngineError when the context named cannot be read."""
    name = env.get("DOCKER_CONTEXT")
    if not name:
        try:
            name = json.loads((config / "config.json").read_text()).get("currentContext")
        except (OSError, ValueError, AttributeError):
            return None
    if not name or name == "default":
        return None
    digest = hashlib.sha256(str(name).encode()).hexdigest()
    try:
        meta = json.loads((config / "contexts" / "meta" / digest / "meta.json").read_text())
        endpoint = meta["Endpoints"]["docker"]
        host = endpoint["Host"]
    except (OSError, ValueError, KeyError, TypeError):
        raise EngineError(f"docker context {name!r}: cannot read its endpoint") from None
    if not isinstance(host, str):
        raise EngineError(f"docker context {name!r}: cannot read its endpoint")
    address = parse(host, f"docker context {name!r}")
    skip = endpoint.get("SkipTLSVerify") is True if isinstance(endpoint, dict) else False
    tls = Tls.from_folder(config / "contexts" / "tls" / digest / "docker", verify=not skip)
    # the CLI's rule (context/docker/load.go): TLS when the context holds TLS files or skips
    # verification; then verified unless it says to skip
    return address, tls if tls.ca or tls.cert or skip else None
