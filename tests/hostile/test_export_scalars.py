"""`export k8s` quotes every string scalar: kubectl decodes YAML 1.1 (go-yaml), where a plain
`y`, `n`, `on`, `1e3`, `1e-4` or `0x1` is a boolean or a number, and an env value or an
argument that turns into one is refused by the API server (or, worse, changed). The test
reads the output back with a loader that resolves scalars the way go-yaml does, then checks
every document with kubernetes-validate (strict).
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hostile.conftest import MINIMAL_CONFIG, Hostile

IMAGE = "registry.example.com/ml/train@sha256:" + "ab" * 32
AMBIGUOUS = ["1e-4", "y", "n", "Y", "N", "1e3", "on", "off", "yes", "0x1", "022", "1:0", "~"]
AMBIGUOUS += ["null", ".inf", "-.5", "+1", "true", "1_000", ".NaN", "0b1", "0o7"]


class GoYaml11Loader(yaml.SafeLoader):
    """Plain scalars as go-yaml v2 (kubectl's decoder through sigs.k8s.io/yaml) reads them."""


GoYaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(
        r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE"
        r"|on|On|ON|off|Off|OFF)$"
    ),
    list("yYnNtTfFoO"),
)
GoYaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)


def _strings(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [v for value in node.values() for v in _strings(value)]
    if isinstance(node, list):
        return [v for value in node for v in _strings(value)]
    return [node]


@pytest.mark.parametrize("kind", ["job", "jobset", "pytorchjob"])
def test_every_string_stays_a_string_for_kubectl(hostile: Hostile, kind: str) -> None:
    env = "".join(
        f"    V{i}: {yaml.safe_dump(v).splitlines()[0]}\n" for i, v in enumerate(AMBIGUOUS)
    )
    hostile.write_config(MINIMAL_CONFIG + "  env:\n" + env)
    outcome = hostile.invoke_unchanged(
        "export", "k8s", "--kind", kind, "--image", IMAGE, "train.py", "--", *AMBIGUOUS
    )
    assert outcome.code == 0, outcome
    docs = [d for d in yaml.load_all(outcome.stdout, Loader=GoYaml11Loader) if d]
    pods = [c for d in docs for c in _containers(d)]
    assert pods
    for container in pods:
        values = {e["name"]: e.get("value") for e in container["env"]}
        for i, text in enumerate(AMBIGUOUS):
            assert values[f"V{i}"] == text, (i, text, values[f"V{i}"])
        assert container["args"][-len(AMBIGUOUS) :] == AMBIGUOUS
    for doc in docs:
        if doc["kind"] in ("Service", "Job"):
            kubernetes_validate.validate(doc, "1.29", strict=True)
        for container in _containers(doc):
            for value in _strings(container):
                assert not isinstance(value, float), value


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "containers" in node and isinstance(node["containers"], list):
                found.extend(node["containers"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found
