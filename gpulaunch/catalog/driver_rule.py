"""The driver rule a container really meets: an image's requirement string (nvidia/cuda's
NVIDIA_REQUIRE_CUDA, an NGC release's stated driver, or a torch wheel's minor-version floor),
parsed and evaluated against a host's driver version and GPU brand (NVML).

`host_can_run` is the one question other code asks: can this driver/brand run this image (start
the container and initialise CUDA in it), and which driver does a user need.
Data: gpulaunch/data/driver_rules.yaml.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpulaunch.catalog.data import CONFIDENCES, major_minor, read_data, version_key
from gpulaunch.errors import CatalogError

_VERSION_RE = re.compile(r"\d+(?:\.\d+){0,3}")
_COND_RE = re.compile(r"(cuda|driver|brand|arch)(>=|<=|=|<|>)([A-Za-z0-9.]+)")
_CUDA_TAG_RE = re.compile(r"(?:nvcr\.io/)?nvidia/cuda:(\d+\.\d+\.\d+)-")
_NGC_TAG_RE = re.compile(r"nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-")


@dataclass(frozen=True)
class Condition:
    key: str  # cuda | driver | brand | arch
    op: str
    value: str


@dataclass(frozen=True)
class Requirement:
    """One image's rule: alternatives (OR) of conditions (AND)."""

    text: str
    source: str  # where the rule comes from, for messages
    alternatives: tuple[tuple[Condition, ...], ...]
    enforced: bool  # True: the container runtime refuses to start (nvidia-container-cli)
    # False: not read from NVIDIA's Dockerfiles (an image newer than driver_rules.yaml's
    # snapshot): modelled from the nearest read rule, never behind a default
    verified: bool = True

    @property
    def cuda_floor(self) -> str | None:
        """X.Y of the `cuda>=` alternative, if any."""
        for alt in self.alternatives:
            for cond in alt:
                if cond.key == "cuda" and cond.op == ">=":
                    return cond.value
        return None

    def needed(self) -> str | None:
        """The lowest driver that satisfies the rule for every GPU brand."""
        floors = [_alt_floor(alt) for alt in self.alternatives if not _brands_of(alt)]
        known = [f for f in floors if f is not None]
        return min(known, key=version_key) if known else None

    def branches(self) -> dict[str, tuple[str, ...]]:
        """Forward-compatibility branches: lower bound -> the brands admitted on it."""
        out: dict[str, list[str]] = {}
        for alt in self.alternatives:
            brands = _brands_of(alt)
            low = _alt_floor(alt)
            if brands and low is not None:
                out.setdefault(low, []).extend(b for b in brands if b not in out.get(low, []))
        return {k: tuple(v) for k, v in sorted(out.items(), key=lambda kv: version_key(kv[0]))}


@dataclass(frozen=True)
class Verdict:
    ok: bool
    driver: str
    brand: str | None
    needed: str | None  # driver every brand can use
    reason: str  # one line: which alternative admitted the host, or what it lacks

    @property
    def forward(self) -> bool:
        """Admitted only through a forward-compatibility branch (`...,driver<M`)."""
        return self.ok and "driver<" in self.reason


def _brands_of(alt: tuple[Condition, ...]) -> list[str]:
    return [c.value for c in alt if c.key == "brand"]


def _alt_floor(alt: tuple[Condition, ...]) -> str | None:
    lows: list[str] = []
    for cond in alt:
        if cond.key == "driver" and cond.op in (">=", "="):
            lows.append(cond.value)
        elif cond.key == "cuda" and cond.op == ">=":
            first = _data()["driver_cuda"].get(cond.value)
            if first is None:
                return None
            lows.append(first)
    return max(lows, key=version_key) if lows else None


