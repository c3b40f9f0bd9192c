"""Resolved plan -> Dockerfile / .dockerignore through the Jinja2 templates.

Templates receive an already-resolved plan (`ImagePlan.context`); every decision about
versions, packages and quoting is made here, so templates hold layout only.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpulaunch import __version__
from gpulaunch.catalog import ImageRequest, ResolvedImage, resolve
from gpulaunch.errors import ConfigError

if TYPE_CHECKING:
    from jinja2 import Environment

    from gpulaunch.config import ProjectConfig

Builder = Literal["buildkit", "classic"]
WHEEL_MOUNT = "/opt/gpulaunch/find-links"


def template_root() -> Path:
    """Templates ship inside the wheel as gpulaunch/templates; a source checkout has ./templates."""
    packaged = Path(str(resources.files("gpulaunch"))) / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "templates"


def dockerfile_string(value: str) -> str:
    """A double-quoted Dockerfile string (ENV/LABEL) with no way to expand or break the line."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _environment() -> Environment:
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
    return env


def image_request(config: ProjectConfig) -> ImageRequest:
    img = config.image
    return ImageRequest(
        python=img.python,
        torch=img.torch,
        cuda=img.cuda,
        cudnn=img.cudnn,
        os=img.os,
        flavor=img.flavor,
        base=img.base,
    )


@dataclass(frozen=True)
class ImagePlan:
    """Everything that shapes the image: the resolved versions plus the template context."""

    name: str
    resolved: ResolvedImage
    builder: Builder
    context: dict[str, Any] = field(repr=False)
    inputs: tuple[Path, ...]  # project files whose content shapes the image (for hashing)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _pyproject_dependencies(path: Path) -> list[str]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"image.requirements: cannot read {path.name}: {err}") from None
    table = data.get("project", {})
    deps = table.get("dependencies", []) if isinstance(table, dict) else None
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ConfigError(f"image.requirements: {path.name} [project].dependencies is not a list")
    from gpulaunch.textcheck import bad_char

    for dep in deps:
        if bad_char(dep) is not None:
            raise ConfigError(
                f"image.requirements: dependency {dep!r} contains a line break or control character"
            )
    return list(deps)


def _apt_packages(resolved: ResolvedImage, config: ProjectConfig) -> tuple[list[str], list[str]]:
    """(packages from the base OS, packages from the deadsnakes PPA)."""
    pkgs: list[str] = []
    deadsnakes: list[str] = []
    if resolved.python_source == "distro":
        pkgs += ["python3", "python3-venv"]
    elif resolved.python_source == "deadsnakes":
        pkgs += ["software-properties-common", "gnupg"]
        deadsnakes = [f"python{resolved.python}", f"python{resolved.python}-venv"]
    if config.image.ca_cert or resolved.python_source in ("distro", "deadsnakes"):
        pkgs.append("ca-certificates")
    pkgs += config.image.system_packages
    return _unique(pkgs), deadsnakes


def _torch_install(resolved: ResolvedImage, extras: list[str]) -> list[str]:
    if resolved.torch is None:
        return []
    pins = [f"torch=={resolved.torch}"]
    versions = {"torchvision": resolved.torchvision, "torchaudio": resolved.torchaudio}
    for extra in extras:
        version = versions[extra]
        if version is None:
            raise ConfigError(
                f"image.torch_extras: {extra} has no release known to match torch {resolved.torch}"
            )
        pins.append(f"{extra}=={version}")
    return pins


def _links_flags(config: ProjectConfig, links: list[dict[str, str]]) -> str:
    flags = "".join(f" --find-links {link['target']}" for link in links)
    return (" --no-index" + flags) if config.image.pip.no_index else flags


