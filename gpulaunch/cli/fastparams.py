"""Flag values without pydantic: typer (0.29+) coerces every parameter through a pydantic
TypeAdapter, built the first time the parameter is processed, even for an option left at
its default. That import and the schema build are ~40 % of a short command's time.

`install()` makes typer's parameter build its coercion lazily: an option left unset (None)
needs none; a `str`, `bool`, `int` (inside its range) or `list[str]` value is converted
here exactly as the adapter would; anything else (Path, choices, floats, a value the
simple rules do not accept) goes to typer's own adapter, built then, so its error messages
stay typer's. tests/cli/test_fastparams.py compares both on every command's parameters.

A no-op when typer's internals differ from what it expects (then typer works as shipped).
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

_INT = re.compile(r"[+-]?[0-9]+")


def _plain(annotation: Any) -> tuple[Any, bool]:
    """(the type without `| None`, whether None was allowed)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def fast_value(annotation: Any, info: Any, value: Any) -> tuple[bool, Any]:
    """(True, converted) when the simple rules convert `value` as typer's adapter would
    (`info`: the parameter's typer ParameterInfo; a ranged int is converted inside its range
    only, so every refusal and clamp stays typer's)."""
    kind, _ = _plain(annotation)
    if kind is str and type(value) is str:
        return True, value
    if kind is bool and type(value) is bool:
        return True, value
    if kind is int:
        number = value if type(value) is int else None
        if type(value) is str and _INT.fullmatch(value) and len(value) < 20:
            number = int(value)
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        if (
            number is not None
            and (low is None or low <= number)
            and (high is None or number <= high)
        ):
            return True, number
    listed = typing.get_origin(kind) is list and typing.get_args(kind) == (str,)
    if listed and isinstance(value, list | tuple) and all(type(v) is str for v in value):
        return True, list(value)
    return False, None


def install() -> None:
    try:
        from typer import _coercion, core

        base = _coercion.RuntimeParam
        build = _coercion.build_runtime_param
        param_cls = core._TyperParameter
        if not hasattr(param_cls, "get_runtime_param"):
            return
    except (ImportError, AttributeError):
        return

    @dataclass(frozen=True)
    class LazyRuntimeParam(base):  # type: ignore[misc,valid-type]
        descriptor: Any = None
        real: list[Any] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done, converted = fast_value(self.annotation, self.parameter_info, value)
            if done:
                return converted
            if not self.real:
                self.real.append(build(self.descriptor))
            return self.real[0]._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            if desc.file_annotation is not None:
                self._runtime_param = build(desc)
            else:
                self._runtime_param = LazyRuntimeParam(
                    parameter_info=desc.parameter_info, annotation=desc.annotation, descriptor=desc
                )
        return self._runtime_param

    param_cls.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
