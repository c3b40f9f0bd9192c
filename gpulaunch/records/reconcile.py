"""Finish records that their launcher could not: detached runs and killed launchers.

A detached run's record stays `running` until `ps`, `logs`, `stop` or `history` sees its
container finished; the exit code and times then come from the engine. A record left
`running` by a launcher that is gone (SIGKILL, a reboot) is checked against the engine:
container still running -> still running; exited -> completed from the engine; gone ->
`lost`, keeping what is known.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from gpulaunch.errors import GpulaunchError
from gpulaunch.records.record import complete, seconds_between
from gpulaunch.records.store import (
    RunRecord,
    Warn,
    is_run_id,
    iso,
    load_all,
    load_one,
    parse_time,
    process_start,
    record_path,
    save,
)


def _launcher_alive(record: RunRecord) -> bool:
    """The gpulaunch process that wrote the record still runs (on this host)."""
    launcher = record.launcher
    pid = launcher.pid
    if launcher.host != os.uname().nodename or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a recycled pid started later is not our launcher (every sealed record has the start);
    # None where /proc cannot tell, and then nothing else could
    now = process_start(pid)
    return launcher.started is None or now is None or now == launcher.started


def complete_from_container(record: RunRecord, container: Any) -> bool:
    """Complete `record` from an exited container's state (read afresh when the engine
    answers); False while it still runs."""
    with contextlib.suppress(GpulaunchError):
        container.reload()
    attrs = getattr(container, "attrs", None) or {}
    state = attrs.get("State") or {}
    if state.get("Running") or state.get("Restarting") or state.get("Status") == "created":
        return False
    started, finished = parse_time(state.get("StartedAt")), parse_time(state.get("FinishedAt"))
    if (duration := seconds_between(started, finished)) is not None:
        record.duration_s = duration
    code = state.get("ExitCode")
    restarts = attrs.get("RestartCount")
    if isinstance(restarts, int) and restarts:
        record.restarts.count = restarts
    ended = iso(finished) if finished is not None else None
    complete(record, code if isinstance(code, int) else None, ended)
    if record.state == "running":  # no exit code from the engine
        record.state = "lost"
    return True


def reconcile(project: Path, engine: Any, warn: Warn) -> list[RunRecord]:
    """Every record of `project` (newest first), running ones checked against the engine."""
    loaded = load_all(project)
    for message in loaded.warnings:
        warn(message)
    for record in loaded.records:
        if record.state != "running":
            continue
        if _launcher_alive(record) and not record.detached:
            continue  # its launcher will complete it
        try:
            _reconcile_one(project, record, engine, warn)
        except GpulaunchError as err:
            warn(f"warning: run {record.id}: cannot check its container: {err.message}")
            return loaded.records  # the engine is not answering: leave the rest as they are
    return loaded.records


def _reconcile_one(project: Path, record: RunRecord, engine: Any, warn: Warn) -> None:
    name = record.container
    container = None
    if record.mode != "host" and isinstance(name, str):  # host: the launcher took the job along
        container = engine.find_leftover(name, record.id)
    if container is None:
        record.state = "lost"
    elif not complete_from_container(record, container):
        return
    save(project, record, warn)


def project_of(container: Any) -> Path | None:
    """The project folder a gpulaunch container runs in: the source of its /workspace."""
    from gpulaunch.engine.runspec import WORKSPACE

    for mount in (getattr(container, "attrs", None) or {}).get("Mounts") or []:
        if mount.get("Destination") == WORKSPACE and isinstance(mount.get("Source"), str):
            return Path(mount["Source"])
    return None


def finish_container(container: Any, run_id: str | None, warn: Warn) -> None:
    """`ps`, `logs` and `stop` saw this container: complete its record if it has exited."""
    project = project_of(container)
    if project is None or run_id is None or not is_run_id(run_id):
        return
    path = record_path(project, run_id)
    if not path.is_file():
        return
    try:
        record = load_one(path)
    except ValueError as err:
        warn(f"warning: skipped {path}: {err}")
        return
    if record.state == "running" and complete_from_container(record, container):
        save(project, record, warn)
