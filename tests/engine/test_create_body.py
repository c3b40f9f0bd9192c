"""The stdlib client's create body (`runspec.create_body`) is exactly what the docker SDK
sends for `sdk_kwargs` of the same plan (what `run` sent before it stopped importing the SDK),
for every option alone and all together; test_sdk_parity.py ties `sdk_kwargs` to the
`docker run` line, so the three stay one."""

from __future__ import annotations

from typing import Any

import pytest

from engine.sdk_oracle import sdk_kwargs
from engine.test_sdk_parity import _full_plan
from gpulaunch.engine.runspec import Mount, RunPlan, create_body
from gpulaunch.errors import EngineError


def _sdk_body(plan: RunPlan) -> tuple[str, dict[str, Any]]:
    """(name, body) as docker-py's `containers.run` -> `create_container` would send them."""
    import docker
    from docker.models.containers import _create_container_args

    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    args = dict(sdk_kwargs(plan), version="1.41")
    stop_timeout = args.pop("stop_timeout")
    create = _create_container_args(args)
    create["stop_timeout"] = stop_timeout
    name = create.pop("name")
    config = api.create_container_config(**create)
    return name, {k: v for k, v in config.items() if v is not None}  # as _post_json drops


def _plan(**changes: Any) -> RunPlan:
    base: dict[str, Any] = {
        "image": "p:gl-1",
        "name": "gl-p-1",
        "command": ["python", "/workspace/t.py"],
        "env": {"B": "2", "A": "x=y"},
        "mounts": [Mount("/src", "/workspace")],
        "user": "1000:1000",
        "gpus": 0,
        "labels": {"io.gpulaunch.run-id": "20261204-101500-a1b2c3"},
    }
    return RunPlan(**{**base, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"gpus": 2},
        {"gpus": "all"},
        {"gpus": "1,3"},
        {"ipc": None, "shm_size": "512m"},
        {"shm_size": "2g", "memory": "2048"},
        {"memory": "64G"},
        {"memory": "10k"},
        {"ulimits": {}},
        {"init": False},
        {"network": "none"},
        {"network": "host", "hostname": "h"},
        {"extra_hosts": {"b": "1.1.1.1", "a": "::1"}},
        {"cap_add": ["SYS_NICE"], "devices": ["/dev/a", "/dev/b:/dev/c", "/dev/d:/dev/d:r"]},
        {"cpuset_cpus": "0-3,8"},
        {"restart_retries": 3},
        {"stdin": True},
        {"stdin": True, "tty": True},
        {"mounts": [Mount("/a", "/workspace"), Mount("/b", "/data", True)], "env": {}},
        {"stop_timeout": 7},
    ],
    ids=str,
)
def test_the_body_is_what_the_sdk_sends(changes: dict[str, Any]) -> None:
    plan = _plan(**changes)
    body = create_body(plan)
    assert _sdk_body(plan) == (body.pop("name"), body)


@pytest.mark.parametrize("gpus", [0, 2, "all", "0,2"])
def test_the_full_plan_body_is_what_the_sdk_sends(gpus: int | str) -> None:
    plan = _full_plan(gpus)
    body = create_body(plan)
    assert _sdk_body(plan) == (body.pop("name"), body)


def test_a_size_the_sdk_refuses_is_an_engine_error() -> None:
    with pytest.raises(EngineError, match="not a size"):
        create_body(_plan(memory="12x"))
