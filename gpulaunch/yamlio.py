"""Safe YAML reading (writing lives in gpulaunch.fsio; `atomic_write` is kept here).

Hostile input (alias bombs, huge or binary files, non-UTF-8, deep nesting) becomes a
`ConfigError` with a one-line reason. Floats are never produced: `torch: 2.10` stays the
string "2.10" because gpulaunch.yaml has no float fields and versions must not lose digits;
an integer is only what prints back as written (`-5`, `10`): `+1`, `-0`, `022`, `0x10`, `1:0`,
`1e3`, `.5`, `-.inf` and dates stay the strings they were written as, so an env value given
unquoted reaches the job as typed, and a number field refuses the odd spellings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.textcheck import single_line

MAX_BYTES = 1024 * 1024  # a config larger than 1 MiB is not a config
MAX_NODES = 100_000  # expanded node count; stops alias bombs ("billion laughs")
CONFIG_NAME = "gpulaunch.yaml"  # here, below pydantic, so the config cache can find it


def _loader_class() -> type:
    import yaml

    # libyaml's parser when present (10x faster on the 27 KB catalog; same nodes and marks),
    # with the Python constructor and resolver below either way.
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class _Loader(base):  # type: ignore[valid-type,misc]
        pass

    # Drop the implicit float resolver: "2.10" must not become 2.1. Booleans follow YAML 1.2
    # (true/false only): YAML 1.1 reads `numa: off` as False; the schema turns "yes"/"off"
    # into booleans itself where a field is a boolean.
    _Loader.yaml_implicit_resolvers = {
        first: [
            (tag, rx)
            for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:bool", _INT, _TIMESTAMP)
        ]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    for first in "tTfF":
        _Loader.yaml_implicit_resolvers.setdefault(first, []).insert(0, _BOOL_1_2)
    # Integers are canonical decimals only, the text str(int) gives back: YAML 1.1 reads `1:0`
    # as 60 (base 60), `022` as 18 (octal), `0x10` as 16, `1_000` as 1000, `+1` as 1 and `-0`
    # as 0; those stay the strings they were written as. No text is lost on the way to a
    # string field (`coerce_numbers_to_str` gives back exactly what was written).
    for first in "-+0123456789":
        _Loader.yaml_implicit_resolvers.setdefault(first, []).append(_INT_DECIMAL)
    _Loader.construct_mapping = _construct_unique_mapping
    return _Loader


_INT = "tag:yaml.org,2002:int"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"  # `2024-01-01` would be a date, not the text
_INT_DECIMAL = (_INT, re.compile(r"^(?:0|-?[1-9][0-9]*)$"))
_BOOL_1_2 = ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"))


def _construct_unique_mapping(self: Any, node: Any, deep: bool = False) -> Any:
    """SafeConstructor.construct_mapping that refuses a key given twice in one mapping.

    PyYAML keeps the last value silently, so a second `launch:` block would drop the first.
    Keys brought in by a `<<` merge may be overridden (that is what merging is for).
    """
    import yaml

    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if ident in seen:
            raise ConfigError(
                f"duplicate key {key_node.value!r} (line {seen[ident]} and line {line})"
            )
        seen[ident] = line
    return yaml.SafeLoader.construct_mapping(self, node, deep=deep)


def _expanded_size(obj: Any, memo: dict[int, int], depth: int = 0) -> int:
    if depth > 200:
        raise ConfigError("nesting is deeper than 200 levels")
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, dict):
        size = 1 + sum(
            _expanded_size(k, memo, depth + 1) + _expanded_size(v, memo, depth + 1)
            for k, v in obj.items()
        )
    elif isinstance(obj, list):
        size = 1 + sum(_expanded_size(v, memo, depth + 1) for v in obj)
    else:
        size = 1
    if isinstance(obj, (dict, list)):
        memo[key] = size
    if size > MAX_NODES:
        raise ConfigError(f"expands to more than {MAX_NODES} values (alias bomb?)")
    return size


def _tab_at(text: str, mark: Any) -> bool:
    """The parser stopped at a tab (libyaml's message does not name the character)."""
    if mark is None:
        return False
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    return "\t" in line[: mark.column + 1]


PACKAGED = "gpulaunch/data/"
PACKAGED_JSON = Path(__file__).resolve().parent / "data" / "json"


def packaged_copy(text: str, source: str) -> tuple[bool, Any]:
    """(True, data) when `source` ("gpulaunch/data/REL") is a YAML file shipped in
    gpulaunch/data/ and the JSON copy
    beside it (data/json/NAME.yaml.json, written by dev/packaged-json) was made from exactly
    this text (its sha256): json is ~30x faster than YAML and needs no yaml import. Any
    doubt (no copy, another text, a broken copy) is (False, None): the YAML is parsed."""
    if not source.startswith(PACKAGED) or ".." in source:
        return False, None
    import hashlib
    import json

    try:
        doc = json.loads((PACKAGED_JSON / (source.removeprefix(PACKAGED) + ".json")).read_bytes())
    except (OSError, ValueError, RecursionError):
        return False, None
    if not isinstance(doc, dict) or "data" not in doc:
        return False, None
    if doc.get("sha256") != hashlib.sha256(text.encode("utf-8")).hexdigest():
        return False, None
    return True, doc["data"]


def read_packaged(name: str) -> Any:
    """gpulaunch/data/NAME as plain data (its JSON copy when current); ConfigError names it."""
    from importlib import resources

    text = resources.files("gpulaunch").joinpath("data", name).read_text("utf-8")
    return parse_yaml_text(text, PACKAGED + name)


def parse_yaml_text(text: str, source: str, packaged: str | None = None) -> Any:
    """Parse YAML text into plain data; every failure is a ConfigError naming `source`.
    gpulaunch's own data files (a `source` under gpulaunch/data/, or `packaged`: the file's
    path there) come from their JSON copy when it matches (packaged_copy)."""
    found, data = packaged_copy(text, PACKAGED + packaged if packaged else source)
    if found:
        return data
    return parse_yaml_only(text, source)


def parse_yaml_only(text: str, source: str) -> Any:
    """parse_yaml_text without the JSON copies (what dev/packaged-json and its test use)."""
    import yaml

    try:
        data = yaml.load(text, Loader=_loader_class())
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = err.problem or str(err)
        if "'\\t'" in str(err) or "tab" in problem.lower() or _tab_at(text, mark):
            problem = "tabs are not allowed for indentation in YAML; use spaces"
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML: {err}") from None
    except ConfigError as err:
        raise ConfigError(f"{source}: {err.message}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML nesting is too deep") from None
    try:
        _expanded_size(data, {})
    except ConfigError as err:
        raise ConfigError(f"{source}: {err.message}") from None
    return data


def read_bytes(path: Path) -> bytes:
    """A config file's bytes (at most MAX_BYTES + 1); ConfigError when it cannot be read. Its
    own step so the config cache can key on exactly the bytes that are then parsed."""
    source = str(path)
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file (run `gpulaunch init` first?)") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory, expected a YAML file") from None
    except OSError as err:
        raise ConfigError(f"{source}: cannot read: {err.strerror}") from None


