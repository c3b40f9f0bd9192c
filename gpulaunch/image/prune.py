"""Which of gpulaunch's own images may go, and removing them (`gpulaunch prune`), plus the
one-line notice `build` prints when a project's older images grow past a size.

Ownership is one rule (`owned`), applied to what the engine lists: an image is a project's when
it carries the managed label that `build` sets (`io.gpulaunch.managed=true`), a project label,
and a content-addressed tag of that very project (`PROJECT:gl-<12 hex>`). A look-alike name
without the label, a label without such a tag (an image built FROM one of ours inherits its
labels), or an untagged image is never a candidate. A candidate is kept, with each reason
said, when a container (any state, anyone's) uses it, a recent run record names it, it is among
the project's newest N, `PROJECT:latest` points at it, or it carries a tag that is not
gpulaunch's. The rest is removed by id and never forced: the engine itself refuses an image
that a container started meanwhile uses, or that someone tagged meanwhile, and that refusal is
reported as a kept image, not an error. `--dry-run` only lists (images, containers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulaunch.engine.docker_api import MANAGED_LABEL, PROJECT_LABEL, Engine
from gpulaunch.errors import ConfigError

DEFAULT_KEEP = 3
RECENT_RECORD_DAYS = 30  # runs started this long ago or less keep their image
NOTICE_ENV = "GPULAUNCH_PRUNE_NOTICE"
DEFAULT_NOTICE_BYTES = 10 * 1024**3
_GL_TAG = re.compile(r"gl-[0-9a-f]{12}")  # image.build.prepare_build's tag
_SIZE = re.compile(r"([0-9]{1,15})(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


@dataclass(frozen=True)
class Image:
    """One of a project's images, as the engine listed it."""

    id: str
    project: str
    tags: tuple[str, ...]
    created: int
    size: int


@dataclass
class Decision:
    """An image and why it stays (no reasons: it goes); `outcome` once acted on."""

    image: Image
    reasons: list[str] = field(default_factory=list)
    outcome: str = ""  # "would remove", "removed", "untagged", "kept"

    def to_json(self) -> dict[str, Any]:
        data = {**asdict(self.image), "tags": list(self.image.tags)}
        if self.reasons:
            data["reasons"] = list(self.reasons)
        else:
            data["outcome"] = self.outcome
        return data


@dataclass
class Report:
    """What prune found and did: the images removed (or that would be) and those kept."""

    dry_run: bool
    keep: int
    projects: list[str]
    removed: list[Decision] = field(default_factory=list)
    kept: list[Decision] = field(default_factory=list)

    @property
    def removed_bytes(self) -> int:
        """The removed images' sizes added up: an upper bound, layers shared with a kept
        image stay in the engine."""
        return sum(d.image.size for d in self.removed if d.outcome != "untagged")

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "keep": self.keep,
            "projects": list(self.projects),
            "removed": [d.to_json() for d in self.removed],
            "removed_bytes": self.removed_bytes,
            "kept": [d.to_json() for d in self.kept],
        }


def owned(rows: Iterable[Mapping[str, Any]], project: str | None = None) -> list[Image]:
    """The images gpulaunch built, of `project` (None: every project): the module's one rule."""
    found = []
    for row in rows:
        labels = row.get("labels") or {}
        name = labels.get(PROJECT_LABEL)
        if labels.get(MANAGED_LABEL) != "true" or not isinstance(name, str) or not name:
            continue
        if project is not None and name != project:
            continue
        tags = tuple(str(t) for t in row.get("tags") or ())
        if not any(_is_build_tag(tag, name) for tag in tags):
            continue
        found.append(
            Image(
                id=str(row.get("id") or ""),
                project=name,
                tags=tags,
                created=_whole(row.get("created")),
                size=_whole(row.get("size")),
            )
        )
    return found


