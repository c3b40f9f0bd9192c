"""Resolved plan -> Dockerfile / .dockerignore through the Jinja2 templates.

Templates receive an already-resolved plan (`ImagePlan.context`); every decision about
versions, packages and quoting is made here, so templates hold layout only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch import __version__
from gpulaunch.catalog import driver_rule
from gpulaunch.catalog.request import (
    ResolvedImage,
    check_certificate,
    check_image_env,
    summarize,
    torch_summary,
)
from gpulaunch.catalog.request import image_request as image_request  # its old home
from gpulaunch.catalog.resolver import resolve
from gpulaunch.engine.buildspec import Builder
from gpulaunch.engine.context import CODE_DIR, context_path
from gpulaunch.errors import ConfigError
from gpulaunch.project import layout, pythonpath
from gpulaunch.project.model import TORCH_FAMILY

if TYPE_CHECKING:
    from jinja2 import BytecodeCache, Environment
    from jinja2.bccache import Bucket

    from gpulaunch.config import ProjectConfig

    Archs = tuple[str, ...] | None

WHEEL_MOUNT = "/opt/gpulaunch/find-links"


def template_root() -> Path:
    """Templates ship inside the wheel as gpulaunch/templates; a source checkout has ./templates."""
    packaged = Path(str(resources.files("gpulaunch"))) / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "templates"


def dockerfile_string(value: str) -> str:
    """A double-quoted Dockerfile string (ENV/LABEL) with no way to expand or break the line."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _environment(remember: bool = False) -> Environment:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(template_root()),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=False,
    )
    env.filters["shquote"] = lambda v: shlex.quote(str(v))
    env.filters["jsonstr"] = lambda v: json.dumps(str(v))
    env.filters["dockerstr"] = lambda v: dockerfile_string(str(v))
    env.bytecode_cache = _template_cache(compile_options(env), remember)
    return env


TEMPLATE_CACHE = "templates"  # below the user cache: jinja2's compiled templates
_TEMPLATE_CACHE_BYTES = 1 << 20
_CODEGEN = ("block_start_string", "block_end_string", "variable_start_string",
            "variable_end_string", "comment_start_string", "comment_end_string",
            "line_statement_prefix", "line_comment_prefix", "trim_blocks", "lstrip_blocks",
            "newline_sequence", "keep_trailing_newline", "autoescape", "optimized")  # fmt: skip


def compile_options(env: Environment) -> str:
    """What jinja2's code for a template depends on besides its text and Python's version."""
    from jinja2 import __version__ as jinja

    return repr([jinja, *(getattr(env, k) for k in _CODEGEN), sorted(env.extensions)])


def _template_cache(options: str, remember: bool) -> BytecodeCache:
    """jinja2's own bytecode cache, kept in the user cache ($XDG_CACHE_HOME/gpulaunch/
    templates/), so a render compiles no template a build compiled before. jinja2 takes a
    template's code from it only when compiled from this very text (its checksum) by this
    Python (its magic); the key adds the template's file, jinja2's version and the options
    above, so a stale, foreign or corrupt entry only means compiling again. Read by every
    render, written (through fsio) only when `remember`: by builds, never by a dry run.
    Compiled templates are code: they live in the user's own cache, which no container
    mounts, never in the project."""
    from jinja2 import BytecodeCache

    from gpulaunch.errors import GpulaunchError
    from gpulaunch.fsio import cache_dir, cache_root, read_back, write_file

    folder = cache_dir() / TEMPLATE_CACHE

    class UserCache(BytecodeCache):
        def get_cache_key(self, name: str, filename: str | None = None) -> str:
            return super().get_cache_key(name, f"{filename}\0{options}")

        def load_bytecode(self, bucket: Bucket) -> None:
            try:
                bucket.bytecode_from_string(read_back(folder / bucket.key, _TEMPLATE_CACHE_BYTES))
            except Exception:  # missing, a link, corrupt: compile
                bucket.reset()

        def dump_bytecode(self, bucket: Bucket) -> None:
            if remember:  # a failed write only means compiling again
                with contextlib.suppress(GpulaunchError, OSError):
                    code = bucket.bytecode_to_string()
                    write_file(folder / bucket.key, code, root=cache_root(), force=True, mode=0o600)

    return UserCache()


