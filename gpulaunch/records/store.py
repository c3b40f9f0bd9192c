"""Where run records live (`.gpulaunch/runs/<id>.json`) and how they are read and written.

A record is written whole through the one writer (temp file + rename), so a reader sees the
old record or the new one, never half of one. Each is sealed (records/seal.py): a record
without this user's seal (forged by a job, edited by hand) is skipped like a corrupt one.
Records are a convenience, never a reason for a job not to run: a read-only folder, a corrupt
file or a record from a newer gpulaunch is a warning (the `warn` callback), not an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpulaunch.errors import GpulaunchError

SCHEMA_VERSION = 1
RUNS_DIR = Path(".gpulaunch") / "runs"
# run ids are made by engine.runspec.new_run_id: 20261203-201500-a1b2c3
_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")
MAX_RECORD_BYTES = 4 * 1024 * 1024

Warn = Callable[[str], None]


def runs_dir(project: Path) -> Path:
    return project / RUNS_DIR


def is_run_id(text: str) -> bool:
    return bool(_RUN_ID.fullmatch(text))


def utc_now() -> str:
    """Now in UTC, ISO 8601 with milliseconds (2026-12-03T20:15:00.123Z): runs started in the
    same second still sort in order."""
    return iso(datetime.now(UTC))


def parse_time(text: Any) -> datetime | None:
    """An ISO 8601 time from a record or the engine (nanoseconds and offsets allowed)."""
    if not isinstance(text, str) or not text or text.startswith("0001-01-01"):
        return None
    text = text.strip().replace("Z", "+00:00")
    match = re.fullmatch(r"(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)", text)
    if match:  # Python's fromisoformat takes at most microseconds
        text = match[1] + (match[2] or "")[:7] + match[3]
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Loaded:
    """Every readable record (newest first) and what was skipped, as warnings."""

    records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def record_path(project: Path, run_id: str) -> Path:
    return runs_dir(project) / f"{run_id}.json"


def save(project: Path, record: dict[str, Any], warn: Warn) -> bool:
    """Write (or replace) one record; False and a warning when it cannot be written."""
    from gpulaunch.fsio import write_file
    from gpulaunch.records.seal import seal

    path = record_path(project, str(record["id"]))
    try:
        text = json.dumps(seal(record), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        write_file(path, text, root=project, force=True)
    except GpulaunchError as err:
        warn(f"warning: run record not written: {err.message}")
        return False
    return True


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22): with the
    pid it names one process; a recycled pid has another. None off Linux or when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_OBJECTS = ("image", "options", "config", "gpus", "restarts", "gpu_metrics", "git")


def load_one(path: Path) -> dict[str, Any]:
    """One record, or ValueError saying why it is not one gpulaunch can read."""
    from gpulaunch.fsio import read_json_back

    try:
        data = read_json_back(path, MAX_RECORD_BYTES)
    except FileNotFoundError:
        raise ValueError("is gone") from None
    if not isinstance(data, dict):
        raise ValueError("not a run record (no JSON object)")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("not a run record (no schema_version)")
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"schema_version {version} is newer than this gpulaunch reads ({SCHEMA_VERSION})"
        )
    if not is_run_id(str(data.get("id", ""))) or path.stem != data["id"]:
        raise ValueError("not a run record (its id does not match its file name)")
    for key in _OBJECTS:  # what history, rerun and reconcile read as objects
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ValueError(f"not a run record ({key} is not a JSON object)")
    from gpulaunch.records.seal import check

    check(data)  # a record is data gpulaunch wrote, never one a job or an edit made
    return data


def load(project: Path, run_id: str) -> dict[str, Any]:
    from gpulaunch.errors import ConfigError

    if not is_run_id(run_id):
        raise ConfigError(f"ID: {run_id!r} is not a run id (see `gpulaunch history`)")
    path = record_path(project, run_id)
    if not path.exists():
        raise ConfigError(f"ID: no run record {run_id} in {runs_dir(project)}")
    try:
        return load_one(path)
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None


def load_all(project: Path) -> Loaded:
    """All records of a project, newest first; unreadable ones become warnings."""
    found = Loaded()
    folder = runs_dir(project)
    try:
        names = sorted((p for p in folder.iterdir() if p.suffix == ".json"), reverse=True)
    except FileNotFoundError:
        return found
    except OSError as err:
        found.warnings.append(f"warning: cannot read {folder}: {err.strerror}")
        return found
    for path in names:
        if path.name.startswith("."):
            continue  # a writer's temp file
        try:
            found.records.append(load_one(path))
        except ValueError as err:
            found.warnings.append(f"warning: skipped {path}: {err}")
    found.records.sort(key=lambda r: (str(r.get("started_at", "")), str(r["id"])), reverse=True)
    return found
