"""`gpulaunch history`: the rows and totals shown for a project's run records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.records.store import RunRecord, parse_time

_RELATIVE = re.compile(r"([0-9]{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """--since: a date (2026-12-01), a UTC time (2026-12-01T08:00) or an age (30m, 12h, 3d, 2w)."""
    now = now or datetime.now(UTC)
    match = _RELATIVE.fullmatch(text)
    if match:
        try:
            return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
        except OverflowError:
            raise ConfigError(f"--since: {text!r} reaches before the year 1") from None
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9:.]+)?(Z|[+-][0-9:]+)?", text):
        value = parse_time(text if "T" in text or " " in text else text + "T00:00:00")
        if value is not None:
            return value
    raise ConfigError(
        f"--since: {text!r} is not a date (2026-12-01), a time (2026-12-01T08:00) "
        "or an age (30m, 12h, 3d, 2w)"
    )


@dataclass(frozen=True)
class Totals:
    runs: int
    duration_s: float
    gpu_hours: float
    cost: str | None  # None when no run has a price


def select(
    records: list[RunRecord], limit: int | None = None, since: datetime | None = None
) -> list[RunRecord]:
    """Newest first; those started at or after `since`; at most `limit`."""
    if since is not None:
        records = [r for r in records if (t := parse_time(r.started_at)) and t >= since]
    return records[:limit]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def totals(records: list[RunRecord]) -> Totals:
    total_cost: Decimal | None = None
    for item in (r.cost for r in records if isinstance(r.cost, str)):
        try:
            value = Decimal(item)
        except ArithmeticError:
            continue
        if value.is_finite():  # not "Infinity"/"NaN" from a hand-edited file
            total_cost = (total_cost or Decimal(0)) + value
    cost = None if total_cost is None else str(total_cost.quantize(Decimal("0.01")))
    return Totals(
        runs=len(records),
        duration_s=round(sum(_number(r.duration_s) for r in records), 1),
        gpu_hours=round(sum(_number(r.gpu_hours) for r in records), 4),
        cost=cost,
    )


def duration_text(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def row(record: RunRecord) -> dict[str, str]:
    """One history line as text (the table); --json prints the records themselves."""
    tag = record.image.tag if record.image is not None else None
    code = record.exit_code
    exit_text = "-" if code is None else str(code)
    if record.signal:
        exit_text += f" ({record.signal})"
    hours = record.gpu_hours
    return {
        "id": record.id,
        "start": str(record.started_at or "-").replace("T", " ")[:19],
        "state": str(record.state),
        "command": " ".join(str(part) for part in record.command),
        "image": str(tag or ("(host)" if record.mode == "host" else "-")),
        "gpus": str(record.gpus.count if record.gpus.count is not None else "?"),
        "duration": duration_text(record.duration_s),
        "exit": exit_text,
        "gpu_hours": "-" if hours is None else f"{hours:.4f}",
        "cost": str(record.cost or "-"),
    }


def recorded_images(records: list[RunRecord]) -> dict[str, str]:
    """Image id or tag -> the run id of the newest record that names it (records newest
    first, as `store.load_all` and `select` give them): what `prune` keeps for them."""
    named: dict[str, str] = {}
    for record in records:
        if record.image is not None:
            for value in (record.image.id, record.image.tag):
                if value:
                    named.setdefault(value, record.id)
    return named
