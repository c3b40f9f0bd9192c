"""The staleness warning ages torch, CUDA image and NGC facts separately: an overlay vouches
only for the parts it refreshed (`sources.refreshed`), so a PyPI-only `catalog update` does not
silence the warning for CUDA image and NGC facts (issue 24 item 10)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from gpulaunch.catalog import overlay, staleness
from gpulaunch.errors import CatalogError

TODAY = date(2027, 3, 1)  # 180 days after the "2026-09" facts below


def test_a_pypi_only_overlay_leaves_cuda_and_ngc_stale() -> None:
    message = staleness.stale_message("2026-09", [(date(2027, 2, 20), {"torch"})], TODAY)
    assert message is not None
    assert message.startswith("the version catalog's CUDA image and NGC facts are 181 days old")
    assert "refreshed only its torch facts" in message


def test_docker_hub_reached_leaves_only_ngc_stale() -> None:
    refreshed = [(date(2027, 2, 20), {"torch", "cuda_images"})]
    message = staleness.stale_message("2026-09", refreshed, TODAY)
    assert message is not None and message.startswith("the version catalog's NGC facts are")


@pytest.mark.parametrize(
    "overlays",
    [
        [date(2027, 2, 20)],  # a bare date (hand-written overlay): every part
        [(date(2027, 2, 20), {"torch", "cuda_images", "ngc"})],
        [(date(2027, 2, 20), {"torch"}), (date(2027, 1, 1), {"cuda_images", "ngc"})],
    ],
)
def test_every_part_refreshed_is_quiet(overlays: list[object]) -> None:
    assert staleness.stale_message("2026-09", overlays, TODAY) is None  # type: ignore[arg-type]


def test_all_parts_old_is_the_plain_message() -> None:
    message = staleness.stale_message("2026-09", [(date(2026, 10, 1), {"torch"})], TODAY)
    assert message is not None
    assert message.startswith("the version catalog's facts are 181 days old (2026-09-01)")


def _overlay(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "_config" / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pypi.yaml"
    path.write_text(f'overlay_version: "1"\nresearch_date: "{date.today().isoformat()}"\n{body}')
    return path


def test_refreshed_is_read_from_the_overlay(tmp_path: Path) -> None:
    written = overlay.read_overlay(_overlay(tmp_path, 'sources: {refreshed: ["torch"]}\n'))
    assert staleness.refreshed(written) == {"torch"}
    hand = overlay.read_overlay(_overlay(tmp_path, ""))
    assert staleness.refreshed(hand) == {"torch", "cuda_images", "ngc"}


def test_due_warning_after_a_pypi_only_update(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The overlay `catalog update` writes when only PyPI answered, read from its file."""
    monkeypatch.delenv(staleness.OFF_ENV)
    path = _overlay(tmp_path, 'sources: {refreshed: ["torch"], reached: [], not_reached: []}\n')
    today = date.today()  # an overlay may not be dated in the future: real dates here
    refreshed = (today - timedelta(days=2)).isoformat()
    path.write_text(path.read_text().replace(today.isoformat(), refreshed))
    packaged = (today - timedelta(days=179)).isoformat()
    message = staleness.due_warning(packaged, [path], today)
    assert message is not None
    assert message.startswith("the version catalog's CUDA image and NGC facts are 179 days old")
    assert staleness.due_warning(packaged, [path], today) is None  # once a day


# --- issue 31 §4: what a source is known to lack, not only the packaged date ---------------

GAPS = (
    staleness.Gap("ngc", "NGC releases after 26.07", date(2026, 9, 30)),
    staleness.Gap("torch", "torch 2.16", date(2026, 12, 22)),
)


def test_a_due_gap_warns_however_young_the_facts_are() -> None:
    message = staleness.stale_message("2026-12-04", [], date(2026, 12, 5), GAPS)
    assert message == (
        "the version catalog lacks what its sources have by now: NGC releases after 26.07 "
        "(`gpulaunch catalog update` reads torch releases from PyPI; a newer gpulaunch, or an "
        "overlay of your own, brings the rest)"
    )
    later = staleness.stale_message("2026-12-04", [], date(2026, 12, 23), GAPS)
    assert later is not None and "NGC releases after 26.07; torch 2.16 (" in later
    assert staleness.stale_message("2026-12-04", [], date(2026, 12, 5)) is None  # age alone


def test_an_overlay_refreshing_the_part_after_the_gap_clears_it() -> None:
    today = date(2026, 12, 23)
    torch_only = [(date(2026, 12, 22), {"torch"})]
    message = staleness.stale_message("2026-12-04", torch_only, today, GAPS)
    assert message is not None and "torch 2.16" not in message and "NGC releases" in message
    before = [(date(2026, 12, 21), {"torch", "ngc"})]  # older than the 2.16 gap: not cleared
    message = staleness.stale_message("2026-12-04", before, today, GAPS)
    assert message is not None and "torch 2.16" in message and "NGC" not in message
    assert staleness.stale_message("2026-12-04", [date(2026, 12, 22)], today, GAPS) is None


def test_an_old_catalog_names_its_gaps_in_the_age_warning() -> None:
    message = staleness.stale_message("2026-09", [], TODAY, GAPS)
    assert message is not None and message.startswith(
        "the version catalog's facts are 181 days old (2026-09-01); it lacks NGC releases "
        "after 26.07; torch 2.16; `gpulaunch catalog update`"
    )


def test_the_packaged_gaps_are_read_and_checked() -> None:
    packaged = staleness.gaps(overlay.packaged_raw()["known_gaps"])
    assert {gap.part for gap in packaged} == {"torch", "cuda_images", "ngc"}
    assert any("NGC PyTorch releases after 26.09" in gap.what for gap in packaged)
    with pytest.raises(CatalogError, match=r"known_gaps\[0\]: part must be one of"):
        staleness.gaps([{"part": "drivers", "what": "x", "expected": "2027-01-01"}])
    with pytest.raises(CatalogError, match=r"known_gaps\[0\]: expected part, what and expected"):
        staleness.gaps([{"part": "ngc", "what": "x", "expected": "2027-01-01", "extra": 1}])


def test_due_warning_names_a_due_gap_once_a_day(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(staleness.OFF_ENV)
    today = date.today()
    due = staleness.Gap("ngc", "NGC releases after 26.07", today)
    message = staleness.due_warning(today.isoformat(), [], today, [due])
    assert message is not None and "lacks what its sources have by now" in message
    assert staleness.due_warning(today.isoformat(), [], today, [due]) is None  # once a day
