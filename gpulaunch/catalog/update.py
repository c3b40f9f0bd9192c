"""`gpulaunch catalog update`: what PyPI (and, where reachable, the PyTorch wheel index and
Docker Hub) knows that the packaged catalog does not, written as an overlay file.

Confidence of what it writes:
- a torch patch is on PyPI (a fact); its torchvision / torchaudio come from their own metadata:
  `high` when it pins `torch==` it exactly, `medium` when a release uploaded with or after it
  declares a range that admits it, else (metadata not readable) the version convention,
  `medium` and reported;
- a new torch minor's Python range and glibc come from its wheels (`requires_python`, cp3XX
  and manylinux tags); its CUDA builds are those the PyTorch index lists (`medium`: their arch
  lists are carried over from the previous minor), else only the build PyPI's own wheel pins
  (cuda-toolkit==X.Y.Z, `medium`). No build is carried over without such evidence.
What could not be verified or reached is listed in the report and in the overlay's `sources`;
the overlay's `sources.refreshed` names the parts it read (torch; cuda_images only when Docker
Hub answered), so a PyPI-only update does not silence the staleness of CUDA and NGC facts.
"""

from __future__ import annotations

import copy
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from gpulaunch.catalog import overlay, pypi_facts
from gpulaunch.catalog.data import DASH, T, major_minor, version_key
from gpulaunch.catalog.pypi_facts import ReleaseFacts
from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.outside import pypi

INDEX_ENV = "GPULAUNCH_TORCH_INDEX_URL"  # PyTorch's wheel index (a mirror, a test server)
HUB_ENV = "GPULAUNCH_DOCKER_HUB_URL"
DEFAULT_INDEX = "https://download.pytorch.org/whl"
DEFAULT_HUB = "https://hub.docker.com"
PROBE_TIMEOUT_S = 10.0
OVERLAY_NAME = "pypi.yaml"
# What one update reads and writes is bounded whatever a server answers: the newest releases
# the catalog lacks (a few a month are published), tags from one page, and the file itself,
# far below what an overlay may be (yamlio.MAX_BYTES) and far above what a real update writes.
MAX_NEW_RELEASES = 24
MAX_TAGS = 100  # Docker Hub's page_size
MAX_OVERLAY_BYTES = 256 * 1024
MAX_VERSION_CHARS = 32  # 2.15.1: a longer "version" is not one


class Sources:
    """The outside reads of one update, each through `gpulaunch.outside.pypi` with a timeout;
    records what was reached and what was not (a source that failed once is not retried)."""

    def __init__(self, *, base_url: str | None = None, timeout: float = pypi.TIMEOUT_S) -> None:
        """`timeout`: seconds the whole update may spend reading; each read gets what is left."""
        self.base_url = (base_url or pypi.pypi_url()).rstrip("/")
        self.index_url = (os.environ.get(INDEX_ENV) or DEFAULT_INDEX).rstrip("/")
        self.hub_url = (os.environ.get(HUB_ENV) or DEFAULT_HUB).rstrip("/")
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout
        self.reached: list[str] = []
        self.unreachable: list[str] = []
        self.hub_reached = False  # Docker Hub's tag list answered (cuda_images refreshed)
        self._down: set[str] = set()

    def _get(self, url: str, kind: str, timeout: float, fetch: Callable[..., T]) -> T | None:
        """`fetch` within the time left; None when the source did not answer (recorded)."""
        if kind in self._down:
            return None
        left = self._deadline - time.monotonic()
        if left <= 0.05:
            self.unreachable.append(f"{url}: not asked: --timeout {self.timeout:g} s spent")
            return None
        timeout = min(timeout, left)
        try:
            data = fetch(url, timeout=timeout)
        except pypi.Unreachable as err:
            if kind != "pypi-release":  # a missing per-release page is not an outage
                self._down.add(kind)
            message = err.message
            if time.monotonic() >= self._deadline - 0.05:
                message = f"{url}: no complete answer within --timeout {self.timeout:g} s"
            self.unreachable.append(message)
            return None
        self.reached.append(url)
        return data

    def project(self, name: str) -> dict[str, Any] | None:
        return self._get(
            f"{self.base_url}/{name}/json", f"pypi-{name}", self.timeout, pypi.fetch_json
        )

    def requires_dist(self, name: str, version: str) -> list[str] | None:
        url = f"{self.base_url}/{name}/{version}/json"
        data = self._get(url, "pypi-release", self.timeout, pypi.fetch_json)
        if data is None or not isinstance(data.get("info"), dict):
            return None
        return pypi_facts.requires_dist(data["info"])

    def index_page(self, variant: str) -> str | None:
        url = f"{self.index_url}/{variant}/torch/"
        return self._get(url, "index", PROBE_TIMEOUT_S, pypi.fetch_text)

    def hub_tags(self, cuda_xy: str) -> list[str] | None:
        url = f"{self.hub_url}/v2/repositories/nvidia/cuda/tags?page_size=100&name={cuda_xy}."
        data = self._get(url, "hub", PROBE_TIMEOUT_S, pypi.fetch_json)
        if data is None or not isinstance(data.get("results"), list):
            return None
        self.hub_reached = True
        return [str(r.get("name")) for r in data["results"][:MAX_TAGS] if isinstance(r, dict)]


