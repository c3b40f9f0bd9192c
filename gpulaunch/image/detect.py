"""What a project already says about its image (read by `init`, see `init.py`).

Detection reads requirements.txt / pyproject.toml for a torch pin, torchvision/torchaudio
and a PyTorch wheel index (`.../whl/cu121`), so the generated config agrees with what the
project already pins instead of silently choosing another CUDA build.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from gpulaunch.config import CONFIG_NAME, sanitize_name
from gpulaunch.errors import ConfigError

_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
_INDEX = re.compile(r"download\.pytorch\.org/whl/(cu\d+|cpu|rocm[\d.]+)")


@dataclass
class Detected:
    """What init found in the project folder."""

    name: str
    requirements: str | None = None
    torch_spec: str | None = None  # e.g. "==2.4.1" or ">=2.1,<2.5"
    torch_extras: list[str] = field(default_factory=list)
    variant: str | None = None  # "cu121" / "cpu" from an --index-url line
    existing_config: bool = False
    notes: list[str] = field(default_factory=list)


def _requirement_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path.name}: cannot read: {err}") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines()]


def _pyproject_lines(path: Path) -> list[str] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path.name}: cannot parse: {err}") from None
    deps = data.get("project", {}).get("dependencies")
    return [str(d) for d in deps] if isinstance(deps, list) else None


def _scan(lines: list[str], found: Detected) -> None:
    for line in lines:
        if not line:
            continue
        index = _INDEX.search(line)
        if index:
            found.variant = index.group(1)
        if line.startswith("-"):
            continue
        match = _REQ_NAME.match(line.split(";", 1)[0])
        if not match:
            continue
        name = match.group(1).lower().replace("_", "-")
        spec = match.group(3).strip()
        if name == "torch":
            found.torch_spec = spec.split("+", 1)[0] if spec else ""
        elif name in ("torchvision", "torchaudio"):
            found.torch_extras.append(name)


def detect(project_dir: Path) -> Detected:
    found = Detected(name=sanitize_name(project_dir.resolve().name))
    found.existing_config = (project_dir / CONFIG_NAME).exists()
    req = project_dir / "requirements.txt"
    pyproject = project_dir / "pyproject.toml"
    if req.is_file():
        found.requirements = "requirements.txt"
        _scan(_requirement_lines(req), found)
    elif pyproject.is_file():
        lines = _pyproject_lines(pyproject)
        if lines is not None:
            found.requirements = "pyproject.toml"
            _scan(lines, found)
    if found.torch_spec is not None:
        found.notes.append(f"torch pin found in {found.requirements}: torch{found.torch_spec}")
    return found


def pick_torch(spec: str | None, known: list[str]) -> str | None:
    """Newest catalog torch version that satisfies a requirement specifier."""
    if not spec:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        specifier = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ConfigError(f"requirements: cannot understand the torch pin {spec!r}") from None
    matching = sorted((v for v in known if Version(v) in specifier), key=Version)
    if not matching:
        raise ConfigError(
            f"requirements: no torch release in the catalog matches torch{spec}; "
            f"known: {', '.join(sorted(known, key=Version)[-6:])}"
        )
    return matching[-1]


def variant_to_cuda(variant: str | None) -> str | None:
    """'cu121' -> '12.1', 'cu118' -> '11.8', 'cpu' -> 'cpu'."""
    if variant is None or variant.startswith("rocm"):
        return None
    if variant == "cpu":
        return "cpu"
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"
