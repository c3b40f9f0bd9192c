"""`gpulaunch catalog update` against a local fake of PyPI's JSON API (offline): what it parses,
what it writes, and that the overlay reaches `versions` and `init`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from catalog.fake_pypi import FakeIndex, project, serve, torch_files, wheel
from gpulaunch.catalog import overlay
from gpulaunch.catalog.update import Sources, build_update
from gpulaunch.cli import app

CLOSED = "http://127.0.0.1:1"
SCRIPT = Path(__file__).resolve().parents[2] / "dev" / "catalog-check"
# a copy of NVIDIA's NVIDIA_REQUIRE_CUDA list (tests never read the shared reference folder)
RULES = (
    Path(__file__).resolve().parent / "fixtures" / "nvidia-require-cuda.txt"
)  # nothing listens on port 1: connection refused at once
PINS_216 = [
    "filelock",
    'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.27.0.1; platform_system == "Linux"',
    'optree==0.13.0; extra == "optree"',
]
PY_216 = ["3.11", "3.12", "3.13", "3.14", "3.15"]


def _pages(fake: FakeIndex) -> None:
    """PyPI after the packaged catalog (2.15.0): a patch 2.15.1 whose torchvision declares a
    range, a minor 2.16.0 whose torchvision pins it, and things an update must skip."""
    torch_releases = {
        "2.15.0": torch_files("2.15.0", PY_216, ">=3.11", "2026-10-28"),  # packaged
        "2.15.1": torch_files("2.15.1", PY_216, ">=3.11", "2026-11-20"),
        "2.16.0": torch_files("2.16.0", PY_216, ">=3.11", "2026-12-01"),
        "2.17.0rc1": torch_files("2.17.0rc1", ["3.11"], ">=3.11", "2026-12-02"),  # not final
        "1.12.1": torch_files("1.12.1", ["3.10"], ">=3.7", "2022-08-05"),  # older than the catalog
        "2.16.1": [
            {**f, "yanked": True} for f in torch_files("2.16.1", ["3.11"], ">=3.11", "2026-12-03")
        ],
    }
    fake.pages["/pypi/torch/json"] = project("torch", torch_releases, "2.16.0", PINS_216)
    days = {"0.29.2": "2026-10-28", "0.29.3": "2026-11-20", "0.31.0": "2026-12-01"}
    vision = {
        v: [wheel("torchvision", v, "py3-none-manylinux_2_28_x86_64", ">=3.10", day)]
        for v, day in days.items()
    }
    fake.pages["/pypi/torchvision/json"] = project(
        "torchvision", vision, "0.31.0", ["numpy", "torch==2.16.0"]
    )
    # an older release's own metadata: PyPI's per-release JSON
    fake.pages["/pypi/torchvision/0.29.3/json"] = {
        "info": {"version": "0.29.3", "requires_dist": ["numpy", "torch>=2.15.0"]}
    }
    audio = {"2.11.1": [wheel("torchaudio", "2.11.1", "py3-none-any", ">=3.10", "2026-10-28")]}
    fake.pages["/pypi/torchaudio/json"] = project("torchaudio", audio, "2.11.1", ["torch>=2.11"])


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeIndex]:
    with serve(FakeIndex()) as index:
        _pages(index)
        monkeypatch.setenv("GPULAUNCH_PYPI_URL", f"{index.url}/pypi")
        monkeypatch.setenv("GPULAUNCH_TORCH_INDEX_URL", f"{CLOSED}/whl")
        monkeypatch.setenv("GPULAUNCH_DOCKER_HUB_URL", CLOSED)
        yield index


def _overlay_path(tmp_path: Path) -> Path:
    return tmp_path / "_config" / "gpulaunch" / "catalog.d" / "pypi.yaml"


def _releases(path: Path) -> dict[str, dict[str, object]]:
    doc = yaml.safe_load(path.read_text())
    return {row["minor"]: row for row in doc["torch"]["releases"]}


def test_update_writes_what_pypi_has_and_the_catalog_lacks(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["catalog", "update"])
    assert result.exit_code == 0, result.output
    path = _overlay_path(tmp_path)
    assert f"wrote {path}" in result.output
    rows = _releases(path)
    assert sorted(rows) == ["2.15", "2.16"]  # no 2.17.0rc1, no 1.12.1, no yanked 2.16.1
    # companions from their own metadata: 0.29.3 declares torch>=2.15.0 and came out with
    # 2.15.1; torchaudio 2.11.1 (torch>=2.11) is older than 2.15.1: not paired with it
    assert rows["2.15"]["patches"] == [
        {
            "torch": "2.15.1",
            "torchvision": "0.29.3",
            "torchaudio": None,
            "confidence": "medium",
            "note": "PyPI 2026-11-20; torchvision 0.29.3 declares torch>=2.15.0",
        }
    ]
    new = rows["2.16"]
    assert new["python"] == {"min": "3.11", "max": "3.15"}  # cp315t (free-threaded) not counted
    assert (new["pypi_default"], new["glibc"], new["confidence"]) == ("13.2", "2.28", "medium")
    patch = new["patches"][0]
    assert (patch["torch"], patch["torchvision"], patch["confidence"]) == (
        "2.16.0",
        "0.31.0",
        "high",
    )
    assert patch["note"] == "PyPI 2026-12-01; torchvision 0.31.0 pins torch==2.16.0"
    # only the build PyPI's wheel pins: nothing is carried over from 2.15 without evidence
    assert [(v["variant"], v["cudnn"], v["confidence"]) for v in new["variants"]] == [
        ("cu132", "9.27.0.1", "medium")
    ]
    assert new["builds"] == "partial"  # the index was not read: other builds are unknown
    doc = yaml.safe_load(path.read_text())
    assert doc["research_date"]
    assert doc["sources"]["refreshed"] == ["torch"]  # Docker Hub not reached
    assert any(line.startswith(f"{CLOSED}/whl/") for line in doc["sources"]["not_reached"])
    assert "unconfirmed: nvidia/cuda 13.2.x tags: Docker Hub not reached" in result.output
    assert "not reached: http://127.0.0.1:1/whl/cu126/torch/" in result.output


def test_no_build_is_carried_forward_without_evidence(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path
) -> None:
    """Issue 24 item 10: the previous minor's cu126 is not assumed for a new minor; the report
    says what could not be verified."""
    packaged = overlay.packaged_raw()
    rel = next(r for r in packaged["torch"]["releases"] if r["minor"] == "2.15")
    rel["variants"].insert(0, {**rel["variants"][0], "variant": "cu126", "cuda": "12.6"})
    sources = Sources()
    report = build_update(packaged, sources, date(2026, 12, 4))
    rows = {r["minor"]: r for r in report.overlay["torch"]["releases"]}
    assert [v["variant"] for v in rows["2.16"]["variants"]] == ["cu132"]
    assert (
        "torch 2.16 cu126: not verified (PyTorch index not reached); not listed"
        in report.unconfirmed
    )


def test_convention_pairing_only_when_the_metadata_cannot_be_read(fake: FakeIndex) -> None:
    """A conventional torchvision whose metadata is unreadable is paired and reported; one
    whose metadata names another torch is not."""
    doc = fake.pages["/pypi/torchvision/json"]
    doc["releases"]["0.30.1"] = [
        wheel("torchvision", "0.30.1", "py3-none-manylinux_2_28_x86_64", ">=3.10", "2026-11-20")
    ]
    del fake.pages["/pypi/torchvision/0.29.3/json"]  # 0.29.3's metadata: 404
    report = build_update(overlay.packaged_raw(), Sources(), date(2026, 12, 4))
    patch = report.overlay["torch"]["releases"][0]["patches"][0]
    assert (patch["torch"], patch["torchvision"], patch["confidence"]) == (
        "2.15.1",
        "0.30.1",
        "medium",
    )
    assert (
        "torch 2.15.1: torchvision 0.30.1 paired by the version convention (its metadata not read)"
        in report.unconfirmed
    )
    fake.pages["/pypi/torchvision/0.30.1/json"] = {
        "info": {"version": "0.30.1", "requires_dist": ["torch==2.16.0"]}
    }
    report = build_update(overlay.packaged_raw(), Sources(), date(2026, 12, 4))
    patch = report.overlay["torch"]["releases"][0]["patches"][0]
    assert patch["torchvision"] is None
    assert "torch 2.15.1: no torchvision release since torch 2.15.1 declares it" in (
        report.unconfirmed
    )


def test_overlay_reaches_versions_and_init(
    fake: FakeIndex, runner: CliRunner, in_tmp: Path, tmp_path: Path
) -> None:
    assert runner.invoke(app, ["catalog", "update"]).exit_code == 0
    result = runner.invoke(app, ["versions", "--torch", "2.16.0", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["variant"] for r in rows} == {"cu132", "cpu"}
    assert {(r["python_min"], r["origin"]) for r in rows} == {
        ("3.11", str(_overlay_path(tmp_path)))
    }
    packaged = json.loads(runner.invoke(app, ["versions", "--torch", "2.15.0", "--json"]).output)
    assert {r["origin"] for r in packaged} == {None}
    patch = json.loads(runner.invoke(app, ["versions", "--torch", "2.15.1", "--json"]).output)
    assert {r["origin"] for r in patch} == {str(_overlay_path(tmp_path))}
    table = runner.invoke(app, ["versions", "--torch", "2.15"])
    # not a terminal: the plain-text table, one row per line, the overlay column last
    marks = [line.split()[-1] for line in table.output.splitlines() if line.startswith("2.15.")]
    assert marks.count("pypi.yaml") == 4 and marks.count("-") == 4  # 2.15.1 and 2.15.0 rows

    refused = runner.invoke(app, ["init", "--torch", "2.16.0", "--python", "3.10", "--yes"])
    assert refused.exit_code == 2
    assert "image.python: torch 2.16.0 supports Python 3.11\u20133.15; got 3.10" in refused.output
    assert not (in_tmp / "gpulaunch.yaml").exists()
    made = runner.invoke(app, ["init", "--torch", "2.16.0", "--yes"])
    assert made.exit_code == 0, made.output
    # the build PyPI's wheel pins; its 13.2 image's driver rule is modelled, and init says so
    assert "torch 2.16.0+cu132 | CUDA 13.2" in made.output
    assert "driver rule not read from NVIDIA" in made.output


def test_index_reached_confirms_or_drops_builds(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULAUNCH_TORCH_INDEX_URL", f"{fake.url}/whl")
    packaged = overlay.packaged_raw()
    rel = next(r for r in packaged["torch"]["releases"] if r["minor"] == "2.15")
    rel["variants"][:0] = [
        {**rel["variants"][0], "variant": "cu126", "cuda": "12.6"},
        {**rel["variants"][0], "variant": "cu130", "cuda": "13.0"},
    ]
    fake.pages["/whl/cu132/torch/"] = (
        '<a href="x">torch-2.16.0+cu132-cp311-cp311-manylinux_2_28_x86_64.whl</a>'
    )
    fake.pages["/whl/cu126/torch/"] = (
        '<a href="y">torch-2.16.0%2Bcu126-cp311-cp311-manylinux_2_28_x86_64.whl</a>'
    )
    fake.pages["/whl/cu130/torch/"] = (
        '<a href="z">torch-2.15.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl</a>'
    )
    report = build_update(packaged, Sources(), date(2026, 12, 4))
    rows = {r["minor"]: r for r in report.overlay["torch"]["releases"]}
    variants = {v["variant"]: v for v in rows["2.16"]["variants"]}
    assert sorted(variants) == ["cu126", "cu132"]
    assert {v["confidence"] for v in variants.values()} == {"medium"}
    assert "torch 2.16: no cu130 build on the PyTorch index" in report.unconfirmed
    assert rows["2.16"]["builds"] == "complete"  # every page read: an absence is evidenced


def test_pypi_unreachable_is_one_line_and_writes_nothing(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULAUNCH_PYPI_URL", CLOSED)
    result = runner.invoke(app, ["catalog", "update", "--timeout", "5"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines == [lines[0]]
    assert lines[0].startswith(
        "gpulaunch: error: catalog update: PyPI did not answer: http://127.0.0.1:1/torch/json: "
    )
    assert not (tmp_path / "_config").exists()


def test_pypi_answering_garbage_is_unreachable(fake: FakeIndex, runner: CliRunner) -> None:
    fake.pages["/pypi/torch/json"] = "<html>maintenance</html>"
    result = runner.invoke(app, ["catalog", "update"])
    assert result.exit_code == 1
    assert result.output.strip().endswith("/pypi/torch/json: answer is not JSON")


def test_nothing_new_still_records_the_date(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path
) -> None:
    doc = fake.pages["/pypi/torch/json"]
    doc["releases"] = {"2.15.0": doc["releases"]["2.15.0"]}
    result = runner.invoke(app, ["catalog", "update", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["added"] == [] and report["path"] == str(_overlay_path(tmp_path))
    written = yaml.safe_load(_overlay_path(tmp_path).read_text())
    assert "torch" not in written and written["research_date"]


def test_output_option_and_a_link_is_refused(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path
) -> None:
    target = tmp_path / "mine" / "new.yaml"
    assert runner.invoke(app, ["catalog", "update", "-o", str(target)]).exit_code == 0
    assert "2.16" in _releases(target)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "link.yaml"
    link.symlink_to(victim)
    result = runner.invoke(app, ["catalog", "update", "-o", str(link)])
    assert result.exit_code == 2
    assert "symbolic link" in result.output
    assert victim.read_text() == "keep"


def test_catalog_check_lists_differences(fake: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """dev/catalog-check over the fake: a changed Python floor and ceiling, a torchvision whose
    declared torch requirement excludes its pairing, a packaged patch PyPI lacks, and what an
    update would add (the driver rules match the reference copy: no line for them)."""
    doc = fake.pages["/pypi/torch/json"]
    doc["releases"]["2.15.0"] = torch_files("2.15.0", ["3.12", "3.13"], ">=3.12", "2026-10-28")
    fake.pages["/pypi/torchvision/json"]["info"]["requires_dist"] = ["torch==2.14.9"]
    fake.pages["/pypi/torchvision/json"]["info"]["version"] = "0.29.2"
    env = {k: v for k, v in os.environ.items() if k != "GPULAUNCH_TORCH_INDEX_URL"}
    env["GPULAUNCH_TORCH_INDEX_URL"] = f"{CLOSED}/whl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert "torch 2.15: python.min 3.11, PyPI 2.15.0 requires_python >=3.12" in lines
    assert "torch 2.15: python.max 3.15, PyPI 2.15.0 has wheels up to cp313" in lines
    assert "torch 2.13.0: no final Linux x86_64 release on PyPI" in lines
    assert "torch 2.15.0: torchvision 0.29.2 requires torch==2.14.9 on PyPI" in lines
    assert "missing: torch 2.15.1: torchvision 0.29.3 (medium)" in lines
    assert not any(line.startswith("driver rule") for line in lines)
    assert any(line.startswith("not reached: http://127.0.0.1:1/whl/") for line in lines)
    assert done.stderr.strip().startswith("catalog-check: ")


def test_catalog_check_without_pypi(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "GPULAUNCH_PYPI_URL": CLOSED}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("catalog-check: catalog update: PyPI did not answer")


def test_docker_hub_reached_confirms_and_adds_images(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULAUNCH_DOCKER_HUB_URL", fake.url)
    tags = [
        "13.2.1-runtime-ubuntu24.04",  # 13.2.1 on one of its two OSes: stays as it is
        "13.2.2-runtime-ubuntu24.04",
        "13.2.2-runtime-ubuntu22.04",
        "13.2.2-cudnn-runtime-ubuntu24.04",
        "13.2.2-cudnn-runtime-ubuntu22.04",
        "13.2.3-runtime-ubuntu24.04",
        "13.2.3-devel-ubuntu24.04",
        "13.2.3-runtime-ubuntu25.10",  # an OS the catalog does not know: left out
        "latest",
    ]
    query = "/v2/repositories/nvidia/cuda/tags?page_size=100&name="
    fake.pages[f"{query}13.2."] = {"results": [{"name": t} for t in tags], "next": None}
    result = runner.invoke(app, ["catalog", "update"])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(_overlay_path(tmp_path).read_text())
    assert doc["sources"]["refreshed"] == ["torch", "cuda_images"]
    by_cuda = {row["cuda"]: row for row in doc["cuda_images"]["versions"]}
    assert sorted(by_cuda) == ["13.2.2", "13.2.3"]
    assert by_cuda["13.2.2"]["confidence"] == "high"  # the packaged low row, seen everywhere
    assert by_cuda["13.2.2"]["os"] == ["ubuntu22.04", "ubuntu24.04"]
    assert by_cuda["13.2.3"]["os"] == ["ubuntu24.04"] and by_cuda["13.2.3"]["cudnn"] is None
    assert "added: nvidia/cuda 13.2.3: ubuntu24.04 (Docker Hub)" in result.output
    assert "added: nvidia/cuda 13.2.2: confirmed on Docker Hub" in result.output
    assert "Docker Hub not reached" not in result.output
    shown = runner.invoke(app, ["versions", "--torch", "2.16.0", "--cuda", "13.2", "--json"])
    assert shown.exit_code == 0, shown.output
    # the default OS (ubuntu22.04) has no 13.2.3 tag: the newest image there is 13.2.2
    assert json.loads(shown.output)[0]["image"] == "nvidia/cuda:13.2.2-runtime-ubuntu22.04"


def test_update_repairs_its_own_broken_overlay(
    fake: FakeIndex, runner: CliRunner, tmp_path: Path
) -> None:
    path = _overlay_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('overlay_version: "1"\nresearch_date: "2026-11-01"\ntorch: {releases: 3}\n')
    assert runner.invoke(app, ["versions"]).exit_code == 2  # the broken file is refused
    result = runner.invoke(app, ["catalog", "update"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["versions", "--torch", "2.16.0"]).exit_code == 0
