"""The gpulaunch.yaml schema (pydantic v2) and loading with field-path errors.

Importing this module imports pydantic; the CLI imports it lazily inside the commands
that need a config so `gpulaunch --help` stays fast.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from gpulaunch.errors import ConfigError
from gpulaunch.secretshape import secret_kind
from gpulaunch.textcheck import (
    bad_char,
    docker_size,
    env_item,
    parse_gpus,
    parse_ref,
    single_line,
    split_mount,
)
from gpulaunch.textcheck import parse_price as parse_price  # its home: below pydantic
from gpulaunch.yamlio import CONFIG_NAME as CONFIG_NAME  # its home: below pydantic
from gpulaunch.yamlio import parse_yaml_bytes, read_bytes

SCHEMA_VERSION = 1

# Every pattern is used with fullmatch: `$` would accept a trailing newline.
_APT_PKG = re.compile(r"[a-z0-9][a-z0-9+.\-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+:~\-]+)?")
_NAME = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")
_VERSION = re.compile(r"[A-Za-z0-9.+_-]+")
_URL = re.compile(r"(https?|file)://[^\s]+")
MAX_NAME = 128
_CAP = re.compile(r"(CAP_)?[A-Z][A-Z0-9_]*")

NcclPreset = Literal["auto", "nvlink", "pcie", "ib-gdr", "tcp", "debug", "safe", "none"]
NumaMode = Literal["auto", "off", "node", "socket"]
Precision = Literal["fp32", "tf32", "fp16", "bf16"]
Network = Literal["default", "host", "none"]


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        env_item(key, value)
    return env


def _no_secret_shape(value: str) -> str:
    """image.env is ENV in every layer (`docker history`): a value shaped like a secret is
    refused whatever its name (names are checked where the image is planned, catalog/request.py)."""
    kind = secret_kind(value)
    if kind is not None:
        raise ValueError(
            f"holds {kind}, which would be baked into the image; set it at run time with "
            "launch.env or --env"
        )
    return value


_ImageEnvValue = Annotated[str, AfterValidator(_no_secret_shape)]


def _check_strings(value: Any, multiline: bool) -> None:
    """Every str inside `value` (list items, dict keys and values) is one line."""
    if isinstance(value, str):
        char = bad_char(value)
        if char is not None and not (multiline and char in "\n\t"):
            raise ValueError(
                f"{value!r} must be a single line without control characters "
                f"(found U+{ord(char):04X})"
            )
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_strings(item, multiline)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key, False)
            _check_strings(item, multiline)


def _project_relative(value: str) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ValueError(f"{value!r} must be a relative path inside the project")
    return single_line(value)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)
    # Fields whose strings may span lines (shell steps, rendered JSON-escaped).
    _multiline: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _single_line(cls, value: Any, info: ValidationInfo) -> Any:
        """No string anywhere in the schema may carry a line break or control character."""
        _check_strings(value, info.field_name in cls._multiline)
        return value


class PipSettings(_Model):
    index_url: str | None = Field(None, description="Replaces PyPI for requirements.")
    extra_index_urls: list[str] = Field(default_factory=list)
    find_links: list[str] = Field(
        default_factory=list,
        description="Wheelhouse folders inside the project (air-gapped builds).",
    )
    no_index: bool = Field(False, description="Install only from find_links (no network).")

    @field_validator("find_links")
    @classmethod
    def _links(cls, value: list[str]) -> list[str]:
        return [_project_relative(v) for v in value]

    @field_validator("index_url", "extra_index_urls")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        for url in [value] if isinstance(value, str) else value or []:
            single_line(url)
            if not _URL.fullmatch(url):
                raise ValueError(f"{url!r} is not an http(s):// or file:// URL")
        return value


class ImageSettings(_Model):
    python: str | None = Field(None, description='Python version, e.g. "3.11".')
    torch: str | None = Field(None, description='PyTorch version; "none" for no torch.')
    torch_extras: list[Literal["torchvision", "torchaudio"]] = Field(
        default_factory=list, description="Installed with the pins matching torch."
    )
    torchvision: str | None = Field(
        None, description="Exact torchvision version over the catalog's pairing (a project pin)."
    )
    torchaudio: str | None = Field(
        None, description="Exact torchaudio version over the catalog's pairing (a project pin)."
    )
    cuda: str | None = Field(None, description='"12.4", "12.4.1" or "cpu"; derived when absent.')
    cudnn: str | None = Field(None, description='"8" or "9": a cuDNN base image (rarely needed).')
    os: str | None = Field(None, description='"ubuntu22.04", "ubuntu24.04", ...')
    flavor: Literal["runtime", "devel", "ngc", "cpu"] = "runtime"
    base: str | None = Field(None, description="Explicit base image; skips the catalog's choice.")
    python_source: Literal["distro", "deadsnakes", "standalone", "image"] | None = Field(
        None,
        description="Where the venv's Python comes from: distro (the OS's python3), deadsnakes "
        "(PPA), standalone (a CPython build installed by uv at build time), image (the base "
        "image's own). Unset: distro when it is the asked Python, else deadsnakes where it "
        "still exists.",
    )
    system_packages: list[str] = Field(default_factory=list)
    requirements: str | None = Field(
        None, description="requirements.txt or pyproject.toml, relative to the project."
    )
    pip: PipSettings = Field(default_factory=PipSettings)
    ca_cert: str | None = Field(None, description="Extra CA certificate (PEM) in the project.")
    env: dict[str, _ImageEnvValue] = Field(default_factory=dict)
    run: list[str] = Field(default_factory=list, description="Extra build steps (shell).")

    _multiline: ClassVar[frozenset[str]] = frozenset({"run"})

    @field_validator("torch_extras")
    @classmethod
    def _extras(cls, value: list[str]) -> list[str]:
        dupes = sorted({v for v in value if value.count(v) > 1})
        if dupes:
            raise ValueError(f"{dupes[0]!r} is listed twice")
        return value

    @field_validator("python", "torch", "cuda", "cudnn", "os", "torchvision", "torchaudio")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not _VERSION.fullmatch(value):
            raise ValueError(f"{value!r} is not a version string")
        return value

    @field_validator("base")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        if value is not None:
            parse_ref(value)
        return value

    @field_validator("system_packages")
    @classmethod
    def _packages(cls, value: list[str]) -> list[str]:
        for pkg in value:
            if not _APT_PKG.fullmatch(pkg):
                raise ValueError(f"{pkg!r} is not a valid Debian/Ubuntu package name")
        return value

    @field_validator("requirements", "ca_cert")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return None if value is None else _project_relative(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("run")
    @classmethod
    def _run(cls, value: list[str]) -> list[str]:
        for step in value:
            if not step.strip():
                raise ValueError("build steps must not be empty")
        return value


class BuildSettings(_Model):
    network: Network = Field("default", description="Network for RUN steps during the build.")


class DockerOptions(_Model):
    """docker run options a profile may set."""

    shm_size: str | None = Field(None, description='e.g. "16g"; used instead of ipc=host.')
    ipc: Literal["host", "private", "shareable"] | None = None
    memory: str | None = Field(
        None, description='Memory limit of the container, e.g. "64g" (docker --memory).'
    )
    network: Network | None = None
    cap_add: list[str] = Field(default_factory=list)
    devices: list[str] = Field(default_factory=list)
    ulimits: dict[str, StrictInt] = Field(default_factory=dict)  # StrictInt: "022" is no 22
    cpuset_cpus: str | None = None

    @field_validator("cap_add")
    @classmethod
    def _caps(cls, value: list[str]) -> list[str]:
        for cap in value:
            if not _CAP.fullmatch(cap):
                raise ValueError(f"{cap!r} is not a capability name like SYS_NICE")
        return value

    @field_validator("cpuset_cpus")
    @classmethod
    def _cpuset(cls, value: str | None) -> str | None:
        if value is not None:
            from gpulaunch.cpulist import parse_cpulist, possible_cpus

            parse_cpulist(value, limit=possible_cpus())
        return value

    @field_validator("shm_size", "memory")
    @classmethod
    def _shm(cls, value: str | None) -> str | None:
        if value is not None:
            docker_size(value)
        return value


class ProfileSpec(_Model):
    """A launch profile; `extends` composes profiles (built-in or user)."""

    extends: str | None = None
    description: str | None = None
    nccl: NcclPreset | None = None
    numa: NumaMode | None = None
    precision: Precision | None = None
    expandable_segments: bool | None = Field(
        None, description="PYTORCH_ALLOC_CONF=expandable_segments:True (less fragmentation)."
    )
    env: dict[str, str] = Field(default_factory=dict)
    docker: DockerOptions = Field(default_factory=DockerOptions)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)


class LaunchSettings(_Model):
    gpus: int | str = Field(1, description='Count, "all", "0,2", or 0 for CPU.')
    nproc: StrictInt | None = Field(None, ge=1, le=1024, description="Processes (CPU runs).")
    profile: str = "default"
    # -- multi-node and cluster exports (issue 12) --
    image: str | None = Field(
        None, description="A pushed image (REGISTRY/NAME[:TAG][@sha256:...]) to run and export."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Kubernetes node labels, e.g. nvidia.com/gpu.product."
    )
    node_affinity: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Kubernetes node affinity: label key -> allowed values (key In [values]).",
    )
    checkpoint_pvc: str | None = Field(
        None, description="PersistentVolumeClaim mounted at /checkpoints in Kubernetes exports."
    )
    nccl: NcclPreset | None = None
    numa: NumaMode | None = None
    precision: Precision | None = None
    network: Network = "default"
    env: dict[str, str] = Field(default_factory=dict)
    mounts: list[str] = Field(default_factory=list, description='"host:container[:ro]"')
    # run records and preemption (issue 11)
    price_per_gpu_hour: str | None = Field(
        None, description="Price of one GPU-hour (any currency), for the cost in run records."
    )
    checkpoint_dir: str | None = Field(
        None, description="Host folder mounted read-write at /checkpoints (created if missing)."
    )
    python: str | None = Field(None, description="--no-container's interpreter (path or command).")
    stop_grace: StrictInt = Field(
        45, ge=1, le=86400, description="Seconds between SIGTERM and SIGKILL when a job stops."
    )

    @field_validator("price_per_gpu_hour", mode="before")
    @classmethod
    def _price(cls, value: Any) -> str | None:
        return None if value is None else parse_price(value)

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint_dir(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\\" in value):
            raise ValueError(f"{value!r} is not a folder path")
        return None if value is None else single_line(value)

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> int | str:
        return parse_gpus(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_env(value)

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for mount in value:
            split_mount(mount)
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is not None:
            parse_ref(value)
        return value

    @field_validator("node_selector", "node_affinity")
    @classmethod
    def _labels(cls, value: dict[str, Any]) -> dict[str, Any]:
        from gpulaunch.textcheck import label_key, label_value

        for key, item in value.items():
            label_key(key)
            for one in item if isinstance(item, list) else [item]:
                label_value(one)
        return value

    @field_validator("checkpoint_pvc")
    @classmethod
    def _pvc(cls, value: str | None) -> str | None:
        from gpulaunch.textcheck import dns_subdomain

        return None if value is None else dns_subdomain(value)


class ProjectConfig(_Model):
    version: Literal[1] = Field(1, description="Schema version of gpulaunch.yaml.")
    name: str = Field(description="Image repository name.")
    image: ImageSettings = Field(default_factory=ImageSettings)
    build: BuildSettings = Field(default_factory=BuildSettings)
    launch: LaunchSettings = Field(default_factory=LaunchSettings)
    profiles: dict[str, ProfileSpec] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value) or len(value) > MAX_NAME:
            raise ValueError(
                f"{value!r} is not a valid image name (lowercase letters, digits, . _ - /)"
            )
        return value


def sanitize_name(text: str) -> str:
    """Turn a folder name into a valid image repository name."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("._-")
    name = re.sub(r"[._-]{2,}", "-", name)
    name = name[:MAX_NAME].strip("._-")  # a long folder name still gives a valid name
    return name or "project"


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before", "int", "str", "literal"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_message(err: ValidationError, model: type[BaseModel] = ProjectConfig) -> str:
    """First pydantic error as `field.path: reason` (one line)."""
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and "[" in p))
    path = _format_loc(loc) or "gpulaunch.yaml"
    kind = first["type"]
    if kind == "extra_forbidden":
        parent = _resolve_model(model, loc[:-1])
        valid = ", ".join(parent.model_fields) if parent else ""
        reason = "unknown field" + (f" (valid: {valid})" if valid else "")
    elif kind == "missing":
        reason = "required field is missing"
    else:
        reason = str(first["msg"]).removeprefix("Value error, ")
        if kind == "literal_error" and "input" in first:
            reason = f"{first['input']!r} is not allowed; {reason.lower()}"
    more = len(err.errors()) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{path}: {reason}{suffix}"


