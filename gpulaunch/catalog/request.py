"""What an image request asks for and what it resolves to, and how each version is parsed
and selected from the catalog (torch release, wheel variant, Python, cuDNN).

The resolver (`resolver.py`) composes these; refusals name both sides and the nearest
valid choice.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gpulaunch.catalog import driver_rule
from gpulaunch.catalog.data import (
    CU_VARIANT_RE,
    DASH,
    PYTHON_RE,
    UNVERIFIED,
    Catalog,
    Patch,
    T,
    TorchRelease,
    Variant,
    major_minor,
    parse_xyz,
    version_key,
)
from gpulaunch.catalog.python_install import Choice, choose_source
from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.masking import has_userinfo, is_secret_name

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig

FLAVORS = ("runtime", "devel", "ngc", "cpu")


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
    torch: str | None
    torchvision: str | None
    torchaudio: str | None
    torch_variant: str | None
    torch_index_url: str | None
    cuda: str | None
    cudnn: str | None
    min_driver: str | None
    recommended_driver: str | None
    cuda_archs: tuple[str, ...]
    ngc_tag: str | None
    warnings: tuple[str, ...]
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
    img = config.image
    return ImageRequest(
        python=img.python,
        torch=img.torch,
        cuda=img.cuda,
        cudnn=img.cudnn,
        os=img.os,
        flavor=img.flavor,
        base=img.base,
        python_source=img.python_source,
    )


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


class CudaReq(NamedTuple):
    xy: str
    full: str | None

    @property
    def text(self) -> str:
        return self.full or self.xy


class TorchSel(NamedTuple):
    release: TorchRelease
    patch: Patch


def parse_cuda(cat: Catalog, value: str | None) -> CudaReq | str | None:
    """None, "cpu", or a CUDA request whose x.y is known to the catalog."""
    if value is None:
        return None
    text = value.strip().lower()
    if text == "cpu":
        return "cpu"
    if m := CU_VARIANT_RE.match(text):
        text = f"{int(m.group(1))}.{m.group(2)}"
    parsed = parse_xyz(text)
    if parsed is None:
        raise CatalogError(
            f'image.cuda: expected a CUDA version like "12.4", "12.4.1", "cu124" or "cpu"; '
            f"got {value!r}"
        )
    xy, full = parsed
    known = cat.cuda_xys()
    if xy not in known:
        raise CatalogError(
            f"image.cuda: unknown CUDA {xy}; nearest known: {', '.join(_nearest(xy, list(known)))}"
        )
    return CudaReq(xy, full)


def parse_cudnn(value: str | None, flavor: str) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if text not in ("8", "9"):
        raise CatalogError(f'image.cudnn: expected "8" or "9"; got {value!r}')
    if flavor == "cpu":
        raise CatalogError("image.cudnn: flavor cpu has no cuDNN; drop image.cudnn")
    return text


def parse_python(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if not PYTHON_RE.match(text):
        raise CatalogError(f'image.python: expected major.minor like "3.11"; got {value!r}')
    return text


def newest_of(items: Iterable[T], key: Callable[[T], str]) -> T:
    """Newest item, preferring rows that are verified (see data.UNVERIFIED)."""
    pool = list(items)
    trusted = [i for i in pool if getattr(i, "confidence", "high") != UNVERIFIED]
    return max(trusted or pool, key=lambda i: version_key(key(i)))


def select_torch(cat: Catalog, value: str | None) -> TorchSel | None:
    """Resolve "2.4.1" / "2.4" / None (newest) / "none" to a catalog row."""
    if value is not None and value.strip().lower() == "none":
        return None
    if value is None:
        # the newest release with a build whose image's driver rule is NVIDIA's own: a
        # release whose builds all need unverified images is never the default
        ready = [
            r
            for r in cat.releases
            if any(v.confidence != UNVERIFIED and verified_image(cat, v) for v in r.variants)
        ]
        release = newest_of(ready or cat.releases, lambda r: r.minor)
        return TorchSel(release, newest_of(release.patches, lambda p: p.torch))
    text = value.strip()
    parsed = parse_xyz(text)
    if parsed is None:
        raise CatalogError(
            f'image.torch: expected a version like "2.4.1", "2.4" or "none"; got {value!r}'
        )
    xy, full = parsed
    for release in cat.releases:
        if version_key(release.minor) != version_key(xy):
            continue
        if full is None:
            return TorchSel(release, newest_of(release.patches, lambda p: p.torch))
        for patch in release.patches:
            if version_key(patch.torch) == version_key(text):
                return TorchSel(release, patch)
    known = [p.torch for _, p in cat.patches()]
    nearest = ", ".join(_nearest(text, known))
    raise CatalogError(f"image.torch: unknown torch version {text}; nearest known: {nearest}")


def choose_variant(sel: TorchSel, cuda: CudaReq | None, cat: Catalog) -> Variant:
    """The wheel variant: the requested CUDA x.y, else the broadest driver reach (see
    broad_reach_variant). A CUDA the release lists no build for is
    refused only when its build list is complete; otherwise the absence is unknown and an
    unverified build is offered (`_unlisted_build`), never as a default."""
    rel = sel.release
    if cuda is None:
        return broad_reach_variant(cat, rel)
    for v in rel.variants:
        if v.cuda == cuda.xy:
            return v
    if rel.builds == "partial":
        return _unlisted_build(sel, cuda.xy, cat)
    raise CatalogError(
        f"image.cuda: torch {sel.patch.torch} has no CUDA {cuda.xy} build; "
        f"available: {', '.join(v.variant for v in rel.variants)}"
    )


def _unlisted_build(sel: TorchSel, xy: str, cat: Catalog) -> Variant:
    """A build the catalog neither lists nor knows to be absent (the release's build list is
    partial): offered unverified, with the arch list of the newest earlier build of that CUDA."""
    earlier = [
        v
        for rel in cat.releases
        if version_key(rel.minor) < version_key(sel.release.minor)
        for v in rel.variants
        if v.cuda == xy
    ]
    return Variant(
        variant="cu" + xy.replace(".", ""),
        cuda=xy,
        status="stable",
        cudnn="",
        archs=earlier[-1].archs if earlier else (),
        confidence=UNVERIFIED,
        note=f"not in the catalog's partial list of torch {sel.release.minor} builds",
    )


def verified_image(cat: Catalog, variant: Variant) -> bool:
    """A build whose CUDA x.y has a trusted nvidia/cuda image with NVIDIA's own driver rule."""
    return any(
        img.xy == variant.cuda
        and img.confidence != UNVERIFIED
        and driver_rule.verified_rule(img.cuda)
        for img in cat.cuda_images
    )


