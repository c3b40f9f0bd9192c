"""How Python gets into an image: the pip floor a venv is upgraded to before torch is
installed (gpulaunch/data/python_install.yaml)."""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from gpulaunch.errors import CatalogError, ConfigError

_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
_PIP_WHEEL_RE = re.compile(r"^pip-(\d+(?:\.\d+)*)-py3-none-any\.whl$")
DATA = "gpulaunch/data/python_install.yaml"


def _vt(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


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
    from gpulaunch.yamlio import parse_yaml_text

    text = resources.files("gpulaunch").joinpath("data", "python_install.yaml").read_text("utf-8")
    try:
        raw = parse_yaml_text(text, DATA)
    except ConfigError as err:
        raise CatalogError(err.message) from None
    if not isinstance(raw, dict):
        raise _bad("top level", "expected a mapping")
    return raw


def pip_floor() -> PipFloor:
    pip = _data().get("pip")
    if not isinstance(pip, dict):
        raise _bad("pip", "expected a mapping")
    floor, why = pip.get("min"), pip.get("why")
    if not isinstance(floor, str) or not _VERSION_RE.match(floor):
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
            if m and _vt(m.group(1)) >= _vt(floor):
                found.append(m.group(1))
    return max(found, key=_vt) if found else None