@dataclass(frozen=True)
class ImagePlan:
    """Everything that shapes the image: the resolved versions plus the template context."""

    name: str
    resolved: ResolvedImage
    builder: Builder
    context: dict[str, Any] = field(repr=False)
    # project paths the Dockerfile reads (COPY, bind mounts), relative, links' targets too:
    # they stay in the build context whatever .dockerignore says
    required: tuple[str, ...]
    # BuildKit secret id -> value: index URLs with credentials, never in the Dockerfile.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    # project paths only build steps read (wheelhouses, the CA bundle; links' targets too):
    # sent apart from the code, never in the final COPY (engine.context.context_path)
    inputs: tuple[str, ...] = ()


def _apt_packages(resolved: ResolvedImage, config: ProjectConfig) -> tuple[list[str], list[str]]:
    """(packages from the base OS, packages from the deadsnakes PPA)."""
    pkgs: list[str] = []
    deadsnakes: list[str] = []
    if resolved.python_source == "distro":
        pkgs += ["python3", "python3-venv"]
    elif resolved.python_source == "deadsnakes":
        pkgs += ["software-properties-common", "gnupg"]
        deadsnakes = [f"python{resolved.python}", f"python{resolved.python}-venv"]
    if config.image.ca_cert or resolved.python_source in ("distro", "deadsnakes", "standalone"):
        pkgs.append("ca-certificates")
    ppa = f"python{resolved.python}-" if deadsnakes else "\0"  # its -dev is the PPA's too
    pkgs += [p for p in config.image.system_packages if not p.startswith(ppa)]
    deadsnakes += [p for p in config.image.system_packages if p.startswith(ppa)]
    return list(dict.fromkeys(pkgs)), list(dict.fromkeys(deadsnakes))


def _torch_install(
    resolved: ResolvedImage, extras: list[str], pinned: dict[str, str | None]
) -> list[str]:
    if resolved.torch is None:
        return []
    pins = [f"torch=={resolved.torch}"]
    versions = {"torchvision": resolved.torchvision, "torchaudio": resolved.torchaudio}
    # the project's own companion pins (init keeps them) win over the catalog's pairing
    versions.update({k: v for k, v in pinned.items() if v})
    extras = [*extras, *(k for k, v in pinned.items() if v and k not in extras)]
    for extra in extras:
        version = versions[extra]
        if version is None:
            raise ConfigError(
                f"image.torch_extras: {extra} has no release known to match torch {resolved.torch}"
            )
        pins.append(f"{extra}=={version}")
    return pins


