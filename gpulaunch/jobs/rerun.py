"""`gpulaunch rerun ID`: a recorded run again, with its command, flags and profile, on the
same image id, running the code that image holds (the recorded code: its own /workspace, not
today's tree mounted over it). `--current-code` mounts today's tree instead and says how it
differs from the recorded one. An image that is gone is rebuilt (`--rebuild`) only when the
tree and config give the very image tag the run had; otherwise the refusal names what differs.

Secrets were masked before the record was written, so they are not in it: a masked value
(`***`, or a value with a masked part such as `https://***@host`) is taken from the current
gpulaunch.yaml (same field, when masking it gives the recorded text) or, for
`--env NAME=***`, from this shell's environment; when neither has it the rerun refuses,
naming the field. A masked part of the command or its arguments cannot be restored: refused.
The run happens in the project the record was found in (a moved or copied checkout), in the
recorded working folder's place inside it.

A record is data, never authority: it is read only when sealed by this user's gpulaunch
(records/seal.py), and even then each option goes through the validator of the `run` flag that
sets it; a field no flag sets is refused. The CLI prints what will run before it runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.masking import MASK, mask
from gpulaunch.records.store import Image, RunRecord


@dataclass(frozen=True)
class ReusedImage:
    """The image of the recorded run, reused as it is (what observers see as job.build)."""

    tag: str
    image_id: str
    builder: str
    dockerfile_sha256: str | None
    versions: dict[str, Any]
    cached: bool = True
    dockerfile: str = ""
    plan: Any = None


def _unmask(recorded: Any, current: Any, where: str) -> Any:
    if isinstance(recorded, str) and MASK in recorded:
        if isinstance(current, str) and (recorded == MASK or mask(current) == recorded):
            return current
        raise ConfigError(
            f"rerun: {where} was a secret (masked in the record) and the current config has no "
            "value for it"
        )
    if isinstance(recorded, dict):
        cur = current if isinstance(current, dict) else {}
        return {k: _unmask(v, cur.get(k), f"{where}.{k}") for k, v in recorded.items()}
    if isinstance(recorded, list):
        items = current if isinstance(current, list) else []
        return [
            _unmask(v, items[i] if i < len(items) else None, f"{where}[{i}]")
            for i, v in enumerate(recorded)
        ]
    return recorded


def _env_flags(items: list[str], environ: Mapping[str, str]) -> list[str]:
    out = []
    for item in items:
        name, _, value = item.partition("=")
        if value == MASK:
            if name not in environ:
                raise ConfigError(
                    f"rerun: --env {name} was a secret (masked in the record); set {name} in "
                    "the environment to rerun"
                )
            value = environ[name]
        out.append(f"{name}={value}")
    return out


def _refuse_masked(value: Any, where: str) -> None:
    """A masked part left in the flags or the command (`--api-key=***`): the secret is not in
    the record and a rerun would pass the mask itself to the job."""
    if isinstance(value, str) and MASK in value:
        raise ConfigError(
            f"rerun: {where} ({value!r}) holds a masked secret that the record does not keep; "
            "run the command again with `gpulaunch run`"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_masked(item, f"{where}.{key}")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_masked(item, f"{where}[{i}]")


def _same_place(record: RunRecord, project: Path) -> Path:
    """The recorded working folder, moved with the project: its path relative to the
    recorded project, inside `project`; the project itself when that is not a folder."""
    recorded = Path(_text_field(record, "project") or ".")
    cwd = Path(_text_field(record, "cwd") or recorded)
    try:
        rel = cwd.relative_to(recorded)
    except ValueError:
        return project
    if ".." in rel.parts:  # a record edited by hand: stay in the project
        return project
    inside = project / rel
    return inside if inside.is_dir() else project


def _checked(check: Any, *args: Any) -> Any:
    """A flag's validator applied to a record's value: its error says it came from the record."""
    try:
        return check(*args)
    except ConfigError as err:
        raise ConfigError(f"rerun: the record's {err.message}", hint=err.hint) from None


def _text_field(record: RunRecord, name: str) -> str | None:
    """A record field that names a path (project, cwd, config_file): a single line or absent."""
    from gpulaunch.textcheck import single_line

    value = getattr(record, name)
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError("is not a string")
        single_line(value)
    except ValueError as err:
        raise ConfigError(f"rerun: the record's {name}: {err}") from None
    return value


def rerun_job(
    record: RunRecord,
    current_cfg: Any,
    extra: list[str],
    here: Path,
    *,
    rebuild: bool,
    current_code: bool,
) -> Any:
    """The recorded run (its config, flags, working folder) plus `extra` args, planned in the
    project `here` (where the record was found): on its recorded code, or today's tree with
    `current_code` (a host run always runs today's tree).

    The record is data: its options go through the checks `run` makes on its flags
    (jobs/options.py) and the plan's validators (mounts, env, script), its config through the
    config file's validation, its price through --price's; anything they would refuse is
    refused here (exit 2, one line naming the field).
    """
    from gpulaunch.config import validate_data
    from gpulaunch.jobs.execute import JobSpec, plan_job
    from gpulaunch.jobs.options import check_options, check_price, options_from_record

    config = _unmask(record.config, current_cfg.model_dump(mode="json"), "config")
    try:
        cfg = validate_data(config, "the recorded config")
    except ConfigError as err:
        raise ConfigError(
            f"rerun: the recorded config is not valid any more: {err.message}"
        ) from None
    opts = _checked(options_from_record, record.options)
    opts.env = _env_flags(list(opts.env), os.environ)
    _refuse_masked({k: v for k, v in vars(opts).items() if k != "env"}, "options")
    _checked(check_options, opts)
    if (record.mode == "host") != opts.no_container:
        raise ConfigError(
            f"rerun: the record's mode {record.mode!r} does not match its "
            f"options.no_container ({opts.no_container})"
        )
    price = _checked(check_price, record.price_per_gpu_hour, "price_per_gpu_hour")
    if opts.command:
        opts.command = [*opts.command, *extra]
    else:
        opts.args = [*opts.args, *extra]
    cwd = _same_place(record, here)
    config_file = _text_field(record, "config_file")
    host = opts.no_container
    if current_code and host:
        raise ConfigError("--current-code: a host-mode run always runs the tree as it is now")
    spec = JobSpec(
        cfg,
        here,
        cwd,
        opts,
        config_file=None if config_file is None else Path(config_file),
        rebuild=rebuild,
        price=price,
        mount_project=current_code or host,
    )
    tag = record.image and record.image.tag
    return _checked(plan_job, spec, str(tag) if tag and not host else None)  # None: host or pending


def reuse_image(job: Any, record: RunRecord, engine: Any) -> None:
    """Point the job at the recorded image id; EngineError when that image is gone."""
    image = record.image or Image()
    image_id = image.id
    if record.mode == "host":
        return
    if not isinstance(image_id, str) or not image_id:
        raise EngineError(
            f"run {record.id}: its record has no image id",
            hint=f"`gpulaunch rerun {record.id} --rebuild` builds one from its config",
        )
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", image_id):
        raise ConfigError(f"rerun: the record's image.id {image_id!r} is not an image id")
    if not engine.image_exists(image_id):
        raise EngineError(
            f"run {record.id}: its image {image.tag} ({image_id[:19]}) is gone",
            hint=f"`gpulaunch rerun {record.id} --rebuild` rebuilds it from the recorded config",
        )
    job.build = ReusedImage(
        tag=str(image.tag or image_id),
        image_id=image_id,
        builder=str(image.builder or ""),
        dockerfile_sha256=image.dockerfile_sha256,
        versions=dict(image.versions or {}),
    )
    job.plan.run.image = image_id


def tree_difference(record: RunRecord, project: Path) -> str | None:
    """How the project's tree differs from the recorded run's (commit, uncommitted changes,
    files changed), None when git says it is the same; a sentence saying git cannot tell
    outside a git checkout or for a commit this clone lacks."""
    from gpulaunch.outside.git import changed_since, git_state

    recorded = record.git
    now = git_state(project)
    if recorded is None or now is None or not isinstance(recorded.get("commit"), str):
        return "git cannot tell how the tree differs (no git state recorded or here)"
    then_commit, now_commit = str(recorded["commit"]), str(now["commit"])
    said: list[str] = []
    if then_commit != now_commit:
        said.append(f"commit {then_commit[:12]} then, {now_commit[:12]} now")
    if recorded.get("dirty"):
        said.append("the run had uncommitted changes that git did not keep")
    files = changed_since(project, then_commit)
    if files is None:
        said.append(f"this clone lacks commit {then_commit[:12]}")
    elif files:
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        said.append(f"{len(files)} file(s) changed: {shown}")
    return "; ".join(said) or None


def check_rebuild_matches(job: Any, record: RunRecord, engine: Any) -> None:
    """Before a rebuild of a gone image: the tree and recorded config must give the very tag
    the run had (the tag hashes the Dockerfile and every file sent); else ConfigError naming
    what differs, and nothing is built."""
    from gpulaunch.image.build import BuildOptions, prepare_build

    spec = job.spec
    recorded = str((record.image and record.image.tag) or "")
    prepared = prepare_build(
        spec.cfg, spec.project, engine.builder_kind(), BuildOptions(config_file=spec.config_file)
    )
    if prepared.tag == recorded:
        return
    why = tree_difference(record, spec.project) or "the Dockerfile gpulaunch renders changed"
    raise ConfigError(
        f"rerun --rebuild: this tree builds {prepared.tag}, not the run's {recorded or 'image'} "
        f"({why}); the recorded code cannot be rebuilt from it",
        hint=f"`gpulaunch rerun {record.id} --current-code --rebuild` runs today's tree",
    )


def recorded_image(record: RunRecord, job: Any, engine: Any, io: Any) -> None:
    """How a rerun gets its image (`Start.image`, the record bound): the recorded image id as
    it is; with --rebuild, a build, from the recorded code only when the tree gives the run's
    tag."""
    from gpulaunch.jobs.execute import build_image

    if not job.spec.rebuild:
        reuse_image(job, record, engine)
        return
    if not job.spec.mount_project:  # the recorded code, not --current-code
        check_rebuild_matches(job, record, engine)
    build_image(job, engine, io)
