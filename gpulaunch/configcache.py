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
validated as before, with the same errors; only a valid config is ever remembered. A hit is
a tree of ConfigView objects with the attributes, `model_dump` and `model_fields_set` that
callers use on the pydantic models; `_write` proves each entry reads back equal to the
model before storing it, and never stores a config holding a secret (what masking hides:
`launch.env` tokens, credentials in a URL), which is then validated on every command.
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
from gpulaunch.errors import GpulaunchError
from gpulaunch.fsio import cache_dir, read_cache, write_cache
from gpulaunch.yamlio import CONFIG_NAME, read_bytes

FORMAT = 1
FOLDER = "config"
# The modules that parse and validate gpulaunch.yaml (tests/test_configcache.py checks that
# `import gpulaunch.config` loads no other gpulaunch module).
_CODE = (
    "__init__.py",
    "config.py",
    "configcache.py",
    "cpulist.py",
    "errors.py",
    "textcheck.py",
    "yamlio.py",
)
_LIBS = ("pydantic", "pydantic_core", "yaml")
_PACKAGE = Path(__file__).resolve().parent


def find_config(explicit: Path | None, cwd: Path) -> Path:
    """The config path: --config, else ./gpulaunch.yaml."""
    return explicit if explicit is not None else cwd / CONFIG_NAME


def load(path: Path, overrides: Sequence[str] = (), *, write: bool) -> Any:
    """config.load_config's answer (same values, same errors): from the cache when these
    bytes were validated before, else validated now and, when `write`, remembered. A hit is
    a ConfigView tree, a miss the pydantic model."""
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
    if write and key is not None:
        _write(where, key, config)
    return config


def entry_path(path: Path, overrides: Sequence[str]) -> Path:
    """One file per config path and --set list (a changed file replaces its entry)."""
    name = json.dumps([os.path.abspath(path), list(overrides)], ensure_ascii=True)
    return cache_dir() / FOLDER / (hashlib.sha256(name.encode("ascii")).hexdigest()[:40] + ".json")


def cache_key(raw: bytes, path: Path, overrides: Sequence[str]) -> str:
    parts = [
        FORMAT,
        hashlib.sha256(raw).hexdigest(),
        os.path.abspath(path),
        list(overrides),
        fingerprint(),
    ]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode("ascii")).hexdigest()


def fingerprint() -> list[Any]:
    """What validation depends on besides the file: this gpulaunch's code, Python, the
    libraries that parse and validate, and the host's possible CPUs."""
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
        libs.append([lib, origin, st and st.st_size, st and st.st_mtime_ns])
    return [__version__, code.hexdigest(), sys.version, libs, possible_cpus()]


