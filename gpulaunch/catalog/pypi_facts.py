"""What PyPI's JSON API says about torch, torchvision and torchaudio, as plain facts.

Pure functions over the JSON (no network: `gpulaunch.outside.pypi` fetches it), so the parsing
is tested offline. Only final releases with a Linux x86_64 wheel (a cp3XX one, or one py3-none
wheel for every Python: torchaudio 2.11.1, torchvision 0.29.2) count; yanked releases are left
out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from gpulaunch.catalog.data import major_minor, version_key

_FINAL_RE = re.compile(r"^\d+\.\d+\.\d+$")
# torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl (the cp3XXt ABI is free-threaded: skipped)
_WHEEL_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
    r"(?P<plat>[^-]+)\.whl$"
)
_CP_RE = re.compile(r"^cp3(\d+)$")
_MANYLINUX_RE = re.compile(r"manylinux_?(\d+)_(\d+)_x86_64|manylinux(2014|2010|1)_x86_64")
# manylinux1 says glibc 2.5, but torch's wheels carry it while being built on 2.17 or 2.28:
# it is read as "unknown"
_LEGACY_GLIBC = {"1": None, "2010": "2.12", "2014": "2.17"}
_FLOOR_RE = re.compile(r"^\s*>=\s*(3\.\d+)(?:\.\d+)?\s*$")
# an exact pin in Requires-Dist: "torch==2.12.0", "cuda-toolkit[cublas]==13.2.2; platform..."
_PIN_RE = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([0-9][^;,\s]*)\s*(?:;(.*))?$"
)
_CUDA_PKG_RE = re.compile(r"^(?:cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)$")
_CUDNN_PKG_RE = re.compile(r"^nvidia-cudnn-cu\d+$")


class ReleaseFacts(NamedTuple):
    """One final release of one project, as its wheel files describe it."""

    version: str
    requires_python: str | None
    pythons: tuple[str, ...]  # CPython x.y with a Linux x86_64 wheel, oldest first
    glibc: str | None  # the manylinux floor of its Linux x86_64 wheels (the highest seen)
    date: str | None  # upload date of the first file, YYYY-MM-DD
    pure: bool  # a py3-none wheel for any Python (torchaudio 2.11.1, torchvision 0.29.2)

    @property
    def python_min(self) -> str | None:
        """The higher of Requires-Python's floor and the oldest CPython with a wheel (torch
        2.5.1 says >=3.8.0 but has no cp38 wheel)."""
        found = [v for v in (python_floor(self.requires_python), *self.pythons[:1]) if v]
        return max(found, key=version_key) if found else None

    @property
    def python_max(self) -> str | None:
        return self.pythons[-1] if self.pythons else None


def python_floor(requires_python: str | None) -> str | None:
    """ ">=3.11" -> "3.11"; also the floor inside "!=3.14.1,>=3.10". None when there is none."""
    clauses = (requires_python or "").split(",")
    return next((m.group(1) for c in clauses if (m := _FLOOR_RE.match(c))), None)


def releases(project: Mapping[str, Any]) -> dict[str, ReleaseFacts]:
    """Final, not yanked releases with a Linux x86_64 (or pure-Python) wheel, by version."""
    raw = project.get("releases")
    if not isinstance(raw, dict):
        return {}
    out: dict[str, ReleaseFacts] = {}
    for version, files in raw.items():
        if not isinstance(version, str) or not _FINAL_RE.match(version):
            continue
        facts = _release(version, files if isinstance(files, list) else [])
        if facts is not None:
            out[version] = facts
    return out


def _release(version: str, files: list[Any]) -> ReleaseFacts | None:
    pythons: set[str] = set()
    glibcs: list[str] = []
    dates: list[str] = []
    requires: str | None = None
    pure = False
    for item in files:
        if not isinstance(item, dict) or item.get("yanked"):
            continue
        m = _WHEEL_RE.match(str(item.get("filename", "")))
        if not m:
            continue
        cp = _CP_RE.match(m.group("py"))
        linux = _MANYLINUX_RE.search(m.group("plat"))
        if m.group("abi") == "none" and m.group("py").startswith("py3"):
            if m.group("plat") != "any" and not linux:
                continue  # another platform's wheel
            pure = True  # one wheel for every Python 3 (py3-none-any, py3-none-manylinux_2_28)
            if linux and not linux.group(3):
                glibcs.append(f"{linux.group(1)}.{linux.group(2)}")
        elif not (linux and cp and m.group("abi") in (m.group("py"), m.group("py") + "m")):
            continue  # another platform, or a free-threaded (cp3XXt) / abi3 build; cp37m counts
        else:
            pythons.add(f"3.{cp.group(1)}")
            if linux.group(3):
                legacy = _LEGACY_GLIBC[linux.group(3)]
                glibcs.extend([legacy] if legacy else [])
            else:
                glibcs.append(f"{linux.group(1)}.{linux.group(2)}")
        if isinstance(item.get("requires_python"), str):
            requires = item["requires_python"]
        if isinstance(item.get("upload_time"), str):
            dates.append(item["upload_time"][:10])
    if not pythons and not pure:
        return None
    return ReleaseFacts(
        version=version,
        requires_python=requires,
        pythons=tuple(sorted(pythons, key=version_key)),
        glibc=max(glibcs, key=version_key) if glibcs else None,
        date=min(dates) if dates else None,
        pure=pure,
    )


def latest(project: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """(version, requires_dist) of the release the project JSON's `info` describes."""
    info = project.get("info")
    if not isinstance(info, dict):
        return None, []
    version = info.get("version") if isinstance(info.get("version"), str) else None
    return version, requires_dist(info)


