"""gpulaunch.yaml validated once: a command whose config file is unchanged since it was last
validated reads the result back without importing pydantic or yaml (about 130 ms of start-up).

The cache lives in the user's cache folder ($XDG_CACHE_HOME/gpulaunch/config/, one small JSON
file per config path and `--set` list), not in the project: the project is mounted
read-write into every job and may be read-only or shared, and the answer depends on this
gpulaunch and this machine as much as on the file. An entry is used only when
- its key matches: the sha256 of the file's bytes (the very bytes then parsed on a miss), the
  absolute path, the `--set` items, FORMAT, gpulaunch's version and the sha256 of the source
  files that validation runs (_CODE), the Python version, the installed pydantic,
  pydantic_core and PyYAML (their files' stat), and the host's possible CPUs (cpuset_cpus is
  checked against them);
- and it carries the seal of this user's record key (records/seal.py: HMAC-SHA256, a key
  outside every project), so an entry someone else planted or edited is ignored.
Anything else (missing, corrupt, linked, too big, stale, unsealed) is a miss: the file is
validated as before, with the same errors; only a valid config is ever remembered. Hit or
miss, callers get the same type: a tree of ConfigView objects (configview.Model), a miss's
proved to answer as the pydantic model does. A config holding a secret (what masking hides:
`launch.env` tokens, credentials in a URL) is never stored, so it is validated every time.
Kept because it pays: `history` 153 ms cached vs 278 ms cold, `run --dry-run -- true` 350 vs
466 ms (median of 10, examples/cpu, 2 cores, 2026-12-05).
Written through fsio.write_cache only when the command may write (never by --dry-run); read
by every command.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpulaunch import __version__
from gpulaunch.configview import VALIDATION_CODE, ConfigView, Model, decode, encode, same
from gpulaunch.errors import GpulaunchError
from gpulaunch.fsio import cache_dir, cache_root, identity, read_cache, write_cache
from gpulaunch.yamlio import CONFIG_NAME, read_bytes

FORMAT = 1
FOLDER = "config"
_CODE = ("__init__.py", "configcache.py", *VALIDATION_CODE)
_LIBS = ("pydantic", "pydantic_core", "yaml")
_PACKAGE = Path(__file__).resolve().parent


def find_config(explicit: Path | None, cwd: Path) -> Path:
    """The config path: --config, else ./gpulaunch.yaml."""
    return explicit if explicit is not None else cwd / CONFIG_NAME


def load(path: Path, overrides: Sequence[str] = (), *, write: bool) -> Model:
    """config.load_config's answer (same values, same errors) as a ConfigView tree; a miss is
    remembered only when `write`."""
    raw = read_bytes(path)
    where = entry_path(path, overrides)
    try:
        key: str | None = cache_key(raw, path, overrides)
    except (OSError, ValueError):  # gpulaunch's sources unreadable (a zipped install): no cache
        key = None
    hit = _read(where, key) if key is not None else None
    if hit is not None:
        return hit
    from gpulaunch.config import load_config_bytes

    config = load_config_bytes(raw, path, overrides)
    tree = encode(config)
    view = decode(json.loads(json.dumps(tree)))  # exactly what a hit reads back
    if not same(view, config):
        raise TypeError(f"{type(config).__name__} does not read back as a ConfigView")
    if write and key is not None:
        _write(where, key, view, tree)
    return view


def entry_path(path: Path, overrides: Sequence[str]) -> Path:
    """One file per config path and --set list (a changed file replaces its entry)."""
    name = json.dumps([os.path.abspath(path), list(overrides)], ensure_ascii=True)
    return cache_dir() / FOLDER / (hashlib.sha256(name.encode("ascii")).hexdigest()[:40] + ".json")


def cache_key(raw: bytes, path: Path, overrides: Sequence[str]) -> str:
    """Every input the validated answer depends on, as the module docstring lists them
    (tests/test_configcache.py: test_every_input_of_the_key_misses)."""
    import importlib.util

    from gpulaunch.cpulist import possible_cpus

    code = hashlib.sha256()
    for name in _CODE:
        code.update(name.encode("ascii") + b"\0" + (_PACKAGE / name).read_bytes() + b"\0")
    libs: list[Any] = []
    for lib in _LIBS:
        spec = importlib.util.find_spec(lib)
        origin = spec.origin if spec is not None else None
        try:
            st = os.stat(origin) if origin else None
        except OSError:
            st = None
        libs.append([lib, origin, identity(st) if st else None])
    parts = [
        FORMAT,
        hashlib.sha256(raw).hexdigest(),
        os.path.abspath(path),
        list(overrides),
        [__version__, code.hexdigest(), sys.version, libs, possible_cpus()],
    ]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode("ascii")).hexdigest()


def _read(where: Path, key: str) -> ConfigView | None:
    entry = read_cache(where)
    if not isinstance(entry, dict) or entry.get("key") != key:  # the key holds FORMAT
        return None
    from gpulaunch.records.seal import check

    try:
        check(entry)  # ValueError: no seal, another key, or edited
        return decode(entry["config"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _write(where: Path, key: str, view: ConfigView, tree: dict[str, Any]) -> None:
    """Remember a validated config, unless it holds a secret or no key can be made; a failed
    write is ignored (fsio.write_cache)."""
    from gpulaunch.masking import mask_data
    from gpulaunch.records.seal import seal

    dump = view.model_dump(mode="json")
    if mask_data(dump) != dump:
        return
    try:
        entry = seal({"format": FORMAT, "key": key, "config": tree})
    except GpulaunchError:
        return
    write_cache(where, entry, root=cache_root())


# -- the stored form: {"model": NAME, "set": [fields set], "fields": {NAME: tagged value}} --
# A tagged value is {"model": node}, {"models": {KEY: node}} (a dict of models, as
# `profiles:`) or {"value": plain JSON}: models and user data never share a shape.
