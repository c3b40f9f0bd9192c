"""The data the project readers produce (plain dataclasses, no parsing here)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit

TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


@dataclass(frozen=True)
class Dep:
    """One third-party requirement, as PEP 508 text plus where it was read."""

    name: str  # canonical distribution name
    text: str  # PEP 508 text pip accepts on its command line
    specifier: str = ""  # "==2.1.2+cu118", ">=2.1,<2.5" or ""
    url: str | None = None  # direct URL (wheel file or VCS)
    where: str = ""  # "requirements/base.txt:3"

    @property
    def vcs(self) -> bool:
        return self.url is not None and self.url.split("+", 1)[0] in ("git", "hg", "svn", "bzr")


@dataclass(frozen=True)
class LocalInstall:
    """A package inside the project tree (`-e .`, `./pkg`, poetry/uv path dependencies)."""

    path: str  # project-relative POSIX path, "." for the root
    editable: bool
    where: str


@dataclass(frozen=True)
class Build:
    """What building a local package needs beyond pip's isolated build environment."""

    path: str  # the LocalInstall path
    torch: str = ""  # why its build imports torch ("setup.py:3 imports torch.utils...")
    compiles: str = ""  # why it compiles C/C++ ("setup.py:9 CppExtension")
    cuda: str = ""  # why it needs nvcc ("setup.py:9 CUDAExtension")

    @property
    def shown(self) -> str:
        return "the project (.)" if self.path == "." else self.path

    @property
    def isolated(self) -> bool:
        """pip's isolated build env has no torch: a build importing torch runs without it."""
        return not self.torch


@dataclass
class ReqFile:
    """A requirements or constraints file the Dockerfile copies (by its relative path)."""

    path: str
    # 1-based inclusive physical line ranges the image must not hand to pip before the
    # project is copied (local installs; torch pins given as direct URLs)
    drop: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Project:
    """Everything gpulaunch read from one project folder."""

    entry: str | None = None  # what image.requirements names
    entry_kind: str = ""  # "requirements", "pyproject", "setup.cfg", "conda", ...
    sources: list[str] = field(default_factory=list)  # every dependency source found
    not_understood: list[str] = field(default_factory=list)  # named, never silently dropped
    # dependencies of a file pip never reads itself (pyproject, conda...) that do not parse:
    # `render` refuses them rather than build an image without them
    invalid: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    deps: list[Dep] = field(default_factory=list)  # what the entry installs (flattened)
    inline: list[str] = field(default_factory=list)  # PEP 508 texts given on pip's command line
    files: list[ReqFile] = field(default_factory=list)  # requirements files to copy, entry first
    locals: list[LocalInstall] = field(default_factory=list)
    builds: list[Build] = field(default_factory=list)  # local packages whose build needs more
    # project-relative folders put on PYTHONPATH (a src/ layout not installed), with why
    import_paths: list[tuple[str, str]] = field(default_factory=list)
    # what else binds torch's version: a lock file, a -c constraints file, a dependency's
    # own requirement (init's --check-pins): (PEP 440 specifier, why)
    torch_constraints: list[tuple[str, str]] = field(default_factory=list)
    # uv override-dependencies, applied as pip constraints (PEP 508 texts, with where)
    constraints: list[tuple[str, str]] = field(default_factory=list)
    install_project: bool = False  # the entry is an installable pyproject/setup project
    python_spec: str | None = None  # a PEP 440 specifier for the interpreter
    python_where: str | None = None
    variant: str | None = None  # "cu118", "cpu", ... the project's torch build
    # set by the caller before reading: True for a CUDA image (a [gpu]/[cuda] extra is
    # installed), False for a CPU one (a [cpu] extra), None: neither
    gpu: bool | None = None
    # set by the caller: the torch* distributions the image's own torch step installs and
    # pins (PIP_CONSTRAINT). The project's requirements on them are weighed (reconcile) but
    # never handed to pip again, in whatever file they stand: a --torch that overrides the
    # project's pin then reaches every install path, and pip never sees two torch versions
    image_torch: frozenset[str] = frozenset()
    variant_where: str | None = None

    def pin(self, name: str) -> Dep | None:
        """The first requirement on `name` (torch, torchvision, torchaudio...)."""
        return next((d for d in self.deps if d.name == name), None)

    def build_of(self, path: str) -> Build | None:
        return next((b for b in self.builds if b.path == path), None)

    def add_local(self, local: LocalInstall) -> None:
        """One install per path: pip refuses the same `-e PATH` twice (two requirement files
        naming it); editable wins when one of them asks for it."""
        local = LocalInstall(posixpath.normpath(local.path), local.editable, local.where)
        for i, known in enumerate(self.locals):
            if known.path == local.path:
                self.locals[i] = replace(known, editable=known.editable or local.editable)
                return
        self.locals.append(local)

    def add_dep(self, dep: Dep) -> None:
        """A requirement, and the torch build its URL or torch's local version names."""
        if dep.url:
            self.set_variant(variant_of_url(dep.url), f"{dep.where} ({dep.url})")
        if dep.name == "torch":
            spec = dep.specifier
            self.set_variant(variant_of_version(spec), f"{dep.where} (torch{spec})")
        self.deps.append(dep)

    def dist_names(self) -> set[str]:
        return {d.name for d in self.deps}

    def set_python(self, spec: str, where: str) -> None:
        if self.python_spec is None and spec:
            self.python_spec, self.python_where = spec, where

    def set_variant(self, variant: str | None, where: str) -> None:
        if variant and self.variant is None:
            self.variant, self.variant_where = variant, where


def variant_of_url(url: str) -> str | None:
    """`https://download.pytorch.org/whl/cu121` (or a wheel under it) -> "cu121"."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if "whl" in parts:
        i = parts.index("whl")
        if i + 1 < len(parts) and _is_variant(parts[i + 1]):
            return parts[i + 1]
    wheel = wheel_name(url)
    local = wheel[1].partition("+")[2] if wheel is not None else ""
    return local if _is_variant(local) else None


def wheel_name(url: str) -> tuple[str, str, str] | None:
    """(name, version, python tag) of a wheel URL, or None when it is not a wheel."""
    last = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not last.endswith(".whl"):
        return None
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, version, _, tags = parse_wheel_filename(last)
    except InvalidWheelFilename:
        return None
    interpreters = sorted({t.interpreter for t in tags})
    return canonicalize_name(name), str(version), interpreters[0] if interpreters else ""


def _is_variant(text: str) -> bool:
    return (
        text == "cpu" or (text.startswith("cu") and text[2:].isdigit()) or text.startswith("rocm")
    )


def variant_of_version(spec: str) -> str | None:
    """ "==2.1.2+cu118" -> "cu118"."""
    local = spec.partition("+")[2].split(",", 1)[0].strip()
    return local if _is_variant(local) else None


def pick_extra(names: list[str], gpu: bool | None) -> str | None:
    """The optional-dependency group a CUDA (gpu=True) or CPU image installs: `gpu`, `cuda`,
    `cuda12`, `cu121` ... over `cpu` ones, and the reverse."""
    if gpu is None:
        return None

    def is_gpu(name: str) -> bool:
        low = name.lower().replace("_", "-")
        return low in ("gpu", "cuda") or low.startswith(("cuda", "gpu-")) or _is_variant(low)

    for name in names:
        if (is_gpu(name) and name.lower() != "cpu") if gpu else name.lower() == "cpu":
            return name
    return None