@functools.cache
def _data() -> dict[str, Any]:
    raw = read_data("driver_rules.yaml", "driver rules: ")
    if not isinstance(raw, dict):
        raise CatalogError("driver rules: expected a mapping")
    for key in ("brands", "datacenter_brands", "wheel_floor", "driver_cuda", "require_cuda"):
        if key not in raw:
            raise CatalogError(f"driver rules: missing {key}")
    for table in ("require_cuda", "ngc_require"):
        for name, req in (raw.get(table) or {}).items():
            parse_requirement(str(req), f"{table} {name}", tuple(raw["datacenter_brands"]))
    return raw


@functools.lru_cache(maxsize=1024)  # the matrix asks for the same few rules hundreds of times
def parse_requirement(
    text: str, source: str = "requirement", datacenter: tuple[str, ...] | None = None
) -> Requirement:
    """Parse NVIDIA_REQUIRE_CUDA grammar (the result is frozen, so shared); `brand=datacenter`
    expands to the datacenter list (driver_rules.yaml's unless given)."""
    alternatives: list[tuple[Condition, ...]] = []
    for word in text.split():
        conds: list[list[Condition]] = [[]]
        for part in word.split(","):
            m = _COND_RE.fullmatch(part)
            if not m:
                raise CatalogError(f"{source}: cannot parse condition {part!r} in {text!r}")
            key, op, value = m.groups()
            if key in ("cuda", "driver") and not _VERSION_RE.fullmatch(value):
                raise CatalogError(f"{source}: {key} needs a version; got {value!r}")
            if key == "brand" and value == "datacenter":
                names = datacenter if datacenter is not None else _data()["datacenter_brands"]
                conds = [[*c, Condition("brand", "=", b)] for c in conds for b in names]
            else:
                conds = [[*c, Condition(key, op, value)] for c in conds]
        alternatives.extend(tuple(c) for c in conds)
    if not alternatives:
        raise CatalogError(f"{source}: empty requirement")
    return Requirement(text, source, tuple(alternatives), enforced=True)


