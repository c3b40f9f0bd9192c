"""Every `docker run` flag of the dry-run line has its SDK kwarg, and the other way round.

tests/test_launch.py compares the values it knows about; this test makes the mapping total,
so a kwarg dropped from `sdk_kwargs` (or a flag dropped from the line) fails even when no
one thought to compare it. The real engine proves the same in tests/e2e/test_inspect.py.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from engine.sdk_oracle import sdk_kwargs
from gpulaunch.config import parse_gpus
from gpulaunch.engine.runspec import Mount, RunPlan, docker_run_argv
from gpulaunch.gpurequest import GpuRequest

FLAG_TO_KWARG = {
    "--name": "name",
    "--init": "init",
    "--interactive": "stdin_open",
    "--tty": "tty",
    "--user": "user",
    "--workdir": "working_dir",
    "--gpus": "device_requests",
    "--ipc": "ipc_mode",
    "--shm-size": "shm_size",
    "--memory": "mem_limit",
    "--ulimit": "ulimits",
    "--stop-signal": "stop_signal",
    "--stop-timeout": "stop_timeout",
    "--network": "network_mode",
    "--hostname": "hostname",
    "--add-host": "extra_hosts",
    "--cap-add": "cap_add",
    "--device": "devices",
    "--cpuset-cpus": "cpuset_cpus",
    "--label": "labels",
    "--mount": "mounts",
    "--env": "environment",
    "--restart": "restart_policy",
}
CLI_ONLY = {"--rm", "--detach"}  # the supervisor removes the container; detach is implied
SDK_ONLY = {"image", "command"}  # positional on the line
FLAGS_WITHOUT_VALUE = {"--rm", "--detach", "--init", "--interactive", "--tty"}


def _full_plan(gpus: int | str = 2) -> RunPlan:
    """Every option set, so every flag appears."""
    return RunPlan(
        image="proj:gl-abc",
        name="gl-proj-1",
        command=["python", "/workspace/t.py", "--lr", "1 2"],
        env={"A": "1", "SPACED": "a b $HOME"},
        mounts=[Mount("/src", "/workspace"), Mount("/data", "/data", True)],
        user="1000:1000",
        gpus=gpus,
        labels={"io.gpulaunch.managed": "true", "io.gpulaunch.run-id": "r1"},
        ipc=None,
        shm_size="16g",
        memory="2g",
        network="none",  # sets hostname and an extra host
        cap_add=["IPC_LOCK", "SYS_NICE"],
        devices=["/dev/infiniband"],
        restart_retries=2,
        cpuset_cpus="0-3",
        stdin=True,
        tty=True,
    )


def _flags(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    assert argv[:2] == ["docker", "run"]
    flags: dict[str, list[str]] = {}
    i = 2
    while argv[i].startswith("--"):
        if argv[i] in FLAGS_WITHOUT_VALUE:
            flags.setdefault(argv[i], []).append("")
            i += 1
        else:
            flags.setdefault(argv[i], []).append(argv[i + 1])
            i += 2
    return flags, argv[i:]


def _sdk_value_as_flags(key: str, value: Any) -> list[str]:
    """The SDK kwarg written back as the flag values docker's CLI would take."""
    if key in ("init", "stdin_open", "tty"):
        return [""] if value else []
    if key == "device_requests":
        (req,) = value
        if req["DeviceIDs"]:
            return [f'"device={",".join(req["DeviceIDs"])}"']
        return ["all" if req["Count"] == -1 else str(req["Count"])]
    if key == "ulimits":
        assert all(u["Soft"] == u["Hard"] for u in value)
        return [f"{u['Name']}={u['Soft']}" for u in value]
    if key in ("labels", "environment"):
        return [f"{k}={v}" for k, v in sorted(value.items())]
    if key == "extra_hosts":
        return [f"{k}:{v}" for k, v in sorted(value.items())]
    if key == "mounts":
        return [
            f"type=bind,source={m['Source']},target={m['Target']}"
            + (",readonly" if m["ReadOnly"] else "")
            for m in value
        ]
    if key == "restart_policy":
        return [f"{value['Name']}:{value['MaximumRetryCount']}"]
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


@pytest.mark.parametrize("gpus", [0, 2, "all", "0,2"])
@pytest.mark.parametrize("ipc", ["host", None])
def test_every_flag_and_every_kwarg_correspond(gpus: int | str, ipc: str | None) -> None:
    plan = _full_plan(gpus)
    plan.ipc = ipc
    flags, positional = _flags(shlex.split(shlex.join(docker_run_argv(plan))))
    sdk = sdk_kwargs(plan)
    unknown = set(flags) - set(FLAG_TO_KWARG) - CLI_ONLY
    assert not unknown, f"flags without an SDK counterpart in this test: {unknown}"
    expected_kwargs = {FLAG_TO_KWARG[f] for f in flags if f not in CLI_ONLY} | SDK_ONLY
    assert set(sdk) == expected_kwargs
    for flag, kwarg in FLAG_TO_KWARG.items():
        if kwarg in sdk:
            assert flags.get(flag, []) == _sdk_value_as_flags(kwarg, sdk[kwarg]), flag
    assert positional == [sdk["image"], *sdk["command"]]
    assert sdk["stop_signal"] == "SIGTERM"  # not left to the image's STOPSIGNAL


def test_the_full_plan_uses_every_flag() -> None:
    """Guard for the test above: the plan really exercises every mapped flag."""
    plan = _full_plan(2)
    plan.ipc = "host"
    flags, _ = _flags(docker_run_argv(plan))
    assert set(flags) == set(FLAG_TO_KWARG) | {"--rm"}
    assert sdk_kwargs(plan)["shm_size"] == "16g"


@pytest.mark.parametrize("value", [True, False])
def test_parse_gpus_refuses_booleans(value: bool) -> None:
    """YAML `gpus: yes` is a bool, and bool is an int in Python: it must not mean 1 GPU."""
    with pytest.raises(ValueError, match="must be a count"):
        parse_gpus(value)


def test_dry_run_json_shows_every_option_of_the_plan() -> None:
    """`run --dry-run --json` is read by scripts: its `options` carry the plan's own values."""
    plan = _full_plan("0,2")
    data = plan.to_json()
    assert data["docker_run"] == docker_run_argv(plan)
    assert (data["image"], data["name"], data["command"]) == (plan.image, plan.name, plan.command)
    assert data["env"] == {"A": "1", "SPACED": "a b $HOME"}
    assert data["options"] == {
        "user": "1000:1000",
        "workdir": "/workspace",
        "gpus": "0,2",
        "ipc": None,
        "shm_size": "16g",
        "memory": "2g",
        "ulimits": plan.ulimits,
        "init": True,
        "stop_timeout": plan.stop_timeout,
        "network": "none",
        "cap_add": ["IPC_LOCK", "SYS_NICE"],
        "devices": ["/dev/infiniband"],
        "cpuset_cpus": "0-3",
        "hostname": plan.hostname,
        "extra_hosts": {plan.hostname: "127.0.0.1", "localhost-v4mapped": "::ffff:127.0.0.1"},
        "labels": plan.labels,
        "mounts": [
            {"source": "/src", "target": "/workspace", "read_only": False, "kind": "bind"},
            {"source": "/data", "target": "/data", "read_only": True, "kind": "bind"},
        ],
        "restart_retries": 2,
        "interactive": True,
        "tty": True,
    }


@pytest.mark.parametrize(
    ("gpus", "host", "expected"),
    [(0, 8, 0), (3, None, 3), ("all", 8, 8), ("all", None, None), ("0,2", None, 2)],
)
def test_gpu_count(gpus: int | str, host: int | None, expected: int | None) -> None:
    assert GpuRequest(gpus).count(host) == expected
