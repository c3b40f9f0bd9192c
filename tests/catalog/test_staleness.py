"""The staleness warning ages torch, CUDA image and NGC facts separately: an overlay vouches
only for the parts it refreshed (`sources.refreshed`), so a PyPI-only `catalog update` does not
silence the warning for CUDA image and NGC facts (issue 24 item 10)."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from gpulaunch.catalog import overlay, staleness

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
