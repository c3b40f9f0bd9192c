"""The project's word against the catalog: its torch pin (local version included), CUDA
variant, Python range and torchvision / torchaudio pins win where the catalog has such a
build; a conflict is refused naming the nearest combination, or warned saying what changed.

The catalog rows come from the caller (`gpulaunch versions` rows), so this package stays
below `gpulaunch.image`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from gpulaunch.errors import ConfigError
from gpulaunch.project.model import Project

if TYPE_CHECKING:
    from gpulaunch.catalog.request import MatrixRow


@dataclass
class Choice:
    torch: str | None = None
    cuda: str | None = None  # "11.8" or "cpu"; None: the catalog's default
    python: str | None = None
    extras: list[str] = field(default_factory=list)  # torchvision/torchaudio at the catalog pairing
    pins: dict[str, str] = field(default_factory=dict)  # project pins kept over the pairing
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _spec(text: str, what: str) -> SpecifierSet:
    """A specifier for matching catalog releases: local labels (+cu118) are the variant's
    business, so they are left out here."""
    parts = [p.split("+", 1)[0] for p in text.split(",") if p.strip()]
    try:
        return SpecifierSet(",".join(parts))
    except InvalidSpecifier:
        raise ConfigError(f"{what}: cannot understand the specifier {text!r}") from None


def _pythons(row: MatrixRow) -> list[str]:
    lo, hi = Version(row.python_min), Version(row.python_max)
    return [f"3.{m}" for m in range(lo.minor, hi.minor + 1) if lo.major == 3]


def _python_fits(project: Project, rows: list[MatrixRow]) -> list[MatrixRow]:
    """The rows with a Python the project's requires-python allows."""
    spec = _spec(project.python_spec or "", project.python_where or "requires-python")
    return [r for r in rows if any(Version(p) in spec for p in _pythons(r))]


def cuda_of_variant(variant: str) -> str | None:
    if variant == "cpu":
        return "cpu"
    if variant.startswith("cu") and variant[2:].isdigit():
        return f"{variant[2:-1]}.{variant[-1]}"
    return None


def _versions(rows: Sequence[MatrixRow]) -> str:
    return ", ".join(sorted({r.torch for r in rows}, key=Version)[-6:])


def reconcile(
    project: Project,
    rows: Sequence[MatrixRow],
    *,
    torch: str | None,
    cuda: str | None,
    python: str | None,
    default_python: Callable[[str, str | None], str],
) -> Choice:
    """Choose torch / CUDA / Python for `init` from flags, then the project, then defaults."""
    choice = Choice()
    pin = project.pin("torch")
    rows = list(rows)
    everything = rows
    overridden = False  # --torch outside the project's pin: its companion pins yield too
    if pin is not None and pin.specifier and torch is None:
        spec = _spec(pin.specifier, f"{pin.where} torch")
        rows = [r for r in rows if Version(r.torch) in spec]
        if not rows:
            raise ConfigError(
                f"{pin.where}: no torch release in the catalog matches torch{pin.specifier}"
                + _outside(spec, everything)
            )
        choice.notes.append(f"torch pin found in {pin.where}: torch{pin.specifier}")
    elif torch is not None and torch != "none":
        rows = [r for r in rows if r.torch == torch or r.torch.startswith(torch + ".")] or rows
        if pin is not None and pin.specifier:
            spec = _spec(pin.specifier, "torch")
            overridden = not any(Version(r.torch) in spec for r in rows)
            if overridden:
                choice.warnings.append(
                    f"--torch {torch} overrides the project's torch{pin.specifier} ({pin.where})"
                )
    rows = _constrained(project, rows, torch, choice)
    variant = _variant(project, cuda, choice)
    if variant is not None:
        with_variant = [r for r in rows if r.variant == variant]
        if not with_variant:
            _no_variant(project, variant, rows, torch, python)
        rows = with_variant
    rows = _python_rows(project, rows, python)
    rows = rows if overridden else _companion_rows(project, rows)
    trusted = [r for r in rows if r.confidence != "low"] or rows
    if cuda != "cpu" and variant != "cpu":
        # never a default whose CUDA builds are all unverified or whose images all carry an
        # unverified driver rule
        ready = {r.torch for r in rows if r.cuda and r.driver_verified and r.verified}
        trusted = [r for r in trusted if r.torch in ready] or trusted
    best = max(trusted, key=lambda r: Version(r.torch))
    if pin is not None or torch is not None or project.torch_constraints:
        choice.torch = best.torch if torch != "none" else None
    if variant is not None:
        choice.cuda = cuda_of_variant(variant)
    choice.python = _pick_python(project, best, python, default_python(best.torch, choice.cuda))
    _companions(project, best, choice, overridden)
    return choice


