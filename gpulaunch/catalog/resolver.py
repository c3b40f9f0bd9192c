"""The resolver: an `ImageRequest` -> one `ResolvedImage` (base image tag, torch wheel variant,
Python source), or a `CatalogError` naming the conflict and the nearest valid choice; and how
each version is parsed and selected from the catalog (torch release, wheel variant, Python,
cuDNN).

The image's CUDA x.y always equals the wheel's CUDA x.y. Unverified catalog rows (confidence
low: inferred or unknown) are never chosen as defaults; asked for, they are used with a warning,
and a refusal names only an absence the catalog has evidence for.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from gpulaunch.catalog import driver_rule
from gpulaunch.catalog.data import (
    CU_VARIANT_RE,
    DASH,
    PYTHON_RE,
    UNVERIFIED,
    Catalog,
    CudaImage,
    NgcRelease,
    Patch,
    T,
    TorchRelease,
    Variant,
    load_catalog,
    major_minor,
    parse_xyz,
    version_key,
)
from gpulaunch.catalog.python_install import choose_source
from gpulaunch.catalog.request import ImageRequest, ResolvedImage
from gpulaunch.errors import CatalogError

FLAVORS = ("runtime", "devel", "ngc", "cpu")


def resolve(req: ImageRequest) -> ResolvedImage:
    """Turn a partial request into one consistent image plan, or refuse with a reason."""
    return resolve_in(load_catalog(), req)


def resolve_in(cat: Catalog, req: ImageRequest) -> ResolvedImage:
    """`resolve` against this catalog (the matrix resolves each of its rows against the one
    catalog it read, not the overlay folder listed again per row)."""
    flavor = req.flavor
    if flavor not in FLAVORS:
        raise CatalogError(f"image.flavor: unknown flavor {flavor!r}; valid: {', '.join(FLAVORS)}")
    cuda = parse_cuda(cat, req.cuda)
    if cuda == "cpu":
        if flavor in ("devel", "ngc"):
            raise CatalogError(f'image.cuda: "cpu" needs flavor cpu; got flavor {flavor}')
        flavor = "cpu"
    elif cuda is not None and flavor == "cpu":
        raise CatalogError(f"image.cuda: flavor cpu has no CUDA; got {req.cuda}")
    cuda_req = cuda if isinstance(cuda, CudaReq) else None
    cudnn = parse_cudnn(req.cudnn, flavor)
    python = parse_python(req.python)
    if flavor == "ngc":
        if req.base is not None:
            raise CatalogError("image.base: an explicit base image cannot be combined with ngc")
        own_python_only(req.python_source, "NGC images")
        return _resolve_ngc(cat, req.torch, cuda_req, cudnn, python, req.os)
    sel = select_torch(cat, req.torch)
    if req.base is not None:
        return _resolve_custom(cat, req, flavor, sel, cuda_req, cudnn, python)
    if flavor == "cpu":
        own_python_only(req.python_source, "flavor cpu's python:*-slim images")
        return _resolve_cpu(cat, sel, python, req.os)
    return _resolve_cuda(cat, flavor, sel, cuda_req, cudnn, python, req.os, req.python_source)


def _pins(cat: Catalog, sel: TorchSel | None, variant: str | None) -> dict[str, str | None]:
    """The ResolvedImage fields the torch selection fills (none without torch)."""
    if sel is None:
        return {}
    return {
        "torch": sel.patch.torch,
        "torchvision": sel.patch.torchvision,
        "torchaudio": sel.patch.torchaudio,
        "torch_variant": variant,
        "torch_index_url": cat.index_url.format(variant=variant) if variant else None,
    }


def _resolve_cpu(
    cat: Catalog, sel: TorchSel | None, python: str | None, os_name: str | None
) -> ResolvedImage:
    if os_name is not None and os_name != cat.cpu.os:
        raise CatalogError(
            f"image.os: flavor cpu uses {cat.cpu.template.format(python='X.Y')} images "
            f"(os {cat.cpu.os}); got {os_name}"
        )
    warnings: list[str] = []
    py = pick_python(cat, sel, python, cat.cpu_python, warnings, cat.cpu.pythons)
    if py not in cat.cpu.pythons:
        raise CatalogError(
            f"image.python: no {cat.cpu.template.format(python=py)} image; "
            f"available: {cat.cpu.pythons[0]}{DASH}{cat.cpu.pythons[-1]}"
        )
    if sel is not None:
        torch_warnings(sel, None, warnings)
    return ResolvedImage(
        flavor="cpu",
        base_image=cat.cpu.template.format(python=py),
        os=cat.cpu.os,
        python=py,
        python_source="image",
        **_pins(cat, sel, "cpu"),
        cuda_archs=(),
        warnings=tuple(warnings),
    )


def _resolve_custom(
    cat: Catalog,
    req: ImageRequest,
    flavor: str,
    sel: TorchSel | None,
    cuda: CudaReq | None,
    cudnn: str | None,
    python: str | None,
) -> ResolvedImage:
    warnings: list[str] = []
    variant: Variant | None = None
    if flavor == "cpu":
        variant_name: str | None = "cpu"
        cuda_text = None
    else:
        if sel is not None:
            variant = choose_variant(sel, cuda, cat)
        variant_name = variant.variant if variant else None
        cuda_text = cuda.text if cuda else (variant.cuda if variant else None)
    base = req.base or ""
    os_name = base_os(cat, base, req.os)
    if os_name is None and req.python_source not in (None, "image"):
        raise CatalogError(
            f"image.os: gpulaunch cannot tell {base}'s OS; set image.os so it can install "
            f"Python ({req.python_source}) on it"
        )
    preferred = cat.os[os_name].python if os_name else cat.cpu_python
    py = pick_python(cat, sel, python, preferred, warnings)
    source = "image"
    if os_name is not None and req.python_source != "image":  # provisioned like a catalog base
        release = sel.release if sel else None
        source = choose_source(cat, os_name, py, req.python_source, release, warnings)
    elif python is None:
        warnings.append(f"image.base: assuming {base} has Python {py}; set image.python if not")
    if sel is not None:
        torch_warnings(sel, variant, warnings)
    return ResolvedImage(
        flavor=flavor,
        base_image=base,
        os=os_name,
        python=py,
        python_source=source,
        **_pins(cat, sel, variant_name),
        cuda=cuda_text,
        cudnn=cudnn,
        min_driver=min_driver_for(cuda_text, base) if cuda_text else None,
        recommended_driver=toolkit_driver(cat, cuda_text, warnings),
        cuda_archs=variant.archs if variant else (),
        warnings=tuple(warnings),
    )


def _check_glibc(cat: Catalog, sel: TorchSel | None, os_name: str) -> None:
    if sel is None:
        return
    have, need = cat.os[os_name].glibc, sel.release.glibc
    if version_key(have) < version_key(need):
        raise CatalogError(
            f"image.os: torch {sel.patch.torch} wheels need glibc >= {need} "
            f"(manylinux_{need.replace('.', '_')}); {os_name} has {have}"
        )


def _image_candidates(
    cat: Catalog, xy: str, full: str | None, cudnn: str | None
) -> list[CudaImage]:
    """nvidia/cuda versions of this CUDA x.y (or exact patch) that have the wanted flavor."""
    entries = [img for img in cat.cuda_images if img.xy == xy]
    if full is not None:
        exact = [img for img in entries if img.cuda == full]
        if not exact:
            patches = sorted((img.cuda for img in entries), key=version_key, reverse=True)
            raise CatalogError(
                f"image.cuda: no {cat.cuda_image} image for CUDA {full}; "
                f"{xy} images: {', '.join(patches) or 'none'}"
            )
        entries = exact
    if not entries:
        raise CatalogError(f"image.cuda: no {cat.cuda_image} image for CUDA {xy}")
    if cudnn is None:
        return entries
    with_cudnn = [img for img in entries if img.cudnn_major]
    what = full or xy
    if not with_cudnn:
        alternatives = [
            img.cuda for img in cat.cuda_images if img.xy == xy and img.cudnn_major == cudnn
        ]
        hint = f"; use {', '.join(alternatives)}" if alternatives else ""
        raise CatalogError(f"image.cudnn: NVIDIA publishes no cuDNN flavor for CUDA {what}{hint}")
    matching = [img for img in with_cudnn if img.cudnn_major == cudnn]
    if not matching:
        shipped = sorted({img.cudnn_major or "" for img in with_cudnn})
        other = sorted(
            {img.xy for img in cat.cuda_images if img.cudnn_major == cudnn},
            key=version_key,
        )
        span = f"{other[0]}{DASH}{other[-1]}" if other else "none"
        raise CatalogError(
            f"image.cudnn: CUDA {what} images ship cuDNN {'/'.join(shipped)}, not cuDNN {cudnn}; "
            f"cuDNN {cudnn} images exist for CUDA {span}"
        )
    return matching


def _choose_image(
    cat: Catalog,
    xy: str,
    full: str | None,
    kind: str,
    cudnn: str | None,
    os_name: str | None,
    sel: TorchSel | None,
) -> tuple[CudaImage, str]:
    entries = _image_candidates(cat, xy, full, cudnn)
    with_cudnn = cudnn is not None
    flavor_text = entries[0].flavor_tag(kind, with_cudnn)
    if os_name is not None:
        ubuntus = [name for name in cat.os if name.startswith("ubuntu")]
        if os_name not in ubuntus:
            raise CatalogError(f"image.os: unknown OS {os_name!r}; valid: {', '.join(ubuntus)}")
        _check_glibc(cat, sel, os_name)
        on_os = [img for img in entries if os_name in img.oses(with_cudnn)]
        if not on_os:
            have = sorted({o for img in entries for o in img.oses(with_cudnn)}, key=ubuntus.index)
            raise CatalogError(
                f"image.os: no {cat.cuda_image} {full or xy} {flavor_text} image for {os_name}; "
                f"available: {', '.join(have) or 'none'}"
            )
    else:
        for name in cat.ubuntu_preference:
            if sel is not None and version_key(cat.os[name].glibc) < version_key(sel.release.glibc):
                continue
            on_os = [img for img in entries if name in img.oses(with_cudnn)]
            if on_os:
                os_name = name
                break
        else:
            who = f" that torch {sel.patch.torch} supports" if sel else ""
            raise CatalogError(
                f"image.os: no {cat.cuda_image} {full or xy} {flavor_text} image on an Ubuntu{who}"
            )
    pool = _documented(on_os) if full is None else on_os
    return newest_of(pool, lambda img: img.cuda), os_name


def _documented(rows: list[CudaImage]) -> list[CudaImage]:
    """The rows NVIDIA documents (high confidence) whose driver rule is read from NVIDIA's
    Dockerfiles; else the rows with such a rule; else all of them (a warning says so)."""
    verified = [img for img in rows if driver_rule.verified_rule(img.cuda)]
    return [img for img in verified if img.confidence == "high"] or verified or rows


def _resolve_cuda(
    cat: Catalog,
    kind: str,
    sel: TorchSel | None,
    cuda: CudaReq | None,
    cudnn: str | None,
    python: str | None,
    os_name: str | None,
    requested_source: str | None = None,
) -> ResolvedImage:
    warnings: list[str] = []
    variant: Variant | None = None
    if sel is not None:
        variant, image, os_name = _variant_with_image(
            cat, kind, sel, cuda, cudnn, os_name, warnings
        )
    elif cuda is not None:
        image, os_name = _choose_image(cat, cuda.xy, cuda.full, kind, cudnn, os_name, None)
    else:
        image, os_name = _newest_image(cat, kind, cudnn, os_name)
    with_cudnn = cudnn is not None
    tag = f"{image.cuda}-{image.flavor_tag(kind, with_cudnn)}-{os_name}"
    base_image = f"{cat.cuda_image}:{tag}"

    if requested_source == "image":
        raise CatalogError("image.python_source: nvidia/cuda images bring no Python; got image")
    py = pick_python(cat, sel, python, cat.os[os_name].python, warnings)
    oses = image.oses(with_cudnn)
    release = sel.release if sel else None
    source = choose_source(cat, os_name, py, requested_source, release, warnings, oses)

    if image.confidence == UNVERIFIED:
        warnings.append(f"{base_image} is unverified (no source showed the tag); check it exists")
    if cat.os[os_name].confidence == UNVERIFIED:
        info = cat.os[os_name]
        warnings.append(
            f"{os_name}'s Python {info.python} and glibc {info.glibc} are unverified catalog facts"
        )
    if not driver_rule.verified_rule(image.cuda):
        rule = driver_rule.cuda_image_requirement(image.cuda)
        warnings.append(f"{base_image}: driver rule not read from NVIDIA ({rule.source})")
    same = [i for i in cat.cuda_images if i.xy == image.xy]
    latest = newest_of(_documented(same) if image.confidence == "high" else same, lambda i: i.cuda)
    if version_key(image.cuda) < version_key(latest.cuda):
        warnings.append(
            f"{base_image} is not the newest CUDA {image.xy} patch ({latest.cuda}); "
            "NVIDIA deletes superseded tags after EOL, so it may disappear (pin a digest)"
        )
    if sel is not None:
        torch_warnings(sel, variant, warnings)
        if with_cudnn:
            warnings.append(
                f"torch {sel.patch.torch} wheels bundle their own cuDNN; "
                "the cuDNN image ships it a second time"
            )
    return ResolvedImage(
        flavor=kind,
        base_image=base_image,
        os=os_name,
        python=py,
        python_source=source,
        **_pins(cat, sel, variant.variant if variant else None),
        cuda=image.cuda,
        cudnn=cudnn,
        min_driver=min_driver_for(image.cuda, base_image),
        recommended_driver=toolkit_driver(cat, image.cuda, warnings),
        cuda_archs=variant.archs if variant else (),
        warnings=tuple(warnings),
    )


def _variant_with_image(
    cat: Catalog,
    kind: str,
    sel: TorchSel,
    cuda: CudaReq | None,
    cudnn: str | None,
    os_name: str | None,
    warnings: list[str],
) -> tuple[Variant, CudaImage, str]:
    """Variant and image together: without an explicit CUDA, fall back to another stable
    variant when the default one has no image for the requested OS / cuDNN."""
    default = choose_variant(sel, cuda, cat)
    try:
        image, chosen_os = _choose_image(
            cat, default.cuda, cuda.full if cuda else None, kind, cudnn, os_name, sel
        )
        return default, image, chosen_os
    except CatalogError:
        if cuda is not None or (os_name is None and cudnn is None):
            raise
        others = sorted(
            (v for v in sel.release.variants if v is not default),
            key=lambda v: (v.status == "stable", version_key(v.cuda)),
            reverse=True,
        )
        for other in others:
            try:
                image, chosen_os = _choose_image(cat, other.cuda, None, kind, cudnn, os_name, sel)
            except CatalogError:
                continue
            warnings.append(
                f"torch {sel.patch.torch} default {default.variant} has no matching image; "
                f"using {other.variant}"
            )
            return other, image, chosen_os
        raise


def _newest_image(
    cat: Catalog, kind: str, cudnn: str | None, os_name: str | None
) -> tuple[CudaImage, str]:
    """No torch and no CUDA asked for: the newest CUDA x.y with a matching image (an x.y whose
    images are all unverified is never the default)."""
    first_error: CatalogError | None = None
    known = {img.xy for img in cat.cuda_images if img.confidence != UNVERIFIED}
    for xy in sorted(known or {img.xy for img in cat.cuda_images}, key=version_key, reverse=True):
        try:
            return _choose_image(cat, xy, None, kind, cudnn, os_name, None)
        except CatalogError as err:
            first_error = first_error or err
    assert first_error is not None
    raise first_error


def _resolve_ngc(
    cat: Catalog,
    torch: str | None,
    cuda: CudaReq | None,
    cudnn: str | None,
    python: str | None,
    os_name: str | None,
) -> ResolvedImage:
    warnings: list[str] = []
    rows = list(cat.ngc)
    if torch is not None:
        parsed = parse_xyz(torch.strip())  # "none" is no version either: NGC brings torch
        if parsed is None:
            raise CatalogError(
                f"image.torch: flavor ngc ships NVIDIA's torch; give a version like 2.4 "
                f"or leave it unset; got {torch!r}"
            )
        torch_xy = parsed[0]
        rows = [r for r in rows if r.torch_xy == torch_xy]
        if not rows:
            minors = sorted({r.torch_xy for r in cat.ngc}, key=version_key)
            raise CatalogError(
                f"image.torch: no NGC PyTorch container ships torch {torch_xy}; "
                f"available: {', '.join(minors)}"
            )
    if cuda is not None:
        with_cuda = [
            r for r in rows if major_minor(r.cuda) == cuda.xy and (cuda.full in (None, r.cuda))
        ]
        if not with_cuda:
            tags = ", ".join(f"{r.tag} (CUDA {r.cuda})" for r in rows[-4:])
            raise CatalogError(
                f"image.cuda: no NGC PyTorch container with CUDA {cuda.text}; candidates: {tags}"
            )
        rows = with_cuda
    if os_name is not None:
        on_os = [r for r in rows if r.os == os_name]
        if not on_os:
            oses = sorted({r.os for r in rows})
            raise CatalogError(
                f"image.os: no matching NGC PyTorch container on {os_name}; "
                f"available: {', '.join(oses)}"
            )
        rows = on_os
    if python is not None:
        best = newest_of(rows, _ngc_key)
        with_py = [r for r in rows if r.python == python]
        if not with_py:
            raise CatalogError(
                f"image.python: NGC {best.tag} ships Python {best.python}; got {python} "
                "(NGC images bring their own Python)"
            )
        rows = with_py
    if cudnn is not None:
        with_cudnn = [r for r in rows if r.cudnn is None or r.cudnn.split(".")[0] == cudnn]
        if not with_cudnn:
            best = newest_of(rows, _ngc_key)
            raise CatalogError(
                f"image.cudnn: NGC {best.tag} ships cuDNN {best.cudnn}; got cuDNN {cudnn}"
            )
        rows = with_cudnn
    row = newest_of(rows, _ngc_key)
    if row.confidence == UNVERIFIED:
        warnings.append(
            f"NGC {row.tag} versions (torch {row.torch}, CUDA {row.cuda}) are unverified "
            "catalog facts; check the NGC release notes"
        )
    if torch is not None and torch.count(".") == 2:
        warnings.append(
            f"NGC {row.tag} ships NVIDIA's pre-release build {row.torch}, not torch {torch}"
        )
    return ResolvedImage(
        flavor="ngc",
        base_image=cat.ngc_image.format(tag=row.tag),
        os=row.os,
        python=row.python,
        python_source="image",
        cuda=row.cuda,
        cudnn=cudnn,
        min_driver=min_driver_for(row.cuda, cat.ngc_image.format(tag=row.tag)),
        recommended_driver=toolkit_driver(cat, row.cuda, warnings),
        ngc_tag=row.tag,
        warnings=tuple(warnings),
        ngc_torch=row.torch,
    )


def _ngc_key(row: NgcRelease) -> str:
    return row.tag


# ---------------------------------------------------------------------------
# Parsing and selecting each version
# ---------------------------------------------------------------------------


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
    """The wheel variant: the requested CUDA x.y, else `broad_reach_variant`. A CUDA the
    release lists no build for is refused only when its build list is complete; otherwise the
    absence is unknown and an unverified build is offered (`_unlisted_build`)."""
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


def pick_python(
    cat: Catalog,
    sel: TorchSel | None,
    asked: str | None,
    preferred: str,
    warnings: list[str],
    allowed: Sequence[str] = (),
) -> str:
    """The venv's Python: `asked`, refused outside torch's range (an experimental one warns);
    else `preferred` when torch allows it, else the newest Python torch supports up to the cap
    (one of `allowed`, where given and possible)."""
    if sel is None:
        return asked or preferred
    rel = sel.release
    if asked is None:
        if rel.python_ok(preferred):
            return preferred
        major, lo = version_key(rel.python_min)
        hi = min(version_key(rel.python_max)[1], version_key(cat.python_cap)[1])
        options = [f"{major}.{minor}" for minor in range(lo, max(lo, hi) + 1)]
        return ([o for o in options if o in allowed] or options)[-1]
    if rel.python_ok(asked):
        return asked
    if asked in rel.python_experimental:
        warnings.append(f"Python {asked} is experimental for torch {sel.patch.torch}")
        return asked
    raise CatalogError(
        f"image.python: torch {sel.patch.torch} supports Python {rel.python_range()}; got {asked}"
    )


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


def own_python_only(requested: str | None, what: str) -> None:
    """Bases that bring their Python (python:*-slim, NGC) take no other source."""
    if requested not in (None, "image"):
        raise CatalogError(f"image.python_source: {what} bring their own Python; got {requested}")


def _nearest(wanted: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to n known versions closest to `wanted` in version order, nearest first."""
    ordered = sorted(set(known), key=version_key)
    pos = bisect.bisect_left(ordered, version_key(wanted), key=version_key)

    def distance(i: int) -> tuple[int, int]:  # the lower one first at the same distance
        return (pos - i, 0) if i < pos else (i + 1 - pos, 1)

    return [ordered[i] for i in sorted(range(len(ordered)), key=distance)[:n]]