def broad_reach_variant(cat: Catalog, rel: TorchRelease) -> Variant:
    """The default build when no CUDA is asked for: among upstream's stable builds, the one
    whose image the most drivers can start (lowest cuda>= driver); ties go to PyPI's default,
    then the newer CUDA. Without stable builds: PyPI's default, else the newest. Low-confidence
    builds (an overlay's unconfirmed rows) and builds whose images have only an unverified
    driver rule (`verified_image`) are chosen only when nothing else is left."""
    trusted = [v for v in rel.variants if v.confidence != UNVERIFIED] or list(rel.variants)
    trusted = [v for v in trusted if verified_image(cat, v)] or trusted
    stable = [v for v in trusted if v.status == "stable"] or trusted

    def key(v: Variant) -> tuple[tuple[int, ...], bool, tuple[int, ...]]:
        need = driver_rule.cuda_image_requirement(v.cuda).needed() or "0"
        return (
            version_key(need),
            v.cuda != rel.pypi_default,
            tuple(-n for n in version_key(v.cuda)),
        )

    return min(stable, key=key)


def check_python(sel: TorchSel | None, python: str, warnings: list[str]) -> None:
    if sel is None or sel.release.python_ok(python):
        return
    if python in sel.release.python_experimental:
        warnings.append(f"Python {python} is experimental for torch {sel.patch.torch}")
        return
    raise CatalogError(
        f"image.python: torch {sel.patch.torch} supports Python {sel.release.python_range()}; "
        f"got {python}"
    )


def default_python(
    cat: Catalog, sel: TorchSel | None, preferred: str, allowed: Sequence[str] = ()
) -> str:
    """`preferred` when torch allows it, else the newest Python torch supports up to the cap."""
    if sel is None or sel.release.python_ok(preferred):
        return preferred
    rel = sel.release
    major, lo = version_key(rel.python_min)
    hi = min(version_key(rel.python_max)[1], version_key(cat.python_cap)[1])
    options = [f"{major}.{minor}" for minor in range(lo, max(lo, hi) + 1)]
    if allowed:
        options = [o for o in options if o in allowed] or options
    return options[-1]


