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


def test_the_validated_copy_answers_as_pydantic_does() -> None:
    """validated.json (dev/packaged-json) holds the built-in profiles and NCCL presets as the
    models validate them: each decoded view answers as its model does."""
    from gpulaunch.configview import same
    from gpulaunch.launch import presets

    presets._validated_copy.cache_clear()
    presets.builtin_specs.cache_clear()
    presets.nccl_presets.cache_clear()
    assert presets._validated_copy() is not None, "validated.json is stale: dev/packaged-json"
    models = presets.validate_builtin_specs()
    views = presets.builtin_specs()
    assert list(views) == list(models) and len(models) >= 3
    for name, model in models.items():
        assert type(views[name]).__name__ == "ConfigView"
        assert same(views[name], model), name
    assert presets.nccl_presets() == presets.validate_nccl_presets()


@pytest.mark.parametrize(
    "doc",
    [
        "not json",
        '{"inputs": "0000", "profiles": {}, "nccl_presets": {}}',
        "VALID_BUT_BROKEN_PROFILE",
        "VALID_BUT_BROKEN_PRESET",
    ],
)
def test_a_stale_or_broken_validated_copy_means_pydantic(
    doc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.launch import presets

    case = doc
    real = presets._data_text
    current = json.loads(real("json", presets.VALIDATED))
    if doc == "VALID_BUT_BROKEN_PROFILE":
        current["profiles"]["default"] = {"model": "ProfileSpec", "set": ["nope"], "fields": {}}
        doc = json.dumps(current)
    elif doc == "VALID_BUT_BROKEN_PRESET":
        name = next(iter(current["nccl_presets"]))
        current["nccl_presets"][name]["extra"] = 1
        doc = json.dumps(current)

    def fake(*parts: str) -> str:
        return doc if parts == ("json", presets.VALIDATED) else real(*parts)

    monkeypatch.setattr(presets, "_data_text", fake)
    for fn in (presets._validated_copy, presets.builtin_specs, presets.nccl_presets):
        fn.cache_clear()
    try:
        specs = presets.builtin_specs()
        kinds = {type(s).__name__ for s in specs.values()}
        assert kinds == ({"ConfigView"} if "PRESET" in case else {"ProfileSpec"})
        assert presets.nccl_presets() == presets.validate_nccl_presets()
    finally:
        for fn in (presets._validated_copy, presets.builtin_specs, presets.nccl_presets):
            fn.cache_clear()


def test_every_input_of_the_validated_copy_is_in_its_hash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The copy names the sha256 of the code that validates and stores it (config.py and the
    modules it imports, configview.py) and of every profile and preset text: editing any of
    them (in a copy of the package here) makes the copy stale."""
    import shutil
    import types

    from gpulaunch.configview import VALIDATION_CODE
    from gpulaunch.launch import presets

    package = tmp_path / "gpulaunch"
    shutil.copytree(DATA, package / "data")
    for name in VALIDATION_CODE:
        shutil.copy(REPO / "gpulaunch" / name, package / name)
    fake = types.SimpleNamespace(files=lambda name: package)
    monkeypatch.setattr(presets, "resources", fake)
    before = presets.validated_inputs()
    assert before == json.loads((DATA / "json" / presets.VALIDATED).read_text())["inputs"]
    edited = [package / name for name in VALIDATION_CODE]
    edited += [package / "data" / "nccl_presets.yaml"]
    edited += sorted((package / "data" / "profiles").glob("*.yaml"))
    assert {"config.py", "configview.py", "errors.py", "textcheck.py"} <= {p.name for p in edited}
    for path in edited:
        original = path.read_bytes()
        path.write_bytes(original + b"\n# edited\n")
        assert presets.validated_inputs() != before, path.name
        path.write_bytes(original)
    assert presets.validated_inputs() == before
