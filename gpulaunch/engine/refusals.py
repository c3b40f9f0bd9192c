"""What an engine refused before, remembered per engine: a ulimit it may not raise (an
engine inside an unprivileged sandbox refuses memlock=-1 at container start).

Without this every run creates the container, has its start refused, removes it and creates
it again: two round trips of create and start for nothing. The answer is kept in the user
cache dir keyed by the engine's identity (its ID, version and kernel from /info) and for a
day at most, so a reconfigured engine is asked again; a cache file that is missing, corrupt
or planted only means asking again (read through fsio.read_cache, checked field by field)."""

from __future__ import annotations

import time

from gpulaunch.fsio import cache_dir, read_cache, write_cache

FILE_NAME = "engines.json"
MAX_AGE_S = 24 * 3600
MAX_ENGINES = 32
ULIMIT_NAMES = frozenset({"memlock", "stack", "nofile"})


def _entries() -> dict[str, dict[str, object]]:
    data = read_cache(cache_dir() / FILE_NAME)  # JSON: its keys are strings
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def refused_ulimits(engine_id: str, now: float | None = None) -> set[str]:
    """The ulimits this engine refused within the last day (empty when unknown)."""
    entry = _entries().get(engine_id, {})
    at, refused = entry.get("at"), entry.get("refused_ulimits")
    now = time.time() if now is None else now
    if not isinstance(at, int | float) or not 0 <= now - at <= MAX_AGE_S:
        return set()
    names = refused if isinstance(refused, list) else []
    return {name for name in names if isinstance(name, str) and name in ULIMIT_NAMES}


def remember_refused_ulimit(engine_id: str, name: str, now: float | None = None) -> None:
    """Record that this engine refused ulimit `name` (a failed write is ignored)."""
    if name not in ULIMIT_NAMES:
        return
    now = time.time() if now is None else now
    entries = _entries()
    known = refused_ulimits(engine_id, now)
    entries[engine_id] = {"at": now, "refused_ulimits": sorted(known | {name})}
    newest = sorted(entries, key=lambda k: _at(entries[k]), reverse=True)[:MAX_ENGINES]
    write_cache(cache_dir() / FILE_NAME, {k: entries[k] for k in newest}, root=cache_dir().parent)


def _at(entry: dict[str, object]) -> float:
    at = entry.get("at")
    return float(at) if isinstance(at, int | float) else 0.0