def plan_image(config: ProjectConfig, project_dir: Path, builder: Builder) -> ImagePlan:
    """Resolve versions and compute the template context for one builder."""
    resolved = resolve(image_request(config))
    img = config.image
    required: list[str] = []
    inputs: list[str] = []  # ImagePlan.inputs

    links: list[dict[str, str]] = []
    mounted: dict[str, str] = {}  # wheelhouse (real path) -> where its steps see it
    for i, rel in enumerate(img.pip.find_links):
        field_name = f"image.pip.find_links[{i}]"
        target = _inside(project_dir, rel, field_name, inputs)
        if not target.is_dir():
            raise ConfigError(f"{field_name}: {rel!r} is not a folder in the project")
        real = inputs[-1]
        links.append({"source": real, "target": f"{WHEEL_MOUNT}/{i}"})
        mounted.setdefault(real, f"{WHEEL_MOUNT}/{i}")
    cert_rel = ""
    if img.ca_cert:
        cert = _inside(project_dir, img.ca_cert, "image.ca_cert", inputs)
        if not cert.is_file():
            raise ConfigError(f"image.ca_cert: {img.ca_cert!r} not found in the project")
        check_certificate(cert, img.ca_cert)
        cert_rel = inputs[-1]
    required += inputs
    for link in links:
        link["source"] = context_path(link["source"], inputs)

    archs = resolved.cuda_archs if resolved.cuda or resolved.flavor == "ngc" else None
    companions = {"torchvision": img.torchvision, "torchaudio": img.torchaudio}
    torch_install = _torch_install(resolved, list(img.torch_extras), companions)
    # the torch* the image installs and pins: the project's own pins on them are not installed
    owned = TORCH_FAMILY if resolved.flavor == "ngc" else [t.split("==")[0] for t in torch_install]
    entry = img.requirements
    if entry:
        deps = _dependencies(project_dir, entry, required, archs, mounted, frozenset(owned))
    else:
        deps = _Dependencies(None, [], [], [], [], [], "", pythonpath.import_paths(project_dir))
    check_image_env(dict(img.env))
    links_flags = "".join(f" --find-links {link['target']}" for link in links)
    if img.pip.no_index:
        links_flags = " --no-index" + links_flags
    if img.pip.no_index or resolved.torch_index_url is None:
        torch_flags = links_flags
    else:
        torch_flags = f" --index-url {resolved.torch_index_url}{links_flags}"
    req_flags = links_flags
    secrets: dict[str, str] = {}
    index_note = ""
    if not img.pip.no_index:
        secrets, index_note = _index_secrets(config, builder)
        if img.pip.index_url and not secrets:
            req_flags = f" --index-url {shlex.quote(img.pip.index_url)}" + req_flags
        for url in img.pip.extra_index_urls if not secrets else ():
            req_flags += f" --extra-index-url {shlex.quote(url)}"

    if resolved.python_source == "standalone" and config.build.network == "none":
        raise ConfigError(
            "image.python_source: standalone downloads CPython at build time; "
            "build.network none forbids it (use distro, deadsnakes or a base with Python)"
        )
    # air-gapped, a pip wheel in the wheelhouse is used whatever is installed (local, harmless)
    needs_new_pip = (
        bool(torch_install)
        or _names_pytorch_index(config, project_dir, deps)
        or (img.pip.no_index and bool(entry))
    )
    pip_upgrade, pip_note = _pip_upgrade(config, resolved, links, project_dir, needs_new_pip)
    apt, deadsnakes = _apt_packages(resolved, config)
    python_bin = f"python{resolved.python}" if resolved.python_source == "deadsnakes" else "python3"
    labels = {
        "org.opencontainers.image.title": config.name,
        "io.gpulaunch.version": __version__,
        "io.gpulaunch.project": config.name,
        **resolved.labels(),
        **{f"io.gpulaunch.{k}": v for k, v in companions.items() if v},
    }
    summary = summarize(resolved)
    context: dict[str, Any] = {
        "driver_note": driver_note(resolved),
        "gl_version": __version__,
        "config_name": "gpulaunch.yaml",
        "summary": summary,
        "builder": builder,
        "buildkit": builder == "buildkit",
        "base_image": resolved.base_image,
        "labels": labels,
        "ca_cert": context_path(cert_rel, inputs) if cert_rel else "",
        "code_dir": CODE_DIR,
        "apt_packages": apt,
        "deadsnakes": deadsnakes,
        "python": resolved.python,
        "python_source": resolved.python_source,
        "python_bin": python_bin,
        "uv_image": _uv_image(resolved),
        "system_site_packages": resolved.flavor == "ngc",
        "ngc": resolved.flavor == "ngc",
        "pip_upgrade": pip_upgrade,
        "pip_note": pip_note,
        "torch_install": torch_install,
        "torch_summary": torch_summary(resolved),
        "torch_source_flags": torch_flags,
        "pip_cache_flag": "" if builder == "buildkit" else " --no-cache-dir",
        "find_links": links,
        "requirements_file": deps.entry,
        "requirement_copies": [
            {**copy, "source": context_path(copy["source"], inputs)} for copy in deps.copies
        ],
        "requirement_edits": deps.edits,
        "dependencies": deps.inline,
        "local_installs": deps.local_installs,
        "local_builds": deps.local_builds,
        "build_env": deps.build_env,
        "python_path": ":".join(["/workspace", *(f"/workspace/{p}" for p in deps.import_paths)]),
        "req_source_flags": req_flags,
        "pip_secrets": sorted(secrets),
        "pip_secret_vars": {sid: _SECRET_VARS[sid] for sid in secrets},
        "index_note": index_note,
        "env": dict(img.env),
        "run_steps": list(img.run),
    }
    return ImagePlan(
        config.name,
        resolved,
        builder,
        context,
        tuple(dict.fromkeys(required)),
        secrets,
        tuple(dict.fromkeys(inputs)),
    )


def _pip_upgrade(
    config: ProjectConfig,
    resolved: ResolvedImage,
    links: list[dict[str, str]],
    project_dir: Path,
    needed: bool,
) -> tuple[dict[str, str] | None, str]:
    """The step that upgrades the venv's pip first (old pip cannot read the PyTorch index), and
    a note when it is left out. Air-gapped (`pip.no_index`): from the wheelhouse when it holds a
    new enough pip, else left out. The step itself skips the upgrade when pip is new enough."""
    from gpulaunch.catalog.python_install import pip_floor, wheelhouse_pip

    if resolved.flavor == "ngc" or not needed:
        return None, ""
    floor = pip_floor()
    step = {
        "check": floor.check_script(),
        "floor": floor.min,
        "spec": f"pip>={floor.min}",
        "why": floor.why,
    }
    if not config.image.pip.no_index:
        return step, ""
    folders = [project_dir / rel for rel in config.image.pip.find_links]
    wheel = wheelhouse_pip(folders, floor.min)
    if wheel is None:
        return None, (
            f"pip is not upgraded: pip.no_index and no pip>={floor.min} wheel in the "
            "wheelhouse (old pip fails only on the PyTorch index, which is not used)"
        )
    return {**step, "spec": f"pip=={wheel}"}, ""


