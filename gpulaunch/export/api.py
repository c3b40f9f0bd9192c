"""The export and submit use cases the CLI calls: plan the image reference, build the
spec, render; `submit` hands the rendered text to kubectl or sbatch (gpulaunch.outside).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.errors import ConfigError
from gpulaunch.export.images import cluster_image
from gpulaunch.export.slurm import SlurmOptions, render_sbatch
from gpulaunch.export.spec import ExportOptions, build_spec
from gpulaunch.textcheck import dns_label

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig


@dataclass(frozen=True)
class Exported:
    text: str
    warnings: tuple[str, ...]
    image: str


def local_tag(config: ProjectConfig, project: Path, config_file: Path | None) -> str:
    """The tag `gpulaunch build` would give the current project (no daemon asked)."""
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.image.build import BuildOptions, prepare_build

    kind = Engine().builder_kind()
    opts = BuildOptions(builder=kind, config_file=config_file)
    return prepare_build(config, project, kind, opts).tag


def export_k8s(
    config: ProjectConfig,
    project: Path,
    cwd: Path,
    opts: ExportOptions,
    kind: str,
    namespace: str | None = None,
    config_file: Path | None = None,
) -> Exported:
    from gpulaunch.export.k8s import KINDS, render_text

    if kind not in KINDS:
        raise ConfigError(f"--kind: {kind!r} is not one of {', '.join(KINDS)}")
    if namespace is not None:
        try:
            dns_label(namespace)
        except ValueError as err:
            raise ConfigError(f"--namespace: {err}") from None
    spec = build_spec(config, project, cwd, opts, "")  # bad flags fail before the image
    given = opts.image or config.launch.image
    tag = "" if given else local_tag(config, project, config_file)
    image = cluster_image(opts.image, config.launch.image, tag, project, "export k8s")
    spec = replace(spec, image=image)
    return Exported(render_text(spec, kind, namespace), spec.warnings, image)


def export_slurm(
    config: ProjectConfig,
    project: Path,
    cwd: Path,
    opts: ExportOptions,
    slurm: SlurmOptions,
    config_file: Path | None = None,
) -> Exported:
    """The sbatch script. Host mode (`none`) runs gpulaunch on the nodes and needs no image;
    docker mode on one node may use the local tag (the node is this machine's engine)."""
    spec = build_spec(config, project, cwd, opts, "(host)")  # bad flags fail first
    image = "(host)"
    if slurm.container != "none":
        given = opts.image or config.launch.image
        tag = "" if given else local_tag(config, project, config_file)
        try:
            image = cluster_image(opts.image, config.launch.image, tag, project, "export slurm")
        except ConfigError:
            if given or slurm.container != "docker" or opts.nodes > 1:
                raise
            image = tag  # one node with docker: this machine's own engine has it
    spec = replace(spec, image=image)
    return Exported(render_sbatch(spec, slurm, project), spec.warnings, image)


def submit_k8s(text: str, context: str | None) -> str:
    from gpulaunch.outside.tools import kubectl_apply

    return kubectl_apply(text, context)


def submit_slurm(text: str) -> str:
    from gpulaunch.outside.tools import sbatch

    return sbatch(text)


@dataclass(frozen=True)
class Pushed:
    reference: str  # REPOSITORY@sha256:...
    pushed_tag: str  # REPOSITORY:TAG
    digest: str


def push_image(
    engine: Any, project: Path, local: str, target: str, on_line: Callable[[str], None]
) -> Pushed:
    """`build --push`: push the built tag (its content-hash tag unless TAG is given), check
    the digest against the registry's own answer, record it for exports."""
    from gpulaunch.errors import EngineError
    from gpulaunch.export.images import push_target, write_push_record
    from gpulaunch.outside.registry import manifest_digest, ping

    ref = push_target(target)
    tag = ref.tag or local.rpartition(":")[2]
    ping(ref.registry)  # a registry that does not answer fails in seconds, not at the push
    digest = engine.push(local, ref.repository, tag, on_line)
    reported = manifest_digest(ref.registry, ref.path, tag)
    if not digest:
        digest = reported
    if not digest or (reported and reported != digest):
        raise EngineError(
            f"push to {ref.repository}:{tag}: the engine reported {digest or 'no digest'}, "
            f"the registry {reported or 'none'}"
        )
    pinned = f"{ref.repository}@{digest}"  # what a cluster should pull
    write_push_record(project, local, pinned)
    return Pushed(pinned, f"{ref.repository}:{tag}", digest)
