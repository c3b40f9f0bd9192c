"""User overlay catalogs: YAML files merged over the packaged gpulaunch/data/catalog.yaml.

Where: `$XDG_CONFIG_HOME/gpulaunch/catalog.d/*.yaml` (default `~/.config`), in name order,
then each entry of `$GPULAUNCH_CATALOG_PATH` (files or folders, `os.pathsep`-separated); a
later file wins. `gpulaunch catalog update` writes `catalog.d/pypi.yaml`.

An overlay has the packaged file's shape, partially: rows of `torch.releases` (merged by
`minor`; inside it `patches` by `torch` and `variants` by `variant`), `cuda_images.versions` (by
`cuda`), `drivers.toolkit` (by `cuda`) and `ngc.releases` (by `tag`). Each merged row is tagged
with `origin: <file>`, so `versions` can say where it came from; the merged whole then goes
through the packaged catalog's full validation (gpulaunch.catalog.data).
"""

from __future__ import annotations

import copy
import os
import re
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from gpulaunch.catalog.data import VERSION_RE, read_data, version_key
from gpulaunch.errors import CatalogError, ConfigError

PATH_ENV = "GPULAUNCH_CATALOG_PATH"
OVERLAY_VERSION = "1"
ORIGIN = "origin"  # the key merged rows carry (set here; an overlay may not write it)
_TOP_KEYS = ("overlay_version", "research_date", "sources", "note", "torch", "cuda_images",
             "drivers", "ngc")  # fmt: skip
# (section, list key, row key): the keyed lists an overlay may add to or change
_LISTS = (
    ("torch", "releases", "minor"),
    ("cuda_images", "versions", "cuda"),
    ("drivers", "toolkit", "cuda"),
    ("ngc", "releases", "tag"),
)
_DATE_RE = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?$")


class Overlay(NamedTuple):
    path: Path
    data: dict[str, Any]
    research_date: date


def overlay_dir() -> Path:
    """$XDG_CONFIG_HOME/gpulaunch/catalog.d ($XDG_CONFIG_HOME: ~/.config, the XDG default)."""
    value = os.environ.get("XDG_CONFIG_HOME", "")
    home = Path(value) if os.path.isabs(value) else Path.home() / ".config"
    return home / "gpulaunch" / "catalog.d"


def overlay_paths() -> list[Path]:
    """Every overlay file, in merge order (the last one wins)."""
    found = sorted(p for p in _yaml_in(overlay_dir()))
    for entry in os.environ.get(PATH_ENV, "").split(os.pathsep):
        if not entry.strip():
            continue
        path = Path(entry).expanduser()
        if path.is_dir():
            found.extend(sorted(_yaml_in(path)))
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"{PATH_ENV}: {entry}: no such file or folder")
    return found


def _yaml_in(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise ConfigError(f"{folder}: cannot read: {err.strerror}") from None


def fingerprint(paths: list[Path]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """What identifies the overlays' contents cheaply: each path and its `fsio.identity`
    (empty when missing), the cache key of the merged catalog and part of the tag cache's."""
    from gpulaunch.fsio import identity

    out: list[tuple[str, tuple[int, ...]]] = []
    for path in paths:
        try:
            out.append((str(path), identity(path.stat())))
        except OSError:
            out.append((str(path), ()))
    return tuple(out)


def packaged_raw() -> Any:
    """gpulaunch/data/catalog.yaml as plain data (unvalidated)."""
    return read_data("catalog.yaml", "catalog: ")


def parse_date(value: object) -> date | None:
    """ "2026-09" (the first of the month) or "2026-12-03"; None when it is neither."""
    if not isinstance(value, str):
        return None
    m = _DATE_RE.match(value)
    if not m:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1))
    except ValueError:
        return None


def read_overlay(path: Path) -> Overlay:
    """Read one overlay file and check its top level (the rows are checked after merging)."""
    from gpulaunch.yamlio import read_bytes

    return parse_overlay(read_bytes(path), path)


def parse_overlay(raw: bytes, path: Path) -> Overlay:
    """An overlay file's bytes as `read_overlay` takes them: the one reader, so `catalog
    update` checks exactly what `render` and `run` will read before it writes a file."""
    from gpulaunch.yamlio import parse_yaml_bytes

    data = parse_yaml_bytes(raw, str(path))
    where = f"catalog overlay {path}"
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: expected a mapping")
    extra = sorted(set(data) - set(_TOP_KEYS))
    if extra:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(map(str, extra))}")
    if data.get("overlay_version") != OVERLAY_VERSION:
        raise CatalogError(f'{where}: overlay_version: must be "{OVERLAY_VERSION}"')
    when = parse_date(data.get("research_date"))
    if when is None:
        raise CatalogError(f'{where}: research_date: expected "YYYY-MM-DD" or "YYYY-MM"')
    if when > date.today():  # a future date would silence the staleness warning for ever
        raise CatalogError(f"{where}: research_date: {when} is in the future")
    return Overlay(path, data, when)


