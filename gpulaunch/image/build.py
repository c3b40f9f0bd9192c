"""`gpulaunch build`: render for the builder in use, hash what shapes the image, build or reuse.

The tag `NAME:gl-<hash>` is content-addressed: the rendered Dockerfile, build args, the
template version, the .dockerignore rules and every entry of the build context (names,
modes, contents; see gpulaunch.engine.context), which is exactly what the engine receives.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpulaunch import __version__
from gpulaunch.engine.buildspec import Builder, BuildRequest, DockerCli
from gpulaunch.engine.cliprobe import remember_probes
from gpulaunch.engine.context import (
    CODE_DIR,
    INPUTS_DIR,
    Entry,
    drop_bare_parents,
    effective_rules,
    hash_entries,
    parse_rules,
    place,
    refuse_detected_secrets,
    refuse_secrets,
    scan,
)
from gpulaunch.engine.docker_api import MANAGED_LABEL, Engine
from gpulaunch.errors import BuildError, ConfigError
from gpulaunch.fsio import NotRegular, open_regular, open_stream
from gpulaunch.masking import mask

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig
    from gpulaunch.image.render import ImagePlan
    from gpulaunch.image.tagcache import CachedPlan, Hit
    from gpulaunch.planreads import PlanReads

TAIL_LINES = 30
MAX_IGNORE_BYTES = 1024 * 1024
# `#7 [stage-0  7/10] RUN ...`: BuildKit pads the step number to the width of the count
_BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:[^\]]*?\s)?\s*(\d+)/(\d+)\]\s+(.*)$")
_CLASSIC_STEP = re.compile(r"^Step\s+(\d+)/(\d+)\s*:\s*(.*)$")
_BUILDKIT_ERROR = re.compile(r"^#\d+ ERROR: (.*)$|^ERROR: (.*)$|^error: (.*)$")


@dataclass(frozen=True)
class BuildOptions:
    network: str | None = None  # overrides build.network
    rebuild: bool = False
    no_cache: bool = False
    builder: Builder | None = None  # None = what the engine offers
    config_file: Path | None = None  # --config: never sent to the engine, whatever its name


@dataclass
class BuildOutcome:
    tag: str
    cached: bool
    builder: Builder
    dockerfile: str
    log_path: Path | None = None
    plan: ImagePlan | CachedPlan | None = None  # CachedPlan: the tag came from the tag cache
    seconds: float = 0.0  # the build's wall time (0 when nothing was built)
    size: int | None = None  # the image's size in bytes, when the engine says


@dataclass
class Progress:
    """Tracks the step being built from BuildKit plain output or classic builder output.

    BuildKit names a step when it starts and again when its output resumes after another
    step's: `fresh` tells a step seen for the first time from one seen again."""

    step: int = 0
    total: int = 0
    current: str = ""
    started: float = field(default_factory=time.monotonic)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    failed_step: str = ""
    error: str = ""
    fresh: bool = False
    seen: set[tuple[int, int, str]] = field(default_factory=set)

    def feed(self, line: str) -> bool:
        """Consume one output line; True when it names a step (the current one changed)."""
        self.tail.append(line)
        match = _BUILDKIT_STEP.match(line) or _CLASSIC_STEP.match(line)
        if match:
            self.step, self.total = int(match.group(1)), int(match.group(2))
            self.current = match.group(3).strip()
            key = (self.step, self.total, self.current)
            self.fresh = key not in self.seen
            self.seen.add(key)
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


def templates_dir() -> Path:
    """render.template_root's answer without importing render (or the tag cache)."""
    packaged = Path(__file__).resolve().parents[1] / "templates"
    return packaged if packaged.is_dir() else packaged.parents[1] / "templates"


def render_dockerignore() -> str:
    """gpulaunch's default .dockerignore: the template's own text while it holds no Jinja
    markup (what Jinja would render; a run that finds its tag in the tag cache then imports
    neither render, the catalog nor jinja2), else rendered."""
    try:
        text = (templates_dir() / "dockerignore.j2").read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        text = "{#"
    if not any(mark in text for mark in ("{{", "{%", "{#", "\r")):
        return text
    from gpulaunch.image.render import render_dockerignore as render

    return render()


