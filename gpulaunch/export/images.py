"""Which image a cluster runs: a pushed reference, never a tag only this machine has.

`build --push` records what it pushed (`.gpulaunch/pushed.json`: local tag -> the
registry reference with its digest); exports read that record, so clusters run exactly
the bytes that were built. A reference without a registry host is refused for clusters.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpulaunch.errors import ConfigError
from gpulaunch.textcheck import ImageRef
from gpulaunch.textcheck import parse_ref as check_ref

PUSH_RECORD = Path(".gpulaunch") / "pushed.json"


def parse_ref(text: str, where: str) -> ImageRef:
    """textcheck.parse_ref, its refusal naming `where` (the flag or field)."""
    try:
        return check_ref(text)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


def push_target(text: str) -> ImageRef:
    """`build --push REGISTRY/NAME[:TAG]`: a registry is required, a digest is not allowed."""
    ref = parse_ref(text, "--push")
    if not ref.registry:
        raise ConfigError(
            f"--push: {text!r} names no registry; give REGISTRY/NAME (e.g. 127.0.0.1:5000/train)"
        )
    if ref.digest:
        raise ConfigError("--push: give REGISTRY/NAME[:TAG]; the digest is what the push returns")
    return ref


def read_push_record(project: Path) -> dict[str, str]:
    """Local tag -> pushed reference (with digest); {} when nothing was pushed."""
    from gpulaunch.fsio import read_json_back

    path = project / PUSH_RECORD
    try:
        data = read_json_back(path, 1024 * 1024)
    except FileNotFoundError:
        return {}
    except ValueError as err:
        raise ConfigError(f"{path}: unreadable push record ({err}); push again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a push record; push again")
    return {str(k): str(v) for k, v in data.items()}


def write_push_record(project: Path, local_tag: str, pushed: str) -> None:
    from gpulaunch.fsio import write_file

    record = read_push_record(project)
    record[local_tag] = pushed
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    write_file(project / PUSH_RECORD, text, root=project, force=True)


def cluster_image(
    explicit: str | None, configured: str | None, local_tag: str, project: Path, where: str
) -> str:
    """The image a cluster pulls: --image, else launch.image, else what `build --push` pushed
    for the current build; a tag only this machine has is refused with the fix."""
    if explicit or configured:
        text = str(explicit or configured)
        ref = parse_ref(text, "--image" if explicit else "launch.image")
        if not ref.registry:
            raise ConfigError(
                f"{'--image' if explicit else 'launch.image'}: {text!r} names no registry; "
                "cluster nodes cannot pull it",
                hint="push it first: gpulaunch build --push REGISTRY/NAME",
            )
        return text
    pushed = read_push_record(project).get(local_tag)
    if pushed:
        return pushed
    raise ConfigError(
        f"{where}: the image {local_tag} exists only on this machine; cluster nodes cannot pull it",
        hint="push it: gpulaunch build --push REGISTRY/NAME (or --image REGISTRY/NAME@sha256:...)",
    )
