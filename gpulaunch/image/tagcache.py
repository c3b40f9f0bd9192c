"""The up-to-date check without rendering or hashing: the last computed tag, kept with what
it was computed from, in .gpulaunch/tag-cache.json (never sent to the engine).

`prepare_build` (catalog, render, hash of every context file) is what a run with nothing
changed spends most of its time on. This cache keeps, for one key, the tag it produced and
the stat of every entry that went into the hash. The key is a hash of everything else the
tag depends on: gpulaunch's version and the stat of its own files (code, catalog, templates),
the user's catalog overlays, the validated config (with --set), the builder choice (and the
docker CLIs it is probed from), the .dockerignore text, the build args, --config and the
GPULAUNCH_* environment. A hit also re-scans the context with the same rules and compares
each entry's (kind, mode, size, mtime, ctime, inode): any file added, removed or rewritten
misses the tag. When only files changed and none of them was read by the plan (what the plan
read is kept: gpulaunch.planreads), the plan and its Dockerfile stand, and only the context is
hashed again (`Hit.tag` None). An entry changed within RACY_S of the hash is never cached (a
change inside the timestamp granularity would be invisible). A missing or corrupt file, a
linked one, or one whose tag is not this project's `NAME:gl-<12 hex>` is a miss. (Whoever can
write the project's .gpulaunch/ can also edit its sources: the cache adds no way in.)
Only `run_build` reads and writes it; --dry-run does neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import types
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch import __version__
from gpulaunch.engine.buildspec import Builder
from gpulaunch.errors import ConfigError
from gpulaunch.fsio import identity, read_cache, write_cache
from gpulaunch.image.build import build_args, context_entries, read_dockerignore
from gpulaunch.planreads import PlanReads
from gpulaunch.project.layout import output_folders

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig
    from gpulaunch.engine.context import Entry
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.image.build import BuildOptions, PreparedBuild

CACHE_REL = ".gpulaunch/tag-cache.json"
RACY_S = 2.0
_PACKAGE = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class CachedPlan:
    """What a hit knows of the image plan: its resolved versions (what run records, smoke and
    the GPU check read, as attributes), without the template context: nothing was rendered,
    and the render/catalog modules are not even imported."""

    name: str
    resolved: types.SimpleNamespace
    builder: Builder
    required: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    secrets: Mapping[str, str] = dataclasses.field(default_factory=dict)  # none are cached


@dataclasses.dataclass(frozen=True)
class Hit:
    """`tag` None: only code the plan never read changed (module docstring). `reads` is kept
    again with the new tag, so the next code edit reuses the plan too."""

    tag: str | None
    dockerfile: str
    plan: CachedPlan
    reads: PlanReads | None = None


def _tree_stat(root: Path) -> list[tuple[str, tuple[int, ...]]]:
    """Each file below `root` and its `fsio.identity`."""
    out: list[tuple[str, tuple[int, ...]]] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            out.append((os.path.join(folder, name), identity(st)))
    return out


def key(config: ProjectConfig, project: Path, engine: Engine, opts: BuildOptions) -> str:
    """Everything but the context entries that the tag depends on, hashed ("" when the
    project's .dockerignore is unreadable: no cache, and prepare_build reports the problem).
    It holds the effective .dockerignore text, the default rules included where the project
    has none, so it is right whatever they depend on."""
    from gpulaunch.catalog.overlay import fingerprint, overlay_paths
    from gpulaunch.image.build import templates_dir  # looked up now: tests replace it

    try:
        ignore = read_dockerignore(project)
    except ConfigError:
        return ""
    facts = {
        "v": __version__,
        "package": _tree_stat(_PACKAGE),
        "templates": _tree_stat(templates_dir()),
        "overlays": fingerprint(overlay_paths()),  # as the catalog's own cache knows them
        "config": config.model_dump(mode="json"),
        "project": os.path.abspath(project),
        "builder": opts.builder or "auto",
        "builder_key": repr(() if opts.builder else engine.builder_key()),
        "ignore": ignore,
        "args": build_args(),
        "config_file": str(opts.config_file.resolve()) if opts.config_file is not None else None,
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("GPULAUNCH_")),
    }
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _stats(project: Path, entries: Sequence[Entry]) -> list[list[Any]] | None:
    out: list[list[Any]] = []
    for entry in entries:
        try:
            st = os.lstat(project / entry.rel) if entry.rel != "." else os.lstat(project)
        except OSError:
            return None
        out.append(
            [entry.rel, str(entry.kind), entry.mode, entry.link, st.st_mode, st.st_size,
             st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        )  # fmt: skip
    return out


def lookup(project: Path, cache_key: str, name: str) -> Hit | None:
    """The cached tag when the key and every context entry's stat are what they were."""
    try:  # a linked .gpulaunch is not followed, for reading either
        if not stat.S_ISDIR(os.lstat(project / ".gpulaunch").st_mode):
            return None
    except OSError:
        return None
    data = read_cache(project / CACHE_REL)
    if not isinstance(data, dict) or data.get("key") != cache_key:
        return None
    until = data.get("until")  # a plan that chose a deadsnakes series holds until it ends
    if until is not None and not (isinstance(until, str) and date.today().isoformat() <= until):
        return None
    try:
        tag, builder, dockerfile = data["tag"], data["builder"], data["dockerfile"]
        required, never, ignore = data["required"], data["never"], data["ignore"]
        outputs, fields, inputs = data["outputs"], data["resolved"], data.get("inputs", [])
        if not (
            isinstance(tag, str)
            and re.fullmatch(re.escape(name) + r":gl-[0-9a-f]{12}", tag)
            and builder in ("buildkit", "classic")
            and isinstance(dockerfile, str)
            and isinstance(ignore, str)
            and isinstance(fields, dict)  # the resolved versions, by name
            and all(isinstance(x, str) for x in [*required, *never, *outputs, *inputs, *fields])
        ):
            return None
        # an output folder that became code (or stopped being it) changes the rules
        if list(outputs) != output_folders(project)[0]:
            return None
        now = _stats(project, context_entries(project, ignore, required, never, outputs))
        reads = PlanReads.from_json(data.get("reads"))
        if now == data["entries"]:
            found: str | None = tag
        elif _code_edit(data["entries"], now) and reads is not None and reads.still_true(project):
            found = None
        else:
            return None
        resolved = types.SimpleNamespace(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        )
    except (KeyError, TypeError, ValueError, OSError):
        return None
    kind: Builder = "buildkit" if builder == "buildkit" else "classic"  # checked above
    plan = CachedPlan(name, resolved, kind, tuple(required), tuple(inputs))
    return Hit(found, dockerfile, plan, reads)


def _code_edit(before: object, now: list[list[Any]] | None) -> bool:
    """Only files changed: the same entries in the same order and of the same kinds
    (nothing in the context added, removed or renamed, so a stat the plan made of a context
    path would see what it saw), and every folder or link entry as it was."""
    if now is None or not isinstance(before, list) or len(before) != len(now):
        return False
    for old, new in zip(before, now, strict=True):
        if old != new and (old[:2] != new[:2] or new[1] != "file"):
            return False
    return True


def store(project: Path, cache_key: str, prepared: PreparedBuild, hashed_at: float) -> None:
    """Remember `prepared`'s tag, unless an entry changed too close to the hash to tell, and
    what its plan read (`prepared.reads`; a plan with build secrets is never reused: their
    values never reach a disk)."""
    stats = _stats(project, prepared.request.entries)
    if stats is None:
        return
    limit = int((hashed_at - RACY_S) * 1e9)
    if any(s[6] >= limit or s[7] >= limit for s in stats):
        return
    data = {
        "key": cache_key,
        "tag": prepared.tag,
        "builder": prepared.plan.builder,
        "dockerfile": prepared.dockerfile,
        "required": list(prepared.plan.required),
        "never": list(prepared.never),
        "outputs": list(prepared.outputs),
        "ignore": prepared.ignore,
        "entries": stats,
        "resolved": vars(prepared.plan.resolved),  # the catalog's dataclass or a cached plan's
        "inputs": list(prepared.plan.inputs),
    }
    resolved = prepared.plan.resolved
    if resolved.python_source == "deadsnakes":  # the day after the series ends, plan again
        from gpulaunch.catalog.python_install import deadsnakes

        series = deadsnakes().get(str(resolved.os))
        data["until"] = series.until.isoformat() if series is not None else "0000-00-00"
    if prepared.reads is not None and not prepared.plan.secrets:
        data["reads"] = prepared.reads.to_json()
    write_cache(project / CACHE_REL, data, root=project)
