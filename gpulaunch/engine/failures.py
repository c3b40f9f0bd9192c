"""How the engine's failures read: the deadline of each API call, an engine that cannot be
reached or stopped answering as one line naming it (for the stdlib client and the SDK alike),
and an error's text cut short.

Standard library only: `engine/api/` imports it, and so does the SDK path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulaunch.errors import ConfigError, EngineError

TIMEOUT_ENV = "GPULAUNCH_ENGINE_TIMEOUT"  # deadline of each whole API call after the ping
API_TIMEOUT_S = 60  # each later API call (streams and waits disable their read timeout)
UNREACHABLE_HINT = "start dockerd, or set DOCKER_HOST to a running engine"


def api_timeout(env: Mapping[str, str]) -> float:
    """GPULAUNCH_ENGINE_TIMEOUT, or 60 s; anything but a number in (0, 86400] is exit 2."""
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return API_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 86400:
        raise ConfigError(f"{TIMEOUT_ENV}: {text!r} is not a number of seconds in (0, 86400]")
    return value


def unreachable(host: str, reason: str) -> EngineError:
    return EngineError(f"cannot reach the Docker engine at {host}: {reason}", hint=UNREACHABLE_HINT)


def stalled(host: str, timed_out: bool, limit: float | None, why: str = "") -> EngineError:
    """The engine answered before (its ping) and now does not."""
    reason = f"no answer within {limit:g} s" if timed_out and limit else "the connection failed"
    return EngineError(
        f"the Docker engine at {host} stopped answering: {why or reason}",
        hint=f"check dockerd (its ping answers, its API does not); {TIMEOUT_ENV} sets the wait",
    )


def from_transport(err: BaseException) -> bool:
    """An error of the HTTP layer under the docker SDK (requests, urllib3), by module, so
    nothing imports them for this."""
    return any(c.__module__.split(".")[0] in ("requests", "urllib3") for c in type(err).__mro__)


def stalls_raise(api: Any, host: str) -> None:
    """Make every request of the SDK's session (a `docker.APIClient`, untyped) that the
    transport fails (a read timeout, a dropped connection) an EngineError naming the engine,
    instead of urllib3's pool text. Wrapping `Session.request` covers every call, those inside
    the SDK's models too; urllib3's errors count because requests lets them through from a
    streamed body."""
    import requests  # the SDK is loaded, and with it requests and urllib3: free here
    import urllib3.exceptions

    send = api.request

    def request(*args: Any, **kwargs: Any) -> Any:
        try:
            return send(*args, **kwargs)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as err:
            limit = kwargs.get("timeout")
            limit = limit if isinstance(limit, int | float) else None
            raise stalled(host, "timed out" in str(err).lower(), limit) from None

    api.request = request


def short_text(err: BaseException) -> str:
    """An error's message (the engine's `explanation` when it has one) on one line, at most
    400 characters."""
    explanation = getattr(err, "explanation", None)
    text = str(explanation or err).strip()
    return " ".join(text.split())[:400]
