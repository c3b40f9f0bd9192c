"""Does an image fit this host: which GPU architectures a torch build supports, the rows
`gpulaunch versions` shows (with the driver each needs), and the host check that refuses a
CUDA/driver or GPU-architecture mismatch before anything is built or started (NVML).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from gpulaunch.catalog import driver_rule
from gpulaunch.catalog.data import (
    CC_RE,
    CONFIDENCES,
    UNVERIFIED,
    Variant,
    load_catalog,
    major_minor,
    parse_xyz,
    version_key,
)
from gpulaunch.catalog.request import ImageRequest, MatrixRow, ResolvedImage
from gpulaunch.catalog.resolver import CudaReq, parse_cuda, resolve_in, select_torch
from gpulaunch.engine import nvml
from gpulaunch.errors import CatalogError, ConfigError


def matrix(torch: str | None = None, cuda: str | None = None) -> list[MatrixRow]:
    """Every torch patch x wheel variant (CPU included), newest first, optionally filtered."""
    cat = load_catalog()
    pairs = cat.patches()
    if torch is not None:
        text = torch.strip()
        parsed = parse_xyz(text)
        if parsed is not None and parsed[1] is None:  # x.y: every patch of that release
            pairs = [(rel, p) for rel, p in pairs if version_key(rel.minor) == version_key(text)]
        else:
            sel = select_torch(cat, text)
            pairs = [(rel, p) for rel, p in pairs if sel is not None and p == sel.patch]
        if not pairs:
            select_torch(cat, text)  # raises with the nearest versions
    wanted = parse_cuda(cat, cuda)
    rows: list[MatrixRow] = []
    for rel, patch in sorted(pairs, key=lambda pair: version_key(pair[1].torch), reverse=True):
        variants: list[Variant | None] = [*rel.variants, None]
        for variant in variants:
            if wanted == "cpu" and variant is not None:
                continue
            if isinstance(wanted, CudaReq) and (variant is None or variant.cuda != wanted.xy):
                continue
            resolved = resolve_in(
                cat, ImageRequest(torch=patch.torch, cuda=variant.cuda if variant else "cpu")
            )
            rule = driver_rule.requirement_for(resolved.base_image, resolved.cuda)
            image = [
                i
                for i in cat.cuda_images
                if resolved.base_image.startswith(f"{cat.cuda_image}:{i.cuda}-")
            ]
            confidences = [
                rel.confidence,
                patch.confidence,
                variant.confidence if variant else "high",
                *(i.confidence for i in image),
            ]
            rows.append(
                MatrixRow(
                    torch=patch.torch,
                    variant=variant.variant if variant else "cpu",
                    cuda=variant.cuda if variant else None,
                    image=resolved.base_image,
                    python_min=rel.python_min,
                    python_max=rel.python_max,
                    torchvision=patch.torchvision,
                    torchaudio=patch.torchaudio,
                    min_driver=resolved.min_driver,
                    archs=resolved.cuda_archs,
                    status=variant.status if variant else "stable",
                    confidence=max(confidences, key=CONFIDENCES.index),
                    driver_requirement=rule.text if rule else None,
                    driver_branches=tuple(rule.branches()) if rule else (),
                    origin=patch.origin or (variant.origin if variant else None) or rel.origin,
                    driver_verified=rule.verified if rule else True,
                    verified=UNVERIFIED not in confidences,
                )
            )
    return rows


def _cc(value: str) -> tuple[int, int]:
    m = CC_RE.match(value.strip())
    if not m:
        raise CatalogError(f'gpu: expected a compute capability like "9.0"; got {value!r}')
    return int(m.group(1)), int(m.group(2))


def supports_arch(resolved: ResolvedImage, compute_capability: str) -> bool:
    """Can the image's torch (or toolkit) run kernels on a GPU of this compute capability?

    SASS built for X.Y runs on the same major X with minor >= Y, never across majors;
    "+PTX" lets the driver JIT for any newer capability. Without a wheel arch list (NGC,
    no torch) the CUDA toolkit's arch window is used instead.
    """
    return _supports(resolved.cuda_archs, resolved.cuda, compute_capability)


def _supports(archs: Sequence[str], cuda: str | None, compute_capability: str) -> bool:
    cc = _cc(compute_capability)
    if archs:
        for arch in archs:
            base = _cc(arch.removesuffix("+PTX"))
            if base[0] == cc[0] and base[1] <= cc[1]:
                return True
            if arch.endswith("+PTX") and base <= cc:
                return True
        return False
    if cuda is None:
        return False
    windows = [
        w
        for w in load_catalog().arch_windows
        if version_key(w.cuda) <= version_key(major_minor(cuda))
    ]
    if not windows:
        return False
    window = windows[-1]
    lo, hi = _cc(window.min_cc), _cc(window.max_cc)
    return lo <= cc and (cc <= hi or cc[0] == hi[0])


def gpu_compute_capability(name: str) -> str | None:
    """Compute capability of a GPU from its product name, e.g. "NVIDIA H100 80GB HBM3"."""
    for gpu in load_catalog().gpus:
        if any(pattern.search(name) for pattern in gpu.names):
            return gpu.cc
    return None


# ---------------------------------------------------------------- the host check
# Uses NVML (nvidia-ml-py) when it is installed and a driver answers; otherwise nothing is
# known about the host and nothing is refused. The answer names both sides and what fits.


@dataclass(frozen=True)
class HostGpus:
    driver: str | None
    names: tuple[str, ...]
    brands: tuple[str | None, ...] = ()  # per GPU, as NVIDIA_REQUIRE_CUDA spells it
    ccs: tuple[str | None, ...] = ()  # per GPU from NVML; None: by product name (catalog)

    def capability(self, index: int) -> str | None:
        """GPU `index`'s compute capability: NVML's, else the catalog's by product name."""
        nvml_cc = self.ccs[index] if index < len(self.ccs) else None
        return nvml_cc or gpu_compute_capability(self.names[index])

    def capabilities(self) -> list[str]:
        """The GPUs' distinct compute capabilities (`capability` of each)."""
        return [cc for cc in dict.fromkeys(map(self.capability, range(len(self.names)))) if cc]

    def describe(self) -> str:
        """One phrase: `driver 550.54.15, 2x NVIDIA H100 80GB HBM3 (sm_90)`."""
        counts = Counter(
            f"{name} (sm_{cc.replace('.', '')})" if (cc := self.capability(i)) else name
            for i, name in enumerate(self.names)
        )
        gpus = ", ".join(f"{n}x {label}" for label, n in counts.items())
        return f"driver {self.driver}, {gpus}"


