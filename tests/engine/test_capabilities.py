"""The per-engine capability cache: remembered per engine identity, for a day, and a cache
file that is corrupt, planted or of another shape only means asking the engine again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpulaunch.engine import daycache, refusals


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache" / "gpulaunch" / "engines.json"


def test_a_refusal_is_remembered_for_that_engine_only(cache: Path) -> None:
    assert refusals.refused_ulimits("A|20.10|6.1", now=1000) == set()
    refusals.remember_refused_ulimit("A|20.10|6.1", "memlock", now=1000)
    assert refusals.refused_ulimits("A|20.10|6.1", now=1001) == {"memlock"}
    assert refusals.refused_ulimits("B|20.10|6.1", now=1001) == set()
    assert refusals.refused_ulimits("A|24.0|6.1", now=1001) == set()  # upgraded engine
    assert cache.stat().st_mode & 0o777 == 0o600


def test_a_remembered_refusal_expires_after_a_day() -> None:
    refusals.remember_refused_ulimit("A", "memlock", now=1000)
    assert refusals.refused_ulimits("A", now=1000 + daycache.MAX_AGE_S) == {"memlock"}
    assert refusals.refused_ulimits("A", now=1001 + daycache.MAX_AGE_S) == set()
    assert refusals.refused_ulimits("A", now=999) == set()  # from the future: distrusted


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"A": "memlock"}',
        b'{"A": {"at": "now", "refused_ulimits": ["memlock"]}}',
        b'{"A": {"at": 1000, "refused_ulimits": "memlock"}}',
        b'{"A": {"at": 1000, "refused_ulimits": ["memlock; rm -rf /", 3]}}',
        b"[" * 100000,
    ],
)
def test_a_corrupt_or_hostile_cache_means_asking_again(cache: Path, content: bytes) -> None:
    cache.parent.mkdir()
    cache.write_bytes(content)
    assert refusals.refused_ulimits("A", now=1000) == set()
    refusals.remember_refused_ulimit("A", "memlock", now=1000)  # and it is rewritten
    assert refusals.refused_ulimits("A", now=1000) == {"memlock"}


def test_a_planted_link_is_neither_read_nor_written_through(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"A": {"at": 1000, "refused_ulimits": ["memlock"]}}))
    cache.parent.mkdir()
    os.symlink(target, cache)
    assert refusals.refused_ulimits("A", now=1000) == set()
    refusals.remember_refused_ulimit("A", "stack", now=1000)
    assert json.loads(target.read_text()) == {"A": {"at": 1000, "refused_ulimits": ["memlock"]}}


def test_unknown_names_are_not_recorded(cache: Path) -> None:
    refusals.remember_refused_ulimit("A", "core", now=1000)
    assert not cache.exists()
