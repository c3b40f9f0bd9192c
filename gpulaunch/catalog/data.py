"""Catalog data model and the loader of gpulaunch/data/catalog.yaml.

Shape validation lives here (every field checked, unknown keys and unquoted numbers refused,
errors carry the YAML path), so the other catalog modules hold only the reasoning over facts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from gpulaunch.errors import CatalogError, ConfigError

if TYPE_CHECKING:
    from gpulaunch.catalog.overlay import Overlay

CONFIDENCES = ("high", "medium", "low")
# How a catalog fact is known: high = read from a primary source, medium = from a secondary one;
# low = inferred or unknown (a release plan, a series pattern, nobody has seen it). One idea for
# every row (image, build, patch, release, NGC tag, driver): an unverified fact is never a
# default, is offered with a warning, is marked in `versions`, and no refusal rests on it.
UNVERIFIED = "low"
# A release's build list: "complete" (read from the PyTorch index / RELEASE.md: a CUDA it lacks
# has no build) or "partial" (only some builds seen, e.g. PyPI's: an absent one is unknown).
BUILD_LISTS = ("complete", "partial")


VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
XYZ_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")  # a CUDA or torch version: x.y or x.y.z
CU_VARIANT_RE = re.compile(r"^cu(\d+)(\d)$")
PYTHON_RE = re.compile(r"^3\.\d+$")
CC_RE = re.compile(r"^(\d+)\.(\d+)[af]?$")
DASH = "\u2013"  # en dash for ranges in messages: "3.8\u20133.11"

T = TypeVar("T")


@functools.lru_cache(maxsize=4096)  # the matrix asks for the same few versions ~50,000 times
def version_key(version: str) -> tuple[int, ...]:
    """Numeric tuple of a dotted version, so "2.10" sorts after "2.9" (never as 2.1)."""
    return tuple(int(part) for part in version.split("."))


@functools.lru_cache(maxsize=4096)
def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def parse_xyz(text: str) -> tuple[str, str | None] | None:
    """A CUDA or torch version as ("x.y", "x.y.z" or None without a patch), each number
    normalised ("12.04.1" -> "12.4", "12.4.1"); None when `text` is neither form."""
    m = XYZ_RE.match(text)
    if not m:
        return None
    xy = f"{int(m.group(1))}.{int(m.group(2))}"
    return xy, (f"{xy}.{int(m.group(3))}" if m.group(3) is not None else None)


# ---------------------------------------------------------------------------
# Catalog model
# ---------------------------------------------------------------------------


class OsInfo(NamedTuple):
    name: str
    python: str
    glibc: str
    confidence: str = "high"


class CudaImage(NamedTuple):
    cuda: str
    os: tuple[str, ...]
    cudnn_token: str | None
    cudnn_major: str | None
    cudnn_os: tuple[str, ...]
    confidence: str
    origin: str | None = None  # the overlay file this row came from (None: packaged)

    @property
    def xy(self) -> str:
        return major_minor(self.cuda)

    def oses(self, cudnn: bool) -> tuple[str, ...]:
        return self.cudnn_os if cudnn else self.os

    def flavor_tag(self, kind: str, cudnn: bool) -> str:
        return f"{self.cudnn_token}-{kind}" if cudnn else kind


class CpuImage(NamedTuple):
    template: str
    os: str
    pythons: tuple[str, ...]
    confidence: str


class Variant(NamedTuple):
    variant: str
    cuda: str
    status: str
    cudnn: str
    archs: tuple[str, ...]
    confidence: str
    origin: str | None = None
    note: str | None = None  # the evidence, for an unverified build


class Patch(NamedTuple):
    torch: str
    torchvision: str | None
    torchaudio: str | None
    confidence: str
    origin: str | None = None


class TorchRelease(NamedTuple):
    minor: str
    python_min: str
    python_max: str
    python_experimental: tuple[str, ...]
    pypi_default: str
    glibc: str
    patches: tuple[Patch, ...]
    variants: tuple[Variant, ...]
    confidence: str
    origin: str | None = None
    builds: str = "complete"  # BUILD_LISTS: whether a CUDA absent from `variants` has no build

    def python_ok(self, python: str) -> bool:
        return version_key(self.python_min) <= version_key(python) <= version_key(self.python_max)

    def python_range(self) -> str:
        text = f"{self.python_min}{DASH}{self.python_max}"
        if self.python_experimental:
            text += f" ({', '.join(self.python_experimental)} experimental)"
        return text


class NgcRelease(NamedTuple):
    tag: str
    torch: str
    cuda: str
    cudnn: str | None
    python: str
    os: str
    confidence: str
    origin: str | None = None

    @property
    def torch_xy(self) -> str:
        return major_minor(self.torch.split("a")[0].split("+")[0])


class Gpu(NamedTuple):
    cc: str
    arch: str
    names: tuple[re.Pattern[str], ...]
    confidence: str


class ArchWindow(NamedTuple):
    cuda: str
    min_cc: str
    max_cc: str


class ToolkitDriver(NamedTuple):
    cuda: str
    driver: str
    confidence: str
    origin: str | None = None


class Catalog(NamedTuple):
    os: dict[str, OsInfo]
    ubuntu_preference: tuple[str, ...]
    python_cap: str
    cpu_python: str
    cuda_image: str
    cuda_images: tuple[CudaImage, ...]
    cpu: CpuImage
    index_url: str
    releases: tuple[TorchRelease, ...]  # oldest first
    minor_version_floor: dict[str, str]
    toolkit_drivers: dict[str, ToolkitDriver]
    gpus: tuple[Gpu, ...]
    arch_windows: tuple[ArchWindow, ...]
    ngc_image: str
    ngc: tuple[NgcRelease, ...]
    research_date: str = ""  # the packaged facts' date ("2026-09")
    overlays: tuple[str, ...] = ()  # overlay files merged in, in order

    def patches(self) -> list[tuple[TorchRelease, Patch]]:
        return [(rel, p) for rel in self.releases for p in rel.patches]

    def cuda_xys(self) -> set[str]:
        known = {img.xy for img in self.cuda_images}
        known |= {v.cuda for rel in self.releases for v in rel.variants}
        return known | {major_minor(n.cuda) for n in self.ngc}


# ---------------------------------------------------------------------------
# Loading and shape validation
# ---------------------------------------------------------------------------


class _Node:
    """A mapping from the YAML file, read key by key so errors carry a path."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, dict):
            raise _bad(path, "expected a mapping")
        self.data: dict[str, Any] = data
        self.path = path
        self.seen: set[str] = {"note"}

    def _get(self, key: str, required: bool) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                raise _bad(f"{self.path}.{key}", "missing")
            return None
        return self.data[key]

    def text(self, key: str, *, version: bool = False) -> str:
        value = self.opt_text(key, version=version)
        if value is None:
            raise _bad(f"{self.path}.{key}", "missing")
        return value

    def opt_text(self, key: str, *, version: bool = False) -> str | None:
        value = self._get(key, required=False)
        if value is None:
            return None
        return _checked_text(value, f"{self.path}.{key}", version)

    def texts(self, key: str, *, version: bool = False, required: bool = True) -> tuple[str, ...]:
        value = self._get(key, required=required)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise _bad(f"{self.path}.{key}", "expected a list")
        return tuple(
            _checked_text(item, f"{self.path}.{key}[{i}]", version) for i, item in enumerate(value)
        )

    def confidence(self) -> str:
        value = self.opt_text("confidence") or "high"
        if value not in CONFIDENCES:
            raise _bad(f"{self.path}.confidence", f"must be one of {', '.join(CONFIDENCES)}")
        return value

    def node(self, key: str) -> _Node:
        return _Node(self._get(key, required=True), f"{self.path}.{key}")

    def opt_node(self, key: str) -> _Node | None:
        value = self._get(key, required=False)
        return None if value is None else _Node(value, f"{self.path}.{key}")

    def nodes(self, key: str) -> list[_Node]:
        value = self._get(key, required=True)
        if not isinstance(value, list):
            raise _bad(f"{self.path}.{key}", "expected a list")
        return [_Node(item, f"{self.path}.{key}[{i}]") for i, item in enumerate(value)]

    def mapping(self, key: str) -> dict[str, _Node]:
        node = self.node(key)
        node.seen.update(node.data)
        return {str(k): _Node(v, f"{node.path}.{k}") for k, v in node.data.items()}

    def text_mapping(self, key: str) -> dict[str, str]:
        node = self.node(key)
        return {str(k): node.text(str(k), version=True) for k in node.data}

    def read(self, **kinds: str) -> dict[str, Any]:
        """Fields by kind: "t" text, "v" dotted version, "t?" / "v?" optional (None when
        absent), "c" the confidence."""
        out: dict[str, Any] = {}
        for key, kind in kinds.items():
            if kind == "c":
                out[key] = self.confidence()
            elif kind.endswith("?"):
                out[key] = self.opt_text(key, version=kind == "v?")
            else:
                out[key] = self.text(key, version=kind == "v")
        return out

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise _bad(self.path, f"unknown key(s) {', '.join(extra)}")