def _names_pytorch_index(config: ProjectConfig, project_dir: Path, deps: _Dependencies) -> bool:
    """Whether the requirements step reads the PyTorch index, the only one old pip fails on:
    plain PyPI or a private index works with any pip, and may not serve pip itself."""
    pip = config.image.pip
    urls = [pip.index_url or "", *pip.extra_index_urls]
    if any(PYTORCH_INDEX_HOST in url for url in urls):
        return True
    for copy in deps.copies:
        text = (project_dir / copy["source"]).read_text(encoding="utf-8", errors="replace")
        if PYTORCH_INDEX_HOST in text:
            return True
    return False


def _uv_image(resolved: ResolvedImage) -> str:
    """The uv image a standalone CPython is installed with (data/python_install.yaml)."""
    if resolved.python_source != "standalone":
        return ""
    from gpulaunch.catalog.python_install import standalone

    return standalone().uv_image


REQ_DIR = "/opt/gpulaunch/req"
PYTORCH_INDEX_HOST = "download.pytorch.org"


@dataclass(frozen=True)
class _Dependencies:
    """How the project's dependencies reach the image (from the project model)."""

    entry: str | None  # the copied requirements file pip reads (-r)
    copies: list[dict[str, str]]  # every requirements/constraints file, by relative path
    edits: list[str]  # sed commands that take local installs out before the project is copied
    inline: list[str]  # PEP 508 texts on pip's command line
    local_installs: list[str]  # pip arguments, installed with --no-deps after the project copy
    local_builds: list[str]  # the same, built without isolation (their build imports torch)
    build_env: str  # their environment (a CUDA extension: TORCH_CUDA_ARCH_LIST, FORCE_CUDA)
    import_paths: list[str]  # project folders on PYTHONPATH besides the root


def _dependencies(
    project_dir: Path,
    entry: str,
    required: list[str],
    archs: Archs,
    mounted: dict[str, str],
    image_torch: frozenset[str] = frozenset(),
) -> _Dependencies:
    """`archs`: the image torch's CUDA archs (None: a CPU image);
    `mounted`: wheelhouse folders -> where pip steps see them (a local wheel there is
    installed from that place: the wheelhouse is not in /workspace)."""
    from gpulaunch.project.discover import read_project
    from gpulaunch.textcheck import bad_char

    entry_path = _inside(project_dir, entry, "image.requirements", [])
    if not entry_path.is_file():
        raise ConfigError(f"image.requirements: {entry!r} not found in the project")
    if Path(entry).name == "pyproject.toml":
        from gpulaunch.project.pyproject import strict_dependencies

        strict_dependencies(entry_path)
    try:
        model = read_project(project_dir, entry, archs is not None, image_torch)
    except ConfigError as err:
        if err.message.startswith("image.requirements"):
            raise
        raise ConfigError(f"image.requirements: {err.message}") from None
    if model.invalid:
        raise ConfigError(f"image.requirements: {model.invalid[0]}")
    copies: list[dict[str, str]] = []
    edits: list[str] = []
    for req_file in model.files:
        _inside(project_dir, req_file.path, "image.requirements", required)
        target = f"{REQ_DIR}/{req_file.path}"
        copies.append({"source": req_file.path, "target": target})
        if req_file.drop:
            ranges = " ".join(f"-e {a},{b}d" if a != b else f"-e {a}d" for a, b in req_file.drop)
            edits.append(f"sed -i {ranges} {shlex.quote(target)}")
    edits += layout.constraint_lines(model)  # uv overrides, beside the torch* pins
    for text in [*model.inline, *(text for text, _ in model.constraints)]:
        if bad_char(text) is not None:
            raise ConfigError(
                f"image.requirements: dependency {text!r} contains a line break or control "
                "character"
            )
    locals_: list[str] = []
    builds: list[str] = []
    for local in model.locals:
        path = _inside(project_dir, local.path, "image.requirements", [])
        rel = path.relative_to(project_dir.resolve()).as_posix()
        target = _seen_at(rel, mounted)
        build = model.build_of(local.path)
        into = builds if build is not None and not build.isolated else locals_
        into.append(("-e " if local.editable else "") + shlex.quote(target))
    entry_target = copies[0]["target"] if model.entry_kind == "requirements" else None
    env = layout.build_env(archs, any(b.cuda and not b.isolated for b in model.builds))
    paths = [p for p, _ in model.import_paths]
    return _Dependencies(entry_target, copies, edits, model.inline, locals_, builds, env, paths)