@dataclass
class UpdateReport:
    overlay: dict[str, Any]
    added: list[str] = field(default_factory=list)
    unconfirmed: list[str] = field(default_factory=list)
    path: Path | None = None

    @property
    def unreachable(self) -> list[str]:
        return list(self.overlay.get("sources", {}).get("not_reached", []))


class UpdateProject:
    """One PyPI project: its final releases and the exact torch pin of each (where read)."""

    def __init__(self, name: str, data: dict[str, Any] | None, sources: Sources) -> None:
        self.name = name
        found = pypi_facts.releases(data) if data else {}
        self.releases = {v: f for v, f in found.items() if len(v) <= MAX_VERSION_CHARS}
        self.latest, self.latest_dist = pypi_facts.latest(data) if data else (None, [])
        self.sources = sources

    def dist(self, version: str) -> list[str] | None:
        if version == self.latest:
            return self.latest_dist
        return self.sources.requires_dist(self.name, version)


def build_update(packaged: dict[str, Any], sources: Sources, today: date) -> UpdateReport:
    """The overlay for what PyPI has and `packaged` (the raw catalog) lacks."""
    torch_data = sources.project("torch")
    if torch_data is None:
        raise pypi.Unreachable(
            "catalog update: PyPI did not answer: " + "; ".join(sources.unreachable[-1:])
        )
    torch = UpdateProject("torch", torch_data, sources)
    if not isinstance(torch_data.get("info"), dict) or not torch.releases:
        # Not PyPI's torch JSON (a captive portal, a broken mirror): writing an overlay from
        # it would replace a good one with nothing.
        raise pypi.Unreachable(
            f"catalog update: {sources.base_url}/torch/json: not PyPI's project JSON for torch "
            "(no release with a Linux wheel); no overlay written"
        )
    vision = UpdateProject("torchvision", sources.project("torchvision"), sources)
    audio = UpdateProject("torchaudio", sources.project("torchaudio"), sources)
    report = UpdateReport(overlay={})
    releases = raw_releases(packaged)
    known = {p["torch"] for rel in releases for p in rel.get("patches", [])}
    oldest = min((version_key(r["minor"]) for r in releases), default=(0,))
    rows: dict[str, dict[str, Any]] = {}
    for version in _new_releases(torch, known, oldest, report):
        facts = torch.releases[version]
        minor = major_minor(version)
        patch = _patch_row(facts, vision, audio, report)
        existing = next((r for r in releases if r["minor"] == minor), None)
        if existing is None and minor not in rows:
            newest = releases[-1] if releases else None
            if newest is None or version_key(minor) < version_key(newest["minor"]):
                continue  # an old minor the catalog never had: not added
            rows[minor] = _new_minor(minor, facts, torch, newest, sources, report)
        row = rows.setdefault(minor, {"minor": minor, "patches": []})
        row["patches"].append(patch)
        report.added.append(f"torch {version}: {_patch_text(patch)}")
    cudas = sorted(
        {str(v["cuda"]) for r in rows.values() for v in r.get("variants", [])}, key=version_key
    )
    images = _images(packaged, cudas, sources, report)
    report.overlay = _document(list(rows.values()), images, sources, today)
    return report


def _new_releases(
    torch: UpdateProject, known: set[str], oldest: tuple[int, ...], report: UpdateReport
) -> list[str]:
    """The torch releases to add, oldest first: at most MAX_NEW_RELEASES, the newest (each
    costs reads of its companions' metadata, and a row in the file)."""
    new = [
        version
        for version in sorted(torch.releases, key=version_key)
        if version not in known
        and version_key(major_minor(version)) >= oldest
        and torch.releases[version].pythons
    ]
    if len(new) > MAX_NEW_RELEASES:
        left = new[:-MAX_NEW_RELEASES]
        report.unconfirmed.append(
            f"torch {left[0]} to {left[-1]}: {len(left)} older releases not read "
            f"(one update adds the newest {MAX_NEW_RELEASES})"
        )
        new = new[-MAX_NEW_RELEASES:]
    return new