def _constrained(
    project: Project, rows: list[MatrixRow], torch: str | None, choice: Choice
) -> list[MatrixRow]:
    """What else binds torch (a lock, a constraints file, a dependency's own requirement):
    a torch none of them allows would not resolve, so it is never chosen; a conflict is
    refused naming both sides (warned when --torch chose)."""
    pin = project.pin("torch")
    for text, why in project.torch_constraints:
        spec = _spec(text, why)
        fitting = [r for r in rows if Version(r.torch) in spec]
        if fitting:
            rows = fitting
            choice.notes.append(f"torch{text}: {why}")
            continue
        chosen = f"--torch {torch}" if torch and torch != "none" else None
        if chosen is None and pin is not None and pin.specifier:
            chosen = f"torch{pin.specifier} ({pin.where})"
        if torch is not None:
            choice.warnings.append(f"{chosen or '--torch'} does not meet torch{text}: {why}")
            continue
        raise ConfigError(
            f"{why}: needs torch{text}, which no torch in the catalog"
            + (f" matching {chosen}" if chosen else "")
            + f" meets ({_versions(rows) or 'none'}); change the pins so they agree"
        )
    return rows


def _outside(spec: SpecifierSet, rows: Sequence[MatrixRow]) -> str:
    """Why a torch pin matches no catalog release: older than the oldest, newer than the
    newest (each named with its builds), or between releases."""
    known = sorted({r.torch for r in rows}, key=Version)
    if not known:
        return ""
    bounds = [Version(s.version.rstrip(".*")) for s in spec if s.operator in ("==", "<", "<=")]
    oldest, newest = known[0], known[-1]
    if bounds and max(bounds) <= Version(oldest):
        builds = ", ".join(sorted({r.variant for r in rows if r.torch == oldest}))
        return (
            f": it is older than every build the catalog has; the oldest is torch {oldest} "
            f"({builds}); pin a newer torch, or give image.base an image of your own"
        )
    lows = [Version(s.version.rstrip(".*")) for s in spec if s.operator in ("==", ">", ">=")]
    if lows and min(lows) > Version(newest):
        return (
            f": it is newer than the newest the catalog has (torch {newest}); "
            "`gpulaunch catalog update` reads newer releases"
        )
    return f"; known: {_versions(rows)}"


def _nearest(variant: str, rows: Sequence[MatrixRow]) -> MatrixRow | None:
    """The build closest to `variant`: the nearest CUDA (a CPU build only for a CPU ask),
    then the newest torch."""

    def distance(row: MatrixRow) -> int:
        if (row.variant == "cpu") != (variant == "cpu"):
            return 10_000
        if variant.startswith("cu") and row.variant.startswith("cu"):
            return abs(int(row.variant[2:]) - int(variant[2:]))
        return 0

    newest_first = sorted(rows, key=lambda r: Version(r.torch), reverse=True)
    return min(newest_first, key=distance, default=None)


def _no_variant(
    project: Project, variant: str, rows: list[MatrixRow], torch: str | None, python: str | None
) -> None:
    """Refuse a project's CUDA build the catalog lacks, naming a build that keeps its other
    constraints (its Python range): `--cuda X.Y` chooses it."""
    builds = sorted({r.variant for r in rows}, key=lambda v: (v == "cpu", len(v), v))
    fitting = _python_fits(project, rows) if python is None and project.python_spec else rows
    near = _nearest(variant, fitting)
    hint = ""
    if near is not None:
        flag = cuda_of_variant(near.variant)
        hint = f"; nearest: torch {near.torch}+{near.variant} (pass --cuda {flag} to choose it)"
    where = project.variant_where or "--cuda"
    if torch is not None and torch != "none":
        where = f"--torch {torch} (the project's {variant}: {where})"
    raise ConfigError(
        f"{where}: the catalog has no {variant} build of torch {_versions(rows) or '?'} "
        f"(builds: {', '.join(builds)}){hint}"
    )


def _variant(project: Project, cuda: str | None, choice: Choice) -> str | None:
    if cuda is not None:
        if project.variant and cuda_of_variant(project.variant) not in (cuda, None):
            choice.warnings.append(
                f"--cuda {cuda} overrides the project's {project.variant} ({project.variant_where})"
            )
        return None  # the flag is checked by the resolver, with its own message
    if project.variant is None:
        return None
    if project.variant.startswith("rocm"):
        raise ConfigError(
            f"{project.variant_where}: ROCm builds ({project.variant}) are not supported; "
            "pass --cuda to choose a CUDA or CPU build"
        )
    choice.notes.append(f"PyTorch build found in {project.variant_where}: {project.variant}")
    return project.variant


def _python_rows(project: Project, rows: list[MatrixRow], python: str | None) -> list[MatrixRow]:
    if python is not None or not project.python_spec:
        return rows
    fitting = _python_fits(project, rows)
    if fitting:
        return fitting
    ranges = sorted({f"{r.python_min}-{r.python_max}" for r in rows})
    everything = f"torch {_versions(rows)}"
    raise ConfigError(
        f"{project.python_where}: Python {project.python_spec} is outside what {everything} "
        f"supports (Python {', '.join(ranges)}); pass --python, or pin a torch that supports it"
    )


def _pick_python(project: Project, row: MatrixRow, python: str | None, default: str) -> str | None:
    if python is not None:
        return python
    if not project.python_spec:
        return None
    spec = _spec(project.python_spec, project.python_where or "requires-python")
    if Version(default) in spec:
        return None
    fitting = [p for p in _pythons(row) if Version(p) in spec]
    return min(
        fitting, key=lambda p: (abs(Version(p).minor - Version(default).minor), -Version(p).minor)
    )


def _companion_rows(project: Project, rows: list[MatrixRow]) -> list[MatrixRow]:
    for name in ("torchvision", "torchaudio"):
        dep = project.pin(name)
        if dep is None or not dep.specifier or _exact(dep.specifier):
            continue
        spec = _spec(dep.specifier, f"{dep.where} {name}")
        fitting = [r for r in rows if getattr(r, name) and Version(getattr(r, name)) in spec]
        if not fitting:
            raise ConfigError(
                f"{dep.where}: {name}{dep.specifier} matches no {name} paired with torch "
                f"{_versions(rows)} in the catalog; pin torch and {name} from `gpulaunch versions`"
            )
        rows = fitting
    return rows


def _exact(spec: str) -> str | None:
    if spec.startswith("==") and "," not in spec and "*" not in spec:
        return spec[2:].split("+", 1)[0]
    return None


def _companions(project: Project, row: MatrixRow, choice: Choice, overridden: bool) -> None:
    """The project's torchvision/torchaudio: its exact pin is kept (with a warning when the
    catalog pairs another), unless --torch overrode its torch pin, to which its companion
    pins were tied: then they yield to the catalog's pairing with the new torch too."""
    for name in ("torchvision", "torchaudio"):
        dep = project.pin(name)
        if dep is None:
            continue
        paired = getattr(row, name)
        exact = _exact(dep.specifier)
        if (
            overridden
            and dep.specifier
            and paired
            and Version(paired) not in _spec(dep.specifier, f"{dep.where} {name}")
        ):
            choice.extras.append(name)
            choice.warnings.append(
                f"--torch {row.torch} overrides the project's {name}{dep.specifier} "
                f"({dep.where}) too: {name} {paired}, the catalog's pairing"
            )
        elif exact is not None and exact != paired:
            choice.pins[name] = exact
            what = f"the catalog's pairing {paired}" if paired else "no pairing in the catalog"
            choice.warnings.append(
                f"{name} {exact} (the project's pin, {dep.where}) is installed with torch "
                f"{row.torch} instead of {what}"
            )
        elif paired:
            choice.extras.append(name)
        else:
            choice.notes.append(f"{name}: no release known for torch {row.torch}; left to pip")
