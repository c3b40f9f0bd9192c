"""The JSON copies of gpulaunch/data/*.yaml (read instead of parsing YAML, for start-up
speed) are current, equal to what the YAML parses to, and never used for another text."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpulaunch import yamlio

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "gpulaunch" / "data"
YAMLS = sorted(DATA.rglob("*.yaml"))


def test_every_copy_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "dev" / "packaged-json"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"run dev/packaged-json: {proc.stdout}"


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.relative_to(DATA).as_posix())
def test_the_copy_is_what_the_yaml_parses_to(path: Path) -> None:
    rel = path.relative_to(DATA).as_posix()
    text = path.read_text("utf-8")
    found, data = yamlio.packaged_copy(text, yamlio.PACKAGED + rel)
    assert found, f"no usable JSON copy for {rel}"
    parsed = yamlio.parse_yaml_only(text, rel)
    assert data == parsed
    assert json.dumps(data) == json.dumps(parsed), "mapping order differs (it is shown)"
    assert yamlio.parse_yaml_text(text, yamlio.PACKAGED + rel) == data


def test_another_text_is_parsed_not_answered_from_the_copy() -> None:
    text = (DATA / "catalog.yaml").read_text("utf-8") + "\nextra_key: 1\n"
    assert yamlio.packaged_copy(text, yamlio.PACKAGED + "catalog.yaml") == (False, None)
    assert yamlio.parse_yaml_text(text, yamlio.PACKAGED + "catalog.yaml")["extra_key"] == 1


@pytest.mark.parametrize("content", [b"", b"not json", b"[]", b'{"sha256": "x"}', b"[" * 100000])
def test_a_broken_copy_falls_back_to_the_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    monkeypatch.setattr(yamlio, "PACKAGED_JSON", tmp_path)
    (tmp_path / "x.yaml.json").write_bytes(content)
    assert yamlio.packaged_copy("a: 1\n", yamlio.PACKAGED + "x.yaml") == (False, None)
    assert yamlio.parse_yaml_text("a: 1\n", yamlio.PACKAGED + "x.yaml") == {"a": 1}


def test_a_copy_is_only_used_for_the_text_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlio, "PACKAGED_JSON", tmp_path)
    text = "a: 1\n"
    doc = {"sha256": hashlib.sha256(text.encode()).hexdigest(), "data": {"a": 2}}
    (tmp_path / "x.yaml.json").write_text(json.dumps(doc))
    assert yamlio.parse_yaml_text(text, yamlio.PACKAGED + "x.yaml") == {"a": 2}  # the copy
    assert yamlio.parse_yaml_text(text, "user.yaml") == {"a": 1}  # not gpulaunch's: parsed
    assert yamlio.parse_yaml_text(text, yamlio.PACKAGED + "../x.yaml") == {"a": 1}