_TAG_RE = re.compile(r"^(\d+\.\d+\.\d+)-(?:(cudnn\d*)-)?runtime-(ubuntu\d\d\.\d\d)$")


def _images(
    packaged: dict[str, Any], cudas: list[str], sources: Sources, report: UpdateReport
) -> list[dict[str, Any]]:
    """nvidia/cuda rows for the CUDA x.y of new builds, from Docker Hub's tag list where it is
    reached: unconfirmed catalog rows seen there become `high`, new patch releases are added.
    Not reached: the catalog's rows stay as they are, and the report says so."""
    known = [r for r in packaged.get("cuda_images", {}).get("versions", []) if isinstance(r, dict)]
    oses = set(packaged.get("os", {}))
    out: list[dict[str, Any]] = []
    for xy in cudas:
        same = [r for r in known if major_minor(str(r.get("cuda"))) == xy]
        tags = sources.hub_tags(xy)
        if tags is None:
            if not same or any(r.get("confidence", "high") != "high" for r in same):
                report.unconfirmed.append(f"nvidia/cuda {xy}.x tags: Docker Hub not reached")
            continue
        seen: dict[str, dict[str, set[str]]] = {}
        for tag in tags:
            m = _TAG_RE.match(tag)
            if m and m.group(3) in oses:
                flavors = seen.setdefault(m.group(1), {"": set(), "cudnn": set()})
                flavors["cudnn" if m.group(2) else ""].add(m.group(3))
        template = same[-1] if same else None
        for cuda, flavors in sorted(seen.items(), key=lambda kv: version_key(kv[0])):
            row = next((r for r in same if r.get("cuda") == cuda), None)
            if row is not None:
                if row.get("confidence", "high") != "high" and _all_seen(row, flavors):
                    confirmed = {k: v for k, v in row.items() if k not in ("origin", "note")}
                    confirmed["confidence"] = "high"
                    confirmed["note"] = f"tags seen on Docker Hub ({sources.hub_url})"
                    out.append(confirmed)
                    report.added.append(f"nvidia/cuda {cuda}: confirmed on Docker Hub")
                continue  # a row not fully seen (a page may be partial) stays as it is
            if not flavors[""] or template is None:
                continue
            base = copy.deepcopy(template)
            base.pop("origin", None)
            new = {**base, "cuda": cuda, "os": sorted(flavors[""], key=_os_key)}
            cudnn = new.get("cudnn")
            if isinstance(cudnn, dict):
                cudnn_os = sorted(flavors["cudnn"], key=_os_key)
                if not cudnn_os:
                    new["cudnn"] = None
                elif cudnn_os != new["os"]:
                    new["cudnn"] = {**cudnn, "os": cudnn_os}
                else:
                    new["cudnn"] = {k: v for k, v in cudnn.items() if k != "os"}
            new["confidence"] = "high"
            new["note"] = f"runtime tags seen on Docker Hub ({sources.hub_url})"
            out.append(new)
            report.added.append(f"nvidia/cuda {cuda}: {', '.join(new['os'])} (Docker Hub)")
    return out


def _all_seen(row: dict[str, Any], flavors: dict[str, set[str]]) -> bool:
    oses = [str(o) for o in row.get("os", [])]
    cudnn = row.get("cudnn")
    cudnn_os = [str(o) for o in cudnn.get("os", oses)] if isinstance(cudnn, dict) else []
    return set(oses) <= flavors[""] and set(cudnn_os) <= flavors["cudnn"]


def _os_key(name: str) -> tuple[int, ...]:
    return version_key(name.removeprefix("ubuntu"))