def parse_yaml_bytes(raw: bytes, source: str) -> Any:
    """YAML file content with size, encoding and binary checks (read_bytes' result)."""
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{source}: file is larger than {MAX_BYTES // 1024} KiB")
    if b"\x00" in raw:
        raise ConfigError(f"{source}: looks like a binary file (contains NUL bytes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text (byte {err.start})") from None
    return parse_yaml_text(text, source)


def atomic_write(
    path: Path, content: str, *, force: bool = False, mode: int = 0o644, root: Path | None = None
) -> None:
    """Write `content` to `path` atomically, refusing to overwrite unless forced.

    Kept for callers; the writer itself is `gpulaunch.fsio.write_file` (no symlink is
    followed, no non-regular file replaced; `root` makes every folder below it checked too).
    """
    from gpulaunch.fsio import write_file

    write_file(path, content, root=root, force=force, mode=mode)


_SET_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """`--set image.torch=2.5.1` (repeatable): each dotted path is set in the raw config,
    creating mappings on the way, so the schema checks it like a value in the file and its
    errors name the same field paths. Values are YAML scalars or flow lists without floats
    ("2.10" stays "2.10"; `[torchvision]`, `4`, `true`, `null` work)."""
    if not isinstance(data, dict):
        return data
    for item in overrides:
        path, sep, text = item.partition("=")
        if not sep:
            raise ConfigError(f"--set: {item!r} is not PATH=VALUE (e.g. image.torch=2.5.1)")
        keys = path.strip().split(".")
        if not all(_SET_KEY.fullmatch(key) for key in keys):
            raise ConfigError(f"--set: {path!r} is not a dotted path like image.torch")
        try:
            single_line(text)
        except ValueError as err:
            raise ConfigError(f"--set {path}: {text!r} {err}") from None
        value = parse_yaml_text(text, f"--set {path}") if text.strip() else ""
        node = data
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(f"--set: {where} is not a mapping; cannot set {path}")
            node = child
        node[keys[-1]] = value
    return data
