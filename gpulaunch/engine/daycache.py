"""What the engine seam remembers in the user cache for a day, one file per kind of answer,
entries by key (an engine's identity, an address, a probe's key): ulimits an engine refused,
which engine an address had, which docker CLI builds. A missing, corrupt or planted file, and
an entry that is stale or from the future, only mean "not known" (read through
fsio.read_cache, each entry's fields checked by its reader)."""

from __future__ import annotations

import time

from gpulaunch.fsio import cache_dir, read_cache, write_cache

MAX_AGE_S = 24 * 3600  # an answer older than a day is asked again
MAX_ENTRIES = 32  # per file: the newest are kept


def entries(name: str) -> dict[str, dict[str, object]]:
    """The entries of the cache file `name` (JSON: their keys are strings)."""
    data = read_cache(cache_dir() / name)
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def fresh(entry: dict[str, object], now: float | None = None) -> bool:
    """Written (its "at") within the last day, and not in the future."""
    at = entry.get("at")
    now = time.time() if now is None else now
    return isinstance(at, int | float) and 0 <= now - at <= MAX_AGE_S


def save(name: str, found: dict[str, dict[str, object]]) -> None:
    """Write the newest MAX_ENTRIES of `found` as the cache file `name` (a failed write is
    ignored: the next run asks again)."""

    def at(key: str) -> float:
        stamp = found[key].get("at")
        return float(stamp) if isinstance(stamp, int | float) else 0.0

    newest = sorted(found, key=at, reverse=True)[:MAX_ENTRIES]
    write_cache(cache_dir() / name, {k: found[k] for k in newest}, root=cache_dir().parent)
