"""The one type callers see of a validated config: `Model` (a Protocol: attributes,
`model_dump`, `model_fields_set`), which ConfigView is. `encode` turns a pydantic model
(duck-typed) into a JSON tree, `decode` turns that tree into ConfigView objects, and `same`
proves a view answers as its model does. The config cache (configcache.py) hands out views
whether it validated the file now or read it back, and so do the built-in profiles and NCCL
presets that dev/packaged-json validates once (launch/presets.py)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["VALIDATION_CODE", "ConfigView", "Model", "decode", "encode", "same"]

# The modules that parse and validate gpulaunch.yaml and store the result as views
# (tests/test_configcache.py checks that `import gpulaunch.config` loads no other gpulaunch
# module): the config cache (configcache._CODE) and the validated copy of the built-in
# profiles (launch/presets.validated_inputs) are keyed on their text.
VALIDATION_CODE = (
    "config.py",
    "configview.py",
    "cpulist.py",
    "errors.py",
    "secretshape.py",
    "textcheck.py",
    "yamlio.py",
)


class Model(Protocol):
    """What a loaded config (and each model in it) answers: its fields as attributes,
    `model_dump` and `model_fields_set`. Code that needs more adds it to ConfigView."""

    @property
    def model_fields_set(self) -> set[str]: ...

    def model_dump(
        self, *, mode: str = "python", exclude_unset: bool = False
    ) -> dict[str, Any]: ...

    def __getattr__(self, name: str) -> Any: ...


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
    """A validated config model as plain data, without pydantic: its fields as
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