def raw_releases(packaged: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        releases = packaged["torch"]["releases"]
    except (KeyError, TypeError):
        raise CatalogError("catalog: torch.releases: missing") from None
    return sorted(
        (r for r in releases if isinstance(r, dict) and isinstance(r.get("minor"), str)),
        key=lambda r: version_key(r["minor"]),
    )


_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
READS_PER_COMPANION = 3  # per-release metadata reads for one torch version (newest first)


class _Pairing(NamedTuple):
    version: str | None
    how: str  # pinned | declared | convention | none
    why: str  # for the note and the report


def _companion(project: UpdateProject, torch: ReleaseFacts, guess: str | None) -> _Pairing:
    """The torchvision/torchaudio release for a torch version by the module docstring's rule:
    "pinned", "declared" (torchvision 0.29.2 says torch>=2.14.0 and came out with 2.15.0),
    "convention" (its metadata not read), else "none"."""
    day = torch.date or ""
    later = [
        v
        for v, facts in sorted(
            project.releases.items(), key=lambda kv: version_key(kv[0]), reverse=True
        )
        if (facts.date or "") >= day
    ]
    order = list(dict.fromkeys([g for g in (guess,) if g in project.releases] + later))
    declared: _Pairing | None = None
    unread: list[str] = []
    for version in order[:READS_PER_COMPANION]:
        dist = project.dist(version)
        if dist is None:
            unread.append(version)
            continue
        spec = pypi_facts.torch_requirement(dist)
        if spec is None or not pypi_facts.admits(spec, torch.version):
            continue
        if spec == f"=={torch.version}":
            return _Pairing(version, "pinned", f"{project.name} {version} pins torch{spec}")
        if declared is None and version in later:
            declared = _Pairing(
                version, "declared", f"{project.name} {version} declares torch{spec}"
            )
    if declared is not None:
        return declared
    if guess in unread:
        why = f"{project.name} {guess} paired by the version convention (its metadata not read)"
        return _Pairing(guess, "convention", why)
    return _Pairing(
        None, "none", f"no {project.name} release since torch {torch.version} declares it"
    )


def _patch_row(
    facts: ReleaseFacts, vision: UpdateProject, audio: UpdateProject, report: UpdateReport
) -> dict[str, Any]:
    major, minor, micro = version_key(facts.version)
    guess = f"0.{minor + 15}.{micro}" if major == 2 else None  # torch 2.14.1 <-> 0.29.1
    tv = _companion(vision, facts, guess)
    ta = _companion(audio, facts, facts.version)
    day = facts.date if facts.date and _DAY_RE.fullmatch(facts.date) else None
    notes = [f"PyPI {day or 'release'}"]  # a server's date goes into the file only as a date
    for pairing in (tv, ta):
        if pairing.how in ("declared", "convention", "pinned"):
            notes.append(pairing.why)
        if pairing.how == "convention":
            report.unconfirmed.append(f"torch {facts.version}: {pairing.why}")
    if tv.version is None:
        notes.append(tv.why)
        report.unconfirmed.append(f"torch {facts.version}: {tv.why}")
    hows = {p.how for p in (tv, ta) if p.version is not None}
    return {
        "torch": facts.version,
        "torchvision": tv.version,
        "torchaudio": ta.version,
        "confidence": "high" if hows <= {"pinned"} else "medium",
        "note": "; ".join(notes),
    }


def _patch_text(row: dict[str, Any]) -> str:
    parts = [f"{k} {row[k]}" for k in ("torchvision", "torchaudio") if row.get(k)]
    return (", ".join(parts) or "no torchvision/torchaudio") + f" ({row['confidence']})"


def _new_minor(
    minor: str,
    facts: ReleaseFacts,
    torch: UpdateProject,
    previous: dict[str, Any],
    sources: Sources,
    report: UpdateReport,
) -> dict[str, Any]:
    """A torch minor the catalog does not know: its facts from the wheels and pins, its CUDA
    builds as `_variants` finds evidence for them."""
    dist = torch.dist(facts.version)
    wheel = pypi_facts.wheel_cuda(pypi_facts.exact_pins(dist or []))
    default_cuda = wheel.cuda if wheel else previous.get("pypi_default")
    variants, complete = _variants(minor, facts.version, wheel, previous, sources, report)
    pythons = f"{facts.python_min}{DASH}{facts.python_max}"
    report.added.append(
        f"torch {minor}: Python {pythons} (requires_python {facts.requires_python or '?'}), "
        f"glibc {facts.glibc}, PyPI wheel CUDA {default_cuda}; builds "
        + ", ".join(f"{v['variant']} ({v['confidence']})" for v in variants)
    )
    return {
        "minor": minor,
        "python": {"min": facts.python_min, "max": facts.python_max},
        "pypi_default": default_cuda,
        "glibc": facts.glibc or previous.get("glibc"),
        "confidence": "medium" if wheel else "low",
        "note": (
            f"from PyPI (torch {facts.version}: requires_python, wheel tags"
            + (", exact pins)" if wheel else "; its pins were not read)")
        ),
        "patches": [],
        "variants": variants,
        # an index page not reached leaves its builds unknown, not absent (catalog/data.py)
        "builds": "complete" if complete else "partial",
    }


def _variants(
    minor: str,
    version: str,
    wheel: pypi_facts.WheelCuda | None,
    previous: dict[str, Any],
    sources: Sources,
    report: UpdateReport,
) -> tuple[list[dict[str, Any]], bool]:
    """The CUDA builds with evidence: each one the PyTorch index lists, else the one PyPI's
    wheel pins. A build of the previous minor without such evidence is never carried over
    (torch 2.15 has no cu126 build just because 2.14 had one): the report names it. The
    flag says whether the list is complete: every index page was read."""
    complete = True
    carried = [copy.deepcopy(v) for v in previous.get("variants", []) if isinstance(v, dict)]
    by_name = {str(v.get("variant")): v for v in carried}
    built = "cu" + wheel.cuda.replace(".", "") if wheel else None
    if wheel is not None and built is not None:
        base = by_name.get(built) or (carried[-1] if carried else {"archs": []})
        row = {**copy.deepcopy(base), "variant": built, "cuda": wheel.cuda, "status": "stable"}
        if wheel.cudnn:
            row["cudnn"] = wheel.cudnn
        by_name[built] = row
    out = []
    for name, row in sorted(by_name.items(), key=lambda kv: version_key(str(kv[1]["cuda"]))):
        row.pop("note", None)
        row.pop("origin", None)
        page = sources.index_page(name)
        complete = complete and page is not None
        if page is not None:
            if re.search(rf"torch-{re.escape(version)}(\+|%2B){name}-", page) is None:
                report.unconfirmed.append(f"torch {minor}: no {name} build on the PyTorch index")
                continue
            row["confidence"] = "medium"  # the build exists; its archs are carried over
            row["note"] = f"on the PyTorch index; archs from torch {previous['minor']}"
        elif name == built:
            row["confidence"] = "medium"
            row["note"] = (
                f"PyPI's wheel pins cuda-toolkit {wheel.cuda if wheel else ''}; "
                "PyTorch index not reached; archs carried from the previous minor"
            )
        else:
            report.unconfirmed.append(
                f"torch {minor} {name}: not verified (PyTorch index not reached); not listed"
            )
            continue
        out.append(row)
    return out, complete


def _document(
    rows: list[dict[str, Any]], images: list[dict[str, Any]], sources: Sources, today: date
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "overlay_version": overlay.OVERLAY_VERSION,
        "research_date": today.isoformat(),
        "sources": {
            "reached": sorted(set(sources.reached)),
            "not_reached": sorted(set(sources.unreachable)),
            # the parts of the catalog this file's research_date vouches for (staleness.py)
            "refreshed": ["torch", *(["cuda_images"] if sources.hub_reached else [])],
        },
    }
    if rows:
        doc["torch"] = {"releases": rows}
    if images:
        doc["cuda_images"] = {"versions": images}
    return doc


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def render_overlay(doc: dict[str, Any], today: date) -> str:
    """The overlay as YAML: rows of scalars as flow mappings, one a line; a string the reader
    would take for another type ("2.10", "yes") quoted, and any character outside printable
    ASCII (a line separator, DEL or C1 from a server) escaped, so it reads back as the same text."""
    import yaml

    lines = [
        f"# Written by `gpulaunch catalog update` on {today.isoformat()} from PyPI's JSON API.",
        "# The next update replaces this file; put your own rows in another file beside it.",
        "# confidence: high = read from the source (an exact pin); medium = inferred from a",
        "# source (a declared range, the wheel's pin, the index; archs carried over).",
    ]
    body: str = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=float("inf"))
    return "\n".join(lines) + "\n" + body


