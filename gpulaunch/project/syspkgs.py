"""The OS packages a project's pip distributions need (gpulaunch/data/system_packages.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from gpulaunch.errors import ConfigError
from gpulaunch.project.model import Project

DATA = "system_packages.yaml"


@dataclass(frozen=True)
class Need:
    packages: tuple[str, ...]
    because: str  # "opencv-python (requirements.txt:4): cv2 loads libGL.so.1 ..."


def _table() -> dict[str, object]:
    from gpulaunch.yamlio import read_packaged

    data = read_packaged(DATA)
    if not isinstance(data, dict):
        raise ConfigError(f"gpulaunch/data/{DATA}: not a mapping")
    return data


def needs(project: Project) -> list[Need]:
    """What the table says for each requirement of the project, in requirement order."""
    table = _table()
    vcs = table.get("vcs", {})
    packages = table.get("packages", {})
    assert isinstance(vcs, dict) and isinstance(packages, dict)
    out: list[Need] = []
    for dep in project.deps:
        if dep.url and dep.vcs:
            kind = dep.url.split("+", 1)[0]
            out.append(Need(tuple(vcs.get(kind, [])), f"{dep.name} ({dep.where}): a {kind} URL"))
        row = packages.get(dep.name)
        if isinstance(row, dict):
            out.append(
                Need(tuple(row.get("apt", [])), f"{dep.name} ({dep.where}): {row.get('why')}")
            )
    for build in project.builds:
        if build.compiles:
            out.append(Need(("g++",), f"{build.shown} ({build.compiles}): compiles an extension"))
    return out


# compilers whose packages build Python extensions, which need the interpreter's headers
COMPILERS = ("g++", "gcc", "build-essential", "clang")
