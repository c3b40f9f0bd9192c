"""Launch profiles: precedence, extends chains, presets, precision, deprecated names."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from typing import Any

import fake_nvml
import pytest
from conftest import REPO
from fake_nvml import FakeNvml, install

from gpulaunch.config import ProjectConfig, validate_data
from gpulaunch.errors import ConfigError, ExitCode
from gpulaunch.launch.options import RunOptions
from gpulaunch.launch.presets import (
    check_env_names,
    detect_interconnect,
    nccl_presets,
    precision_env,
    validate_builtin_specs,
)
from gpulaunch.launch.profiles import (
    ResolvedLaunch,
    Sourced,
    list_profiles,
    resolve_launch,
)
from gpulaunch.yamlio import parse_yaml_text

YAML = "(gpulaunch.yaml)"


def _config(text: str = "") -> ProjectConfig:
    data = parse_yaml_text("name: demo\n" + textwrap.dedent(text), "gpulaunch.yaml")
    return validate_data(data)


def _resolve(text: str = "", cli: RunOptions | None = None, **kw: Any) -> ResolvedLaunch:
    return resolve_launch(_config(text), cli or RunOptions(), **kw)


def _error(text: str = "", cli: RunOptions | None = None, **kw: Any) -> str:
    with pytest.raises(ConfigError) as info:
        _resolve(text, cli, **kw)
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in info.value.message
    return info.value.message


# --------------------------------------------------------------------- built-in data


def test_builtin_profiles_validate_and_cover_the_basics() -> None:
    profiles = validate_builtin_specs()
    assert {"default", "debug", "safe", "nvlink", "pcie"} <= set(profiles)
    assert profiles["default"].extends is None
    for name, spec in profiles.items():
        assert spec.description, name
        if name != "default":
            assert spec.extends == "default", name
    assert profiles["debug"].nccl == "debug"
    assert profiles["safe"].nccl == "safe"
    assert profiles["safe"].numa == "off"


def test_builtin_profiles_are_copies() -> None:
    validate_builtin_specs()["default"].env["X"] = "1"
    assert "X" not in validate_builtin_specs()["default"].env


def test_preset_names() -> None:
    assert set(nccl_presets()) == {"nvlink", "pcie", "ib-gdr", "tcp", "debug", "safe", "none"}


def test_builtin_data_uses_no_deprecated_names() -> None:
    for preset in nccl_presets().values():
        assert not check_env_names(preset.env), preset.name
    for name, spec in validate_builtin_specs().items():
        assert not check_env_names(spec.env), name
    for mode in ("fp32", "tf32", "fp16", "bf16"):
        assert not check_env_names(precision_env(mode)), mode


def test_project_never_reads_shared_folder() -> None:
    for path in [*(REPO / "gpulaunch").rglob("*.py"), *(REPO / "gpulaunch" / "data").rglob("*")]:
        if path.is_file():
            assert "/work/shared" not in path.read_text(encoding="utf-8"), path


def test_profiles_module_imports_no_heavy_modules() -> None:
    code = (
        "import sys, gpulaunch.launch.profiles, gpulaunch.launch.presets\n"
        "names = ('pydantic', 'yaml', 'pynvml', 'docker', 'torch')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------- nccl presets


def test_default_profile_resolves_auto_from_interconnect() -> None:
    nv = _resolve(interconnect="nvlink")
    assert nv.profile == "default"
    assert nv.nccl == Sourced("nvlink", "built-in profile default, auto: NVLink detected")
    assert nv.env["NCCL_DEBUG"] == Sourced("WARN", "nccl preset nvlink")
    assert nv.env["CUDA_DEVICE_ORDER"] == Sourced("PCI_BUS_ID", "built-in profile default")
    assert nv.docker["cap_add"] == Sourced(["SYS_NICE"], "built-in profile default")
    assert nv.docker["ipc"] == Sourced("host", "nccl preset nvlink")
    assert nv.numa == Sourced("auto", "built-in profile default")
    assert nv.precision is None
    assert nv.expandable_segments == Sourced(False, "built-in profile default")
    assert nv.warnings == ()
    assert nv.log_dir is None

    pcie = _resolve(interconnect="pcie")
    assert pcie.nccl == Sourced("pcie", "built-in profile default, auto: no NVLink detected")
    assert not any("unknown" in n for n in pcie.notes)

    unknown = _resolve()
    assert unknown.nccl == Sourced("pcie", "built-in profile default, auto: interconnect unknown")
    assert any("interconnect is unknown" in n for n in unknown.notes)


def test_env_values_is_plain_and_sorted() -> None:
    values = _resolve(interconnect="nvlink").env_values()
    assert values == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_DEBUG": "WARN"}
    assert list(values) == sorted(values)


def test_debug_preset_env_docker_and_log_dir() -> None:
    r = _resolve(cli=RunOptions(nccl="debug"))
    assert r.nccl == Sourced("debug", "--nccl debug")
    logs = "/workspace/logs/nccl"
    env = r.env_values()
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,BOOTSTRAP,ENV,NET,GRAPH"
    assert env["NCCL_DEBUG_FILE"] == f"{logs}/nccl.%h.%p.log"
    assert env["NCCL_TOPO_DUMP_FILE"] == f"{logs}/nccl_topo.xml"
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == f"{logs}/nccl_trace_rank_"
    assert env["TORCH_NCCL_DESYNC_DEBUG"] == "1"
    assert r.env["NCCL_DEBUG"].source == "nccl preset debug"
    assert r.log_dir == "logs/nccl"
    assert not any("{log_dir}" in v for v in env.values())


def test_ib_gdr_preset_docker_options() -> None:
    r = _resolve(cli=RunOptions(nccl="ib-gdr"))
    assert r.docker["network"] == Sourced("host", "nccl preset ib-gdr")
    assert r.docker["devices"].value == ["/dev/infiniband"]
    assert r.docker["ulimits"].value == {"memlock": -1}
    # the preset's IPC_LOCK joins the default profile's SYS_NICE
    assert r.docker["cap_add"] == Sourced(
        ["IPC_LOCK", "SYS_NICE"], "nccl preset ib-gdr + built-in profile default"
    )
    assert "NCCL_SOCKET_IFNAME" not in r.env  # NCCL prefers ib* by itself
    assert "NCCL_IB_DISABLE" not in r.env
    assert any("nvidia-peermem" in n for n in r.notes)


def test_tcp_preset_default_interface_exclusion() -> None:
    r = _resolve(cli=RunOptions(nccl="tcp"))
    assert r.env["NCCL_IB_DISABLE"] == Sourced("1", "nccl preset tcp")
    assert r.env["NCCL_SOCKET_IFNAME"] == Sourced("^lo,docker,veth,br-,virbr", "nccl preset tcp")
    assert "GLOO_SOCKET_IFNAME" not in r.env  # gloo cannot take ^exclusions
    assert r.docker["network"].value == "host"


@pytest.mark.parametrize(
    ("ifname", "nccl", "gloo"),
    [
        ("eth0", "eth0", "eth0"),
        ("=ens5", "=ens5", "ens5"),
        ("^lo,docker0", "^lo,docker0", None),
    ],
)
def test_tcp_preset_with_interface(ifname: str, nccl: str, gloo: str | None) -> None:
    r = _resolve(cli=RunOptions(nccl="tcp", nccl_ifname=ifname))
    assert r.env["NCCL_SOCKET_IFNAME"] == Sourced(nccl, f"--nccl-ifname {ifname}")
    if gloo is None:
        assert "GLOO_SOCKET_IFNAME" not in r.env
        assert any("GLOO_SOCKET_IFNAME is not set" in n for n in r.notes)
    else:
        assert r.env["GLOO_SOCKET_IFNAME"] == Sourced(gloo, f"--nccl-ifname {ifname}")


def test_bad_interface_name() -> None:
    assert _error(cli=RunOptions(nccl="tcp", nccl_ifname="eth 0")).startswith("--nccl-ifname:")


def test_safe_profile_is_described_slow() -> None:
    assert "slow" in validate_builtin_specs()["safe"].description
    r = _resolve(cli=RunOptions(profile="safe"))
    assert r.nccl == Sourced("safe", "built-in profile safe")
    assert r.numa == Sourced("off", "built-in profile safe")
    assert r.env_values()["NCCL_P2P_DISABLE"] == "1"
    assert r.env_values()["NCCL_IB_DISABLE"] == "1"
    assert r.env_values()["NCCL_CUMEM_HOST_ENABLE"] == "0"


def test_none_preset_sets_nothing() -> None:
    r = _resolve(cli=RunOptions(nccl="none"))
    assert r.nccl == Sourced("none", "--nccl none")
    assert r.env_values() == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert set(r.docker) == {"cap_add"}


def test_unknown_preset_from_cli() -> None:
    message = _error(cli=RunOptions(nccl="fast"))
    assert message.startswith("--nccl: unknown NCCL preset 'fast' (available: auto, nvlink")


# --------------------------------------------------------------------- precedence


PRECEDENCE_CONFIG = """
launch:
  nccl: tcp
  numa: node
  precision: fp16
  env: {A: launch, B: launch}
