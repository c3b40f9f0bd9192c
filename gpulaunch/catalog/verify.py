"""`dev/catalog-check`: compare every stored driver rule (driver_rules.yaml require_cuda) with
NVIDIA's, as listed in a reference file (VERSION<TAB>OS<TAB>NVIDIA_REQUIRE_CUDA, read from
NVIDIA's container-images Dockerfiles); re-read the packaged catalog's torch facts from PyPI (the
sources `catalog update` uses) and list where they differ, and what PyPI has that the catalog
lacks.

Compared per packaged minor: each patch is a final PyPI release with a Linux x86_64 wheel; the
Python floor (`requires_python`) and ceiling (cp3XX wheels) and the manylinux glibc floor of its
newest patch; torchvision / torchaudio pairings against the torch requirement their metadata
declares.
"""

from __future__ import annotations

from typing import Any

from gpulaunch.catalog import pypi_facts
from gpulaunch.catalog.data import version_key
from gpulaunch.catalog.update import Sources, UpdateProject, build_update, raw_releases
from gpulaunch.errors import CatalogError

# Differences the packaged catalog keeps on purpose: the line `differences` prints -> why.
# `dev/catalog-check` prints them as `excepted:` and does not count them.
EXCEPTIONS: dict[str, str] = {
    "torch 1.13: python.max 3.10, PyPI 1.13.1 has wheels up to cp311": (
        "PyTorch's matrix (RELEASE.md) supports 3.7-3.10 for 1.13, and 1.13.0 has no cp311 "
        "wheel: a release-wide 3.11 would break `torch: 1.13.0`"
    ),
}


def split_exceptions(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the lines that are differences, `excepted: LINE (why)` for the deliberate ones)."""
    real = [line for line in lines if line not in EXCEPTIONS]
    kept = [f"excepted: {line} ({EXCEPTIONS[line]})" for line in lines if line in EXCEPTIONS]
    return real, kept


def differences(packaged: dict[str, Any], sources: Sources) -> list[str]:
    """One line per difference, then `missing:` lines for what an update would add, then
    `not reached:` lines for the sources that did not answer."""
    from datetime import date

    report = build_update(packaged, sources, date.today())  # raises when PyPI does not answer
    torch = UpdateProject("torch", sources.project("torch"), sources)
    vision = UpdateProject("torchvision", sources.project("torchvision"), sources)
    audio = UpdateProject("torchaudio", sources.project("torchaudio"), sources)
    out: list[str] = []
    for rel in raw_releases(packaged):
        out.extend(_release_diffs(rel, torch))
        for patch in rel.get("patches", []):
            for project, key in ((vision, "torchvision"), (audio, "torchaudio")):
                out.extend(_pairing_diffs(patch, project, key))
    out.extend(f"missing: {line}" for line in report.added)
    out.extend(f"not reached: {line}" for line in sorted(set(sources.unreachable)))
    return out


def _release_diffs(rel: dict[str, Any], torch: UpdateProject) -> list[str]:
    minor = rel["minor"]
    out = []
    patches = [p["torch"] for p in rel.get("patches", []) if isinstance(p, dict)]
    for version in patches:
        if version not in torch.releases:
            out.append(f"torch {version}: no final Linux x86_64 release on PyPI")
    found = [torch.releases[v] for v in patches if v in torch.releases]
    if not found:
        return out
    newest = max(found, key=lambda f: version_key(f.version))
    python = rel.get("python", {})
    experimental = python.get("experimental", [])
    if newest.python_min and newest.python_min != python.get("min"):
        out.append(
            f"torch {minor}: python.min {python.get('min')}, PyPI {newest.version} "
            f"requires_python {newest.requires_python}"
        )
    top = newest.python_max
    if top and top != python.get("max") and top not in experimental:
        out.append(
            f"torch {minor}: python.max {python.get('max')}, PyPI {newest.version} has "
            f"wheels up to cp{top.replace('.', '')}"
        )
    if newest.glibc and newest.glibc != rel.get("glibc"):
        out.append(f"torch {minor}: glibc {rel.get('glibc')}, PyPI wheels manylinux {newest.glibc}")
    return out


def _pairing_diffs(patch: dict[str, Any], project: UpdateProject, key: str) -> list[str]:
    paired = patch.get(key)
    if not isinstance(paired, str):
        return []
    if paired not in project.releases:
        return [f"torch {patch['torch']}: {key} {paired} is not a release on PyPI"]
    dist = project.latest_dist if paired == project.latest else None
    spec = pypi_facts.torch_requirement(dist or [])
    if spec is not None and not pypi_facts.admits(spec, patch["torch"]):
        return [f"torch {patch['torch']}: {key} {paired} requires torch{spec} on PyPI"]
    return []


def reference_rules(text: str, label: str = "reference") -> dict[str, str]:
    """VERSION -> requirement from the reference list; '#' lines and blank lines are skipped."""
    rules: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not parts[0].strip() or not parts[2].strip():
            raise CatalogError(f"{label}:{number}: expected VERSION<TAB>OS<TAB>REQUIREMENT")
        rules[parts[0].strip()] = " ".join(parts[2].split())
    return rules


def rule_differences(stored: dict[str, str], reference: dict[str, str]) -> list[str]:
    """One line per stored rule that is not NVIDIA's (absent from the reference or different),
    and per reference rule not stored."""
    out: list[str] = []
    for version in sorted(set(stored) | set(reference), key=version_key):
        mine, theirs = stored.get(version), reference.get(version)
        if theirs is None:
            out.append(
                f"driver rule {version}: stored, but not in NVIDIA's Dockerfiles (reference)"
            )
        elif mine is None:
            out.append(f"driver rule {version}: in the reference, not stored")
        elif " ".join(mine.split()) != theirs:
            out.append(f"driver rule {version}: stored {_first_difference(mine, theirs)}")
    return out


def _first_difference(mine: str, theirs: str) -> str:
    a, b = mine.split(), theirs.split()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"clause {i + 1} {x!r}, NVIDIA's {y!r}"
    return f"{len(a)} clauses, NVIDIA's {len(b)}"