def torch_warnings(sel: TorchSel, variant: Variant | None, warnings: list[str]) -> None:
    rel, patch = sel.release, sel.patch
    if variant is not None and variant.confidence == UNVERIFIED:
        why = f" ({variant.note})" if variant.note else ""
        warnings.append(
            f"torch {patch.torch} {variant.variant} build is unverified{why}: the torch install "
            "fails at build time if PyTorch does not publish it"
        )
    elif variant is not None and variant.status != "stable" and variant.cuda != rel.pypi_default:
        warnings.append(
            f"torch {patch.torch} {variant.variant} is marked {variant.status} upstream"
        )
    for what, conf in (
        (f"torch {rel.minor} release", rel.confidence),
        (f"torch {patch.torch} companion versions", patch.confidence),
    ):
        if conf == UNVERIFIED:
            warnings.append(f"catalog data for {what} is unverified; check it before relying on it")


def toolkit_driver(cat: Catalog, cuda: str | None, warnings: list[str]) -> str | None:
    """Driver bundled with the toolkit: exact patch, or the newest known patch of an x.y."""
    if cuda is None:
        return None
    row = cat.toolkit_drivers.get(cuda)
    if row is None and cuda.count(".") == 1:
        rows = [d for d in cat.toolkit_drivers.values() if major_minor(d.cuda) == cuda]
        row = newest_of(rows, lambda d: d.cuda) if rows else None
    if row is None:
        return None
    if row.confidence == UNVERIFIED:
        warnings.append(f"driver {row.driver} for CUDA {row.cuda} is an unverified catalog fact")
    return row.driver


def min_driver_for(cuda: str, base_image: str | None = None) -> str:
    """Lowest Linux driver that starts a container of this image for every GPU brand: the
    image's own rule (nvidia/cuda NVIDIA_REQUIRE_CUDA, an NGC release's floor), else a torch
    wheel's minor-version floor (gpulaunch.catalog.driver_rule). Without `base_image`: the
    nvidia/cuda image of that CUDA version."""
    if parse_xyz(cuda.strip()) is None:
        raise CatalogError(f"image.cuda: no driver data for CUDA {cuda!r}")
    req = (
        driver_rule.cuda_image_requirement(cuda.strip())
        if base_image is None
        else driver_rule.requirement_for(base_image, cuda.strip())
    )
    needed = req.needed() if req else None
    if needed is None:
        raise CatalogError(f"image.cuda: no driver data for CUDA {cuda!r}")
    return needed


_BASE_OS_RE = re.compile(
    r"(?:^|/)(?:nvidia/cuda:\S*-(ubuntu\d\d\.\d\d)|ubuntu:(\d\d\.\d\d))(?:@\S+)?$"
)


def base_os(cat: Catalog, base: str, asked: str | None) -> str | None:
    """The catalog OS of an explicit base: image.os, else read from an nvidia/cuda or ubuntu
    tag (nvidia/cuda:12.4.1-runtime-ubuntu22.04 -> ubuntu22.04); None when unknown."""
    if asked is not None:
        if asked not in cat.os:
            raise CatalogError(f"image.os: unknown OS {asked!r}; valid: {', '.join(cat.os)}")
        return asked
    m = _BASE_OS_RE.search(base)
    name = (m.group(1) or f"ubuntu{m.group(2)}") if m else None
    return name if name in cat.os else None


def python_source(
    cat: Catalog,
    sel: TorchSel | None,
    os_name: str,
    python: str,
    requested: str | None,
    oses: Sequence[str] = (),
) -> Choice:
    """Where the venv's Python comes from on a base of `os_name` (gpulaunch.catalog.
    python_install, on today's date), or a CatalogError naming what can install instead."""
    return choose_source(
        os_name=os_name,
        python=python,
        distro=cat.os[os_name].python,
        glibc=cat.os[os_name].glibc,
        requested=requested,
        on=date.today(),
        python_ok=lambda py: sel is None or sel.release.python_ok(py),
        other_oses={name: cat.os[name].python for name in oses},
    )


def own_python_only(requested: str | None, what: str) -> None:
    """Bases that bring their Python (python:*-slim, NGC) take no other source."""
    if requested not in (None, "image"):
        raise CatalogError(f"image.python_source: {what} bring their own Python; got {requested}")


def _nearest(wanted: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to n known versions closest to `wanted` in version order, nearest first."""
    ordered = sorted(set(known), key=version_key)
    keys = [version_key(v) for v in ordered]
    pos = bisect.bisect_left(keys, version_key(wanted))
    lo, hi = pos - 1, pos
    out: list[str] = []
    while len(out) < n and (lo >= 0 or hi < len(ordered)):
        if lo >= 0:
            out.append(ordered[lo])
            lo -= 1
        if len(out) < n and hi < len(ordered):
            out.append(ordered[hi])
            hi += 1
    return out