def brand_name(nvml_brand: object) -> str | None:
    """NVML's brand enum (nvmlDeviceGetBrand) as the requirement strings spell it."""
    if nvml_brand is None:
        return None
    return str(_data()["brands"].get(str(nvml_brand), "unknown"))


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA X.Y this driver supports (None below CUDA 11.0)."""
    have = version_key(driver)
    fits = [cuda for cuda, first in _data()["driver_cuda"].items() if version_key(first) <= have]
    return max(fits, key=version_key) if fits else None


def cuda_image_requirement(cuda: str) -> Requirement:
    """NVIDIA_REQUIRE_CUDA of nvidia/cuda:CUDA-*, as read from NVIDIA's Dockerfiles; for a
    version driver_rules.yaml does not list, the best known rule marked unverified (see
    _unverified)."""
    table: dict[str, str] = _data()["require_cuda"]
    if cuda in table:
        return parse_requirement(table[cuda], f"nvidia/cuda {cuda} NVIDIA_REQUIRE_CUDA")
    return _unverified(cuda, table, reported_rules())


@dataclass(frozen=True)
class ReportedRule:
    rule: str
    source: str
    confidence: str


@functools.cache
def reported_rules() -> Mapping[str, ReportedRule]:
    """VERSION -> a rule seen only in secondary evidence (driver_rules.yaml
    reported_require_cuda), with where it was seen and how sure that is."""
    raw = _data().get("reported_require_cuda") or {}
    if not isinstance(raw, dict):
        raise CatalogError("driver rules: reported_require_cuda: expected a mapping")
    out = {}
    for version, row in raw.items():
        where = f"driver rules: reported_require_cuda {version}"
        if not isinstance(row, dict) or set(row) != {"rule", "source", "confidence"}:
            raise CatalogError(f"{where}: expected rule, source and confidence")
        if row["confidence"] not in CONFIDENCES:
            raise CatalogError(f"{where}: confidence must be high, medium or low")
        parse_requirement(str(row["rule"]), where)
        out[str(version)] = ReportedRule(str(row["rule"]), str(row["source"]), row["confidence"])
    return out


def _unverified(
    cuda: str, table: dict[str, str], reported: Mapping[str, ReportedRule]
) -> Requirement:
    """A rule NVIDIA's Dockerfiles we read do not state. In order: a reported rule of this
    version or of the newest earlier patch of the same X.Y (secondary evidence), the newest read
    rule of the same X.Y, else `_pattern_model`. Never a copy of the previous release alone: that
    misses the branch each release adds (13.2 lists 590, 13.1 did not). Marked unverified: never
    the rule of a default image (resolver), and named in every message."""
    xy = major_minor(cuda)
    if xy not in _data()["driver_cuda"]:
        raise CatalogError(f"image.cuda: no driver data for CUDA {cuda!r}")
    seen = [v for v in reported if major_minor(v) == xy and version_key(v) <= version_key(cuda)]
    same = [v for v in table if major_minor(v) == xy]
    if seen:
        near = max(seen, key=version_key)
        row = reported[near]
        text, how = row.rule, f"reported for {near}, {row.confidence} confidence"
    elif same:
        near = max(same, key=version_key)
        text, how = table[near], f"rule of {near}"
    else:
        text, how = _pattern_model(xy, {**table, **{v: r.rule for v, r in reported.items()}})
    return replace(
        parse_requirement(text, f"nvidia/cuda {cuda} (unverified: {how})"), verified=False
    )


def _pattern_model(xy: str, known: dict[str, str]) -> tuple[str, str]:
    """`cuda>=X.Y` with the branches of the newest known rule below X.Y (13.0 carried 12.9's),
    plus the previous X.Y's driver branch, which each release has added (NVIDIA's pattern,
    driver_rules.yaml; branches leave at end of life, which nothing here foretells)."""
    older = [v for v in known if version_key(major_minor(v)) < version_key(xy)]
    if not older:
        return f"cuda>={xy}", f"cuda>={xy} alone"
    near = max(older, key=version_key)
    clauses = [w for w in known[near].split() if "driver<" in w]
    previous = [c for c in _data()["driver_cuda"] if version_key(c) < version_key(xy)]
    added = ""
    if previous and clauses:
        branch = int(_data()["driver_cuda"][max(previous, key=version_key)].split(".")[0])
        listed = {int(w.split("driver>=")[1].split(",")[0].split(".")[0]) for w in clauses}
        if branch not in listed:
            brands = list(dict.fromkeys(w.split(",")[0] for w in clauses))
            clauses += [f"{b},driver>={branch},driver<{branch + 1}" for b in brands]
            added = f" + branch {branch}"
    text = " ".join([f"cuda>={xy}", *clauses])
    how = f"NVIDIA's pattern: branches of {near}{added}" if clauses else f"cuda>={xy} alone"
    return text, how


def stored_rules() -> dict[str, str]:
    """VERSION -> the NVIDIA_REQUIRE_CUDA string stored for nvidia/cuda:VERSION-*: read from
    NVIDIA's Dockerfiles, and the reported ones (what `dev/catalog-check` compares with the
    reference list, which carries both)."""
    out = {str(k): str(v) for k, v in _data()["require_cuda"].items()}
    out.update((version, row.rule) for version, row in reported_rules().items())
    return out


def verified_rule(cuda: str) -> bool:
    """True when driver_rules.yaml holds NVIDIA's own NVIDIA_REQUIRE_CUDA for this version."""
    return cuda in _data()["require_cuda"]


def wheel_requirement(cuda: str) -> Requirement:
    """A torch wheel on a base image without a requirement: CUDA minor-version compatibility."""
    floors: dict[str, str] = _data()["wheel_floor"]
    major = cuda.split(".")[0]
    if major not in floors:
        raise CatalogError(
            f"image.cuda: no driver data for CUDA {cuda!r}; known majors: {', '.join(floors)}"
        )
    req = parse_requirement(f"driver>={floors[major]}", f"torch wheel for CUDA {major}.x")
    return replace(req, enforced=False)


def ngc_requirement(tag: str) -> Requirement:
    table: dict[str, str] = _data().get("ngc_require") or {}
    if tag not in table:
        raise CatalogError(f"image: no driver data for NGC {tag}")
    return parse_requirement(table[tag], f"NGC {tag} release notes")


