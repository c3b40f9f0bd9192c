"""Overlay catalogs (`$XDG_CONFIG_HOME/gpulaunch/catalog.d/*.yaml`, GPULAUNCH_CATALOG_PATH) are
checked like the packaged catalog: types, ranges, min <= max, no date in the future, single-line
strings. A bad overlay is one line naming the file and the field (exit 2), and a command that
does not read the catalog is not blocked by it.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from hostile.conftest import Hostile

HEAD = 'overlay_version: "1"\nresearch_date: "2026-11-20"\n'
RELEASE = """torch:
  releases:
    - minor: "2.14"
      patches:
        - {torch: "2.14.1", torchvision: %s, torchaudio: null}
"""
NEW_MINOR = """torch:
  releases:
    - minor: "2.99"
      python: {min: %s, max: %s}
      pypi_default: "12.8"
      glibc: "2.28"
      patches: [{torch: "2.99.0"}]
      variants: []
"""
TOMORROW = (date.today() + timedelta(days=1)).isoformat()

CASES = [
    # (overlay text, what the one line must name)
    (HEAD + RELEASE % '"0.29\\n1"', "torchvision"),  # a line break inside a version
    (HEAD + RELEASE % '"0.29.1\\u2028"', "torchvision"),  # a Unicode line separator
    (HEAD + RELEASE % '"0.29.1\\t"', "torchvision"),
    (HEAD + RELEASE % "[0, 29]", "torchvision"),  # not a string
    (HEAD + RELEASE % "29", "torchvision"),  # a number
    (HEAD + RELEASE % '"1.99999999"', "torchvision"),  # out of range
    (HEAD + NEW_MINOR % ('"3.13"', '"3.10"'), "python"),  # min above max
    (HEAD + NEW_MINOR % ('"2.7"', '"3.1x"'), "max"),
    (HEAD + NEW_MINOR % ('"3.10"', '"4.0.1"'), "max"),
    (HEAD + NEW_MINOR % ("{a: 1}", '"3.12"'), "min"),
    (f'overlay_version: "1"\nresearch_date: "{TOMORROW}"\n', "research_date"),
    ('overlay_version: "1"\nresearch_date: "2999-01"\n', "research_date"),
    (
        HEAD + 'toolkit_arch_window: [{cuda: "12.8", min_cc: "9.0", max_cc: "5.0"}]\n',
        "toolkit_arch_window",
    ),
]


@pytest.fixture
def catalog_d(hostile: Hostile) -> Path:
    home = hostile.outside / "config"
    folder = home / "gpulaunch" / "catalog.d"
    folder.mkdir(parents=True)
    hostile.monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    hostile.monkeypatch.setenv("GPULAUNCH_NO_STALE_WARNING", "1")
    return folder


@pytest.mark.parametrize(("text", "field"), CASES)
def test_a_bad_overlay_is_one_line_naming_file_and_field(
    hostile: Hostile, catalog_d: Path, text: str, field: str
) -> None:
    path = catalog_d / "bad.yaml"
    path.write_text(text)
    for args in (("versions",), ("render",)):
        line = hostile.invoke_unchanged(*args).assert_clean_error(2, str(path), field)
        assert line.startswith(f"gpulaunch: error: catalog overlay {path}: ")


@pytest.mark.parametrize(
    "args", [("history",), ("profiles",), ("profiles", "show", "default"), ("schema",)]
)
def test_a_bad_overlay_does_not_block_commands_that_do_not_read_it(
    hostile: Hostile, catalog_d: Path, args: tuple[str, ...]
) -> None:
    (catalog_d / "bad.yaml").write_text(CASES[0][0])
    outcome = hostile.invoke_unchanged(*args)
    assert outcome.code == 0, outcome
    assert "bad.yaml" not in outcome.stderr
