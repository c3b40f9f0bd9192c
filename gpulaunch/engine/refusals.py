"""What an engine refused before, remembered per engine: a ulimit it may not raise (an
engine inside an unprivileged sandbox refuses memlock=-1 at container start).

Without this every run creates the container, has its start refused, removes it and creates
it again: two round trips of create and start for nothing. Kept in `daycache` by the engine's
identity (`Engine.identity`), so a reconfigured engine is asked again within a day."""

from __future__ import annotations

from gpulaunch.engine import daycache

FILE_NAME = "engines.json"
ULIMIT_NAMES = frozenset({"memlock", "stack", "nofile"})


def refused_ulimits(engine_id: str, now: float | None = None) -> set[str]:
    """The ulimits this engine refused within the last day (empty when unknown)."""
    refused = (daycache.get(FILE_NAME, engine_id, now) or {}).get("refused_ulimits")
    names = refused if isinstance(refused, list) else []
    return {name for name in names if isinstance(name, str) and name in ULIMIT_NAMES}


def remember_refused_ulimit(engine_id: str, name: str, now: float | None = None) -> None:
    """Record that this engine refused ulimit `name` (a failed write is ignored)."""
    if name not in ULIMIT_NAMES:
        return
    known = sorted(refused_ulimits(engine_id, now) | {name})
    daycache.put(FILE_NAME, {engine_id: {"refused_ulimits": known}}, now)