def requirement_for(base_image: str | None, cuda: str | None) -> Requirement | None:
    """The rule a container of this base image meets: nvidia/cuda and NGC images by tag, any
    other base with a CUDA torch wheel by the wheel's floor; None without CUDA."""
    if base_image:
        m = _CUDA_TAG_RE.match(base_image)
        if m:
            return cuda_image_requirement(m.group(1))
        m = _NGC_TAG_RE.match(base_image)
        if m:
            return ngc_requirement(m.group(1))
    return wheel_requirement(cuda) if cuda else None


def _holds(cond: Condition, driver: str, brand: str | None) -> bool:
    if cond.key == "brand":
        return brand is None or brand == cond.value  # brand unknown: cannot refuse on it
    if cond.key == "arch":
        return True
    have = version_key(driver) if cond.key == "driver" else version_key(driver_cuda(driver) or "0")
    want = version_key(cond.value)
    if cond.key == "driver" and cond.op in ("<", "<="):  # driver<471 bounds the branch 470
        have = have[: len(want)]
    return {
        ">=": have >= want,
        ">": have > want,
        "<=": have <= want,
        "<": have < want,
        "=": have == want,
    }[cond.op]


def host_can_run(requirement: Requirement, driver: str, brand: str | None) -> Verdict:
    """Can a host with this driver (and GPU brand, None if unknown) start this image, and
    which driver does a user need? The verdict names what admitted or refused the host."""
    if not _VERSION_RE.fullmatch(driver.strip()):
        raise CatalogError(f"driver: expected a version like 535.104.05; got {driver!r}")
    driver = driver.strip()
    needed = requirement.needed()
    for alt in requirement.alternatives:
        if _forward_compat(alt) and not _can_forward(brand):
            continue
        if all(_holds(c, driver, brand) for c in alt):
            via = ",".join(f"{c.key}{c.op}{c.value}" for c in alt)
            return Verdict(True, driver, brand, needed, f"{driver} meets {via}")
    reason = explain_need(requirement, brand)
    if not requirement.verified:
        reason += f" ({requirement.source.split('(', 1)[-1].rstrip(')')})"
    return Verdict(False, driver, brand, needed, reason)


def explain_need(requirement: Requirement, brand: str | None = None) -> str:
    """One line: the driver a user needs, e.g. `driver >= 570.26 (cuda>=12.8); datacenter
    GPUs (tesla, nvidia, ...) also on branches 470, 535, 550`."""
    needed = requirement.needed()
    floor = requirement.cuda_floor
    text = f"driver >= {needed}" if needed else "a newer driver"
    if floor:
        text += f" (cuda>={floor})"
    branches = requirement.branches()
    if brand is not None:
        ok = _can_forward(brand)
        branches = {low: bs for low, bs in branches.items() if ok and brand in bs}
    groups: dict[str, list[str]] = {}
    for low, brands in branches.items():
        groups.setdefault(brand or _who(brands), []).append(low)
    for who, lows in groups.items():
        text += f"; {who} GPUs also on driver branch {', '.join(lows)}"
    return text


def _forward_compat(alt: tuple[Condition, ...]) -> bool:
    """A `brand=B,driver>=N,driver<M` alternative: the image's cuda-compat on branch N."""
    return any(c.key == "driver" and c.op in ("<", "<=") for c in alt)


def _can_forward(brand: str | None) -> bool:
    """Forward compatibility runs on datacenter brands only: cuda-compat refuses GeForce/Titan
    at cuInit (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE), although CUDA images before 12.5
    list those brands on their branches and so start the container. Brand unknown: allowed."""
    return brand is None or brand in _data()["datacenter_brands"]


def _who(brands: tuple[str, ...]) -> str:
    if "geforce" in brands:
        return "all"
    if set(brands) == {"tesla"}:
        return "tesla"
    return "datacenter/workstation (not GeForce/Titan)"
