"""`gpulaunch schema` (what editors check gpulaunch.yaml with) accepts every file the loader
accepts: each example and each accepted config below, read both by gpulaunch's loader and by
a YAML 1.1 loader as editors read it (`python: 3.11` a float, `numa: off` a boolean, env values
numbers), validates against the published schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpulaunch.config import load_config
from gpulaunch.yamlio import parse_yaml_text
from hostile.conftest import MINIMAL_CONFIG, Hostile

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("examples/*/gpulaunch.yaml"))
BASE = "version: 1\nname: p\nimage:\n  base: local/base:bookworm\n"
ACCEPTED = {
    "minimal": MINIMAL_CONFIG,
    "python-unquoted": BASE + "  python: 3.11\n  torch: none\n",
    "torch-2.10": "version: 1\nname: p\nimage:\n  torch: 2.10\n  python: 3.12\n",
    "env-numbers": MINIMAL_CONFIG + "  env:\n    A: 1\n    B: 0.5\n    C: 1e-4\n    D: 022\n",
    "env-yaml11": MINIMAL_CONFIG + "  env:\n    E: 0x10\n    F: 1:0\n    G: off\n    H: y\n",
    "price": MINIMAL_CONFIG + "  price_per_gpu_hour: 1.2\n",
    "numa-off": MINIMAL_CONFIG + "  numa: off\n",
    "name-number": MINIMAL_CONFIG.replace("name: hostile", "name: 2024"),
}


def _schema(hostile: Hostile) -> jsonschema.protocols.Validator:
    outcome = hostile.invoke("schema")
    assert outcome.code == 0, outcome
    schema = json.loads(outcome.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _check(validator: jsonschema.protocols.Validator, text: str, path: Path) -> None:
    path.write_text(text)
    load_config(path)  # the loader accepts it: so must the schema
    for data in (parse_yaml_text(text, str(path)), yaml.safe_load(text)):
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(data)]
        assert not errors, errors


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_example_validates(hostile: Hostile, example: Path, tmp_path: Path) -> None:
    _check(_schema(hostile), example.read_text(), tmp_path / "gpulaunch.yaml")


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_every_accepted_config_validates(hostile: Hostile, name: str, tmp_path: Path) -> None:
    _check(_schema(hostile), ACCEPTED[name], tmp_path / "gpulaunch.yaml")


def test_the_schema_still_refuses_what_the_loader_refuses(hostile: Hostile) -> None:
    validator = _schema(hostile)
    for data in ({"version": 1, "name": "p", "nope": 1}, {"version": 1, "name": ["x"]}):
        assert list(validator.iter_errors(data)), data
    assert len(EXAMPLES) >= 5