def _read(where: Path, key: str) -> ConfigView | None:
    entry = read_cache(where)
    if not isinstance(entry, dict) or entry.get("key") != key or entry.get("format") != FORMAT:
        return None
    from gpulaunch.records.seal import check

    try:
        check(entry)  # ValueError: no seal, another key, or edited
        return decode(entry["config"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _write(where: Path, key: str, config: Any) -> None:
    """Remember a validated config; any doubt (it would not read back equal, no key can be
    made) means not caching, and a failed write is ignored (fsio.write_cache)."""
    from gpulaunch.masking import mask_data
    from gpulaunch.records.seal import seal

    dump = config.model_dump(mode="json")
    if mask_data(dump) != dump:  # a secret (launch.env, a URL's credentials) stays in the file
        return
    try:
        tree = encode(config)
        if not same(decode(json.loads(json.dumps(tree))), config):
            return
        entry = seal({"format": FORMAT, "key": key, "config": tree})
    except (GpulaunchError, ValueError, TypeError, OSError):
        return
    root = cache_dir().parent  # $XDG_CACHE_HOME may not exist yet: from where it does,
    while not root.is_dir() and root != root.parent:  # fsio makes each folder (no links)
        root = root.parent
    write_cache(where, entry, root=root)


# -- the stored form: {"model": NAME, "set": [fields set], "fields": {NAME: tagged value}} --
# A tagged value is {"model": node}, {"models": {KEY: node}} (a dict of models, as
# `profiles:`) or {"value": plain JSON}: models and user data never share a shape.


def encode(model: Any) -> dict[str, Any]:
    """A pydantic model (duck-typed: no pydantic import here) as the stored tree."""
    fields = {name: _encode_value(getattr(model, name)) for name in type(model).model_fields}
    return {"model": type(model).__name__, "set": sorted(model.model_fields_set), "fields": fields}


def _is_model(value: Any) -> bool:
    return hasattr(type(value), "model_fields") and hasattr(value, "model_fields_set")


def _encode_value(value: Any) -> dict[str, Any]:
    if _is_model(value):
        return {"model": encode(value)}
    if isinstance(value, dict) and value and all(_is_model(v) for v in value.values()):
        return {"models": {key: encode(item) for key, item in value.items()}}
    _check_plain(value)
    return {"value": value}


def _check_plain(value: Any) -> None:
    """Only what JSON gives back unchanged (so a hit equals the model exactly)."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, list):
        for item in value:
            _check_plain(item)
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        for item in value.values():
            _check_plain(item)
    else:
        raise TypeError(f"{type(value).__name__} is not stored in the config cache")


def decode(node: Any) -> ConfigView:
    """The stored tree as views; ValueError for any shape encode does not make."""
    if not isinstance(node, dict) or set(node) != {"model", "set", "fields"}:
        raise ValueError("not a stored model")
    name, fields_set, fields = node["model"], node["set"], node["fields"]
    if not (isinstance(name, str) and isinstance(fields, dict) and isinstance(fields_set, list)):
        raise ValueError("not a stored model")
    values: dict[str, Any] = {}
    for field, tagged in fields.items():
        if not isinstance(tagged, dict) or len(tagged) != 1 or field.startswith("_"):
            raise ValueError(f"{field!r}: not a stored value")
        ((tag, inner),) = tagged.items()
        if tag == "model":
            values[field] = decode(inner)
        elif tag == "models" and isinstance(inner, dict):
            values[field] = {key: decode(item) for key, item in inner.items()}
        elif tag == "value":
            values[field] = inner
        else:
            raise ValueError(f"{field!r}: not a stored value")
    if not set(fields_set) <= set(values):
        raise ValueError("fields set that the model does not have")
    return ConfigView(name, values, frozenset(fields_set))


def same(view: Any, model: Any) -> bool:
    """The view answers as the model does: both dumps and every model's fields set."""
    if not isinstance(view, ConfigView):
        return False
    for mode in ("python", "json"):
        if view.model_dump(mode=mode) != model.model_dump(mode=mode):
            return False
        if view.model_dump(mode=mode, exclude_unset=True) != model.model_dump(
            mode=mode, exclude_unset=True
        ):
            return False
    if view.model_fields_set != model.model_fields_set:
        return False
    for field, value in view._values.items():
        other = getattr(model, field)
        if isinstance(value, ConfigView) and not same(value, other):
            return False
        views = isinstance(value, dict) and any(isinstance(v, ConfigView) for v in value.values())
        if views and (set(value) != set(other) or not all(same(value[k], other[k]) for k in value)):
            return False
    return True


class ConfigView:
    """A validated config model read back from the cache, without pydantic: its fields as
    attributes (nested models as views, lists and dicts as plain values), `model_dump` and
    `model_fields_set`. Read-only: nothing assigns to a loaded config."""

    __slots__ = ("_model", "_set", "_values")
    __hash__ = None  # type: ignore[assignment]  # as pydantic models: not hashable

    _model: str
    _values: dict[str, Any]
    _set: frozenset[str]

    def __init__(self, model: str, values: dict[str, Any], fields_set: frozenset[str]) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_set", fields_set)

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            try:
                return self._values[name]
            except KeyError:
                pass
        raise AttributeError(f"{self._model!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._model} from the config cache is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self._model} from the config cache is read-only")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConfigView, (self._model, self._values, self._set))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigView):
            return NotImplemented
        return (self._model, self._values) == (other._model, other._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{key}={value!r}" for key, value in self._values.items())
        return f"{self._model}({inner})"

    @property
    def model_fields_set(self) -> set[str]:
        return set(self._set)

    def model_dump(self, *, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        """As pydantic's (fresh lists and dicts); "python" and "json" agree for this schema."""
        if mode not in ("python", "json"):
            raise ValueError(f"mode {mode!r}")
        return {
            key: _dump(value, mode, exclude_unset)
            for key, value in self._values.items()
            if not exclude_unset or key in self._set
        }


def _dump(value: Any, mode: str, exclude_unset: bool) -> Any:
    if isinstance(value, ConfigView):
        return value.model_dump(mode=mode, exclude_unset=exclude_unset)
    if isinstance(value, dict):
        return {key: _dump(item, mode, exclude_unset) for key, item in value.items()}
    if isinstance(value, list):
        return [_dump(item, mode, exclude_unset) for item in value]
    return value
