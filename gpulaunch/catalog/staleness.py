"""The staleness warning: the packaged catalog's facts are more than STALE_DAYS old and no
overlay (gpulaunch.catalog.overlay) is newer; said at most once a day, remembered in a state
file in the user cache folder ($XDG_CACHE_HOME/gpulaunch/catalog-warned)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from gpulaunch.catalog import overlay

STALE_DAYS = 90
OFF_ENV = "GPULAUNCH_NO_STALE_WARNING"  # "1": never warn (tests, CI images)
STATE_NAME = "catalog-warned"


def state_file() -> Path:
    return overlay.cache_home() / "gpulaunch" / STATE_NAME


def stale_message(research_date: str, overlay_dates: Sequence[date], today: date) -> str | None:
    """The warning when the newest facts (packaged or overlay) are older than STALE_DAYS."""
    packaged = overlay.parse_date(research_date)
    if packaged is None:
        return None
    newest = max([packaged, *overlay_dates])
    age = (today - newest).days
    if age <= STALE_DAYS:
        return None
    return (
        f"the version catalog's facts are {age} days old ({newest.isoformat()}); "
        "`gpulaunch catalog update` reads newer torch releases from PyPI into an overlay"
    )


def due_warning(research_date: str, overlays: Sequence[Path], today: date) -> str | None:
    """The stale warning if it is due today (then today is recorded), else None."""
    if os.environ.get(OFF_ENV, "") not in ("", "0"):
        return None
    dates = [overlay.read_overlay(path).research_date for path in overlays]
    message = stale_message(research_date, dates, today)
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