def merge(base: dict[str, Any], overlay: Overlay) -> dict[str, Any]:
    """A copy of `base` with the overlay's rows merged in and tagged with their origin."""
    out = copy.deepcopy(base)
    where = f"catalog overlay {overlay.path}"
    for section, key, row_key in _LISTS:
        value = overlay.data.get(section)
        if value is None:
            continue
        rows = _list(_mapping(value, f"{where}: {section}"), key, f"{where}: {section}")
        target = _mapping(out.get(section), f"catalog: {section}")
        target[key] = _merge_rows(
            target.get(key), rows, row_key, f"{where}: {section}.{key}", str(overlay.path)
        )
    return out


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CatalogError(f"{where}: expected a mapping")
    return value


def _list(node: dict[str, Any], key: str, where: str) -> list[Any]:
    value = node.get(key)
    if not isinstance(value, list):
        raise CatalogError(f"{where}.{key}: expected a list")
    extra = sorted(set(node) - {key, "note"})
    if extra:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(map(str, extra))}")
    return value


def _tag(row: dict[str, Any], origin: str) -> dict[str, Any]:
    tagged = copy.deepcopy(row)
    tagged[ORIGIN] = origin
    return tagged


def _merge_rows(base: object, rows: list[Any], key: str, where: str, origin: str) -> list[Any]:
    """Each row merged into the base row with the same `key` value (a torch release, keyed by
    `minor`: field by field, see `_merge_release`; any other row: replaced whole), or added;
    order: by version where the key is one, else appended."""
    merged: list[Any] = list(base) if isinstance(base, list) else []
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        row = _mapping(row, at)
        if ORIGIN in row:
            raise CatalogError(f"{at}: {ORIGIN!r} is set by gpulaunch, not in a file")
        if not isinstance(row.get(key), str):
            raise CatalogError(f"{at}.{key}: missing (a quoted string)")
        index = _find(merged, key, row[key])
        old = None if index is None else merged[index]
        new = _merge_release(old, row, at, origin) if key == "minor" else _tag(row, origin)
        if index is None:
            merged.append(new)
        else:
            merged[index] = new
    return _sorted(merged, key)


def _find(rows: list[Any], key: str, value: str) -> int | None:
    return next(
        (n for n, old in enumerate(rows) if isinstance(old, dict) and old.get(key) == value), None
    )


def _sorted(rows: list[Any], key: str) -> list[Any]:
    def order(row: Any) -> tuple[int, ...]:
        value = row.get(key) if isinstance(row, dict) else None
        if isinstance(value, str) and VERSION_RE.match(value):
            return version_key(value)
        return (1 << 30,)

    return sorted(rows, key=order)


def _merge_release(
    old: dict[str, Any] | None, row: dict[str, Any], at: str, origin: str
) -> dict[str, Any]:
    """A torch release (by `minor`): a new minor is a whole row; for a known one, its
    `patches` and `variants` merge by key and any other field (python, pypi_default, glibc,
    confidence) replaces the packaged one."""
    if old is None:
        return _tag_release(row, origin)
    merged = copy.deepcopy(old)
    for field, value in row.items():
        if field in ("patches", "variants"):
            if not isinstance(value, list):
                raise CatalogError(f"{at}.{field}: expected a list")
            key = "torch" if field == "patches" else "variant"
            merged[field] = _merge_rows(merged.get(field), value, key, f"{at}.{field}", origin)
        elif field != "minor":
            merged[field] = copy.deepcopy(value)
            merged[ORIGIN] = origin  # the release's own facts now come from the overlay
    return merged


def _tag_release(row: dict[str, Any], origin: str) -> dict[str, Any]:
    tagged = _tag(row, origin)
    for field in ("patches", "variants"):
        if isinstance(tagged.get(field), list):
            tagged[field] = [
                _tag(item, origin) if isinstance(item, dict) else item for item in tagged[field]
            ]
    return tagged


def write_user_file(target: Path, text: str) -> None:
    """Write a file in the user's config or cache folder (gpulaunch's own file there: replaced
    when it exists), creating missing folders without following links."""
    from gpulaunch.fsio import make_dirs, write_file

    anchor = target.parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if anchor != target.parent:
        make_dirs(target.parent, root=anchor)
    write_file(target, text, root=target.parent, force=True)
