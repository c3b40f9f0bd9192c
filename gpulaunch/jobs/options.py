"""The checks `run` makes on its flags, in one place: `run` applies them to what was typed and
`rerun` to what a record holds, so a record can ask for nothing a flag could not.

A record is data, never authority: its `options` are rebuilt field by field with the type the
flag has (`--nproc` an integer 1-1024, `--mount` a list of strings ...), every string flag is
a whole single line, and a field no flag sets is refused rather than ignored or trusted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.launch.options import RunOptions

NPROC_MAX = 1024
RESTARTS_MAX = 100
NETWORKS = ("default", "host", "none")


def _kind(annotation: str) -> str:
    """The kind of a RunOptions field's type: `str | None` is "str?", `list[str]` "list"."""
    base, _, none = annotation.partition(" | ")
    return base.removesuffix("[str]") + ("?" if none == "None" else "")


# RunOptions field -> (the flag, its kind): what a record's `options` may hold.
FLAGS: dict[str, tuple[str, str]] = {
    f.name: (f.metadata["flag"], _kind(str(f.type))) for f in dataclasses.fields(RunOptions)
}

# string flags that must be one non-empty line: all but SCRIPT (a path, checked where it is
# resolved) and --network (one of NETWORKS, check_choice)
_LINE_FLAGS = [
    name
    for name, (flag, kind) in FLAGS.items()
    if kind == "str?" and flag.startswith("--") and name != "network"
]


def _typed(value: Any, kind: str) -> bool:
    if value is None:
        return kind.endswith("?")
    if kind == "list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return type(value) is {"int": int, "bool": bool, "str": str}[kind.rstrip("?")]


def options_from_flags(given: dict[str, Any], **fixed: Any) -> RunOptions:
    """RunOptions from a command's parameters (its locals(), named as the fields), `fixed`
    over them: a list is copied (None is []), a field the command has no flag for keeps its
    default. Not checked: check_options is the check."""
    values = {name: given[name] for name in FLAGS if name in given} | fixed
    for name, (_, kind) in FLAGS.items():
        if kind == "list" and name in values:
            values[name] = list(values[name] or [])
    return RunOptions(**values)


def options_from_record(data: Any) -> RunOptions:
    """RunOptions from a record's `options`, each field with its flag's type; ConfigError
    (`options.FIELD (--flag): ...`) for a field no flag has or a value of the wrong type."""
    if not isinstance(data, dict):
        raise ConfigError("options: not a JSON object")
    for name in data:
        if name not in FLAGS:
            raise ConfigError(f"options.{name}: no `run` flag sets it; refused")
    for name, value in data.items():
        flag, kind = FLAGS[name]
        if not _typed(value, kind):
            raise ConfigError(f"options.{name} ({flag}): {value!r} is not a {kind.rstrip('?')}")
    return RunOptions(**data)


def check_flag_lines(flags: dict[str, Any]) -> None:
    """String flags are whole single lines (no newline, Unicode separator or control char)."""
    from gpulaunch.textcheck import single_line

    for flag, value in flags.items():
        if value is None:
            continue
        try:
            single_line(value)
        except ValueError as err:
            raise ConfigError(f"{flag}: {value!r} {err}") from None
        if not value.strip():
            raise ConfigError(f"{flag}: must not be empty")


def check_choice(flag: str, value: str | None, choices: tuple[str, ...]) -> None:
    """A flag that takes one of a few words: unset, or one of `choices` (exit 2 naming them)."""
    if value is not None and value not in choices:
        words = ", ".join(choices[:-1]) + f" or {choices[-1]}"
        raise ConfigError(f"{flag}: {value!r} is not {words}")


def check_options(opts: RunOptions) -> None:
    """What `run` refuses on its flags (exit 2, one line naming the flag), for any RunOptions."""

    check_flag_lines({FLAGS[name][0]: getattr(opts, name) for name in _LINE_FLAGS})
    check_choice("--network", opts.network, NETWORKS)
    if opts.nproc is not None and not 1 <= opts.nproc <= NPROC_MAX:
        raise ConfigError(f"--nproc: {opts.nproc} is not between 1 and {NPROC_MAX}")
    if not 0 <= opts.restarts <= RESTARTS_MAX:
        raise ConfigError(f"--restarts: {opts.restarts} is not between 0 and {RESTARTS_MAX}")
    if opts.detach and opts.no_container:
        raise ConfigError("--detach: not available with --no-container")
    if opts.script is not None and opts.command:
        raise ConfigError("-- COMMAND: not with SCRIPT (give one of them)")
    if opts.image is not None:
        from gpulaunch.export.images import parse_ref

        parse_ref(opts.image, "--image")


def check_price(price: Any, where: str = "--price") -> str | None:
    """--price (launch.price_per_gpu_hour): a decimal string, or None."""
    from gpulaunch.textcheck import parse_price

    if price is None:
        return None
    if not isinstance(price, str):
        raise ConfigError(f"{where}: {price!r} is not a price")
    try:
        return parse_price(price)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
