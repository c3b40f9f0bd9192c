"""gpulaunch.cli.app (fast_value) converts flag values as typer's pydantic adapter does: compared
on every parameter of every command with values of each kind, and installed (a typer
upgrade that changes its internals makes `install` a no-op, and this test says so)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer import _coercion, core

from gpulaunch.cli import app
from gpulaunch.cli.app import fast_value

VALUES: list[Any] = [
    "4", "0", "-3", "1024", "1025", 0, 100, 101, -1, "007", "+4", " 4", "4.0", "x", "",
    "1" * 25, "true", "no",
    True, False, 3, ("a", "b"), (), ["a"], ("1",),
    "some/dir", "/abs/file.yaml", ".", "~/x", "a\0b", Path("p/q"), Path("/"),
]  # fmt: skip


def _params() -> list[Any]:
    found = []

    def walk(cmd: Any) -> None:
        found.extend(p for p in cmd.params if isinstance(p, core._TyperParameter))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return found


def test_install_replaced_typers_eager_adapter() -> None:
    params = _params()
    assert len(params) > 50
    runtime = params[0].get_runtime_param()
    assert type(runtime).__name__ == "LazyRuntimeParam", "_install_fast_params did not take"


def test_every_fast_conversion_equals_typers_own() -> None:
    checked = 0
    for param in _params():
        desc = param.type_descriptor
        if desc.file_annotation is not None:
            continue
        real = _coercion.build_runtime_param(desc)
        for value in VALUES:
            done, fast = fast_value(desc.annotation, desc.parameter_info, value)
            if not done:
                continue
            try:
                expected = real._coerce_value(value, param=param, ctx=None)
            except Exception as err:  # the adapter refuses: the fast path must not accept
                pytest.fail(f"{param.name} ({desc.annotation}): {value!r} accepted, typer: {err}")
            assert fast == expected and type(fast) is type(expected), (param.name, value)
            checked += 1
    assert checked > 100