def requires_dist(info: Mapping[str, Any]) -> list[str]:
    raw = info.get("requires_dist")
    return [r for r in raw if isinstance(r, str)] if isinstance(raw, list) else []


def exact_pins(requirements: Iterable[str]) -> dict[str, str]:
    """name -> version of each `name==version` requirement that is not for an extra."""
    pins: dict[str, str] = {}
    for req in requirements:
        m = _PIN_RE.match(req)
        if not m or (m.group(3) and "extra" in m.group(3)):
            continue
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


class WheelCuda(NamedTuple):
    """The CUDA runtime and cuDNN the default (PyPI) torch wheel pins."""

    cuda: str  # x.y
    cudnn: str | None


def wheel_cuda(pins: Mapping[str, str]) -> WheelCuda | None:
    """From torch's exact pins: cuda-toolkit==13.2.2 (or nvidia-cuda-runtime-cu12==12.8.90)
    gives CUDA 13.2; nvidia-cudnn-cu13==9.26.0.51 its cuDNN."""
    cuda = next((v for k, v in pins.items() if _CUDA_PKG_RE.match(k)), None)
    if cuda is None or not re.match(r"^\d+\.\d+", cuda):
        return None
    cudnn = next((v for k, v in pins.items() if _CUDNN_PKG_RE.match(k)), None)
    return WheelCuda(major_minor(cuda), cudnn)


_TORCH_REQ_RE = re.compile(r"^\s*torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;(.*))?$", re.I)


def torch_requirement(requirements: Iterable[str]) -> str | None:
    """The version specifier a torchvision / torchaudio release declares for torch
    (`torch>=2.14.0` -> ">=2.14.0", `torch==2.12.0` -> "==2.12.0"); "" for a bare `torch`;
    None when it names no torch (requirements for an extra do not count)."""
    for req in requirements:
        m = _TORCH_REQ_RE.match(req)
        if m and not (m.group(2) and "extra" in m.group(2)):
            return m.group(1).replace(" ", "").strip("()")
    return None


def admits(specifier: str, version: str) -> bool:
    """Whether a declared specifier (">=2.14.0", "==2.15.0", "") admits a torch version."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return version in SpecifierSet(specifier)
    except InvalidSpecifier:
        return False
