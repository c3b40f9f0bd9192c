"""What an image request asks for and what it resolves to (`resolver.py` does the resolving),
and the rows `gpulaunch versions` shows."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from gpulaunch.catalog.data import DASH
from gpulaunch.errors import ConfigError
from gpulaunch.masking import has_userinfo, is_secret_name

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig


@dataclass(frozen=True)
class ImageRequest:
    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    os: str | None = None
    flavor: str = "runtime"
    base: str | None = None
    python_source: str | None = None  # distro | deadsnakes | standalone | image; None: auto


@dataclass(frozen=True)
class ResolvedImage:
    flavor: str
    base_image: str
    os: str | None
    python: str
    python_source: str
    torch: str | None = None
    torchvision: str | None = None
    torchaudio: str | None = None
    torch_variant: str | None = None
    torch_index_url: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    min_driver: str | None = None
    recommended_driver: str | None = None
    cuda_archs: tuple[str, ...] = ()
    ngc_tag: str | None = None
    warnings: tuple[str, ...] = ()
    ngc_torch: str | None = None  # NVIDIA's torch build inside an NGC image (not reinstalled)

    def labels(self) -> dict[str, str]:
        """OCI + gpulaunch labels recording what the image was resolved to."""
        values: dict[str, str | None] = {
            "org.opencontainers.image.base.name": self.base_image,
            "io.gpulaunch.flavor": self.flavor,
            "io.gpulaunch.os": self.os,
            "io.gpulaunch.python": self.python,
            "io.gpulaunch.python-source": self.python_source,
            "io.gpulaunch.torch": self.torch or self.ngc_torch,
            "io.gpulaunch.torchvision": self.torchvision,
            "io.gpulaunch.torchaudio": self.torchaudio,
            "io.gpulaunch.torch-variant": self.torch_variant,
            "io.gpulaunch.cuda": self.cuda,
            "io.gpulaunch.cudnn": self.cudnn,
            "io.gpulaunch.min-driver": self.min_driver,
            "io.gpulaunch.ngc-tag": self.ngc_tag,
        }
        return {key: value for key, value in values.items() if value}


def image_request(config: ProjectConfig) -> ImageRequest:
    """The config's image section as the resolver takes it (the fields share their names)."""
    return ImageRequest(**{f.name: getattr(config.image, f.name) for f in fields(ImageRequest)})


def torch_summary(resolved: ResolvedImage) -> str:
    if resolved.torch is None:
        return "none"
    variant = f"+{resolved.torch_variant}" if resolved.torch_variant else ""
    return f"{resolved.torch}{variant}"


def summarize(resolved: ResolvedImage) -> str:
    parts = []
    if resolved.ngc_tag:
        parts.append(f"NGC PyTorch {resolved.ngc_tag} (torch from the image)")
    elif resolved.torch:
        parts.append(f"torch {torch_summary(resolved)}")
    parts.append(f"CUDA {resolved.cuda}" if resolved.cuda else "CPU only")
    parts.append(f"Python {resolved.python}")
    if resolved.os:
        parts.append(resolved.os)
    if resolved.min_driver:
        parts.append(f"driver >= {resolved.min_driver}")
    return " | ".join(parts)


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


def check_certificate(path: Path, rel: str) -> None:
    """image.ca_cert is copied into the image: PEM certificates only, never a private key."""
    with path.open("rb") as fh:
        kinds = {m.decode("ascii") for m in _PEM_BLOCK.findall(fh.read(1 << 20))}
    if any("PRIVATE KEY" in kind for kind in kinds):
        raise ConfigError(f"image.ca_cert: {rel!r} holds a private key; give the CA certificate")
    if kinds != {"CERTIFICATE"}:
        raise ConfigError(f"image.ca_cert: {rel!r} is not a PEM certificate (BEGIN CERTIFICATE)")


def check_image_env(env: dict[str, str]) -> None:
    """image.env is ENV in every layer (`docker history`): a secret-looking name (*TOKEN*,
    *KEY*, *SECRET*, *PASSWORD* ...) or a URL with credentials is refused."""
    for name, value in env.items():
        if is_secret_name(name) or "KEY" in name.upper() or has_userinfo(value):
            raise ConfigError(
                f"image.env.{name}: looks like a secret and would be baked into the image; "
                "set it at run time with launch.env or --env"
            )


@dataclass(frozen=True)
class MatrixRow:
    """One torch patch x wheel variant, as `gpulaunch versions` shows it."""

    torch: str
    variant: str
    cuda: str | None
    image: str
    python_min: str
    python_max: str
    torchvision: str | None
    torchaudio: str | None
    min_driver: str | None
    archs: tuple[str, ...]
    status: str
    confidence: str
    # the image's driver rule (gpulaunch.catalog.driver_rule): its text, and the older driver
    # branches it admits for some GPU brands (forward compatibility)
    driver_requirement: str | None = None
    driver_branches: tuple[str, ...] = ()
    origin: str | None = None  # the overlay file this row's facts come from (None: packaged)
    driver_verified: bool = True  # False: the image's rule is modelled, not read from NVIDIA
    # False: a fact of this row (release, patch, build, image) is unverified (confidence low):
    # never a default; `versions` marks it
    verified: bool = True

    @property
    def python_range(self) -> str:
        return f"{self.python_min}{DASH}{self.python_max}"