def probe(env: Mapping[str, str]) -> HostGpus | None:
    """Driver version and GPU names from NVML; None when NVML is absent, refuses a query, or
    a fixture is used. Bindings that lack a function raise NvmlError(outdated), never pass
    silently: each caller says what it could not check."""
    try:
        with nvml.session(env) as lib:
            if lib is None:
                return None
            found = nvml.listing(lib, required={"driver", "name", "brand"}, optional={"cc"})
    except nvml.NvmlError as err:
        if err.outdated:
            raise
        # the driver refused a query: nothing is known; the dry-run's `gpus:` line says the
        # GPUs were not validated (topology discovery meets the same refusal)
        return None
    gpus = found.devices  # a required field is never None
    names = tuple(str(gpu.name) for gpu in gpus)
    brands = tuple(driver_rule.brand_name(gpu.brand) for gpu in gpus)
    return HostGpus(found.driver, names, brands, tuple(gpu.cc for gpu in gpus))


def host_builds(host: HostGpus, rows: Sequence[MatrixRow] | None = None) -> list[MatrixRow]:
    """Stable CUDA builds this host can use, best first (newest torch, then newest CUDA).

    A build fits when the driver rule its image meets at container start admits the driver
    for every GPU brand of the host (natively: builds that start only through a datacenter
    forward-compatibility branch come after all native ones) and its wheels carry kernels for
    every GPU's compute capability; builds whose image's driver rule is unverified (not read
    from NVIDIA) are left out. [] without a driver or GPUs. Rows: `matrix()` by default.
    """
    if not host.driver or not host.names:
        return []
    ccs = host.capabilities()
    native: list[MatrixRow] = []
    forward: list[MatrixRow] = []
    for row in matrix() if rows is None else rows:
        if row.cuda is None or row.status != "stable" or not row.verified:
            continue
        if not row.driver_verified:
            continue
        if not all(_supports(row.archs, row.cuda, cc) for cc in ccs):
            continue
        verdicts = _verdicts(row.image, row.cuda, host.driver, host.brands)
        if not verdicts or not all(v.ok for v in verdicts):
            continue
        (forward if any(v.forward for v in verdicts) else native).append(row)

    def newest(row: MatrixRow) -> tuple[Version, tuple[int, ...]]:
        return Version(row.torch), version_key(row.cuda or "0")

    return sorted(native, key=newest, reverse=True) + sorted(forward, key=newest, reverse=True)


