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

NPROC_MAX = 1024
RESTARTS_MAX = 100

# RunOptions field -> (the flag, its kind): what a record's `options` may hold.
FLAGS: dict[str, tuple[str, str]] = {
    "script": ("SCRIPT", "str?"),
    "args": ("ARGS", "list"),
    "command": ("-- COMMAND", "list"),
    "gpus": ("--gpus", "str?"),
    "nproc": ("--nproc", "int?"),
    "env": ("--env", "list"),
    "mounts": ("--mount", "list"),
    "network": ("--network", "str?"),
    "detach": ("--detach", "bool"),
    "profile": ("--profile", "str?"),
    "nccl": ("--nccl", "str?"),
    "nccl_ifname": ("--nccl-ifname", "str?"),
    "numa": ("--numa", "str?"),
    "precision": ("--precision", "str?"),
    "expandable_segments": ("--expandable-segments", "bool?"),
    "no_container": ("--no-container", "bool"),
    "restarts": ("--restarts", "int"),
    "nnodes": ("--nnodes", "int?"),
    "node_rank": ("--node-rank", "int?"),
    "rdzv_endpoint": ("--rdzv-endpoint", "str?"),
    "rdzv_id": ("--rdzv-id", "str?"),
    "local_addr": ("--local-addr", "str?"),
    "image": ("--image", "str?"),
    "allow_unsafe_mounts": ("--allow-unsafe-mounts", "bool"),
}

# string flags that must be one non-empty line (`run`'s check_single_line list)
_LINE_FLAGS = (
    "gpus",
    "profile",
    "nccl",
    "nccl_ifname",
    "numa",
    "precision",
    "rdzv_endpoint",
    "rdzv_id",
    "local_addr",
    "image",
)


def _typed(value: Any, kind: str) -> bool:
    if value is None:
        return kind.endswith("?")
    base = kind.rstrip("?")
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base == "str":
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def options_from_record(data: Any) -> Any:
    """RunOptions from a record's `options`, each field with its flag's type; ConfigError
    (`options.FIELD (--flag): ...`) for a field no flag has or a value of the wrong type."""
    from gpulaunch.launch.plan import RunOptions

    if not isinstance(data, dict):
        raise ConfigError("options: not a JSON object")
    known = {f.name for f in dataclasses.fields(RunOptions)}
    for name in data:
        if name not in FLAGS or name not in known:
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


def check_network(network: str | None) -> None:
    if network is not None and network not in ("default", "host", "none"):
        raise ConfigError(f"--network: {network!r} is not default, host or none")


def check_options(opts: Any) -> None:
    """What `run` refuses on its flags (exit 2, one line naming the flag), for any RunOptions."""

    check_flag_lines({FLAGS[name][0]: getattr(opts, name) for name in _LINE_FLAGS})
    check_network(opts.network)
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
