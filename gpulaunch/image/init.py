"""The `init` use case: detect, ask (on a TTY), validate against the catalog, write atomically."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpulaunch.config import CONFIG_NAME, dump_config, validate_data
from gpulaunch.errors import ConfigError, FileExistsRefusal
from gpulaunch.image.compat import matrix
from gpulaunch.image.detect import detect, pick_torch, variant_to_cuda
from gpulaunch.image.render import image_request, render_dockerignore, summarize
from gpulaunch.image.resolver import resolve
from gpulaunch.yamlio import atomic_write

HEADER = (
    "# gpulaunch.yaml: build and launch settings for this project.\n"
    "# Schema: `gpulaunch schema`; valid versions: `gpulaunch versions`.\n"
)


@dataclass
class InitOptions:
    directory: Path
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    flavor: str | None = None
    name: str | None = None
    force: bool = False
    # Fills in the choices (the CLI prompts on a TTY); None: flags and detection only.
    ask: Callable[[InitOptions], None] | None = None


@dataclass
class InitResult:
    config_path: Path
    dockerignore_path: Path
    dockerignore_written: bool
    summary: str
    notes: list[str] = field(default_factory=list)


def known_torch_versions() -> list[str]:
    return sorted({row.torch for row in matrix() if row.torch})


def run_init(opts: InitOptions) -> InitResult:
    directory = opts.directory
    if not directory.is_dir():
        raise ConfigError(f"init: {directory} is not a folder")
    found = detect(directory)
    config_path = directory / CONFIG_NAME
    if found.existing_config and not opts.force:
        raise FileExistsRefusal(f"{config_path}: already exists; use --force to overwrite")

    notes = list(found.notes)
    if opts.torch is None and found.torch_spec:
        opts.torch = pick_torch(found.torch_spec, known_torch_versions())
    if opts.cuda is None and found.variant:
        opts.cuda = variant_to_cuda(found.variant)
        notes.append(f"PyTorch index found in {found.requirements}: {found.variant}")
    if opts.flavor is None and opts.cuda == "cpu":
        opts.flavor = "cpu"
    if opts.ask is not None:
        opts.ask(opts)

    image: dict[str, object] = {"flavor": opts.flavor or "runtime"}
    for key in ("python", "torch", "cuda"):
        value = getattr(opts, key)
        if value is not None:
            image[key] = value
    if found.requirements:
        image["requirements"] = found.requirements
    if found.torch_extras:
        image["torch_extras"] = sorted(set(found.torch_extras))
    if opts.name is not None:
        try:
            validate_data({"version": 1, "name": opts.name})
        except ConfigError as err:
            raise ConfigError(f"--name: {err.message.removeprefix('name: ')}") from None
    config = validate_data({"version": 1, "name": opts.name or found.name, "image": image})
    resolved = resolve(image_request(config))
    # Pin what was resolved so a newer catalog never changes this project's image silently.
    pinned = config.image.model_copy(
        update={
            "python": resolved.python,
            "torch": opts.torch if resolved.ngc_tag else (resolved.torch or "none"),
            "cuda": ".".join(resolved.cuda.split(".")[:2]) if resolved.cuda else "cpu",
        }
    )
    config = config.model_copy(update={"image": pinned})
    validate_data(config.model_dump(mode="json"))  # the file we write must load back

    atomic_write(config_path, HEADER + dump_config(config), force=opts.force)
    ignore_path = directory / ".dockerignore"
    wrote_ignore = False
    if not ignore_path.exists():
        atomic_write(ignore_path, render_dockerignore())
        wrote_ignore = True
    notes += [f"warning: {w}" for w in resolved.warnings]
    return InitResult(config_path, ignore_path, wrote_ignore, summarize(resolved), notes)