def _seen_at(rel: str, mounted: dict[str, str]) -> str:
    """Where a pip step after the project copy sees the project path `rel`: in a wheelhouse's
    mount (or, classic, its own copy) when it lies in one, else below /workspace."""
    for folder, target in mounted.items():
        if folder != "." and (rel == folder or rel.startswith(folder + "/")):
            return target + rel[len(folder) :]
    return "/workspace" if rel == "." else f"/workspace/{rel}"


def _inside(project: Path, rel: str, field_name: str, required: list[str]) -> Path:
    """The real path of a project file the Dockerfile reads; links may not leave the project.

    Both the name and, for a link, its target's name go to `required`: the engine resolves
    the link inside the context, so the target must be sent too.
    """
    root = project.resolve()
    path = project / rel
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as err:
        raise ConfigError(f"{field_name}: {rel!r} cannot be resolved: {err}") from None
    if not real.is_relative_to(root):
        raise ConfigError(f"{field_name}: {rel!r} points outside the project (to {real})")
    required.append(Path(os.path.normpath(rel)).as_posix())
    required.append(real.relative_to(root).as_posix())
    return real


PIP_INDEX_SECRET = "gl_pip_index_url"
PIP_EXTRA_SECRET = "gl_pip_extra_index_urls"
_SECRET_VARS = {PIP_INDEX_SECRET: "PIP_INDEX_URL", PIP_EXTRA_SECRET: "PIP_EXTRA_INDEX_URL"}


def _index_secrets(config: ProjectConfig, builder: Builder) -> tuple[dict[str, str], str]:
    """Index URLs with credentials go to BuildKit secrets (mounted for the pip step only).

    As build args or in the Dockerfile they would stay in `docker history` for good; the
    classic builder has no secrets, so it is refused. The Dockerfile names the indexes
    masked, so a change of index (not of token) still changes the image hash.
    """
    from gpulaunch.masking import has_userinfo, mask

    pip = config.image.pip
    urls = [u for u in [pip.index_url, *pip.extra_index_urls] if u]
    if not any(has_userinfo(u) for u in urls):
        return {}, ""
    if builder == "classic":
        field_name = (
            "image.pip.index_url"
            if pip.index_url and has_userinfo(pip.index_url)
            else "image.pip.extra_index_urls"
        )
        raise ConfigError(
            f"{field_name}: holds credentials, which the classic builder would keep in the "
            "image history; build with BuildKit (a docker CLI with BuildKit, not --builder "
            "classic) so they are passed as build secrets"
        )
    secrets: dict[str, str] = {}
    if pip.index_url:
        secrets[PIP_INDEX_SECRET] = pip.index_url
    if pip.extra_index_urls:
        secrets[PIP_EXTRA_SECRET] = " ".join(pip.extra_index_urls)
    return secrets, "indexes (BuildKit secrets): " + " ".join(mask(u) for u in urls)


def driver_note(resolved: ResolvedImage) -> list[str]:
    """The Dockerfile's driver comment: the rule the container meets, and the decided policy
    on NVIDIA_DISABLE_REQUIRE (see catalog/driver_rule.py)."""
    req = driver_rule.requirement_for(resolved.base_image, resolved.cuda)
    if req is None:
        return []
    if not req.enforced:
        return [f"Driver: {driver_rule.explain_need(req)} ({req.source}; no container check)."]
    return [
        f"Driver: {driver_rule.explain_need(req)} ({req.source}).",
        "NVIDIA_DISABLE_REQUIRE is deliberately not set: the image's own CUDA libraries need "
        "that driver (forward compatibility covers only the branches and brands listed), and "
        "`gpulaunch run` checks "
        "the same rule before starting, naming a build that fits.",
    ]


def render_dockerfile(plan: ImagePlan, remember: bool = False) -> str:
    """The Dockerfile; `remember`: keep the templates compiled now in the user cache."""
    from jinja2 import TemplateError

    try:
        text = _environment(remember).get_template("Dockerfile.j2").render(plan.context)
    except TemplateError as err:  # a broken template is our bug, but say which
        raise ConfigError(f"template error: {err}") from None
    # Collapse runs of blank lines left by skipped sections.
    lines: list[str] = []
    for line in text.splitlines():
        if line.strip() or (lines and lines[-1].strip()):
            lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


def render_dockerignore() -> str:
    return _environment().get_template("dockerignore.j2").render()