def _resolve_model(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None or isinstance(part, int):
            continue
        field = current.model_fields.get(str(part))
        if field is None:
            # dict[str, Model] entries: the key is a user name
            continue
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        candidates = [ann, *args]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return current


def validate_data(data: Any, source: str = CONFIG_NAME) -> ProjectConfig:
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise ConfigError(f"{source}: top level must be a mapping of settings, got {kind}")
    version = data.get("version", SCHEMA_VERSION)
    if type(version) is not int or version != SCHEMA_VERSION:  # `true` and `1.0` equal 1
        shown = str(version).lower() if isinstance(version, bool) else repr(version)
        raise ConfigError(
            f"version: {shown} is not supported by this gpulaunch (supports {SCHEMA_VERSION})"
        )
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err)) from None


def load_config(path: Path, overrides: Sequence[str] = ()) -> ProjectConfig:
    """Load and validate gpulaunch.yaml; every problem is a one-line ConfigError.

    `overrides` are `--set dotted.path=value` items, applied before validation."""
    return load_config_bytes(read_bytes(path), path, overrides)


def load_config_bytes(raw: bytes, path: Path, overrides: Sequence[str] = ()) -> ProjectConfig:
    """load_config on the file's bytes already read (the config cache keys on them)."""
    data = parse_yaml_bytes(raw, str(path))
    if overrides:
        from gpulaunch.yamlio import apply_overrides

        data = apply_overrides(data, overrides)
    return validate_data(data, str(path.name))


