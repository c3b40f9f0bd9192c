"""User overlay catalogs merged over the packaged one, and the staleness warning."""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.catalog import overlay, staleness
from gpulaunch.catalog.data import load_catalog
from gpulaunch.cli import app
from gpulaunch.errors import CatalogError

HEAD = 'overlay_version: "1"\nresearch_date: "2026-11-20"\n'
PATCH_2151 = """torch:
  releases:
    - minor: "2.15"
      patches:
        - {torch: "2.15.1", torchvision: "%s", torchaudio: null}
"""


def _catalog_d(tmp_path: Path) -> Path:
    folder = tmp_path / "_config" / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _rows(runner: CliRunner, torch: str) -> list[dict[str, object]]:
    result = runner.invoke(app, ["versions", "--torch", torch, "--json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.output)
    return rows


def test_no_overlay_is_the_packaged_catalog(runner: CliRunner) -> None:
    assert load_catalog().overlays == ()
    result = runner.invoke(app, ["versions", "--torch", "2.15.1"])
    assert result.exit_code == 2
    assert "unknown torch version 2.15.1" in result.output


def test_overlay_rows_merge_and_are_marked(runner: CliRunner, tmp_path: Path) -> None:
    path = _write(
        _catalog_d(tmp_path) / "mine.yaml",
        HEAD
        + PATCH_2151 % "0.29.1"
        + """cuda_images:
  versions:
    - {cuda: "13.2.3", os: ["ubuntu24.04"], cudnn: {token: "cudnn", major: "9"}}
""",
    )
    rows = _rows(runner, "2.15.1")
    assert {r["torchvision"] for r in rows} == {"0.29.1"}
    assert {r["origin"] for r in rows} == {str(path)}
    # the packaged 2.15.0 rows of the same minor stay packaged
    assert {r["origin"] for r in _rows(runner, "2.15.0")} == {None}
    cat = load_catalog()
    assert cat.overlays == (str(path),)
    added = [img for img in cat.cuda_images if img.cuda == "13.2.3"]
    assert [(img.os, img.origin) for img in added] == [(("ubuntu24.04",), str(path))]
    # still sorted by version after the merge (the loader refuses unsorted releases)
    versions = [img.cuda for img in cat.cuda_images]
    at = versions.index("13.2.2")
    assert versions[at : at + 3] == ["13.2.2", "13.2.3", "13.3.0"]


def test_catalog_path_comes_after_catalog_d_and_wins(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(_catalog_d(tmp_path) / "a.yaml", HEAD + PATCH_2151 % "0.29.1")
    extra = tmp_path / "extra"
    extra.mkdir()
    later = _write(extra / "b.yaml", HEAD + PATCH_2151 % "0.29.2")
    monkeypatch.setenv("GPULAUNCH_CATALOG_PATH", str(extra))
    rows = _rows(runner, "2.15.1")
    assert {(r["torchvision"], r["origin"]) for r in rows} == {("0.29.2", str(later))}


def test_catalog_path_naming_nothing_is_refused(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULAUNCH_CATALOG_PATH", str(tmp_path / "gone.yaml"))
    result = runner.invoke(app, ["versions"])
    assert result.exit_code == 2
    assert result.output == (
        f"gpulaunch: error: GPULAUNCH_CATALOG_PATH: {tmp_path / 'gone.yaml'}: "
        "no such file or folder\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            HEAD + PATCH_2151.replace("null}", '"two"}') % "0.29.1",
            "torch.releases[16].patches[1].torchaudio: not a dotted version: 'two'",
        ),
        (
            HEAD + 'torch:\n  releases:\n    - {minor: "2.16", patches: [], variants: []}\n',
            "torch.releases[17].python: missing",
        ),
        (
            HEAD + PATCH_2151.replace("null}", "null, torchtext: 1}") % "0.29.1",
            "torch.releases[16].patches[1]: unknown key(s) torchtext",
        ),
        (
            HEAD + PATCH_2151.replace("null}", 'null, origin: "x"}') % "0.29.1",
            "'origin' is set by gpulaunch, not in a file",
        ),
        ('research_date: "2026-11-20"\n', 'overlay_version: must be "1"'),
        ('overlay_version: "1"\nresearch_date: "soon"\n', "research_date: expected"),
        (HEAD + "gpus: []\n", "unknown key(s) gpus"),
        (HEAD + "torch: {releases: {}}\n", "torch.releases: expected a list"),
    ],
)
def test_a_broken_overlay_is_one_line_naming_the_file(
    runner: CliRunner, tmp_path: Path, text: str, message: str
) -> None:
    path = _write(_catalog_d(tmp_path) / "bad.yaml", text)
    result = runner.invoke(app, ["versions"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert result.output.startswith(f"gpulaunch: error: catalog overlay {path}: ")
    assert message in result.output


def test_an_overlay_added_later_in_the_process_is_seen(tmp_path: Path) -> None:
    before = load_catalog()
    _write(_catalog_d(tmp_path) / "late.yaml", HEAD + PATCH_2151 % "0.29.1")
    after = load_catalog()
    assert len(after.patches()) == len(before.patches()) + 1
    assert load_catalog() is after  # cached while the files stay the same


def test_merge_keeps_the_base_untouched() -> None:
    base = overlay.packaged_raw()
    rows = [{"minor": "2.14", "python": {"min": "3.11", "max": "3.14"}}]
    ov = overlay.Overlay(Path("/o.yaml"), {"torch": {"releases": rows}}, date(2026, 12, 1))
    merged = overlay.merge(base, ov)
    row = next(r for r in merged["torch"]["releases"] if r["minor"] == "2.14")
    assert row["python"]["min"] == "3.11" and row["origin"] == "/o.yaml"
    assert len(row["patches"]) == 2  # the packaged patches stay
    old = next(r for r in base["torch"]["releases"] if r["minor"] == "2.14")
    assert old["python"]["min"] == "3.10" and "origin" not in old


# ---------------------------------------------------------------------------
# staleness
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("today", "overlays", "stale"),
    [
        (date(2026, 11, 30), [], False),  # 90 days after 2026-09-01
        (date(2026, 12, 1), [], True),  # 91
        (date(2026, 12, 3), [date(2026, 11, 20)], False),  # a newer overlay
        (date(2027, 3, 1), [date(2026, 11, 20)], True),  # the overlay is old too
    ],
)
def test_stale_message(today: date, overlays: list[date], stale: bool) -> None:
    message = staleness.stale_message("2026-09", overlays, today)
    assert (message is not None) == stale
    if message:
        assert "gpulaunch catalog update" in message


def test_warning_once_a_day(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(staleness.OFF_ENV)
    monkeypatch.setattr(staleness, "STALE_DAYS", -1)  # whatever today is, the facts are old
    first = runner.invoke(app, ["versions", "--torch", "2.14.0", "--json"])
    assert first.exit_code == 0
    assert first.output.startswith("warning: the version catalog's facts are ")  # stderr first
    state = Path(os.environ["XDG_CACHE_HOME"]) / "gpulaunch" / "catalog-warned"
    assert state.read_text() == date.today().isoformat() + "\n"
    again = runner.invoke(app, ["versions", "--torch", "2.14.0", "--json"])
    assert "warning" not in again.output
    state.write_text("2000-01-01\n")  # yesterday's (or any older) record: due again
    assert "warning: the version" in runner.invoke(app, ["versions", "--torch", "2.14"]).output


def test_a_fresh_overlay_silences_the_warning(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(staleness.OFF_ENV)
    _write(
        _catalog_d(tmp_path) / "pypi.yaml",
        f'overlay_version: "1"\nresearch_date: "{date.today().isoformat()}"\n',
    )
    result = runner.invoke(app, ["versions", "--torch", "2.14.0", "--json"])
    assert result.exit_code == 0 and "warning" not in result.output
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "gpulaunch").exists()


def test_unwritable_state_never_fails_the_command(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(staleness.OFF_ENV)
    Path(os.environ["XDG_CACHE_HOME"]).mkdir(exist_ok=True)
    (Path(os.environ["XDG_CACHE_HOME"]) / "gpulaunch").symlink_to(tmp_path / "elsewhere")
    result = runner.invoke(app, ["versions", "--torch", "2.14.0", "--json"])
    assert result.exit_code == 0
    assert not (tmp_path / "elsewhere").exists()


def test_overlay_read_errors_are_catalog_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.yaml", "- a list\n")
    with pytest.raises(CatalogError, match="expected a mapping"):
        overlay.read_overlay(path)