class _ShapeError(CatalogError):
    """A catalog field is malformed; `detail` names it without saying which file (an overlay
    merged over the packaged catalog is named by the loader)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"catalog: {detail} (gpulaunch/data/catalog.yaml is broken)")
        self.detail = detail


def _bad(path: str, why: str) -> CatalogError:
    return _ShapeError(f"{path}: {why}")


def _checked_text(value: object, path: str, version: bool) -> str:
    """A quoted, single-line string; a version is dotted numbers of at most 6 digits each."""
    from gpulaunch.textcheck import bad_char

    if not isinstance(value, str):
        raise _bad(path, f"expected a quoted string, got {value!r}")
    if bad_char(value) is not None:
        raise _bad(path, "must be a single line without control characters")
    if version and not (VERSION_RE.fullmatch(value) and max(map(len, value.split("."))) <= 6):
        raise _bad(path, f"not a dotted version: {value!r}")
    return value


_SOURCED = {"confidence": "c", "origin": "t?"}  # what every row an overlay may change carries


def _each(nodes: Iterable[_Node], build: Callable[[_Node], T]) -> tuple[T, ...]:
    out = []
    for node in nodes:
        out.append(build(node))
        node.done()
    return tuple(out)


def _cuda_image(node: _Node) -> CudaImage:
    cuda = node.text("cuda", version=True)
    oses = node.texts("os")
    cudnn = node.opt_node("cudnn")
    token = major = None
    cudnn_os: tuple[str, ...] = ()
    if cudnn is not None:
        token, major = cudnn.text("token"), cudnn.text("major", version=True)
        cudnn_os = cudnn.texts("os", required=False) or oses
        cudnn.done()
    return CudaImage(cuda, oses, token, major, cudnn_os, node.confidence(), node.opt_text("origin"))


def _variant(node: _Node) -> Variant:
    archs = node.texts("archs")
    for arch in archs:
        if not CC_RE.match(arch.removesuffix("+PTX")):
            raise _bad(f"{node.path}.archs", f"bad arch {arch!r}")
    return Variant(  # in the schema's order: of several bad fields, the first is named
        archs=archs,
        **node.read(variant="t", cuda="v", status="t"),
        cudnn=node.opt_text("cudnn", version=True) or "",  # unknown for an unverified build
        **node.read(**_SOURCED, note="t?"),
    )


def _release(node: _Node) -> TorchRelease:
    py = node.node("python")
    release = TorchRelease(  # in the schema's order: of several bad fields, the first is named
        **node.read(minor="v"),
        python_min=py.text("min", version=True),
        python_max=py.text("max", version=True),
        python_experimental=py.texts("experimental", version=True, required=False),
        **node.read(pypi_default="v", glibc="v"),
        patches=_each(node.nodes("patches"), _patch),
        variants=_each(node.nodes("variants"), _variant),
        **node.read(**_SOURCED),
        builds=node.opt_text("builds") or "complete",
    )
    py.done()
    if release.builds not in BUILD_LISTS:
        raise _bad(f"{node.path}.builds", f"must be one of {', '.join(BUILD_LISTS)}")
    for key in ("min", "max"):
        if not PYTHON_RE.fullmatch(getattr(release, f"python_{key}")):
            raise _bad(f"{py.path}.{key}", "expected a Python version such as 3.11")
    if version_key(release.python_min) > version_key(release.python_max):
        raise _bad(py.path, f"min {release.python_min} is above max {release.python_max}")
    for v in release.variants:
        if v.status not in ("stable", "experimental", "legacy"):
            raise _bad(node.path, f"variant {v.variant}: unknown status {v.status!r}")
    return release


def _patch(node: _Node) -> Patch:
    return Patch(**node.read(torch="v", torchvision="v?", torchaudio="v?", **_SOURCED))


def _ngc(node: _Node) -> NgcRelease:
    kinds = {"tag": "t", "torch": "t", "cuda": "v", "cudnn": "v?", "python": "v", "os": "t"}
    return NgcRelease(**node.read(**kinds, **_SOURCED))


def _driver(node: _Node) -> ToolkitDriver:
    return ToolkitDriver(**node.read(cuda="v", driver="v", **_SOURCED))


def _gpu(node: _Node) -> Gpu:
    names = []
    for pattern in node.texts("names"):
        try:
            names.append(re.compile(pattern, re.IGNORECASE))
        except re.error as err:
            raise _bad(f"{node.path}.names", f"bad pattern {pattern!r}: {err}") from err
    return Gpu(names=tuple(names), **node.read(cc="v", arch="t", confidence="c"))


def _window(node: _Node) -> ArchWindow:
    window = ArchWindow(**node.read(cuda="v", min_cc="v", max_cc="v"))
    if version_key(window.min_cc) > version_key(window.max_cc):
        raise _bad(node.path, f"min_cc {window.min_cc} is above max_cc {window.max_cc}")
    return window


def _parse_catalog(raw: object) -> Catalog:
    root = _Node(raw, "catalog")
    root.text("schema_version")
    research_date = root.text("research_date")
    from gpulaunch.catalog.staleness import gaps

    try:
        gaps(root._get("known_gaps", required=False))
    except CatalogError as err:
        raise _bad("catalog.known_gaps", err.message.split(": ", 2)[-1]) from None
    os_map = {}
    for name, node in root.mapping("os").items():
        os_map[name] = OsInfo(name, **node.read(python="v", glibc="v", confidence="c"))
        node.done()
    defaults = root.node("defaults")
    images = root.node("cuda_images")
    cpu = root.node("cpu_image")
    torch = root.node("torch")
    drivers = root.node("drivers")
    ngc = root.node("ngc")
    catalog = Catalog(
        os=os_map,
        ubuntu_preference=defaults.texts("ubuntu_preference"),
        python_cap=defaults.text("python_cap", version=True),
        cpu_python=defaults.text("cpu_python", version=True),
        cuda_image=images.text("image"),
        cuda_images=_each(images.nodes("versions"), _cuda_image),
        cpu=CpuImage(
            cpu.text("image"), cpu.text("os"), cpu.texts("pythons", version=True), cpu.confidence()
        ),
        index_url=torch.text("index_url"),
        releases=_each(torch.nodes("releases"), _release),
        minor_version_floor=drivers.text_mapping("minor_version_floor"),
        toolkit_drivers={d.cuda: d for d in _each(drivers.nodes("toolkit"), _driver)},
        gpus=_each(root.nodes("gpus"), _gpu),
        arch_windows=_each(root.nodes("toolkit_arch_window"), _window),
        ngc_image=ngc.text("image"),
        ngc=_each(ngc.nodes("releases"), _ngc),
        research_date=research_date,
    )
    for node in (defaults, images, cpu, torch, drivers, ngc, root):
        node.done()
    _check_consistency(catalog)
    return catalog


def _check_consistency(cat: Catalog) -> None:
    """Cross-references the YAML cannot express: unknown OS names, unsorted rows."""
    for img in cat.cuda_images:
        for name in img.os + img.cudnn_os:
            if name not in cat.os:
                raise _bad(f"cuda_images {img.cuda}", f"unknown os {name!r}")
    for name in (*cat.ubuntu_preference, cat.cpu.os, *(n.os for n in cat.ngc)):
        if name not in cat.os:
            raise _bad("os", f"{name!r} is used but not defined")
    minors = [version_key(rel.minor) for rel in cat.releases]
    if minors != sorted(minors):
        raise _bad("torch.releases", "must be sorted oldest first")
    for rel in cat.releases:
        for patch in rel.patches:
            if major_minor(patch.torch) != rel.minor:
                raise _bad(f"torch {rel.minor}", f"patch {patch.torch} is not a {rel.minor}.x")
        for v in rel.variants:
            if v.variant != "cu" + v.cuda.replace(".", ""):
                raise _bad(f"torch {rel.minor}", f"variant {v.variant} != CUDA {v.cuda}")


def read_data(name: str, prefix: str = "") -> Any:
    """gpulaunch/data/NAME as plain data (unvalidated); a file that does not read is a
    CatalogError, its message (which names the file) after `prefix`."""
    from gpulaunch.yamlio import read_packaged

    try:  # the same loader as gpulaunch.yaml: duplicate keys are refused here too
        return read_packaged(name)
    except ConfigError as err:
        raise CatalogError(prefix + err.message) from None


def load_catalog() -> Catalog:
    """The packaged catalog with the user's overlays merged over it (gpulaunch.catalog.overlay);
    loaded once per process while the overlay files stay the same."""
    from gpulaunch.catalog import overlay

    paths = overlay.overlay_paths()
    return _load_merged(overlay.fingerprint(paths))


def check_overlay(data: dict[str, Any], label: str) -> None:
    """Raise CatalogError unless `data` (an overlay not yet written) merges over the packaged
    catalog and the user's other overlays into a valid catalog."""
    from datetime import date

    from gpulaunch.catalog import overlay

    others = [overlay.read_overlay(p) for p in overlay.overlay_paths() if p != Path(label)]
    _merged([*others, overlay.Overlay(Path(label), data, date.today())])


@functools.cache
def _load_merged(key: tuple[tuple[str, tuple[int, ...]], ...]) -> Catalog:
    from gpulaunch.catalog import overlay

    catalog = _merged([overlay.read_overlay(Path(path)) for path, *_ in key])
    return catalog._replace(overlays=tuple(path for path, *_ in key))


def _merged(overlays: list[Overlay]) -> Catalog:
    """The packaged catalog with `overlays` merged over it in order, checked after each one so
    that an error names the file that brought it (the packaged file alone first)."""
    from gpulaunch.catalog import overlay

    raw = overlay.packaged_raw()
    catalog = _parse_catalog(raw)
    for ov in overlays:
        raw = overlay.merge(raw, ov)
        try:
            catalog = _parse_catalog(raw)
        except _ShapeError as err:
            raise CatalogError(f"catalog overlay {ov.path}: {err.detail}") from None
    return catalog