def json_schema() -> dict[str, Any]:
    """For editors, which read `python: 3.11` as a number and `numa: off` as a boolean (YAML
    1.1) where our loader keeps strings: every string field also takes those (_editor_scalars)."""
    schema = _editor_scalars(ProjectConfig.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpulaunch.yaml"
    return dict(schema)


_YAML11_BOOL_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false"}


def _editor_scalars(node: Any) -> Any:
    if isinstance(node, list):
        return [_editor_scalars(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _editor_scalars(value) for key, value in node.items()}
    if out.get("type") != "string":
        return out
    words = {str(v).lower() for v in out.get("enum", [])} | {str(out.get("const", "")).lower()}
    free = words & _YAML11_BOOL_WORDS or not ({"enum", "const"} & set(out))
    kinds = [{"type": "number"}, *([{"type": "boolean"}] if free else [])]
    extra = {k: out.pop(k) for k in ("title", "description", "default") if k in out}
    return {"anyOf": [out, *kinds], **extra}


def dump_config(config: ProjectConfig) -> str:
    """YAML text for a config, omitting defaults, with versions kept as quoted strings."""
    import yaml

    data = config.model_dump(mode="json", exclude_defaults=True)
    data = {"version": SCHEMA_VERSION, **data}

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = '"' if re.match(r"^[\d.]+$", value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return str(yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False))