def run_update(
    *,
    output: Path | None,
    today: date,
    check: Callable[[dict[str, Any]], None],
    sources: Sources | None = None,
) -> UpdateReport:
    """Fetch, build the overlay, and write it only when the file, as the overlay reader reads
    it back, is bounded in size, says exactly what was built, and merges into a valid catalog
    (`check`): a written overlay never breaks `render` or `run`."""
    sources = sources or Sources()
    report = build_update(overlay.packaged_raw(), sources, today)
    target = Path(os.path.abspath(output or overlay.overlay_dir() / OVERLAY_NAME))
    raw = render_overlay(report.overlay, today).encode("utf-8")
    if len(raw) > MAX_OVERLAY_BYTES:
        raise CatalogError(
            f"catalog update: the overlay would be {len(raw) // 1024} KiB, over the "
            f"{MAX_OVERLAY_BYTES // 1024} KiB an update may write; nothing written"
        )
    try:
        read_back = overlay.parse_overlay(raw, target)
    except ConfigError as err:
        raise CatalogError(f"catalog update: the overlay would not read back: {err}") from None
    if read_back.data != report.overlay:
        raise CatalogError(
            "catalog update: the overlay would not read back as built; nothing written"
        )
    check(read_back.data)
    overlay.write_user_file(target, raw.decode("utf-8"))
    report.path = target
    return report