def driver_verdicts(resolved: ResolvedImage, host: HostGpus) -> list[driver_rule.Verdict]:
    """The image's driver rule evaluated once per distinct GPU brand of the host (one verdict
    with brand unknown when NVML gave none); [] for CPU images or an unknown driver."""
    return _verdicts(resolved.base_image, resolved.cuda, host.driver, host.brands)


def _verdicts(
    image: str, cuda: str | None, driver: str | None, brands: Sequence[str | None]
) -> list[driver_rule.Verdict]:
    req = driver_rule.requirement_for(image, cuda)
    if req is None or not driver:
        return []
    return [driver_rule.host_can_run(req, driver, b) for b in dict.fromkeys(brands or [None])]


def check(resolved: ResolvedImage, host: HostGpus, selected: Sequence[int] | None = None) -> None:
    """ConfigError when the host's driver or GPUs cannot run the resolved image.

    The driver rule is the one the container runtime enforces at start (NVIDIA_REQUIRE_CUDA of
    nvidia/cuda images, an NGC release's floor), evaluated with the GPUs' NVML brand: e.g. a
    GeForce on driver 550 cannot start a CUDA 12.8 image, an H100 on R550 can start 13.0."""
    indices = range(len(host.names)) if selected is None else selected
    brands = (
        host.brands if selected is None or not host.brands else [host.brands[i] for i in selected]
    )
    for verdict in _verdicts(resolved.base_image, resolved.cuda, host.driver, brands):
        if not verdict.ok:
            fits = _variants_for_driver(resolved, verdict.driver, verdict.brand)
            alternatives = f"; with this driver use: {', '.join(fits)}" if fits else ""
            gpu = f" ({verdict.brand} GPU)" if verdict.brand else ""
            raise ConfigError(
                f"image.cuda: {resolved.base_image} needs {verdict.reason}; this host has "
                f"driver {verdict.driver}{gpu}{alternatives}"
            )
    if resolved.cuda is None:
        return  # a CPU build runs no kernels on the GPUs it is given: no arch to check
    for name, cc in dict.fromkeys((host.names[i], host.capability(i)) for i in indices):
        if cc and not supports_arch(resolved, cc):
            archs = " ".join(resolved.cuda_archs) or "its toolkit"
            raise ConfigError(
                f"image.cuda: {name} (compute capability {cc}) is not supported by the "
                f"{resolved.torch_variant or resolved.cuda} build (archs: {archs})"
            )


def _variants_for_driver(resolved: ResolvedImage, driver: str, brand: str | None) -> list[str]:
    if not resolved.torch:
        return []
    rows = matrix(resolved.torch)
    out: list[str] = []
    for row in rows:
        req = driver_rule.requirement_for(row.image, row.cuda) if row.cuda else None
        if req is not None and driver_rule.host_can_run(req, driver, brand).ok:
            unverified = "" if row.verified and req.verified else ", unverified"
            out.append(f"cuda {row.cuda} ({row.variant}{unverified})")
    return out
