"""The resolver: an `ImageRequest` -> one `ResolvedImage` (base image tag, torch wheel variant,
Python source), or a `CatalogError` naming the conflict and the nearest valid choice.

The image's CUDA x.y always equals the wheel's CUDA x.y. Unverified catalog rows (confidence
low: inferred or unknown) are never chosen as defaults; asked for, they are used with a warning,
and a refusal names only an absence the catalog has evidence for.
"""

from __future__ import annotations

from gpulaunch.catalog import driver_rule
from gpulaunch.catalog.data import (
    DASH,
    UNVERIFIED,
    Catalog,
    CudaImage,
    NgcRelease,
    Variant,
    load_catalog,
    major_minor,
    parse_xyz,
    version_key,
)
from gpulaunch.catalog.request import (
    FLAVORS,
    CudaReq,
    ImageRequest,
    ResolvedImage,
    TorchSel,
    base_os,
    check_python,
    choose_variant,
    default_python,
    min_driver_for,
    newest_of,
    own_python_only,
    parse_cuda,
    parse_cudnn,
    parse_python,
    python_source,
    select_torch,
    toolkit_driver,
    torch_warnings,
)
from gpulaunch.errors import CatalogError


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
    """The ResolvedImage fields the torch selection fills (all None without torch)."""
    if sel is None:
        return dict.fromkeys(
            ("torch", "torchvision", "torchaudio", "torch_variant", "torch_index_url")
        )
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
    py = python or default_python(cat, sel, cat.cpu_python, cat.cpu.pythons)
    check_python(sel, py, warnings)
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
        cuda=None,
        cudnn=None,
        min_driver=None,
        recommended_driver=None,
        cuda_archs=(),
        ngc_tag=None,
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
    py = python or default_python(cat, sel, cat.os[os_name].python if os_name else cat.cpu_python)
    check_python(sel, py, warnings)
    source = "image"
    if os_name is not None and req.python_source != "image":  # provisioned like a catalog base
        choice = python_source(cat, sel, os_name, py, req.python_source)
        source = choice.source
        if choice.unverified:
            warnings.append(f"image.python_source: {choice.note}")
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
        ngc_tag=None,
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
    py = python or default_python(cat, sel, cat.os[os_name].python)
    check_python(sel, py, warnings)
    oses = image.oses(with_cudnn)
    choice = python_source(cat, sel, os_name, py, requested_source, oses)
    source = choice.source
    if choice.unverified:
        warnings.append(f"image.python_source: {choice.note}")

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
        ngc_tag=None,
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
    torch_xy: str | None = None
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
        **_pins(cat, None, None),
        cuda=row.cuda,
        cudnn=cudnn,
        min_driver=min_driver_for(row.cuda, cat.ngc_image.format(tag=row.tag)),
        recommended_driver=toolkit_driver(cat, row.cuda, warnings),
        cuda_archs=(),
        ngc_tag=row.tag,
        warnings=tuple(warnings),
        ngc_torch=row.torch,
    )


def _ngc_key(row: NgcRelease) -> str:
    return row.tag
