"""The staleness warning: a part of the packaged catalog's facts (torch, CUDA images, NGC) is
more than STALE_DAYS old and no overlay (gpulaunch.catalog.overlay) that refreshed that part is
newer; said at most once a day, remembered in a state file in the user cache folder
($XDG_CACHE_HOME/gpulaunch/catalog-warned).

An overlay written by `catalog update` names the parts it read in `sources.refreshed` (torch
from PyPI; cuda_images only when Docker Hub answered; never ngc), so a PyPI-only update does
not silence the warning for CUDA image and NGC facts. A hand-written overlay (no such list)
vouches for every part."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from datetime import date
from pathlib import Path

from gpulaunch.catalog import overlay

STALE_DAYS = 90
OFF_ENV = "GPULAUNCH_NO_STALE_WARNING"  # "1": never warn (tests, CI images)
STATE_NAME = "catalog-warned"
PARTS = {"torch": "torch", "cuda_images": "CUDA image", "ngc": "NGC"}


def state_file() -> Path:
    return overlay.cache_home() / "gpulaunch" / STATE_NAME


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
) -> str | None:
    """The warning when the newest facts of some part (packaged, or an overlay that refreshed
    that part; a bare date refreshes every part) are older than STALE_DAYS."""
    packaged = overlay.parse_date(research_date)
    if packaged is None:
        return None
    dated = [o if isinstance(o, tuple) else (o, tuple(PARTS)) for o in overlays]
    newest = {
        part: max([packaged, *(when for when, parts in dated if part in parts)]) for part in PARTS
    }
    stale = [part for part, when in newest.items() if (today - when).days > STALE_DAYS]
    if not stale:
        return None
    oldest = min(newest[part] for part in stale)
    age = (today - oldest).days
    if len(stale) == len(PARTS):
        return (
            f"the version catalog's facts are {age} days old ({oldest.isoformat()}); "
            "`gpulaunch catalog update` reads newer torch releases from PyPI into an overlay"
        )
    fresh = [PARTS[part] for part in PARTS if part not in stale]
    return (
        f"the version catalog's {' and '.join(PARTS[p] for p in stale)} facts are {age} days "
        f"old ({oldest.isoformat()}); overlays refreshed only its {' and '.join(fresh)} facts "
        "(`catalog update` reads CUDA image tags only when Docker Hub answers, NGC releases "
        "never): a newer gpulaunch, or an overlay of your own, brings them"
    )


def due_warning(research_date: str, overlays: Sequence[Path], today: date) -> str | None:
    """The stale warning if it is due today (then today is recorded), else None."""
    if os.environ.get(OFF_ENV, "") not in ("", "0"):
        return None
    read = [overlay.read_overlay(path) for path in overlays]
    dated = [(ov.research_date, refreshed(ov)) for ov in read]
    message = stale_message(research_date, dated, today)
    if message is None:
        return None
    state = state_file()
    try:
        if state.read_text("utf-8").strip() == today.isoformat():
            return None
    except (OSError, UnicodeDecodeError):
        pass
    overlay.write_user_file(state, today.isoformat() + "\n")
    return message
