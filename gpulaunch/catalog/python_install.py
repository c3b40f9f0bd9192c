"""How Python gets into an image (gpulaunch/data/python_install.yaml): which source installs
which Python on which OS until when (distro, the deadsnakes PPA, a standalone CPython, the
image's own), the choice among them with the nearest working alternative when none can, and
the pip floor a venv is upgraded to before torch is installed."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from gpulaunch.catalog.data import (
    DASH,
    VERSION_RE,
    Catalog,
    TorchRelease,
    read_data,
    version_key,
)
from gpulaunch.errors import CatalogError

_PIP_WHEEL_RE = re.compile(r"^pip-(\d+(?:\.\d+)*)-py3-none-any\.whl$")
DATA = "gpulaunch/data/python_install.yaml"


class PipFloor(NamedTuple):
    min: str  # major.minor
    why: str

    def check_script(self) -> str:
        """Python one-liner: exit 0 when the running pip is at least `min`."""
        floor = ", ".join(self.min.split(".")[:2])
        return (
            "import importlib.metadata as m, sys; "
            'v = tuple(int(p) for p in m.version("pip").split(".")[:2] if p.isdigit()); '
            f"sys.exit(0 if v >= ({floor}) else 1)"
        )


def _bad(where: str, why: str) -> CatalogError:
    return CatalogError(f"{DATA}: {where}: {why}")


@functools.cache
def _data() -> dict[str, Any]:
    raw = read_data("python_install.yaml")
    if not isinstance(raw, dict):
        raise _bad("top level", "expected a mapping")
    return raw


def pip_floor() -> PipFloor:
    pip = _data().get("pip")
    if not isinstance(pip, dict):
        raise _bad("pip", "expected a mapping")
    floor, why = pip.get("min"), pip.get("why")
    if not isinstance(floor, str) or not VERSION_RE.match(floor):
        raise _bad("pip.min", "expected a quoted version")
    if not isinstance(why, str):
        raise _bad("pip.why", "expected a quoted string")
    return PipFloor(floor, why)


def wheelhouse_pip(folders: list[Path], floor: str) -> str | None:
    """The newest pip wheel at least `floor` in the wheelhouse folders, if any."""
    found = []
    for folder in folders:
        try:
            names = [p.name for p in folder.iterdir()]
        except OSError:
            continue
        for name in names:
            m = _PIP_WHEEL_RE.match(name)
            if m and version_key(m.group(1)) >= version_key(floor):
                found.append(m.group(1))
    return max(found, key=version_key) if found else None


# ---------------------------------------------------------------------------
# Python sources
# ---------------------------------------------------------------------------

_DATE_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


class Deadsnakes(NamedTuple):
    os: str
    pythons: tuple[str, ...]
    until: date
    # Pythons the series may have that no source read here confirms: used with a warning,
    # never refused as absent
    unverified: tuple[str, ...] = ()


class Standalone(NamedTuple):
    pythons: tuple[str, ...]
    glibc: str
    uv_image: str


def _texts(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and VERSION_RE.match(v) for v in value
    ):
        raise _bad(where, "expected a list of quoted versions")
    return tuple(value)


def _sources() -> dict[str, Any]:
    sources = _data().get("sources")
    if not isinstance(sources, dict):
        raise _bad("sources", "expected a mapping")
    return sources


@functools.cache
def deadsnakes() -> dict[str, Deadsnakes]:
    rows = _sources().get("deadsnakes")
    if not isinstance(rows, dict):
        raise _bad("sources.deadsnakes", "expected a mapping")
    out = {}
    for os_name, row in rows.items():
        where = f"sources.deadsnakes.{os_name}"
        if not isinstance(row, dict):
            raise _bad(where, "expected a mapping")
        m = _DATE_RE.match(str(row.get("until", "")))
        if not m:
            raise _bad(f"{where}.until", 'expected "YYYY-MM-DD"')
        until = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        extra = row.get("unverified")
        out[str(os_name)] = Deadsnakes(
            str(os_name),
            _texts(row.get("pythons"), where),
            until,
            _texts(extra, f"{where}.unverified") if extra is not None else (),
        )
    return out


@functools.cache
def standalone() -> Standalone:
    row = _sources().get("standalone")
    if not isinstance(row, dict) or not isinstance(row.get("uv_image"), str):
        raise _bad("sources.standalone", "expected a mapping with uv_image")
    glibc = row.get("glibc")
    if not isinstance(glibc, str) or not VERSION_RE.match(glibc):
        raise _bad("sources.standalone.glibc", "expected a quoted version")
    return Standalone(_texts(row.get("pythons"), "sources.standalone"), glibc, row["uv_image"])


def deadsnakes_gap(os_name: str, python: str, on: date) -> str | None:
    """Why deadsnakes cannot install `python` on `os_name` on that date (None: it can)."""
    row = deadsnakes().get(os_name)
    if row is None:
        return f"deadsnakes has no {os_name} series"
    if on > row.until:
        return f"deadsnakes removed {os_name} after its end of life ({row.until.isoformat()})"
    if python not in row.pythons + row.unverified:
        return f"deadsnakes has no Python {python} for {os_name}"
    return None


def choose_source(
    cat: Catalog,
    os_name: str,
    python: str,
    requested: str | None,
    release: TorchRelease | None,
    warnings: list[str],
    oses: Sequence[str] = (),
) -> str:
    """Where the venv's Python comes from on a base of `os_name` (on today's date), or a
    CatalogError naming the nearest choices that can install (`requested` is never "image":
    the resolver keeps the image's own Python without asking). `oses` are the OSes the same
    image exists for; `release` (the torch release, if any) says which Pythons torch takes.
    A source whose having this Python is not confirmed adds a warning."""
    distro = cat.os[os_name].python
    if requested in (None, "distro") and python == distro:
        return "distro"
    if requested == "distro":
        raise CatalogError(
            f"image.python_source: distro gives Python {distro} on {os_name}; got python {python}"
        )
    if requested == "standalone":
        _check_standalone(python, cat.os[os_name].glibc, os_name)
        return "standalone"  # downloads CPython (python-build-standalone) at build time
    on = date.today()
    gap = deadsnakes_gap(os_name, python, on)
    if gap is None:
        if python in deadsnakes()[os_name].unverified:
            warnings.append(
                f"image.python_source: deadsnakes' Python {python} for {os_name} is unverified "
                "(no source read confirms the PPA publishes it); the build fails at apt-get if "
                "it does not"
            )
        return "deadsnakes"
    python_ok = (lambda py: True) if release is None else release.python_ok
    others = {name: cat.os[name].python for name in oses}
    raise CatalogError(
        f"image.python: Python {python} cannot be installed on {os_name}: {gap}; "
        + _alternatives(os_name, python, distro, on, python_ok, others)
    )


def _check_standalone(python: str, glibc: str, os_name: str) -> None:
    row = standalone()
    if python not in row.pythons:
        raise CatalogError(
            f"image.python_source: standalone CPython builds exist for Python "
            f"{row.pythons[0]}{DASH}{row.pythons[-1]}; got {python}"
        )
    if version_key(glibc) < version_key(row.glibc):
        raise CatalogError(
            f"image.python_source: standalone CPython needs glibc >= {row.glibc}; "
            f"{os_name} has {glibc}"
        )


def _alternatives(
    os_name: str,
    python: str,
    distro: str,
    on: date,
    python_ok: Callable[[str], bool],
    other_oses: Mapping[str, str],
) -> str:
    options = []
    if python in standalone().pythons:
        options.append(f"image.python_source: standalone (Python {python}, no PPA)")
    if python_ok(distro):
        options.append(f"python {distro} ({os_name}'s own)")
    for other, other_distro in other_oses.items():
        if other == os_name:
            continue
        if other_distro == python or deadsnakes_gap(other, python, on) is None:
            options.append(f"os {other}")
            break
    if options:
        return "use " + " or ".join(options)
    return _no_source(python, on, python_ok)


def _no_source(python: str, on: date, python_ok: Callable[[str], bool]) -> str:
    """The reason no catalogued source has `python`, naming what does work: an explicit base
    image that brings it, or the newest Python a source installs that torch takes."""
    series = [
        name for name, row in deadsnakes().items() if python in row.pythons and on <= row.until
    ]
    built = standalone().pythons
    text = (
        f"no source in gpulaunch's data has Python {python} (deadsnakes: "
        f"{', '.join(series) or 'no series'}; standalone builds: up to {built[-1]}); "
        f"use image.base with an image that has Python {python} and image.python_source: image"
    )
    nearest = next((p for p in reversed(built) if python_ok(p)), None)
    if nearest is not None:
        text += f", or python {nearest} with image.python_source: standalone"
    return text
