"""`docker inspect` of what gpulaunch starts: the SDK call and the printed `docker run` line.

tests/test_sdk_parity.py proves the line and the SDK kwargs name the same settings by our own
reading of both; here the engine is the judge. `run --detach` starts a container through the
SDK; the `# run` line of `run --dry-run --detach` is executed by a shell with Debian's docker
client; both are inspected and compared field by field (run-specific names and ids replaced
by placeholders). Expected values are asserted too, so "equal" cannot mean "equally wrong".

This sandboxed engine may refuse `memlock=-1` ("error setting rlimit"): gpulaunch then drops
it with one warning and runs; the pasted line fails the same way, and is retried without
exactly the limits gpulaunch warned about.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    cli_env,
    gl,
    run_shell,
    temp_name,
    tiny_config,
    without_ulimits,
    write_project,
)

pytestmark = pytest.mark.docker
# Debian's client (/usr/bin/docker) first; /usr/local/bin/docker is a newer one.
_DEBIAN_CLIENT_ENV = cli_env(PATH="/usr/bin:/bin:/usr/sbin:/sbin")

PROFILE = {"docker": {"shm_size": "256m", "cap_add": ["SYS_NICE"], "ulimits": {"nofile": 4096}}}
HOST_CONFIG = (
    "AutoRemove",
    "CapAdd",
    "CpusetCpus",
    "DeviceRequests",
    "Devices",
    "ExtraHosts",
    "Init",
    "IpcMode",
    "Mounts",
    "NetworkMode",
    "Privileged",
    "ShmSize",
    "Ulimits",
)
CONFIG = (
    "Cmd",
    "Entrypoint",
    "Env",
    "Hostname",
    "Image",
    "Labels",
    "StopSignal",
    "StopTimeout",
    "User",
    "WorkingDir",
)


@pytest.fixture(scope="module")
def project(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny image of this session's own, with a profile that sets docker options."""
    config = tiny_config(temp_name("inspect"))
    config["profiles"] = {"opts": PROFILE}
    folder = write_project(tmp_path_factory.mktemp("inspect") / "p", "tiny", config)
    built = gl("build", cwd=folder, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    return folder


@pytest.fixture
def started(docker_client: Any) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    from docker.errors import NotFound

    for name in names:
        with contextlib.suppress(NotFound):
            docker_client.containers.get(name).remove(force=True)


def _normalized(attrs: dict[str, Any]) -> dict[str, Any]:
    """The compared fields, with this container's own name, run id and hostname replaced."""
    picked = {
        "HostConfig": {k: attrs["HostConfig"].get(k) for k in HOST_CONFIG},
        "Config": {k: attrs["Config"].get(k) for k in CONFIG},
    }
    for request in picked["HostConfig"]["DeviceRequests"] or []:
        request["DeviceIDs"] = request.get("DeviceIDs") or None  # [] and null mean the same
        request["Options"] = request.get("Options") or None
    picked["Config"]["Env"] = sorted(picked["Config"]["Env"] or [])
    for section in picked.values():
        for key, value in section.items():
            if value == [] or value == {}:
                section[key] = None  # the SDK leaves unset lists null, the CLI sends []
    text = json.dumps(picked, sort_keys=True)
    run_id = attrs["Config"]["Labels"]["io.gpulaunch.run-id"]
    for token, placeholder in (
        (attrs["Name"].lstrip("/"), "<name>"),
        (run_id, "<run-id>"),
        (attrs["Config"]["Hostname"], "<hostname>"),
    ):
        text = text.replace(token, placeholder)
    result: dict[str, Any] = json.loads(text)
    return result


@pytest.mark.parametrize(
    ("flags", "requests"),
    [
        (["--gpus", "2"], [{"Count": 2, "DeviceIDs": None}]),
        (["--gpus", "0,1", "--profile", "opts"], [{"Count": 0, "DeviceIDs": ["0", "1"]}]),
        (["--gpus", "0"], None),
    ],
    ids=["count", "ids+profile", "cpu"],
)
def test_dry_run_line_and_sdk_start_the_same_container(
    project: Path,
    docker_client: Any,
    started: list[str],
    flags: list[str],
    requests: list[dict[str, Any]] | None,
) -> None:
    command = ["--", "sleep", "300"]
    sdk = gl("run", "--detach", *flags, *command, cwd=project)
    assert sdk.returncode == 0, sdk.describe()
    sdk_name = sdk.stdout.strip().splitlines()[-1]
    started.append(sdk_name)

    dry = gl("run", "--dry-run", "--detach", *flags, *command, cwd=project)
    assert dry.returncode == 0, dry.describe()
    lines = dry.stdout.splitlines()
    line = lines[lines.index("# run") + 1]
    assert line.startswith("docker run --detach "), line
    pasted_name = shlex.split(line)[shlex.split(line).index("--name") + 1]
    started.append(pasted_name)

    # The memlock fallback: gpulaunch warned once per refused limit and ran without it;
    # the pasted line fails the same way and runs once the same limits are dropped.
    refused = re.findall(r"warning: the engine refused ulimit (\w+)", sdk.stderr)
    assert len(refused) == len(set(refused)), sdk.stderr
    pasted = run_shell(line, _DEBIAN_CLIENT_ENV)
    if refused:
        assert pasted.returncode != 0 and "rlimit" in pasted.stderr, pasted.stderr
        assert "InfiniBand/GPUDirect need memlock=-1" in sdk.stderr or refused != ["memlock"]
        # docker's CLI leaves the created container behind when its start fails
        docker_client.containers.get(pasted_name).remove(force=True)
        pasted = run_shell(without_ulimits(line, refused), _DEBIAN_CLIENT_ENV)
    assert pasted.returncode == 0, f"$ {line}\n{pasted.stderr}"

    via_sdk = docker_client.api.inspect_container(sdk_name)
    via_line = docker_client.api.inspect_container(pasted_name)
    a, b = _normalized(via_sdk), _normalized(via_line)
    for section in ("HostConfig", "Config"):
        for key in a[section]:
            assert a[section][key] == b[section][key], f"{section}.{key}"

    # ...and both are what gpulaunch means to ask for.
    host, config = a["HostConfig"], a["Config"]
    assert via_sdk["State"]["Running"] and via_line["State"]["Running"]
    assert host["Init"] is True
    assert config["StopTimeout"] == 45 and config["StopSignal"] == "SIGTERM"
    assert config["User"] == f"{os.getuid()}:{os.getgid()}"
    assert config["WorkingDir"] == "/workspace"
    assert config["Cmd"] == ["sleep", "300"]
    assert host["NetworkMode"] == "none"
    assert config["Hostname"] == "<hostname>"
    assert sorted(host["ExtraHosts"]) == [
        "<hostname>:127.0.0.1",
        "localhost-v4mapped:::ffff:127.0.0.1",
    ]
    assert config["Labels"]["io.gpulaunch.managed"] == "true"
    assert config["Labels"]["io.gpulaunch.run-id"] == "<run-id>"
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"] or []}
    expected_limits = {"memlock": (-1, -1), "stack": (67108864, 67108864)}
    if "opts" in flags:
        expected_limits["nofile"] = (4096, 4096)
    for name in refused:
        expected_limits.pop(name)
    assert limits == expected_limits
    mounts = {m["Target"]: m for m in host["Mounts"]}
    assert mounts["/workspace"]["Source"] == str(project) and mounts["/workspace"]["Type"] == "bind"
    assert all(m["ReadOnly"] for t, m in mounts.items() if t.startswith("/opt/gpulaunch/"))
    if "opts" in flags:
        assert host["IpcMode"] == "private" and host["ShmSize"] == 256 * 1024 * 1024
        assert host["CapAdd"] == ["SYS_NICE"]
    else:
        assert host["IpcMode"] == "host"
    got = [
        {"Count": r["Count"], "DeviceIDs": r["DeviceIDs"]} for r in host["DeviceRequests"] or []
    ] or None
    assert got == requests
    for request in host["DeviceRequests"] or []:
        assert request["Capabilities"] == [["gpu"]]
