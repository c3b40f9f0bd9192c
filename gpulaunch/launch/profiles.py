"""Launch profiles resolved: built-ins, the config's `profiles:` (with `extends:`), the
config's `launch:` and the command line merged into one `ResolvedLaunch`, every value
with its source.

Precedence: CLI > `--profile` > `launch:` > built-ins. `extends:` chains are resolved once
each (memoised) and cycles are named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpulaunch.errors import ConfigError
from gpulaunch.launch.presets import (
    ALLOC_VAR,
    DOCKER_KEYS,
    LEGACY_ALLOC_VAR,
    PRECISIONS,
    builtin_specs,
    docker_dict,
    name_findings,
    nccl_presets,
    precision_env,
)

if TYPE_CHECKING:
    from gpulaunch.config import ProfileSpec, ProjectConfig
    from gpulaunch.launch.options import RunOptions

CONFIG_ORIGIN = "gpulaunch.yaml"
BUILTIN_ORIGIN = "built-in"
_SETTINGS = ("nccl", "numa", "precision", "expandable_segments")


@dataclass(frozen=True)
class Sourced:
    """A value and where it came from, for `gpulaunch profiles show`."""

    value: Any
    source: str


@dataclass(frozen=True)
class ResolvedLaunch:
    profile: str
    nccl: Sourced | None
    numa: Sourced
    precision: Sourced | None
    expandable_segments: Sourced
    env: dict[str, Sourced]
    docker: dict[str, Sourced]
    log_dir: str | None
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def env_values(self) -> dict[str, str]:
        return {key: str(item.value) for key, item in sorted(self.env.items())}

    def settings(self) -> dict[str, Sourced]:
        """The four launch settings that are set, in display order."""
        return {name: item for name in _SETTINGS if (item := getattr(self, name)) is not None}


@dataclass(frozen=True)
class _Entry:
    """A profile of the namespace. `path` names it in errors and tells it apart (a user
    profile may take a built-in's name); `source` names it in `profiles show`."""

    name: str
    origin: str  # BUILTIN_ORIGIN | CONFIG_ORIGIN
    spec: ProfileSpec
    path: str
    source: str


def _namespace(config: ProjectConfig | None) -> dict[str, _Entry]:
    table = {}
    for name, spec in builtin_specs().items():
        said = f"built-in profile {name}"
        table[name] = _Entry(name, BUILTIN_ORIGIN, spec, said, said)
    for name, spec in config.profiles.items() if config is not None else ():
        table[name] = _Entry(
            name, CONFIG_ORIGIN, spec, f"profiles.{name}", f"profile {name} ({CONFIG_ORIGIN})"
        )
    return table


def list_profiles(config: ProjectConfig | None) -> list[tuple[str, str, str]]:
    """(name, origin, description) rows: `default` first, then by name."""
    rows = []
    for name, entry in _namespace(config).items():
        spec = entry.spec
        description = spec.description or (f"extends {spec.extends}" if spec.extends else "")
        rows.append((name, entry.origin, description))
    return sorted(rows, key=lambda row: (row[0] != "default", row[0]))


def _parent(table: Mapping[str, _Entry], entry: _Entry) -> _Entry | None:
    """The profile `entry` extends. A user profile that extends its own name extends the
    built-in of that name."""
    name = entry.spec.extends
    if name is None:
        return None
    if name == entry.name and entry.origin == CONFIG_ORIGIN:
        parent = _namespace(None).get(name)
        if parent is None:
            raise ConfigError(
                f"{entry.path}.extends: {name!r} extends itself "
                "(only a built-in profile of the same name may be extended this way)"
            )
        return parent
    parent = table.get(name)
    if parent is None:
        raise ConfigError(
            f"{entry.path}.extends: unknown profile {name!r} "
            f"(available: {', '.join(sorted(table))})"
        )
    return parent


def _check_extends(table: Mapping[str, _Entry]) -> None:
    """Every profile's `extends` chain resolves, without a cycle. Each link is followed once
    over all profiles: walking a 2000-long chain again per profile was cubic time."""
    checked: set[str] = set()  # paths
    for start in table.values():
        walk: dict[str, _Entry] = {}
        current: _Entry | None = start
        while current is not None and current.path not in checked:
            if current.path in walk:
                raise _cycle_error(list(walk.values()), current)
            walk[current.path] = current
            current = _parent(table, current)
        checked.update(walk)


def _chain(table: Mapping[str, _Entry], start: _Entry) -> list[_Entry]:
    """`start` and its ancestors, root first (after _check_extends)."""
    out: list[_Entry] = []
    current: _Entry | None = start
    while current is not None:
        out.append(current)
        current = _parent(table, current)
    return out[::-1]


def _cycle_error(seen: list[_Entry], again: _Entry) -> ConfigError:
    """Name the first gpulaunch.yaml profile in the loop: only the user can have made it."""
    start = next(i for i, e in enumerate(seen) if e.path == again.path)
    loop = seen[start:]
    first = next((i for i, e in enumerate(loop) if e.origin == CONFIG_ORIGIN), 0)
    loop = loop[first:] + loop[:first]
    names = " -> ".join([*(e.name for e in loop), loop[0].name])
    culprit = loop[0]
    return ConfigError(f"{culprit.path}.extends: {culprit.spec.extends!r} makes a cycle ({names})")


@dataclass
class _Layer:
    """One precedence level: scalar settings with (value, source, error path), env, docker,
    all from `source`."""

    source: str
    env: dict[str, str]
    settings: dict[str, tuple[Any, str, str]] = field(default_factory=dict)
    docker: dict[str, Any] = field(default_factory=dict)


def _layer(values: Any, keys: Sequence[str], source: str, path: str) -> _Layer:
    """The env and the settings `keys` that are set of a profile spec or of `launch:`."""
    layer = _Layer(source, dict(values.env))
    for key in keys:
        value = getattr(values, key)
        if value is not None:
            layer.settings[key] = (value, source, f"{path}.{key}")
    return layer


def _profile_layer(entry: _Entry) -> _Layer:
    layer = _layer(entry.spec, _SETTINGS, entry.source, entry.path)
    layer.docker = docker_dict(entry.spec.docker)
    return layer


def _launch_layer(config: ProjectConfig) -> _Layer:
    layer = _layer(config.launch, _SETTINGS[:3], f"launch: ({CONFIG_ORIGIN})", "launch")
    if "network" in config.launch.model_fields_set:
        layer.docker["network"] = config.launch.network
    return layer


def _cli_layer(cli: RunOptions) -> _Layer:
    from gpulaunch.launch.flags import parse_env_flags

    layer = _Layer("--env", parse_env_flags(cli.env))
    for key in _SETTINGS[:3]:
        value = getattr(cli, key)
        if value is not None:
            layer.settings[key] = (value, f"--{key} {value}", f"--{key}")
    if cli.expandable_segments is not None:
        flag = "--expandable-segments" if cli.expandable_segments else "--no-expandable-segments"
        layer.settings["expandable_segments"] = (cli.expandable_segments, flag, flag)
    return layer


def _merge_docker(target: dict[str, Sourced], options: Mapping[str, Any], source: str) -> None:
    """Lists union, dicts merge, scalars override; the source lists every contributor."""
    for key, value in options.items():
        old = target.get(key)
        if old is None or not isinstance(value, list | dict):
            target[key] = Sourced(value, source)
            continue
        if isinstance(value, list):
            merged: Any = [*old.value, *(v for v in value if v not in old.value)]
        else:
            merged = {**old.value, **value}
        said = old.source
        if merged != old.value and source not in said.split(" + "):
            said = f"{said} + {source}"
        target[key] = Sourced(merged, said)


def resolve_launch(
    config: ProjectConfig,
    cli: RunOptions,
    *,
    interconnect: str | None = None,
    gpu_names: Sequence[str] = (),
) -> ResolvedLaunch:
    """Fold profiles, `launch:`, presets, precision and CLI flags into one environment.

    Of `cli` (run's flags) only those a profile also sets are read: --profile, --nccl, --numa,
    --precision, --expandable-segments, --env, --nccl-ifname. `interconnect` ("nvlink"/"pcie",
    usually from `detect_interconnect()`) decides `nccl: auto`; None means unknown and gives
    `pcie` with a note. `gpu_names` (GPU marketing names) let bf16 be refused on GPUs older
    than Ampere. Raises ConfigError for unknown or cyclic profiles, unknown presets and
    impossible precision choices.
    """
    cli_layer = _cli_layer(cli)  # first: a bad --env is named before any profile error
    table = _namespace(config)
    _check_extends(table)  # every profile must resolve, selected or not

    name, flag = cli.profile, "--profile"
    if name is None:
        name, flag = config.launch.profile, "launch.profile"
    if name not in table:
        raise ConfigError(
            f"{flag}: unknown profile {name!r} (available: {', '.join(sorted(table))})"
        )
    base_chain = _chain(table, table["default"]) if "default" in table else []
    base_paths = {e.path for e in base_chain}
    selected_chain = [e for e in _chain(table, table[name]) if e.path not in base_paths]
    layers = [
        *(_profile_layer(e) for e in base_chain),
        _launch_layer(config),
        *(_profile_layer(e) for e in selected_chain),
        cli_layer,
    ]

    settings: dict[str, tuple[Any, str, str]] = {
        "numa": ("auto", "built-in default", ""),
        "expandable_segments": (False, "built-in default", ""),
    }
    for layer in layers:
        settings.update(layer.settings)

    warnings: list[str] = []
    notes: list[str] = []
    derived: dict[str, Sourced] = {}
    docker: dict[str, Sourced] = {}
    log_dir: str | None = None

    # NCCL preset
    nccl: Sourced | None = None
    if "nccl" in settings:
        value, source, path = settings["nccl"]
        preset_name = str(value)
        if preset_name == "auto":
            preset_name, why = _AUTO_NCCL.get(interconnect or "", ("pcie", "interconnect unknown"))
            source = f"{source}, auto: {why}"
            if interconnect not in _AUTO_NCCL:
                notes.append(
                    "nccl auto: the GPU interconnect is unknown, so the pcie preset is used; "
                    "pass --nccl nvlink on NVLink machines"
                )
        presets = nccl_presets()
        if preset_name not in presets:
            raise ConfigError(
                f"{path}: unknown NCCL preset {preset_name!r} "
                f"(available: auto, {', '.join(presets)})"
            )
        nccl = Sourced(preset_name, source)
        preset = presets[preset_name]
        preset_source = f"nccl preset {preset_name}"
        container_logs = preset.log_dir_container or ""
        for key, text in preset.env.items():
            derived[key] = Sourced(text.replace("{log_dir}", container_logs), preset_source)
        _merge_docker(docker, preset.docker, preset_source)
        log_dir = preset.log_dir_host
        notes.extend(preset.notes)
        if preset.ifname_default and not cli.nccl_ifname:
            derived["NCCL_SOCKET_IFNAME"] = Sourced(preset.ifname_default, preset_source)
    if cli.nccl_ifname is not None:
        notes.extend(_ifname_env(cli.nccl_ifname, derived))

    # precision
    precision: Sourced | None = None
    if "precision" in settings:
        value, source, path = settings["precision"]
        mode = str(value)
        if mode not in PRECISIONS:
            raise ConfigError(f"{path}: {mode!r} is not one of {', '.join(PRECISIONS)}")
        _check_precision_hardware(mode, path, gpu_names, warnings)
        precision = Sourced(mode, source)
        for key, text in precision_env(mode).items():
            derived[key] = Sourced(text, f"precision {mode}")
        if mode in ("fp16", "bf16"):
            notes.append(
                f"precision {mode}: Accelerate, HF Trainer and Lightning pick it up; a plain "
                "PyTorch script needs `from gpulaunch_precision import autocast` (no environment "
                "variable turns on torch.autocast)"
            )

    # explicit env, layer by layer; it wins over derived values
    env: dict[str, Sourced] = dict(derived)
    for layer in layers:
        for key, text in layer.env.items():
            old = env.get(key)
            if old is not None and key in derived and old is derived[key] and old.value != text:
                warnings.append(
                    f"{key}={text} from {layer.source} overrides {key}={old.value} "
                    f"set by {old.source}"
                )
            env[key] = Sourced(text, layer.source)

    # deprecated names: warn, and pass exact aliases under their current name
    _apply_name_rules(env, warnings)

    # allocator
    value, source, _ = settings["expandable_segments"]
    expandable = Sourced(bool(value), source)
    if expandable.value:
        _add_expandable_segments(env, expandable.source, warnings)
    if ALLOC_VAR in env and LEGACY_ALLOC_VAR not in env:
        env[LEGACY_ALLOC_VAR] = Sourced(
            env[ALLOC_VAR].value, f"copy of {ALLOC_VAR} for PyTorch versions that read only this"
        )

    # docker options from the layers, and a warning for the ones the user added that reach
    # the host (the built-ins are documented)
    for layer in layers:
        _merge_docker(docker, layer.docker, layer.source)
        if layer.source.startswith("built-in"):
            continue
        for key, what in (("cap_add", "adds capabilities"), ("devices", "passes host devices")):
            if layer.docker.get(key):
                items = ", ".join(str(v) for v in layer.docker[key])
                warnings.append(f"docker.{key} in {layer.source} {what}: {items}")

    return ResolvedLaunch(
        profile=name,
        nccl=nccl,
        numa=Sourced(*settings["numa"][:2]),
        precision=precision,
        expandable_segments=expandable,
        env=dict(sorted(env.items())),
        docker={k: docker[k] for k in DOCKER_KEYS if k in docker},
        log_dir=log_dir,
        warnings=tuple(dict.fromkeys(warnings)),
        notes=tuple(dict.fromkeys(notes)),
    )


# `nccl: auto`: the preset for the detected interconnect, and why
_AUTO_NCCL = {"nvlink": ("nvlink", "NVLink detected"), "pcie": ("pcie", "no NVLink detected")}


def _ifname_env(ifname: str, env: dict[str, Sourced]) -> list[str]:
    """--nccl-ifname: NCCL takes its own syntax (^exclude, =exact); gloo needs plain names."""
    if not ifname or any(c.isspace() or ord(c) < 32 for c in ifname):
        raise ConfigError(f"--nccl-ifname: {ifname!r} is not an interface name or NCCL list")
    source = f"--nccl-ifname {ifname}"
    env["NCCL_SOCKET_IFNAME"] = Sourced(ifname, source)
    if ifname.startswith("^"):
        return ["GLOO_SOCKET_IFNAME is not set: gloo needs interface names, not NCCL's ^exclusions"]
    env["GLOO_SOCKET_IFNAME"] = Sourced(ifname.lstrip("="), source)
    return []


def _check_precision_hardware(
    mode: str, path: str, gpu_names: Sequence[str], warnings: list[str]
) -> None:
    from gpulaunch.catalog.compat import gpu_compute_capability
    from gpulaunch.catalog.data import version_key

    for gpu in dict.fromkeys(gpu_names):
        found = gpu_compute_capability(gpu)  # a checked dotted version
        cc = version_key(found)[:2] if found else ()
        if len(cc) < 2 or cc >= (8, 0):
            continue
        if mode == "bf16":
            raise ConfigError(
                f"{path}: bf16 needs compute capability 8.0+; {gpu} is {cc[0]}.{cc[1]}",
                hint="use fp16 (with gpulaunch_precision.grad_scaler()) or fp32 on this GPU",
            )
        if mode == "tf32":
            warnings.append(
                f"precision tf32 has no effect on {gpu} (compute capability {cc[0]}.{cc[1]}; "
                "TF32 needs 8.0+)"
            )


def _apply_name_rules(env: dict[str, Sourced], warnings: list[str]) -> None:
    plain = {key: str(item.value) for key, item in env.items()}
    for key, message, rule in name_findings(plain):
        item = env.get(key)
        if item is None:
            continue
        text = f"{message} [{item.source}]"
        if rule is not None and rule.translate:
            target = rule.replacement
            del env[key]
            if target in env:
                text += f"; {target} is also set, so {key} is dropped"
            else:
                env[target] = Sourced(item.value, f"{item.source}, as {key}")
                text += f"; gpulaunch passes it as {target}"
        warnings.append(text)


def _add_expandable_segments(env: dict[str, Sourced], source: str, warnings: list[str]) -> None:
    current = env.get(ALLOC_VAR)
    if current is None:
        env[ALLOC_VAR] = Sourced("expandable_segments:True", source)
        return
    parts = [p.strip() for p in str(current.value).split(",") if p.strip()]
    for part in parts:
        key, _, value = part.partition(":")
        if key.strip() == "expandable_segments":
            if value.strip() != "True":
                warnings.append(
                    f"{ALLOC_VAR}={current.value} from {current.source} keeps "
                    f"expandable_segments:{value.strip()} although {source} asks for True"
                )
            return
    merged = ",".join([*parts, "expandable_segments:True"])
    env[ALLOC_VAR] = Sourced(merged, f"{current.source} + {source}")
