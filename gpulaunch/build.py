"""`gpulaunch build`: render for the builder in use, hash what shapes the image, build or reuse.

The tag `NAME:gl-<hash>` is content-addressed: the rendered Dockerfile, build args, the
template version and every file of the build context that .dockerignore lets through.
When that tag exists the build is skipped; otherwise the engine's layer cache still makes
a source-only edit re-run nothing but the final COPY.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpulaunch import __version__
from gpulaunch.engine import MANAGED_LABEL, Builder, BuildRequest, DockerCli, Engine
from gpulaunch.errors import BuildError
from gpulaunch.masking import mask
from gpulaunch.render import ImagePlan, plan_image, render_dockerfile, render_dockerignore
from gpulaunch.yamlio import atomic_write

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig

TAIL_LINES = 30
_BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:[\w.-]+ )?(\d+)/(\d+)\] (.*)$")
_CLASSIC_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_BUILDKIT_ERROR = re.compile(r"^#\d+ ERROR: (.*)$|^ERROR: (.*)$|^error: (.*)$")


@dataclass(frozen=True)
class BuildOptions:
    network: str | None = None  # overrides build.network
    rebuild: bool = False
    no_cache: bool = False
    builder: Builder | None = None  # None = what the engine offers


@dataclass
class BuildOutcome:
    tag: str
    cached: bool
    builder: Builder
    dockerfile: str
    log_path: Path | None = None
    plan: ImagePlan | None = None


@dataclass
class Progress:
    """Tracks the step being built from BuildKit plain output or classic builder output."""

    step: int = 0
    total: int = 0
    current: str = ""
    started: float = field(default_factory=time.monotonic)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    failed_step: str = ""
    error: str = ""

    def feed(self, line: str) -> bool:
        """Consume one output line; True when the step changed."""
        self.tail.append(line)
        match = _BUILDKIT_STEP.match(line) or _CLASSIC_STEP.match(line)
        if match:
            self.step, self.total = int(match.group(1)), int(match.group(2))
            self.current = match.group(3).strip()
            return True
        error = _BUILDKIT_ERROR.match(line)
        if error and not self.error:
            self.failed_step = self.current
            self.error = next(g for g in error.groups() if g)
        return False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def build_args() -> dict[str, str]:
    return {"GL_UID": str(os.getuid()), "GL_GID": str(os.getgid())}


def context_files(project: Path, dockerignore: str) -> list[str]:
    """Files the engine would send, by .dockerignore rules (the docker SDK's own matcher)."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in dockerignore.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # .dockerignore itself is hashed as the rules (see image_hash), so a dry run before the
    # file exists computes the same tag as the build that writes it.
    return sorted(
        p
        for p in exclude_paths(str(project), patterns)
        if p != ".dockerignore" and (project / p).is_file()
    )


def image_hash(
    dockerfile: str, args: dict[str, str], project: Path, files: list[str], ignore: str = ""
) -> str:
    digest = hashlib.sha256()
    digest.update(f"gpulaunch-build:2:{__version__}\n".encode())
    digest.update(dockerfile.encode())
    digest.update(b"\0dockerignore\0" + ignore.encode())
    for key, value in sorted(args.items()):
        digest.update(f"\0arg:{key}={value}".encode())
    for rel in files:
        digest.update(f"\0file:{rel}\0".encode())
        with (project / rel).open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def ensure_dockerignore(project: Path) -> str:
    """The project's .dockerignore; gpulaunch's is written only where there is none."""
    path = project / ".dockerignore"
    if not path.exists():
        atomic_write(path, render_dockerignore())
    return path.read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class PreparedBuild:
    plan: ImagePlan
    dockerfile: str
    request: BuildRequest
    tag: str


def prepare_build(
    config: ProjectConfig, project: Path, builder: Builder, opts: BuildOptions, *, write: bool
) -> PreparedBuild:
    """Render and hash without touching the engine (used by --dry-run as well)."""
    plan = plan_image(config, project, builder)
    dockerfile = render_dockerfile(plan)
    path = project / ".dockerignore"
    if write:
        ignore = ensure_dockerignore(project)
    elif path.exists():
        ignore = path.read_text(encoding="utf-8", errors="replace")
    else:
        ignore = render_dockerignore()
    args = build_args()
    files = context_files(project, ignore)
    tag = f"{config.name}:gl-{image_hash(dockerfile, args, project, files, ignore)}"
    request = BuildRequest(
        dockerfile=dockerfile,
        context=project,
        tags=(tag, f"{config.name}:latest"),
        build_args=args,
        network=opts.network or config.build.network,
        no_cache=opts.no_cache,
        secrets=dict(plan.secrets),
        labels={MANAGED_LABEL: "true"},
    )
    return PreparedBuild(plan, dockerfile, request, tag)


def dry_run_argv(prepared: PreparedBuild, cli: DockerCli | None) -> list[str]:
    """The equivalent docker command line (Dockerfile read from stdin: `-f -`)."""
    tool = cli or DockerCli("docker", "env")
    argv = tool.build_argv(prepared.request, Path("-"))
    return argv


def dry_run_text(prepared: PreparedBuild, cli: DockerCli | None) -> str:
    argv = dry_run_argv(prepared, cli)
    prefix = "DOCKER_BUILDKIT=1 " if (cli is None or cli.mode == "env") else ""
    if prepared.plan.builder == "classic":
        prefix = "DOCKER_BUILDKIT=0 "
    text = prefix + shlex.join(argv) + " <<'DOCKERFILE'\n" + prepared.dockerfile + "DOCKERFILE\n"
    return mask(text)


def run_build(
    config: ProjectConfig,
    project: Path,
    engine: Engine,
    opts: BuildOptions,
    on_progress: Callable[[Progress], None] | None = None,
) -> BuildOutcome:
    builder: Builder = opts.builder or engine.builder_kind()
    prepared = prepare_build(config, project, builder, opts, write=True)
    if not (opts.rebuild or opts.no_cache) and engine.image_exists(prepared.tag):
        engine.tag(prepared.tag, f"{config.name}:latest")
        return BuildOutcome(prepared.tag, True, builder, prepared.dockerfile, plan=prepared.plan)

    log_dir = project / ".gpulaunch" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = (
        log_dir / f"build-{time.strftime('%Y%m%d-%H%M%S')}-{prepared.tag.split(':gl-')[1]}.log"
    )
    progress = Progress()
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"# gpulaunch {__version__} build of {prepared.tag} ({builder})\n")

        def on_line(line: str) -> None:
            line = mask(line)  # the log, the progress line and the error tail
            log.write(line + "\n")
            if progress.feed(line) and on_progress is not None:
                on_progress(progress)

        try:
            engine.build(prepared.request, on_line, builder)
        except BuildError as err:
            step = progress.failed_step or progress.current
            where = f"at step {progress.step}/{progress.total}: {step}" if step else ""
            reason = progress.error or str(err)
            raise BuildError(
                f"build failed {where}".rstrip()
                + (f" ({reason[:200]})" if where else f": {reason[:300]}"),
                hint=f"full log: {log_path}",
                log_tail="\n".join(progress.tail),
                log_path=str(log_path),
            ) from err
    return BuildOutcome(prepared.tag, False, builder, prepared.dockerfile, log_path, prepared.plan)
