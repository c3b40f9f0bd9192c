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
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Self

from gpulaunch.errors import ConfigError, GpulaunchError

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
    """An ISO 8601 time from a record or the engine (Python 3.11's fromisoformat takes a Z and
    the engine's nanoseconds, cut to microseconds); naive times are UTC."""
    if not isinstance(text, str) or not text or text.startswith("0001-01-01"):
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Json:
    """A record's JSON object as a dataclass: its fields typed, with the defaults a record of
    an earlier layout lacks; a key this gpulaunch does not read is kept as read (`extra`)."""

    _nested: ClassVar[dict[str, Any]] = {}  # field -> the _Json class its object is read as
    extra: dict[str, Any]

    @classmethod
    def from_json(cls, data: Any, where: str = "it") -> Self:
        if not isinstance(data, dict):
            raise ValueError(f"not a run record ({where} is not a JSON object)")
        known = {f.name: f for f in fields(cls) if f.name != "extra"}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known or (value is None and known[key].default_factory is not MISSING):
                continue  # kept in extra / null where a list or object belongs: the default
            nested = cls._nested.get(key)
            values[key] = nested.from_json(value, key) if nested and value is not None else value
        extra = {k: v for k, v in data.items() if k not in known}
        make: Any = cls  # a dataclass: its fields are the keywords
        return make(**values, extra=extra)  # type: ignore[no-any-return]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, _Json):
                value = value.to_json()
            if f.name != "extra" and not (value is None and f.name in _ONLY_WHEN_SET):
                out[f.name] = value
        return out | self.extra


_ONLY_WHEN_SET = {"rerun_of", "gpu_metrics", "explanation"}


@dataclass(eq=False, repr=False)  # plain data: no generated methods to load
class Gpus(_Json):
    """What the run asked for (the flag's value) and what that meant on this host."""

    request: int | str | None = None
    count: int | None = None  # None: unknown (UUIDs, "all" without NVML)
    indices: list[int] | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)  # {index, name, uuid}
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Image(_Json):
    """The image the run ran: tag, id, how it was built, the versions in it."""

    tag: str | None = None
    id: str | None = None
    dockerfile_sha256: str | None = None
    builder: str | None = None
    cached: bool = False
    versions: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Launcher(_Json):
    """The gpulaunch process that runs the job: pid and its start time name one process."""

    pid: int | None = None
    host: str | None = None
    started: int | None = None  # clock ticks since boot (process_start); None: unknown
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Restarts(_Json):
    """--restarts: the limit, how many were used, each attempt's times and exit code."""

    max: int = 0
    count: int = 0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class RunRecord(_Json):
    """One run record (`.gpulaunch/runs/<id>.json`): `from_json` reads every layout an
    earlier gpulaunch wrote (a field it lacks takes its default), `to_json` is what is
    written and what `history --json` prints. The only place a record meets JSON."""

    _nested: ClassVar[dict[str, Any]] = {
        "gpus": Gpus,
        "image": Image,
        "launcher": Launcher,
        "restarts": Restarts,
    }

    id: str
    schema_version: int = SCHEMA_VERSION
    kind: str = "run"
    state: str = "running"
    gpulaunch_version: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    mode: str = "container"  # or "host" (--no-container)
    detached: bool = False
    project: str | None = None
    project_name: str | None = None
    cwd: str | None = None
    config_file: str | None = None
    command: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the run flags, masked
    git: dict[str, Any] | None = None  # {commit, dirty}
    image: Image | None = None  # None: host mode
    config: dict[str, Any] = field(default_factory=dict)  # the effective config, masked
    profile: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpus: Gpus = field(default_factory=Gpus)
    nproc: int | None = None
    container: str | None = None
    launcher: Launcher = field(default_factory=Launcher)
    exit_code: int | None = None
    signal: str | None = None
    restarts: Restarts = field(default_factory=Restarts)
    checkpoint_dir: str | None = None
    stop_grace_s: int | None = None
    price_per_gpu_hour: str | None = None
    gpu_hours: float | None = None
    cost: str | None = None
    rerun_of: str | None = None
    gpu_metrics: dict[str, Any] | None = None
    explanation: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Loaded:
    """Every readable record (newest first) and what was skipped, as warnings."""

    records: list[RunRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def record_path(project: Path, run_id: str) -> Path:
    return runs_dir(project) / f"{run_id}.json"


def save(project: Path, record: RunRecord, warn: Warn) -> bool:
    """Write (or replace) one record; False and a warning when it cannot be written."""
    from gpulaunch.fsio import write_file
    from gpulaunch.records.seal import seal

    path = record_path(project, record.id)
    try:
        data = seal(record.to_json())
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
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


def load_one(path: Path) -> RunRecord:
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

    check(data)
    return RunRecord.from_json(data)


def load(project: Path, run_id: str) -> RunRecord:
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
    found.records.sort(key=lambda r: (str(r.started_at or ""), r.id), reverse=True)
    return found