def read_dockerignore(project: Path) -> str:
    """The project's .dockerignore text, or gpulaunch's default rules where there is none.

    Read without following a link; a folder, a link or a non-text file is a usage error.
    """
    path = project / ".dockerignore"
    try:
        fd, _ = open_regular(path)
    except FileNotFoundError:  # the rules init writes, the project's code folders kept
        from gpulaunch.project.layout import keep_code

        return keep_code(render_dockerignore(), project)[0]
    except NotRegular as err:
        raise ConfigError(f"{path}: cannot read: {err}" if err.link else f"{path}: {err}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(MAX_IGNORE_BYTES + 1)
    if len(raw) > MAX_IGNORE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_IGNORE_BYTES // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None


def context_entries(
    project: Path,
    ignore: str,
    required: Sequence[str] = (),
    never: Sequence[str] = (),
    outputs: Sequence[str] = (),
) -> list[Entry]:
    """What the engine receives: what git would publish (in a checkout), .dockerignore rules,
    required files kept, config, `never` and the output folders jobs write left out
    (engine.context.effective_rules)."""
    from gpulaunch.outside.git import published

    user = parse_rules(ignore, str(project / ".dockerignore"))
    rules = effective_rules(user, required, never, outputs)
    entries = scan(project, rules, published(project), required)
    return drop_bare_parents(entries, outputs)


def image_hash(
    dockerfile: str,
    args: dict[str, str],
    project: Path,
    entries: list[Entry],
    ignore: str = "",
    remember: bool = False,
) -> str:
    """Content address: Dockerfile, build args, the rules, and every entry sent to the engine;
    big files' digests read now go to the user's cache (`content_digests`) when `remember`."""
    digest = hashlib.sha256()
    digest.update(f"gpulaunch-build:4:{__version__}\n".encode())
    digest.update(f"{len(dockerfile)}:".encode() + dockerfile.encode())
    digest.update(b"\0dockerignore\0" + f"{len(ignore)}:".encode() + ignore.encode())
    for key, value in sorted(args.items()):
        digest.update(f"\0arg:{key}={value}".encode())
    known, learned = content_digests(), dict[str, str]()
    hash_entries(digest, project, entries, known, learned)
    if remember and learned:
        from gpulaunch.fsio import cache_dir, cache_root, write_cache

        kept = dict(learned)  # the newest first, then the older ones up to the bound
        for k, v in known.items():
            if len(kept) >= DIGEST_CACHE_KEYS:
                break
            kept.setdefault(k, v)
        write_cache(cache_dir() / DIGEST_CACHE, {"digests": kept}, root=cache_root())
    return digest.hexdigest()[:12]


DIGEST_CACHE = "content-digests.json"
DIGEST_CACHE_KEYS = 20_000  # about 2.6 MB, under fsio's cache limit


def content_digests() -> dict[str, str]:
    """Big files' content digests by stat (engine.context.stat_key) as earlier builds read
    them, from the user's cache (`$XDG_CACHE_HOME/gpulaunch/content-digests.json`): a rebuild
    after a source edit then reads the wheelhouse's 200 MB again only when a wheel changed.
    The cache is the user's own folder, which no container mounts; a missing or corrupt one
    only means reading the files again. Read by dry runs too, written only by builds."""
    from gpulaunch.fsio import cache_dir, read_cache

    data = read_cache(cache_dir() / DIGEST_CACHE)
    known = data.get("digests") if isinstance(data, dict) else None
    if not isinstance(known, dict):
        return {}
    hexes = re.compile(r"[0-9a-f]{64}")
    return {
        k: v
        for k, v in known.items()
        if isinstance(k, str) and isinstance(v, str) and hexes.fullmatch(k) and hexes.fullmatch(v)
    }


@dataclass(frozen=True)
class PreparedBuild:
    plan: ImagePlan | CachedPlan  # CachedPlan: the tag cache's plan, which still stands
    dockerfile: str
    request: BuildRequest
    tag: str
    # what chose the context, kept so the tag cache lists it again with the same rules
    ignore: str = ""  # the effective .dockerignore text
    never: tuple[str, ...] = ()  # _never_sent
    outputs: tuple[str, ...] = ()  # the output folders left out
    reads: PlanReads | None = field(default=None, repr=False)  # what the plan read


def prepare_build(
    config: ProjectConfig,
    project: Path,
    builder: Builder,
    opts: BuildOptions,
    remember: bool = False,
    planned: Hit | None = None,
) -> PreparedBuild:
    """Render, list the context, scan it for secret shapes, hash. Asks no daemon and writes
    nothing unless `remember` (a build: compiled templates and big files' digests go to the user
    cache), so --dry-run uses it as it is; the build adds detect-secrets (`scan_context`).
    `planned`: the tag cache's plan and Dockerfile, which still stand (tagcache.lookup)."""
    from gpulaunch.project.layout import output_folders

    plan: ImagePlan | CachedPlan
    if planned is not None:
        plan, dockerfile, reads = planned.plan, planned.dockerfile, planned.reads
    else:
        from gpulaunch.image.render import plan_image, render_dockerfile
        from gpulaunch.planreads import recording

        with recording(project) as recorded:
            plan = plan_image(config, project, builder)
            dockerfile = render_dockerfile(plan, remember)
        reads = recorded.reads() if remember else None  # right after the plan read them
    ignore = read_dockerignore(project)
    args = build_args()
    never = _never_sent(config, project, opts)
    # the folders jobs write that are not the project's code (project.layout.OUTPUT_FOLDERS):
    # left out of the context and the tag unless a `!` rule of the user brings one back
    outputs = output_folders(project)[0]
    entries = context_entries(project, ignore, plan.required, never, outputs)
    sent = {e.rel for e in entries}
    for rel in plan.required:
        if rel not in sent and rel != ".":
            raise ConfigError(
                f"{rel}: the Dockerfile reads it, but it cannot be in the build context",
                hint="gpulaunch.yaml and .gpulaunch/ are never sent to the engine",
            )
    refuse_secrets(project, entries)
    address = image_hash(dockerfile, args, project, entries, ignore, remember)
    tag = f"{config.name}:gl-{address}"
    request = BuildRequest(
        dockerfile=dockerfile,
        context=project,
        tags=(tag, f"{config.name}:latest"),
        build_args=args,
        network=opts.network or config.build.network,
        no_cache=opts.no_cache,
        secrets=dict(plan.secrets),
        labels={MANAGED_LABEL: "true"},
        entries=tuple(place(entries, plan.inputs)),
    )
    return PreparedBuild(
        plan, dockerfile, request, tag, ignore, tuple(never), tuple(outputs), reads
    )


def _never_sent(config: ProjectConfig, project: Path, opts: BuildOptions) -> list[str]:
    """Project paths kept out of the context whatever the rules: --config's file, and
    launch.checkpoint_dir, which jobs write (in the context, every checkpoint would change
    the image hash, and so rebuild)."""
    never = []
    if opts.config_file is not None:
        config_file = opts.config_file.resolve()
        if config_file.is_relative_to(project.resolve()):
            never.append(config_file.relative_to(project.resolve()).as_posix())
    value = config.launch.checkpoint_dir
    if value is not None:
        path = Path(os.path.abspath(project / os.path.expanduser(value)))
        root = Path(os.path.abspath(project))
        if path.is_relative_to(root):
            never.append(path.relative_to(root).as_posix())
    return never


def dry_run_argv(prepared: PreparedBuild, cli: DockerCli | None) -> list[str]:
    """The equivalent docker command line (Dockerfile read from stdin: `-f -`)."""
    tool = cli or DockerCli("docker", "env")
    return tool.build_argv(prepared.request, Path("-"), secret_dir=_secret_dir_shown())


def _secret_dir_shown() -> Path:
    """Where a build links each BuildKit secret (an in-memory file): its private temp folder."""
    import tempfile

    return Path(tempfile.gettempdir()) / "gpulaunch-build-XXXXXXXX"


def dry_run_text(prepared: PreparedBuild, cli: DockerCli | None) -> str:
    argv = dry_run_argv(prepared, cli)
    prefix = "DOCKER_BUILDKIT=1 " if (cli is None or cli.mode == "env") else ""
    if prepared.plan.builder == "classic":
        prefix = "DOCKER_BUILDKIT=0 "
    req = prepared.request
    note = (
        f"# context: {len(req.entries)} entries of {req.context} (what git would publish in a"
        " checkout, .dockerignore, plus the files the Dockerfile reads, minus the config,"
        " .gpulaunch/ and credential files; scanned for secret shapes, and by detect-secrets"
        " when it builds); gpulaunch"
        " sends exactly these, the docker CLI alone would apply .dockerignore only\n"
        f"# laid out as the Dockerfile reads them: the project's files below {CODE_DIR}/, what"
        f" only build steps read (wheelhouses, the CA bundle) below {INPUTS_DIR}/\n"
    )
    if req.secrets:
        note += (
            f"# each --secret src is a link in {_secret_dir_shown()}, the build's private folder"
            " (named when the build starts), to an in-memory file of the build's process holding"
            " the value: never written to a disk\n"
        )
    heredoc = " <<'DOCKERFILE'\n" + prepared.dockerfile + "DOCKERFILE\n"
    return mask(note + prefix + shlex.join(argv) + heredoc)


def run_build(
    config: ProjectConfig,
    project: Path,
    engine: Engine,
    opts: BuildOptions,
    on_progress: Callable[[Progress], None] | None = None,
) -> BuildOutcome:
    from gpulaunch.image import tagcache

    forced = opts.rebuild or opts.no_cache
    cache_key = "" if forced else tagcache.key(config, project, engine, opts)
    hit = tagcache.lookup(project, cache_key, config.name) if cache_key else None
    if hit is not None and hit.tag is not None and engine.image_exists(hit.tag):
        engine.tag(hit.tag, f"{config.name}:latest")  # nothing rendered or hashed
        return BuildOutcome(hit.tag, True, hit.plan.builder, hit.dockerfile, plan=hit.plan)
    builder: Builder = opts.builder or engine.builder_kind()
    remember_probes()  # a build may write caches: render and dry runs then skip the probe
    hashed_at = time.time()
    planned = hit if hit is not None and hit.tag is None and hit.plan.builder == builder else None
    prepared = prepare_build(config, project, builder, opts, remember=True, planned=planned)

    def remember() -> None:
        if cache_key:
            tagcache.store(project, cache_key, prepared, hashed_at)

    if not forced and engine.image_exists(prepared.tag):
        engine.tag(prepared.tag, f"{config.name}:latest")
        remember()
        return BuildOutcome(prepared.tag, True, builder, prepared.dockerfile, plan=prepared.plan)
    # before the engine sees anything; an image of this very tag sends nothing, so needs none
    scan_context(project, prepared.request.entries)

    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    log_path = project / ".gpulaunch" / "logs" / f"build-{stamp}-{prepared.tag[-12:]}.log"
    progress = Progress()
    with open_stream(log_path, root=project) as log:
        log.write(f"# gpulaunch {__version__} build of {prepared.tag} ({builder})\n")

        def on_line(line: str) -> None:
            line = mask(line)  # the log, the progress line and the error tail
            log.write(line + "\n")
            log.flush()  # a user (or a test) may follow the log while it builds
            if progress.feed(line) and on_progress is not None:
                on_progress(progress)

        # a rebuild must not leave the image it replaces dangling (without --rebuild or
        # --no-cache, an image of this tag was just found missing)
        previous = engine.image_id(prepared.tag) if forced else None
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
    if previous is not None:
        engine.remove_if_dangling(previous)
    remember_probes()  # --builder buildkit probes only when the build starts
    remember()
    outcome = BuildOutcome(
        prepared.tag, False, builder, prepared.dockerfile, log_path, prepared.plan
    )
    outcome.seconds = progress.elapsed
    outcome.size = image_size(engine, prepared.tag)
    return outcome


def image_size(engine: Engine, tag: str) -> int | None:
    """The image's size as the engine reports it (`docker image ls`), None when it will not
    say: the size is news for the user, never a reason to fail a build that worked."""
    from gpulaunch.engine.api.containers import inspect_image
    from gpulaunch.errors import GpulaunchError

    try:
        image = inspect_image(engine.api(), tag)
    except (GpulaunchError, OSError):
        return None
    size = image.attrs.get("Size") if image is not None else None
    return size if type(size) is int and size >= 0 else None


SCAN_CACHE = "secret-scan.json"
SCAN_CACHE_KEYS = 40_000  # about 2.7 MB of keys, under fsio's cache limit


def scan_context(project: Path, entries: tuple[Entry, ...]) -> None:
    """detect-secrets over the context before a build (engine.context.refuse_detected_secrets).

    Files an earlier build found clean are known by a key of their bytes (and the scanner's
    version) in the user's cache (`$XDG_CACHE_HOME/gpulaunch/secret-scan.json`), so a rebuild
    scans only what changed: a missing or corrupt cache only means scanning again. Written only
    by builds, never by a dry run. The cache is the user's own folder, which no container
    mounts; a key planted there skips only detect-secrets for that exact content, never the
    shape scan."""
    from gpulaunch.fsio import cache_dir, cache_root, read_cache, write_cache

    path = cache_dir() / SCAN_CACHE
    data = read_cache(path)
    known = data.get("clean") if isinstance(data, dict) else None
    if not isinstance(known, list) or not all(isinstance(k, str) for k in known):
        known = []
    clean = refuse_detected_secrets(project, entries, frozenset(known))
    if clean - set(known):
        kept = [*sorted(clean), *(k for k in known if k not in clean)][:SCAN_CACHE_KEYS]
        write_cache(path, {"clean": kept}, root=cache_root())
