"""The data behind launch profiles: built-in profiles, NCCL presets, environment-name rules
(deprecated and non-existent variables), precision variables, and the interconnect and
compute-capability facts the `auto` choices read.

All of it comes from YAML files in `gpulaunch/data/`; nothing here merges profiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from gpulaunch.configview import VALIDATION_CODE, decode
from gpulaunch.engine import nvml
from gpulaunch.errors import ConfigError

if TYPE_CHECKING:
    from gpulaunch.config import ProfileSpec


T = TypeVar("T")
PRECISION_VAR = "GPULAUNCH_PRECISION"
ALLOC_VAR = "PYTORCH_ALLOC_CONF"
LEGACY_ALLOC_VAR = "PYTORCH_CUDA_ALLOC_CONF"
DOCKER_KEYS = (
    "shm_size",
    "ipc",
    "memory",
    "network",
    "cap_add",
    "devices",
    "ulimits",
    "cpuset_cpus",
)


# Only variables that something really reads (launch research §6). Lightning 2.x reads
# PL_TRAINER_PRECISION through `_defaults_from_env_vars`; an explicit Trainer(precision=) wins.
# No variable turns on torch.autocast: plain scripts use gpulaunch_precision (GPULAUNCH_PRECISION).
_PRECISION_ENV: dict[str, dict[str, str]] = {
    "fp32": {
        PRECISION_VAR: "fp32",
        "ACCELERATE_MIXED_PRECISION": "no",
        "PL_TRAINER_PRECISION": "32-true",
        # NGC images set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; strict fp32 turns it back off,
        # and NVIDIA_TF32_OVERRIDE=0 keeps cuBLAS/cuDNN from using TF32 at all.
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
        "NVIDIA_TF32_OVERRIDE": "0",
    },
    "tf32": {
        PRECISION_VAR: "tf32",
        "ACCELERATE_MIXED_PRECISION": "no",
        "PL_TRAINER_PRECISION": "32-true",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
    },
    "fp16": {
        PRECISION_VAR: "fp16",
        "ACCELERATE_MIXED_PRECISION": "fp16",
        "PL_TRAINER_PRECISION": "16-mixed",
    },
    "bf16": {
        PRECISION_VAR: "bf16",
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "PL_TRAINER_PRECISION": "bf16-mixed",
    },
}
PRECISIONS = tuple(_PRECISION_ENV)  # fp32, tf32, fp16, bf16


@dataclass(frozen=True)
class NcclPreset:
    name: str
    env: Mapping[str, str]
    docker: Mapping[str, Any]
    ifname_default: str | None
    log_dir_host: str | None
    log_dir_container: str | None
    notes: tuple[str, ...]


@dataclass(frozen=True)
class EnvNameRule:
    name: str
    status: str  # deprecated | renamed | removed | nonexistent
    replacement: str
    reason: str
    translate: bool

    def message(self) -> str:
        said = _STATUS_TEXT.get(self.status, "is deprecated")
        return f"{self.name} {said}; use {self.replacement} ({self.reason})"


# How each status reads in a warning ("deprecated" for the rest).
_STATUS_TEXT = {
    "nonexistent": "does not exist and has no effect",
    "removed": "has no effect any more",
    "renamed": "is an old name",
}


def _data_text(*parts: str) -> str:
    return resources.files("gpulaunch").joinpath("data", *parts).read_text(encoding="utf-8")


def _parse(text: str, source: str, packaged: str | None = None) -> Any:
    from gpulaunch.yamlio import parse_yaml_text

    return parse_yaml_text(text, source, packaged)


VALIDATED = "validated.json"  # in gpulaunch/data/json/, written by dev/packaged-json


def validated_inputs() -> str:
    """The sha256 of what the validated copy is made from: the code that validates and stores
    it (configview.VALIDATION_CODE: the models and what they import) and every built-in
    profile and the NCCL presets, by name and text."""
    root = resources.files("gpulaunch")
    parts: list[tuple[str, ...]] = [(name,) for name in VALIDATION_CODE]
    parts.append(("data", "nccl_presets.yaml"))
    folder = root.joinpath("data", "profiles")
    names = sorted(e.name for e in folder.iterdir() if e.name.endswith(".yaml"))
    parts += [("data", "profiles", name) for name in names]
    digest = hashlib.sha256()
    for part in parts:
        digest.update("/".join(part).encode("utf-8") + b"\0")
        digest.update(root.joinpath(*part).read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _validated_copy() -> dict[str, Any] | None:
    """dev/packaged-json's validated built-in profiles and NCCL presets, when the copy names
    the exact inputs here (validated_inputs); None: validate them with pydantic instead."""
    try:
        doc = json.loads(_data_text("json", VALIDATED))
        if isinstance(doc, dict) and doc.get("inputs") == validated_inputs():
            return doc
    except (OSError, ValueError):
        pass
    return None


def _stored(key: str, load: Callable[[str, Any], T]) -> dict[str, T] | None:
    """`key`'s entries of the validated copy, each through `load`; None when the copy is
    stale or not well formed."""
    copy = _validated_copy()
    if copy is None:
        return None
    try:
        return {name: load(name, node) for name, node in copy[key].items()}
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


@lru_cache(maxsize=1)
def builtin_specs() -> dict[str, ProfileSpec]:
    """The built-in profiles, validated: from the validated copy (views, no pydantic) when it
    is current and well formed, else through the pydantic models."""
    stored = _stored("profiles", lambda _, node: decode(node))  # views read as the models
    return validate_builtin_specs() if stored is None else stored  # type: ignore[return-value]


def validate_builtin_specs() -> dict[str, ProfileSpec]:
    """The built-in profiles through the pydantic models (dev/packaged-json, a stale copy)."""
    from pydantic import ValidationError

    from gpulaunch.config import ProfileSpec, validation_message

    folder = resources.files("gpulaunch").joinpath("data", "profiles")
    specs: dict[str, ProfileSpec] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        name = entry.name.removesuffix(".yaml")
        source = f"built-in profile {name}"
        data = _parse(entry.read_text(encoding="utf-8"), source, f"profiles/{entry.name}")
        try:
            specs[name] = ProfileSpec.model_validate(data or {})
        except ValidationError as err:
            raise ConfigError(f"{source}: {validation_message(err, ProfileSpec)}") from None
    return specs


@lru_cache(maxsize=1)
def nccl_presets() -> dict[str, NcclPreset]:
    """The NCCL presets from gpulaunch/data/nccl_presets.yaml, validated: from the validated
    copy when it is current and well formed, else through pydantic."""
    stored = _stored("nccl_presets", _preset)
    return validate_nccl_presets() if stored is None else stored


def _preset(name: str, node: dict[str, Any]) -> NcclPreset:
    if set(node) != set(NcclPreset.__dataclass_fields__) or node["name"] != name:
        raise ValueError(f"NCCL preset {name}: not a stored preset")
    if not isinstance(node["notes"], list) or not isinstance(node["docker"], dict):
        raise ValueError(f"NCCL preset {name}: not a stored preset")
    return NcclPreset(**{**node, "notes": tuple(node["notes"])})


def validate_nccl_presets() -> dict[str, NcclPreset]:
    """The NCCL presets through pydantic models (dev/packaged-json, a stale copy)."""
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    from gpulaunch.config import DockerOptions, validation_message

    class _LogDir(BaseModel):
        model_config = ConfigDict(extra="forbid")
        host: str
        container: str

    class _Preset(BaseModel):
        model_config = ConfigDict(extra="forbid")
        env: dict[str, str] = Field(default_factory=dict)
        docker: DockerOptions = Field(default_factory=DockerOptions)
        ifname_default: str | None = None
        log_dir: _LogDir | None = None
        notes: list[str] = Field(default_factory=list)

    class _File(BaseModel):
        model_config = ConfigDict(extra="forbid")
        version: int
        presets: dict[str, _Preset]

    source = "gpulaunch/data/nccl_presets.yaml"
    try:
        parsed = _File.model_validate(_parse(_data_text("nccl_presets.yaml"), source))
    except ValidationError as err:
        raise ConfigError(f"{source}: {validation_message(err, _File)}") from None
    out: dict[str, NcclPreset] = {}
    for name, preset in parsed.presets.items():
        out[name] = NcclPreset(
            name=name,
            env=dict(preset.env),
            docker=docker_dict(preset.docker),
            ifname_default=preset.ifname_default,
            log_dir_host=preset.log_dir.host if preset.log_dir else None,
            log_dir_container=preset.log_dir.container if preset.log_dir else None,
            notes=tuple(preset.notes),
        )
    return out


@lru_cache(maxsize=1)
def _env_rules() -> tuple[dict[str, EnvNameRule], dict[str, tuple[re.Pattern[str], str]]]:
    source = "gpulaunch/data/env_names.yaml"
    data = _parse(_data_text("env_names.yaml"), source)
    names: dict[str, EnvNameRule] = {}
    for name, item in (data.get("names") or {}).items():
        names[name] = EnvNameRule(
            name=name,
            status=str(item["status"]),
            replacement=str(item["replacement"]),
            reason=" ".join(str(item["reason"]).split()),
            translate=bool(item.get("translate", False)),
        )
    values = {
        name: (re.compile(str(item["pattern"])), " ".join(str(item["reason"]).split()))
        for name, item in (data.get("values") or {}).items()
    }
    return names, values


def check_env_names(env: Mapping[str, str]) -> list[str]:
    """Warnings for deprecated, renamed, removed or invented variable names and legacy values."""
    return [message for _, message, _ in name_findings(env)]


def name_findings(env: Mapping[str, str]) -> list[tuple[str, str, EnvNameRule | None]]:
    names, values = _env_rules()
    found: list[tuple[str, str, EnvNameRule | None]] = []
    for key in sorted(env):
        rule = names.get(key)
        if rule is not None:
            found.append((key, rule.message(), rule))
        legacy = values.get(key)
        if legacy is not None and legacy[0].search(str(env[key])):
            found.append((key, f"{key}={env[key]}: {legacy[1]}", None))
    return found


def precision_env(precision: str) -> dict[str, str]:
    """Variables a precision mode (one of PRECISIONS) sets. Only names that something really
    reads."""
    return dict(_PRECISION_ENV[precision])


def detect_interconnect(env: Mapping[str, str] | None = None) -> str | None:
    """ "nvlink" when NVML reports an active NVLink on any GPU, "pcie" when it reports none,
    None when it cannot tell (no pynvml, no driver, no GPU, or a sysfs fixture is in use)."""
    with nvml.session(os.environ if env is None else env) as lib:
        if lib is None:
            return None
        try:
            return _nvlink_state(lib)
        except nvml.NvmlError:
            return None


def _nvlink_state(lib: Any) -> str | None:
    count = int(lib.nvmlDeviceGetCount())
    if count == 0:
        return None
    max_links = int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(lib, "NVML_FEATURE_ENABLED", 1)
    for index in range(count):
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        for link in range(max_links):
            try:
                if lib.nvmlDeviceGetNvLinkState(handle, link) == enabled:
                    return "nvlink"
            except nvml.NvmlError:  # NotSupported / InvalidArgument past the last link
                break
    return "pcie"


def docker_dict(options: Any) -> dict[str, Any]:
    """Set docker options only (None and empty lists/dicts mean "not set")."""
    out: dict[str, Any] = {}
    for key in DOCKER_KEYS:
        value = getattr(options, key)
        if value is None or value == [] or value == {}:
            continue
        if isinstance(value, list | dict):
            value = type(value)(value)  # a copy: merging must not change the spec
        out[key] = value
    return out