def plan_image(config: ProjectConfig, project_dir: Path, builder: Builder) -> ImagePlan:
    """Resolve versions and compute the template context for one builder."""
    resolved = resolve(image_request(config))
    img = config.image
    inputs: list[Path] = []

    links: list[dict[str, str]] = []
    for i, rel in enumerate(img.pip.find_links):
        if not (project_dir / rel).is_dir():
            raise ConfigError(f"image.pip.find_links[{i}]: {rel!r} is not a folder in the project")
        links.append({"source": rel, "target": f"{WHEEL_MOUNT}/{i}"})
        inputs += sorted(p for p in (project_dir / rel).rglob("*") if p.is_file())

    requirements_file: str | None = None
    dependencies: list[str] = []
    if img.requirements:
        req_path = project_dir / img.requirements
        if not req_path.is_file():
            raise ConfigError(f"image.requirements: {img.requirements!r} not found in the project")
        inputs.append(req_path)
        if req_path.name == "pyproject.toml":
            dependencies = _pyproject_dependencies(req_path)
        else:
            requirements_file = img.requirements

    if img.ca_cert:
        if not (project_dir / img.ca_cert).is_file():
            raise ConfigError(f"image.ca_cert: {img.ca_cert!r} not found in the project")
        inputs.append(project_dir / img.ca_cert)

    torch_install = _torch_install(resolved, list(img.torch_extras))
    links_flags = _links_flags(config, links)
    if img.pip.no_index or resolved.torch_index_url is None:
        torch_flags = links_flags
    else:
        torch_flags = f" --index-url {resolved.torch_index_url}{links_flags}"
    req_flags = links_flags
    if not img.pip.no_index:
        if img.pip.index_url:
            req_flags = f" --index-url {shlex.quote(img.pip.index_url)}" + req_flags
        for url in img.pip.extra_index_urls:
            req_flags += f" --extra-index-url {shlex.quote(url)}"

    apt, deadsnakes = _apt_packages(resolved, config)
    python_bin = f"python{resolved.python}" if resolved.python_source == "deadsnakes" else "python3"
    labels = {
        "org.opencontainers.image.title": config.name,
        "io.gpulaunch.version": __version__,
        "io.gpulaunch.project": config.name,
        **resolved.labels(),
    }
    summary = summarize(resolved)
    context: dict[str, Any] = {
        "gl_version": __version__,
        "config_name": "gpulaunch.yaml",
        "summary": summary,
        "builder": builder,
        "buildkit": builder == "buildkit",
        "base_image": resolved.base_image,
        "labels": labels,
        "ca_cert": img.ca_cert,
        "apt_packages": apt,
        "deadsnakes": deadsnakes,
        "python": resolved.python,
        "python_source": resolved.python_source,
        "python_bin": python_bin,
        "system_site_packages": resolved.flavor == "ngc",
        "torch_install": torch_install,
        "torch_summary": _torch_summary(resolved),
        "torch_source_flags": torch_flags,
        "pip_cache_flag": "" if builder == "buildkit" else " --no-cache-dir",
        "find_links": links,
        "requirements_file": requirements_file,
        "dependencies": dependencies,
        "req_source_flags": req_flags,
        "env": dict(img.env),
        "run_steps": list(img.run),
    }
    return ImagePlan(config.name, resolved, builder, context, tuple(inputs))


def _torch_summary(resolved: ResolvedImage) -> str:
    if resolved.torch is None:
        return "none"
    variant = f"+{resolved.torch_variant}" if resolved.torch_variant else ""
    return f"{resolved.torch}{variant}"


def summarize(resolved: ResolvedImage) -> str:
    parts = []
    if resolved.ngc_tag:
        parts.append(f"NGC PyTorch {resolved.ngc_tag} (torch from the image)")
    elif resolved.torch:
        parts.append(f"torch {_torch_summary(resolved)}")
    parts.append(f"CUDA {resolved.cuda}" if resolved.cuda else "CPU only")
    parts.append(f"Python {resolved.python}")
    if resolved.os:
        parts.append(resolved.os)
    if resolved.min_driver:
        parts.append(f"driver >= {resolved.min_driver}")
    return " | ".join(parts)


def render_dockerfile(plan: ImagePlan) -> str:
    from jinja2 import TemplateError

    try:
        text = _environment().get_template("Dockerfile.j2").render(plan.context)
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
