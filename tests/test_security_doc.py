"""SECURITY.md names the test that holds each promise: every name it gives exists, so the
threat model cannot drift from the tests (`path::test` or `::test` after a path)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`")


def _references() -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    last: str | None = None
    for match in REF.finditer((REPO / "SECURITY.md").read_text(encoding="utf-8")):
        path, name, tail = match.groups()
        if path:
            last = path
            found.append((path, name))
        else:
            assert last is not None, f"::{tail} names no file before it"
            found.append((last, tail))
    return found


def test_security_md_names_tests_that_exist() -> None:
    refs = _references()
    assert len(refs) > 40
    missing = []
    for path, name in refs:
        source = REPO / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(?:async )?def {name}\(", source.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []
