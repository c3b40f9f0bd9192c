"""The NVML seam's one policy (gpulaunch/engine/nvml.py): whatever the bindings raise or lack
reaches callers as NvmlError, and `run` turns it into one explicit line.

An older nvidia-ml-py that lacks a function is the fake's `missing=`; a driver that refuses a
query is `failing=` (tests/fake_nvml.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_nvml import H100, FakeNvml, gpus, install
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.engine.nvml import NvmlError, query, session
from gpulaunch.launch.topology import discover


def _project(path: Path) -> None:
    (path / "gpulaunch.yaml").write_text(
        'version: 1\nname: p\nimage: {torch: "2.4.1", cuda: "12.1"}\n'
    )
    (path / "train.py").write_text("print('hi')\n")


def _dry(runner: CliRunner, *flags: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["run", "train.py", *flags, "--dry-run"])
    return result.exit_code, result.stdout, result.stderr


def test_a_session_lends_functions_that_raise_only_nvml_error(fake_nvml: FakeNvml) -> None:
    fake_nvml.missing = {"nvmlDeviceGetPciInfo"}
    fake_nvml.failing = {"nvmlDeviceGetName"}
    with session({}) as lib:
        assert lib is not None
        assert lib.nvmlDeviceGetCount() == 2
        with pytest.raises(NvmlError) as missing:
            lib.nvmlDeviceGetPciInfo(0)
        with pytest.raises(NvmlError) as refused:
            lib.nvmlDeviceGetName(0)
        assert lib.NVML_FEATURE_ENABLED == 1  # constants pass through
        with pytest.raises(AttributeError):  # so getattr(lib, NAME, default) still works
            _ = lib.NVML_NOT_A_CONSTANT
    assert missing.value.outdated is True
    assert "nvidia-ml-py lacks nvmlDeviceGetPciInfo" in missing.value.message
    assert refused.value.outdated is False
    assert refused.value.message == "NVML: Not Supported (nvmlDeviceGetName)"
    assert fake_nvml.calls == ["init", "shutdown"]


def test_query_reads_a_missing_or_refused_function_as_unknown(fake_nvml: FakeNvml) -> None:
    fake_nvml.missing = {"nvmlDeviceGetBrand"}
    fake_nvml.failing = {"nvmlDeviceGetMemoryInfo"}
    with session({}) as lib:
        assert lib is not None
        assert query(lib, "nvmlDeviceGetBrand", 0) is None
        assert query(lib, "nvmlDeviceGetMemoryInfo", 0) is None
        assert query(lib, "nvmlDeviceGetName", 1) == H100


def test_bindings_without_init_are_no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeNvml(missing=["nvmlInit"]))
    with session({}) as lib:
        assert lib is None
    assert fake.calls == []


@pytest.mark.parametrize(
    "optional", ["nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetCpuAffinity"]
)
def test_topology_without_an_optional_function_reads_it_as_unknown(
    fake_nvml: FakeNvml, optional: str
) -> None:
    """Before the seam's policy, a missing optional function escaped as AttributeError."""
    fake_nvml.missing = {optional}
    topo = discover({})
    assert topo.source == "nvml"
    assert [g.bus_id for g in topo.gpus] == ["ab01:3b:00.0", "ab01:af:00.0"]


@pytest.mark.parametrize(
    "missing",
    [
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetBrand",  # read by the driver check, after topology
        "nvmlSystemGetDriverVersion",
    ],
)
def test_run_with_bindings_lacking_a_function_is_one_explicit_refusal(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    install(monkeypatch, FakeNvml(gpus(H100), missing=[missing]))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "4")
    assert (code, out) == (2, "")
    assert err == (
        f"gpulaunch: error: --gpus: GPUs not validated: NVML: the installed nvidia-ml-py "
        f"lacks {missing} (an older version: pip install -U nvidia-ml-py)\n"
    )


def test_a_cpu_run_with_outdated_bindings_says_not_validated(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU asked for: nothing to refuse, and the dry run says what was not checked."""
    install(monkeypatch, FakeNvml(gpus(H100), missing=["nvmlDeviceGetPciInfo"]))
    _project(in_tmp)
    code, out, err = _dry(runner, "--gpus", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu_check"] == {"validated": False, "detail": "no GPUs requested"}
    assert "topology: unknown" in _dry(runner, "--gpus", "0")[1]