def _is_build_tag(tag: str, project: str) -> bool:
    repo, _, name = tag.rpartition(":")
    return repo == project and bool(_GL_TAG.fullmatch(name))


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def decide(
    images: list[Image],
    users: Iterable[Mapping[str, str]],
    keep: int,
    recorded: Mapping[str, str],
) -> list[Decision]:
    """Each image with the reasons it stays (none: it may go), newest first per project."""
    used: dict[str, list[str]] = {}
    for user in users:
        used.setdefault(str(user.get("image_id", "")), []).append(
            f"used by container {user.get('name', '?')} ({user.get('state') or 'unknown'})"
        )
    decisions = []
    rank: dict[str, int] = {}
    for image in sorted(images, key=lambda i: (i.project, -i.created, i.id)):
        reasons = list(used.get(image.id, []))
        run = recorded.get(image.id) or next((recorded[t] for t in image.tags if t in recorded), "")
        if run:
            reasons.append(f"named by run record {run}")
        rank[image.project] = rank.get(image.project, 0) + 1
        if rank[image.project] <= keep:
            reasons.append(f"among the newest {keep}")
        for tag in image.tags:
            if tag == f"{image.project}:latest":
                reasons.append(f"tagged {tag}")
            elif not _is_build_tag(tag, image.project):
                reasons.append(f"also tagged {tag} (not a gpulaunch tag)")
        decisions.append(Decision(image, reasons))
    return decisions


def prune(
    engine: Engine,
    *,
    project: str | None,
    keep: int = DEFAULT_KEEP,
    recorded: Mapping[str, str] | None = None,
    dry_run: bool = False,
) -> Report:
    """Remove the images of `project` (None: of every project) that nothing keeps.

    `recorded`: image id or tag -> the run record that keeps it (records.history's
    `recorded_images` of the recent records, or none when the user asks)."""
    if keep < 0:
        raise ConfigError(f"--keep: {keep} is negative")
    images = owned(engine.managed_images(), project)
    decisions = decide(images, engine.image_users(), keep, recorded or {})
    projects = sorted({i.project for i in images} | ({project} if project else set()))
    report = Report(dry_run=dry_run, keep=keep, projects=projects)
    for decision in decisions:
        if decision.reasons:
            decision.outcome = "kept"
            report.kept.append(decision)
        elif dry_run:
            decision.outcome = "would remove"
            report.removed.append(decision)
        else:
            _remove(engine, decision)
            (report.removed if decision.outcome != "kept" else report.kept).append(decision)
    return report


def _remove(engine: Engine, decision: Decision) -> None:
    """By id, so only this image can go. An image with several gl- tags (the same content
    built under two hashes) loses all but one first: the engine removes an id that several
    references name only when forced, and prune never forces."""
    image = decision.image
    for ref in [*image.tags[1:], image.id]:
        answer = engine.remove_image(ref)
        if answer.get("outcome") == "refused":
            decision.outcome = "kept"
            decision.reasons.append(f"the engine refused: {answer.get('reason', '')}")
            return
    # "untagged": a child image still needs its layers
    decision.outcome = "untagged" if answer.get("outcome") == "untagged" else "removed"


# -- the notice after `build` ---------------------------------------------------------------
def notice_limit(env: Mapping[str, str]) -> int | None:
    """GPULAUNCH_PRUNE_NOTICE in bytes (10G, 500M, 2GiB, 123456), None for "off" or 0;
    unset: 10 GiB. ConfigError naming the variable for anything else."""
    text = env.get(NOTICE_ENV)
    if text is None:
        return DEFAULT_NOTICE_BYTES
    text = text.strip()
    if text.lower() == "off":
        return None
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ConfigError(f"{NOTICE_ENV}: {text[:40]!r} is not a size like 10G, 500M, 2GiB or off")
    value = int(match[1]) * _UNITS[(match[2] or "").lower()]
    return value or None


def older_images_notice(
    engine: Engine, project: str, current_tag: str, env: Mapping[str, str]
) -> str | None:
    """The line `build` prints when the project's images other than `current_tag`'s take
    more than GPULAUNCH_PRUNE_NOTICE together (None: under it, or the notice is off)."""
    limit = notice_limit(env)
    if limit is None:
        return None
    older = [i for i in owned(engine.managed_images(), project) if current_tag not in i.tags]
    total = sum(i.size for i in older)
    if total <= limit:
        return None
    return (
        f"note: {len(older)} older image(s) of {project} take {human_size(total)} "
        f"(over {NOTICE_ENV}={human_size(limit)}); `gpulaunch prune` removes those no "
        "container or recent run uses"
    )


def human_size(value: int) -> str:
    """Bytes as docker shows sizes, in binary units (1.5 GiB)."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
