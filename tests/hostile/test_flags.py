"""Hostile command-line flags: exit 2 (3 for the engine), one line naming the flag, nothing
written; the flag and the config field it overrides share one validator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hostile.conftest import Hostile

RUN = ("run", "train.py", "--dry-run")

# (id, extra args for `run train.py --dry-run`, names in the error line)
RUN_FLAGS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("gpus-duplicate", ("--gpus", "0,0"), ("--gpus", "twice")),
    ("gpus-duplicate-padded", ("--gpus", "1,01"), ("--gpus", "twice")),
    ("gpus-arabic-indic", ("--gpus", "٣"), ("--gpus",)),
    ("gpus-fullwidth", ("--gpus", "\uff12"), ("--gpus",)),
    ("gpus-huge", ("--gpus", "99999999999999999999"), ("--gpus", "at most")),
    ("gpus-huge-index", ("--gpus", "0,99999999999999999999"), ("--gpus", "out of range")),
    ("gpus-newline", ("--gpus", "0\n"), ("--gpus",)),
    ("gpus-negative", ("--gpus", "-1"), ("--gpus",)),
    ("nproc-too-many", ("--nproc", "5000"), ("--nproc",)),
    ("nproc-zero", ("--nproc", "0"), ("--nproc",)),
    ("mount-empty-host", ("--mount", ":/x"), ("--mount", "host path is empty")),
    ("mount-comma-smuggle", ("--mount", "data:/data,source=/etc"), ("--mount", "commas")),
    ("mount-dotdot", ("--mount", ".:/a/../b"), ("--mount", "..")),
    ("mount-relative", ("--mount", ".:data"), ("--mount", "absolute")),
    ("mount-missing-host", ("--mount", "nope:/data"), ("--mount", "does not exist")),
    ("mount-hides-workspace", ("--mount", ".:/"), ("--mount", "/workspace")),
    ("mount-u2028", ("--mount", ".:/data\u2028x"), ("--mount", "U+2028")),
    ("mount-bad-mode", ("--mount", ".:/data:rx"), ("--mount",)),
    ("env-value-u2028", ("--env", "A=b\u2028c"), ("--env", "U+2028")),
    ("env-value-newline", ("--env", "A=b\nc"), ("--env",)),
    ("env-key-newline", ("--env", "A\n=b"), ("--env", "variable name")),
    ("env-key-digit", ("--env", "1A=b"), ("--env", "variable name")),
    ("env-key-unicode", ("--env", "É=b"), ("--env", "variable name")),
    ("env-no-equals", ("--env", "NOEQUALS"), ("--env", "NAME=VALUE")),
    ("nccl-ifname-u2028", ("--nccl-ifname", "eth0\u2028x"), ("--nccl-ifname",)),
    ("profile-newline", ("--profile", "default\n"), ("--profile",)),
    ("profile-unknown", ("--profile", "nope"), ("--profile", "unknown profile")),
    ("numa-bad", ("--numa", "sideways"), ("--numa",)),
    ("precision-bad", ("--precision", "fp8"), ("precision",)),
    ("network-bad", ("--network", "bridge"), ("--network",)),
    ("nccl-empty", ("--nccl", ""), ("--nccl",)),
]


@pytest.mark.parametrize(("extra", "names"), [pytest.param(a, n, id=i) for i, a, n in RUN_FLAGS])
def test_bad_run_flag_is_a_clean_error(
    hostile: Hostile, extra: tuple[str, ...], names: tuple[str, ...]
) -> None:
    hostile.invoke_unchanged(*RUN, *extra).assert_clean_error(2, *names)


OTHER: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    ("stop-timeout-overflow", ("stop", "x", "--timeout", "1e20"), ("--timeout",)),
    ("stop-timeout-huge", ("stop", "x", "--timeout", "99999999999999999999"), ("--timeout",)),
    ("stop-timeout-negative", ("stop", "x", "--timeout", "-1"), ("--timeout",)),
    ("logs-empty-id", ("logs", ""), ("ID",)),
    ("stop-empty-id", ("stop", ""), ("ID",)),
    ("logs-newline-id", ("logs", "x\ny"), ("ID",)),
    ("init-name-newline", ("init", "--yes", "--force", "--name", "x\ny"), ("--name",)),
    ("init-name-upper", ("init", "--yes", "--force", "--name", "Bad Name"), ("--name",)),
    ("render-builder", ("render", "--builder", "kaniko"), ("--builder",)),
    ("unknown-option", ("render", "--frobnicate"), ("--frobnicate",)),
]


@pytest.mark.parametrize(("args", "names"), [pytest.param(a, n, id=i) for i, a, n in OTHER])
def test_bad_flag_is_a_clean_error(
    hostile: Hostile, args: tuple[str, ...], names: tuple[str, ...]
) -> None:
    hostile.invoke_unchanged(*args).assert_clean_error(2, *names)


def test_same_env_rules_for_flag_and_config() -> None:
    """One validator: what --env refuses, `launch.env` refuses, and the reverse."""
    from gpulaunch.config import validate_data
    from gpulaunch.errors import ConfigError
    from gpulaunch.launch.flags import parse_env_flags

    samples = ["A=b", "A=b\u2028c", "A\n=b", "1A=b", "_A=tab\there", "É=b", "A=\x85", "A="]
    for item in samples:
        key, _, value = item.partition("=")
        try:
            parse_env_flags([item])
            flag_ok = True
        except ConfigError:
            flag_ok = False
        try:
            validate_data({"name": "x", "launch": {"env": {key: value}}})
            config_ok = True
        except ConfigError:
            config_ok = False
        assert flag_ok == config_ok, item


def test_same_gpu_rules_for_flag_and_config() -> None:
    from gpulaunch.config import validate_data
    from gpulaunch.errors import ConfigError
    from gpulaunch.gpurequest import GpuRequest

    for text in ["0", "2", "all", "0,2", "0,0", "٣", "GPU-abc", "1,01", "4096", "4097", " 1 "]:
        try:
            flag = GpuRequest.parse(text, "--gpus").value
        except ConfigError:
            flag = None
        try:
            config = validate_data({"name": "x", "launch": {"gpus": text}}).launch.gpus
        except ConfigError:
            config = None
        assert flag == config, text


@pytest.mark.parametrize("command", [["render"], ["versions"], ["schema"]])
def test_stdout_to_a_full_disk_is_a_clean_error(hostile: Hostile, command: list[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "gpulaunch", *command],
            cwd=hostile.project,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1, proc.stderr  # a full disk is not bad input
    assert proc.stderr.strip() == (
        "gpulaunch: error: cannot write output: No space left on device (the disk or quota is full)"
    )


class _FakeDockerError(Exception):
    pass


_FakeDockerError.__module__ = "docker.errors"


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (
            _FakeDockerError("500 Server Error: boom\nmore"),
            3,
            "Docker engine: 500 Server Error: boom more",
        ),
        (
            PermissionError(13, "Permission denied", "/var/run/docker.sock"),
            2,
            "/var/run/docker.sock: Permission denied",
        ),
        (
            OSError(28, "No space left on device"),
            1,
            "cannot write output: No space left on device (the disk or quota is full)",
        ),
    ],
)
def test_outside_errors_map_to_one_line(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, error: Exception, code: int, text: str
) -> None:
    """OS and engine errors (recognised without importing docker) are not internal errors."""
    import gpulaunch.cli.jobs as cli

    def boom() -> None:
        raise error

    monkeypatch.setattr(cli, "make_engine", boom)
    outcome = hostile.invoke_unchanged("ps")
    line = outcome.assert_clean_error(code)
    assert line == f"gpulaunch: error: {text}"


def test_requests_errors_are_engine_errors(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = pytest.importorskip("requests")
    import gpulaunch.cli.jobs as cli

    def boom() -> None:
        raise requests.exceptions.ConnectionError("Connection aborted")

    monkeypatch.setattr(cli, "make_engine", boom)
    hostile.invoke_unchanged("ps").assert_clean_error(3, "Docker engine", "Connection aborted")


def test_profile_cap_add_and_devices_are_warned(hostile: Hostile) -> None:
    hostile.write_config(
        hostile.project.joinpath("gpulaunch.yaml")
        .read_text()
        .replace("gpus: 0", "gpus: 0\n  profile: p")
        + "profiles:\n  p:\n    docker:\n      cap_add: [SYS_ADMIN]\n      devices: [/dev/null]\n"
    )
    outcome = hostile.invoke_unchanged(*RUN)
    assert outcome.code == 0, outcome.stderr
    assert "warning: docker.cap_add in profile p" in outcome.stderr
    assert "SYS_ADMIN" in outcome.stderr
    assert "warning: docker.devices in profile p" in outcome.stderr


def test_builtin_cap_add_is_not_warned(hostile: Hostile) -> None:
    """The default profile's SYS_NICE is documented; warning on every run would be noise."""
    outcome = hostile.invoke_unchanged(*RUN)
    assert outcome.code == 0, outcome.stderr
    assert "cap_add" not in outcome.stderr


def test_init_in_a_folder_with_a_very_long_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from gpulaunch.cli.app import app
    from gpulaunch.config import load_config

    folder = tmp_path / ("Very Long Project " * 8)  # 144 characters
    folder.mkdir()
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(
        app, ["init", "--yes", "--torch", "none", "--cuda", "cpu", "--python", "3.11"]
    )
    assert result.exit_code == 0, result.output
    name = load_config(folder / "gpulaunch.yaml").name
    assert len(name) <= 128 and name.startswith("very-long-project-")