profiles:
  fast:
    extends: default
    precision: bf16
    env: {B: fast, C: fast}
"""


@pytest.mark.parametrize(
    ("cli", "expected"),
    [
        # launch: beats the built-in default profile
        (
            RunOptions(),
            {
                "nccl": ("tcp", f"launch: {YAML}"),
                "numa": ("node", f"launch: {YAML}"),
                "precision": ("fp16", f"launch: {YAML}"),
                "A": ("launch", f"launch: {YAML}"),
                "B": ("launch", f"launch: {YAML}"),
            },
        ),
        # --profile beats launch:, but what it inherits from `default` does not
        (
            RunOptions(profile="fast"),
            {
                "nccl": ("tcp", f"launch: {YAML}"),
                "numa": ("node", f"launch: {YAML}"),
                "precision": ("bf16", f"profile fast {YAML}"),
                "A": ("launch", f"launch: {YAML}"),
                "B": ("fast", f"profile fast {YAML}"),
                "C": ("fast", f"profile fast {YAML}"),
            },
        ),
        # a built-in profile chosen with --profile also beats launch:
        (
            RunOptions(profile="debug"),
            {"nccl": ("debug", "built-in profile debug"), "numa": ("node", f"launch: {YAML}")},
        ),
        # CLI flags beat everything
        (
            RunOptions(
                profile="fast",
                nccl="safe",
                numa="off",
                precision="tf32",
                env=["B=cli"],
            ),
            {
                "nccl": ("safe", "--nccl safe"),
                "numa": ("off", "--numa off"),
                "precision": ("tf32", "--precision tf32"),
                "B": ("cli", "--env"),
                "C": ("fast", f"profile fast {YAML}"),
            },
        ),
    ],
)
def test_precedence(cli: RunOptions, expected: dict[str, tuple[str, str]]) -> None:
    r = _resolve(PRECEDENCE_CONFIG, cli)
    for key, (value, source) in expected.items():
        got = getattr(r, key) if key.islower() else r.env[key]
        assert got == Sourced(value, source), key


def test_launch_profile_selects_profile() -> None:
    r = _resolve(
        """
        launch: {profile: fast}
        profiles:
          fast: {precision: bf16}
        """
    )
    assert r.profile == "fast"
    assert r.precision == Sourced("bf16", f"profile fast {YAML}")
    # a profile without extends still sits on the default base layer
    assert r.nccl is not None and r.nccl.value == "pcie"


def test_user_default_profile_overrides_builtin() -> None:
    r = _resolve(
        """
        profiles:
          default:
            nccl: nvlink
            env: {X: "1"}
        """
    )
    assert r.nccl == Sourced("nvlink", f"profile default {YAML}")
    # without `extends: default` the built-in default does not contribute
    assert "CUDA_DEVICE_ORDER" not in r.env
    assert "cap_add" not in r.docker
    assert r.numa == Sourced("auto", "built-in default")


def test_user_profile_extending_own_name_gets_builtin() -> None:
    config = """
    profiles:
      default:
        extends: default
        precision: bf16
    """
    r = _resolve(config)
    assert r.precision == Sourced("bf16", f"profile default {YAML}")
    assert r.env["CUDA_DEVICE_ORDER"] == Sourced("PCI_BUS_ID", "built-in profile default")
    # launch: still beats the (user's) default layer
    r = _resolve(config + "launch: {precision: fp32}\n")
    assert r.precision == Sourced("fp32", f"launch: {YAML}")


def test_user_debug_profile_overrides_builtin_name() -> None:
    r = _resolve(
        """
        profiles:
          debug:
            extends: debug
            env: {NCCL_DEBUG_SUBSYS: ALL}
        """,
        RunOptions(profile="debug"),
    )
    assert r.nccl == Sourced("debug", "built-in profile debug")
    assert r.env["NCCL_DEBUG_SUBSYS"] == Sourced("ALL", f"profile debug {YAML}")
    assert any(
        w.startswith("NCCL_DEBUG_SUBSYS=ALL from profile debug") and "nccl preset debug" in w
        for w in r.warnings
    )


def test_extends_chain_of_user_profiles() -> None:
    r = _resolve(
        """
        profiles:
          base:
            extends: nvlink
            env: {A: base, B: base}
            docker: {cap_add: [NET_ADMIN], ulimits: {nofile: 65536}, shm_size: 8g}
          mid:
            extends: base
            env: {B: mid}
            docker: {cap_add: [SYS_PTRACE], ulimits: {core: 0}, shm_size: 16g}
          top:
            extends: mid
            expandable_segments: true
        """,
        RunOptions(profile="top"),
    )
    assert r.nccl == Sourced("nvlink", "built-in profile nvlink")
    assert r.env["A"] == Sourced("base", f"profile base {YAML}")
    assert r.env["B"] == Sourced("mid", f"profile mid {YAML}")
    assert r.expandable_segments == Sourced(True, f"profile top {YAML}")
    assert r.docker["cap_add"].value == ["SYS_NICE", "NET_ADMIN", "SYS_PTRACE"]
    assert r.docker["ulimits"].value == {"memlock": -1, "nofile": 65536, "core": 0}
    assert r.docker["ulimits"].source == (
        f"nccl preset nvlink + profile base {YAML} + profile mid {YAML}"
    )
    assert r.docker["shm_size"] == Sourced("16g", f"profile mid {YAML}")


def test_docker_scalars_override_and_launch_network() -> None:
    r = _resolve(
        """
        launch: {network: none}
        profiles:
          iso: {docker: {network: default, ipc: private}}
        """,
        RunOptions(nccl="tcp"),
    )
    assert r.docker["network"] == Sourced("none", f"launch: {YAML}")
    r = _resolve(
        """
        launch: {network: none}
        profiles:
          iso: {docker: {network: default, ipc: private}}
        """,
        RunOptions(nccl="tcp", profile="iso"),
    )
    assert r.docker["network"] == Sourced("default", f"profile iso {YAML}")
    assert r.docker["ipc"] == Sourced("private", f"profile iso {YAML}")


# --------------------------------------------------------------------- profile errors


@pytest.mark.parametrize(
    ("config", "cli", "message"),
    [
        (
            "",
            RunOptions(profile="nope"),
            "--profile: unknown profile 'nope' (available: bf16, debug, default, nvlink, pcie, "
            "safe)",
        ),
        (
            "launch: {profile: nope}\n",
            RunOptions(),
            "launch.profile: unknown profile 'nope' (available: bf16, debug, default, nvlink, "
            "pcie, safe)",
        ),
        (
            "profiles:\n  a: {extends: ghost}\n",
            RunOptions(),
            "profiles.a.extends: unknown profile 'ghost' (available: a, bf16, debug, default, "
            "nvlink, pcie, safe)",
        ),
        (
            "profiles:\n  a: {extends: b}\n  b: {extends: a}\n",
            RunOptions(profile="a"),
            "profiles.a.extends: 'b' makes a cycle (a -> b -> a)",
        ),
        (
            "profiles:\n  a: {extends: a}\n",
            RunOptions(),
            "profiles.a.extends: 'a' extends itself",
        ),
        (
            "profiles:\n  default: {extends: debug}\n",
            RunOptions(),
            "profiles.default.extends: 'debug' makes a cycle (default -> debug -> default)",
        ),
    ],
)
def test_profile_errors(config: str, cli: RunOptions, message: str) -> None:
    assert _error(config, cli).startswith(message)


def test_broken_unselected_profile_is_still_reported() -> None:
    message = _error("profiles:\n  x: {extends: y}\n  y: {extends: x}\n")
    assert "makes a cycle" in message


# --------------------------------------------------------------------- listing


def test_list_profiles_marks_origin() -> None:
    rows = list_profiles(
        _config(
            """
            profiles:
              fast: {extends: bf16}
              debug: {extends: debug, description: my debug}
            """
        )
    )
    assert rows[0][0] == "default"
    table = {name: (origin, desc) for name, origin, desc in rows}
    assert table["fast"] == ("gpulaunch.yaml", "extends bf16")
    assert table["debug"] == ("gpulaunch.yaml", "my debug")
    assert table["safe"][0] == "built-in"
    assert "slow" in table["safe"][1]
    assert list_profiles(None)[0][0] == "default"


# --------------------------------------------------------------------- precision


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "fp32",
            {
                "GPULAUNCH_PRECISION": "fp32",
                "ACCELERATE_MIXED_PRECISION": "no",
                "PL_TRAINER_PRECISION": "32-true",
                "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
                "NVIDIA_TF32_OVERRIDE": "0",
            },
        ),
        (
            "tf32",
            {
                "GPULAUNCH_PRECISION": "tf32",
                "ACCELERATE_MIXED_PRECISION": "no",
                "PL_TRAINER_PRECISION": "32-true",
                "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
            },
        ),
        (
            "fp16",
            {
                "GPULAUNCH_PRECISION": "fp16",
                "ACCELERATE_MIXED_PRECISION": "fp16",
                "PL_TRAINER_PRECISION": "16-mixed",
            },
        ),
        (
            "bf16",
            {
                "GPULAUNCH_PRECISION": "bf16",
                "ACCELERATE_MIXED_PRECISION": "bf16",
                "PL_TRAINER_PRECISION": "bf16-mixed",
            },
        ),
    ],
)
def test_precision_env(mode: str, expected: dict[str, str]) -> None:
    assert precision_env(mode) == expected
    r = _resolve(cli=RunOptions(precision=mode))
    assert r.precision == Sourced(mode, f"--precision {mode}")
    for key, value in expected.items():
        assert r.env[key] == Sourced(value, f"precision {mode}")


def test_precision_env_rejects_unknown_mode() -> None:
    error = _error(cli=RunOptions(precision="fp8"))
    assert error.startswith("--precision: 'fp8' is not one of fp32, tf32, fp16, bf16")


def test_mixed_precision_note_is_honest() -> None:
    r = _resolve(cli=RunOptions(precision="bf16"))
    assert any("no environment variable turns on torch.autocast" in n for n in r.notes)


def test_bf16_refused_on_v100() -> None:
    message = _error(cli=RunOptions(precision="bf16"), gpu_names=["Tesla V100-SXM2-16GB"])
    assert message == "--precision: bf16 needs compute capability 8.0+; Tesla V100-SXM2-16GB is 7.0"


def test_bf16_refused_from_profile_names_the_field() -> None:
    message = _error(
        "profiles:\n  fast: {precision: bf16}\n",
        RunOptions(profile="fast"),
        gpu_names=["Tesla T4"],
    )
    assert message == "profiles.fast.precision: bf16 needs compute capability 8.0+; Tesla T4 is 7.5"
    message = _error("launch: {precision: bf16}\n", gpu_names=["Tesla T4"])
    assert message.startswith("launch.precision: bf16 needs")


@pytest.mark.parametrize(
    "gpus", [[], ["NVIDIA A100-SXM4-80GB"], ["NVIDIA H100 80GB HBM3"], ["Some Future GPU"]]
)
def test_bf16_allowed(gpus: list[str]) -> None:
    r = _resolve(cli=RunOptions(precision="bf16"), gpu_names=gpus)
    assert r.precision is not None and r.precision.value == "bf16"


def test_tf32_on_old_gpu_warns() -> None:
    r = _resolve(cli=RunOptions(precision="tf32"), gpu_names=["Tesla V100-SXM2-16GB"])
    assert any("tf32 has no effect on Tesla V100-SXM2-16GB" in w for w in r.warnings)


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("Tesla V100-SXM2-16GB", (7, 0)),
        ("Tesla T4", (7, 5)),
        ("NVIDIA A100-SXM4-40GB", (8, 0)),
        ("NVIDIA A10G", (8, 6)),
        ("NVIDIA L4", (8, 9)),
        ("NVIDIA GeForce RTX 4090", (8, 9)),
        ("NVIDIA GeForce RTX 3090", (8, 6)),
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("Tesla P100-PCIE-16GB", (6, 0)),
        ("Quadro RTX 6000", (7, 5)),
        ("NVIDIA RTX A6000", (8, 6)),
        ("mystery", None),
    ],
)
def test_compute_capability_lookup(name: str, cc: tuple[int, int] | None) -> None:
    from gpulaunch.catalog.compat import gpu_compute_capability

    assert gpu_compute_capability(name) == (None if cc is None else f"{cc[0]}.{cc[1]}")


def test_explicit_env_beats_precision_with_warning() -> None:
    r = _resolve(
        "launch: {env: {ACCELERATE_MIXED_PRECISION: fp16}}\n", RunOptions(precision="bf16")
    )
    assert r.env["ACCELERATE_MIXED_PRECISION"] == Sourced("fp16", f"launch: {YAML}")
    assert any(
        "ACCELERATE_MIXED_PRECISION=fp16 from launch: (gpulaunch.yaml) overrides "
        "ACCELERATE_MIXED_PRECISION=bf16 set by precision bf16" in w
        for w in r.warnings
    )


# --------------------------------------------------------------------- expandable segments


def test_expandable_segments_sets_alloc_conf_and_legacy_copy() -> None:
    r = _resolve(cli=RunOptions(expandable_segments=True))
    assert r.expandable_segments == Sourced(True, "--expandable-segments")
    assert r.env["PYTORCH_ALLOC_CONF"] == Sourced(
        "expandable_segments:True", "--expandable-segments"
    )
    assert r.env["PYTORCH_CUDA_ALLOC_CONF"].value == "expandable_segments:True"
    assert r.warnings == ()


def test_expandable_segments_merges_with_existing_value() -> None:
    r = _resolve(
        "launch: {env: {PYTORCH_ALLOC_CONF: 'max_split_size_mb:128'}}\n",
        RunOptions(expandable_segments=True),
    )
    assert r.env["PYTORCH_ALLOC_CONF"] == Sourced(
        "max_split_size_mb:128,expandable_segments:True",
        f"launch: {YAML} + --expandable-segments",
    )


def test_expandable_segments_already_present_or_conflicting() -> None:
    r = _resolve(
        "launch: {env: {PYTORCH_ALLOC_CONF: 'expandable_segments:True'}}\n",
        RunOptions(expandable_segments=True),
    )
    assert r.env["PYTORCH_ALLOC_CONF"].value == "expandable_segments:True"
    r = _resolve(
        "launch: {env: {PYTORCH_ALLOC_CONF: 'expandable_segments:False'}}\n",
        RunOptions(expandable_segments=True),
    )
    assert r.env["PYTORCH_ALLOC_CONF"].value == "expandable_segments:False"
    assert any("keeps expandable_segments:False" in w for w in r.warnings)


def test_expandable_segments_off_by_cli_wins_over_profile() -> None:
    r = _resolve(cli=RunOptions(profile="bf16", expandable_segments=False))
    assert r.expandable_segments == Sourced(False, "--no-expandable-segments")
    assert "PYTORCH_ALLOC_CONF" not in r.env


def test_legacy_alloc_conf_is_translated_and_merged() -> None:
    r = _resolve(
        cli=RunOptions(
            env=["PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64"], expandable_segments=True
        )
    )
    assert r.env["PYTORCH_ALLOC_CONF"].value == "max_split_size_mb:64,expandable_segments:True"
    assert r.env["PYTORCH_CUDA_ALLOC_CONF"].value == r.env["PYTORCH_ALLOC_CONF"].value
    assert any(w.startswith("PYTORCH_CUDA_ALLOC_CONF is deprecated") for w in r.warnings)


# --------------------------------------------------------------------- deprecated names


@pytest.mark.parametrize(
    ("name", "start"),
    [
        (
            "NCCL_ASYNC_ERROR_HANDLING",
            "NCCL_ASYNC_ERROR_HANDLING is deprecated; use TORCH_NCCL_ASYNC_ERROR_HANDLING (",
        ),
        ("NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT is deprecated; use TORCH_NCCL_BLOCKING_WAIT ("),
        ("NCCL_DESYNC_DEBUG", "NCCL_DESYNC_DEBUG is deprecated; use TORCH_NCCL_DESYNC_DEBUG ("),
        ("NCCL_ENABLE_TIMING", "NCCL_ENABLE_TIMING is deprecated; use TORCH_NCCL_ENABLE_TIMING"),
        ("NCCL_IB_GDR_LEVEL", "NCCL_IB_GDR_LEVEL is an old name; use NCCL_NET_GDR_LEVEL ("),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_CUDA_ALLOC_CONF is deprecated; use PYTORCH_ALLOC_CONF",
        ),
        ("NCCL_TIMEOUT", "NCCL_TIMEOUT does not exist and has no effect; use the timeout="),
        ("NCCL_LL_THRESHOLD", "NCCL_LL_THRESHOLD has no effect any more; use NCCL_PROTO ("),
        ("NCCL_MAX_NCHANNELS", "NCCL_MAX_NCHANNELS is deprecated; use NCCL_MAX_CTAS ("),
        ("NCCL_CHECK_POINTERS", "NCCL_CHECK_POINTERS is deprecated; use NCCL_CHECK_MODE ("),
        ("TORCH_ALLOW_TF32", "TORCH_ALLOW_TF32 does not exist and has no effect"),
    ],
)
def test_check_env_names(name: str, start: str) -> None:
    warnings = check_env_names({name: "1"})
    assert len(warnings) == 1
    assert warnings[0].startswith(start)


@pytest.mark.parametrize(
    ("env", "count"),
    [
        ({"NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "INFO"}, 0),
        ({"NCCL_P2P_LEVEL": "2"}, 1),
        ({"NCCL_NET_GDR_LEVEL": "PHB"}, 0),
        ({"NCCL_NET_GDR_LEVEL": "3"}, 1),
        ({"NCCL_LAUNCH_MODE": "GROUP"}, 1),
        ({"NCCL_LAUNCH_MODE": "PARALLEL"}, 0),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, 0),
    ],
)
def test_check_env_values(env: dict[str, str], count: int) -> None:
    assert len(check_env_names(env)) == count


def test_deprecated_name_translated_with_source() -> None:
    r = _resolve(
        "launch: {env: {NCCL_ASYNC_ERROR_HANDLING: '0', NCCL_TIMEOUT: '1800'}}\n",
    )
    assert "NCCL_ASYNC_ERROR_HANDLING" not in r.env
    assert r.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == Sourced(
        "0", f"launch: {YAML}, as NCCL_ASYNC_ERROR_HANDLING"
    )
    assert r.env["NCCL_TIMEOUT"].value == "1800"  # harmless, kept, but warned about
    async_warning = next(w for w in r.warnings if w.startswith("NCCL_ASYNC"))
    assert async_warning.endswith(
        "[launch: (gpulaunch.yaml)]; gpulaunch passes it as TORCH_NCCL_ASYNC_ERROR_HANDLING"
    )
    assert any(w.startswith("NCCL_TIMEOUT does not exist") for w in r.warnings)


def test_deprecated_name_dropped_when_new_name_set() -> None:
    r = _resolve(
        cli=RunOptions(
            env=["NCCL_BLOCKING_WAIT=1", "TORCH_NCCL_BLOCKING_WAIT=0"],
        )
    )
    assert "NCCL_BLOCKING_WAIT" not in r.env
    assert r.env["TORCH_NCCL_BLOCKING_WAIT"] == Sourced("0", "--env")
    assert any("so NCCL_BLOCKING_WAIT is dropped" in w for w in r.warnings)


def test_untranslated_deprecated_name_is_kept() -> None:
    r = _resolve(cli=RunOptions(env=["NCCL_MAX_NCHANNELS=8"]))
    assert r.env["NCCL_MAX_NCHANNELS"] == Sourced("8", "--env")
    assert "NCCL_MAX_CTAS" not in r.env
    assert len(r.warnings) == 1


# --------------------------------------------------------------------- topology detection


def test_detect_interconnect_with_sysfs_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    assert detect_interconnect({"GPULAUNCH_SYSFS_ROOT": "/x"}) is None


def _fake_nvml(links: dict[int, list[int]]) -> FakeNvml:
    devices = fake_nvml.gpus(*(fake_nvml.H100 for _ in links))
    for index, device in enumerate(devices):
        device.nvlinks = links[index]
    return FakeNvml(devices)


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        ({0: [1, 1, 0], 1: [1, 1, 0]}, "nvlink"),
        ({0: [0, 0], 1: [0]}, "pcie"),
        ({0: [], 1: []}, "pcie"),
        ({}, None),
    ],
)
def test_detect_interconnect_with_fake_nvml(
    monkeypatch: pytest.MonkeyPatch, links: dict[int, list[int]], expected: str | None
) -> None:
    fake = install(monkeypatch, _fake_nvml(links))
    assert detect_interconnect({}) == expected
    assert fake.shut


def test_detect_interconnect_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    assert detect_interconnect({}) is None


# --------------------------------------------------------------------- the data files


def test_precision_helper_is_standalone() -> None:
    helper = REPO / "gpulaunch" / "launch" / "pythonpath" / "gpulaunch_precision.py"
    tree = ast.parse(helper.read_text(encoding="utf-8"))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    assert modules <= {"__future__", "contextlib", "os", "typing", "torch"}


def test_data_files_ship_inside_the_package() -> None:
    data = REPO / "gpulaunch" / "data"
    assert (data / "nccl_presets.yaml").is_file()
    assert (data / "env_names.yaml").is_file()
    assert (data / "profiles" / "default.yaml").is_file()


def test_long_extends_chain_follows_each_link_once() -> None:
    """2000 chained profiles: every profile is checked, but each `extends` link is looked up
    a bounded number of times (it was once per profile per link: cubic time)."""
    from collections.abc import Iterator, Mapping

    from gpulaunch.config import validate_data
    from gpulaunch.launch.profiles import _chain, _check_extends, _namespace

    n = 2000
    profiles = {"p0": {"extends": "default"}}
    profiles.update({f"p{i}": {"extends": f"p{i - 1}"} for i in range(1, n)})
    config = validate_data({"name": "x", "profiles": profiles, "launch": {"profile": f"p{n - 1}"}})

    class Counting(Mapping[str, Any]):
        def __init__(self, data: Mapping[str, Any]) -> None:
            self.data = data
            self.lookups = 0

        def __getitem__(self, key: str) -> Any:
            self.lookups += 1
            return self.data[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self.data)

        def __len__(self) -> int:
            return len(self.data)

    table = Counting(_namespace(config))
    _check_extends(table)
    assert table.lookups <= 2 * len(table.data) + 1  # each profile read once, each link once
    assert len(_chain(table, table.data[f"p{n - 1}"])) == n + 1  # p1999 ... p0, default
    resolved = resolve_launch(config, RunOptions())
    assert resolved.profile == f"p{n - 1}"
