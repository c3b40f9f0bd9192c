"""What the engine seam remembers in the user cache for a day, one file per kind of answer,
entries by key (an engine's identity, an address, a probe's key): ulimits an engine refused,
which engine an address had, which docker CLI builds. A missing, corrupt or planted file, and
an entry that is stale or from the future, only mean "not known" (read through
fsio.read_cache, each entry's fields checked by its reader)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from gpulaunch.fsio import cache_dir, read_cache, write_cache

MAX_AGE_S = 24 * 3600  # an answer older than a day is asked again
MAX_ENTRIES = 32  # per file: the newest are kept


def _entries(name: str) -> dict[str, dict[str, object]]:
    """The entries of the cache file `name` (JSON: their keys are strings)."""
    data = read_cache(cache_dir() / name)
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def get(name: str, key: str, now: float | None = None) -> dict[str, object] | None:
    """The entry `key` of the cache file `name` when it was written (its "at") within the
    last day and not in the future; else None."""
    entry = _entries(name).get(key)
    at = None if entry is None else entry.get("at")
    now = time.time() if now is None else now
    return entry if isinstance(at, int | float) and 0 <= now - at <= MAX_AGE_S else None


def put(name: str, found: Mapping[str, Mapping[str, object]], now: float | None = None) -> None:
    """Add `found` (entries by key), written `now`, to the cache file `name`, which keeps its
    newest MAX_ENTRIES (a failed write is ignored: the next run asks again)."""
    now = time.time() if now is None else now
    entries = {**_entries(name), **{key: {"at": now, **fields} for key, fields in found.items()}}

    def at(key: str) -> float:
        stamp = entries[key].get("at")
        return float(stamp) if isinstance(stamp, int | float) else 0.0

    newest = sorted(entries, key=at, reverse=True)[:MAX_ENTRIES]
    write_cache(cache_dir() / name, {k: entries[k] for k in newest}, root=cache_dir().parent)
