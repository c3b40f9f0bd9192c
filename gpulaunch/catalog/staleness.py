"""The staleness warning: a part of the packaged catalog's facts (torch, CUDA images, NGC) is
more than STALE_DAYS old and no overlay (gpulaunch.catalog.overlay) that refreshed that part is
newer; said at most once a day, remembered in a state file in the user cache folder
($XDG_CACHE_HOME/gpulaunch/catalog-warned).

An overlay written by `catalog update` names the parts it read in `sources.refreshed` (torch
from PyPI; cuda_images only when Docker Hub answered; never ngc), so a PyPI-only update does
not silence the warning for CUDA image and NGC facts. A hand-written overlay (no such list)
vouches for every part.

Age is not the only sign: the packaged catalog lists what its sources are known to lack
(`known_gaps`: NGC releases after the newest one seen, a torch release the plan dates, builds
from an index nobody read), each with the date a source would have it. Once that date is past
and no overlay that refreshed the part is as new, the warning names the gap, however young the
facts are."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from gpulaunch.catalog import overlay
from gpulaunch.errors import CatalogError

STALE_DAYS = 90
OFF_ENV = "GPULAUNCH_NO_STALE_WARNING"  # "1": never warn (tests, CI images)
STATE_NAME = "catalog-warned"
PARTS = {"torch": "torch", "cuda_images": "CUDA image", "ngc": "NGC"}


class Gap(NamedTuple):
    """Something a part of the packaged facts is known to lack, and from when a source has it."""

    part: str  # a PARTS key
    what: str
    expected: date


def gaps(raw: Any) -> tuple[Gap, ...]:
    """catalog.yaml `known_gaps` (a list of {part, what, expected}); CatalogError on a bad row."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise CatalogError("catalog: known_gaps: expected a list")
    out = []
    for i, row in enumerate(raw):
        where = f"catalog: known_gaps[{i}]"
        if not isinstance(row, dict) or set(row) - {"part", "what", "expected", "note"}:
            raise CatalogError(f"{where}: expected part, what and expected")
        when = overlay.parse_date(row.get("expected"))
        if row.get("part") not in PARTS or not isinstance(row.get("what"), str) or when is None:
            raise CatalogError(
                f"{where}: part must be one of {', '.join(PARTS)}, what a string, "
                'expected a date "YYYY-MM-DD"'
            )
        out.append(Gap(row["part"], row["what"], when))
    return tuple(out)


def refreshed(ov: overlay.Overlay) -> frozenset[str]:
    """The catalog parts an overlay's research_date vouches for."""
    sources = ov.data.get("sources")
    listed = sources.get("refreshed") if isinstance(sources, dict) else None
    if isinstance(listed, list):
        return frozenset(str(part) for part in listed if str(part) in PARTS)
    return frozenset(PARTS)


def stale_message(
    research_date: str,
    overlays: Sequence[date | tuple[date, Collection[str]]],
    today: date,
    known_gaps: Sequence[Gap] = (),
) -> str | None:
    """The warning the module docstring describes, or None; a bare date in `overlays`
    refreshes every part."""
    packaged = overlay.parse_date(research_date)
    if packaged is None:
        return None
    dated = [o if isinstance(o, tuple) else (o, tuple(PARTS)) for o in overlays]
    newest = {
        part: max([packaged, *(when for when, parts in dated if part in parts)]) for part in PARTS
    }
    # the packaged date never clears a gap (those facts were read without it); an overlay
    # that refreshed the part on or after the gap's date does
    due = [
        gap.what
        for gap in known_gaps
        if gap.expected <= today
        and not any(when >= gap.expected for when, parts in dated if gap.part in parts)
    ]
    lacking = f"; it lacks {'; '.join(due)}" if due else ""
    stale = [part for part, when in newest.items() if (today - when).days > STALE_DAYS]
    if not stale:
        if not due:
            return None
        return (
            f"the version catalog lacks what its sources have by now: {'; '.join(due)} "
            "(`gpulaunch catalog update` reads torch releases from PyPI; a newer gpulaunch, or "
            "an overlay of your own, brings the rest)"
        )
    oldest = min(newest[part] for part in stale)
    age = (today - oldest).days
    if len(stale) == len(PARTS):
        return (
            f"the version catalog's facts are {age} days old ({oldest.isoformat()}){lacking}; "
            "`gpulaunch catalog update` reads newer torch releases from PyPI into an overlay"
        )
    fresh = [PARTS[part] for part in PARTS if part not in stale]
    return (
        f"the version catalog's {' and '.join(PARTS[p] for p in stale)} facts are {age} days "
        f"old ({oldest.isoformat()}){lacking}; overlays refreshed only its "
        f"{' and '.join(fresh)} facts "
        "(`catalog update` reads CUDA image tags only when Docker Hub answers, NGC releases "
        "never): a newer gpulaunch, or an overlay of your own, brings them"
    )


def due_warning(
    research_date: str,
    overlays: Sequence[Path],
    today: date,
    known_gaps: Sequence[Gap] | None = None,
) -> str | None:
    """The stale warning if it is due today (then today is recorded), else None. Known gaps:
    the packaged catalog's unless given."""
    if os.environ.get(OFF_ENV, "") not in ("", "0"):
        return None
    read = [overlay.read_overlay(path) for path in overlays]
    dated = [(ov.research_date, refreshed(ov)) for ov in read]
    if known_gaps is None:
        raw = overlay.packaged_raw()
        known_gaps = gaps(raw.get("known_gaps") if isinstance(raw, dict) else None)
    message = stale_message(research_date, dated, today, known_gaps)
    if message is None:
        return None
    from gpulaunch.fsio import cache_dir

    state = cache_dir() / STATE_NAME
    try:
        if state.read_text("utf-8").strip() == today.isoformat():
            return None
    except (OSError, UnicodeDecodeError):
        pass
    overlay.write_user_file(state, today.isoformat() + "\n")
    return message
