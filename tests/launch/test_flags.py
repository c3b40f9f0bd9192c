"""Launch plan: the dry-run command line and the SDK call carry the same settings."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from engine.sdk_oracle import sdk_kwargs

from gpulaunch.engine.runspec import (
    Mount,
    RunPlan,
    base_labels,
    docker_run_argv,
    shell_line,
)
from gpulaunch.errors import ConfigError
from gpulaunch.launch.flags import host_paths, parse_env_flags, parse_mount, script_command


def _plan(**overrides: object) -> RunPlan:
    values: dict[str, object] = {
        "image": "proj:gl-abc",
        "name": "gl-proj-1",
        "command": ["torchrun", "--standalone", "--nproc-per-node", "2", "/workspace/t.py"],
        "env": {"A": "1", "SPACED": "a b $HOME"},
        "mounts": [Mount("/src", "/workspace"), Mount("/data", "/data", True)],
        "user": "1000:1000",
        "gpus": 2,
        "labels": {"io.gpulaunch.managed": "true"},
        "shm_size": None,
        "network": "host",
        "cap_add": ["IPC_LOCK"],
        "devices": ["/dev/infiniband"],
        "cpuset_cpus": "0-3",
    }
    values.update(overrides)
    return RunPlan(**values)  # type: ignore[arg-type]


def _parse_cli(argv: list[str]) -> dict[str, object]:
    """Parse our own `docker run` line back into SDK-shaped settings."""
    assert argv[:2] == ["docker", "run"]
    out: dict[str, object] = {"env": {}, "labels": {}, "mounts": [], "ulimits": {}}
    i = 2
    while argv[i].startswith("--"):
        flag = argv[i]
        if flag in ("--rm", "--init", "--detach"):
            out[flag] = True
            i += 1
            continue
        value = argv[i + 1]
        i += 2
        if flag == "--env":
            k, _, v = value.partition("=")
            out["env"][k] = v  # type: ignore[index]
        elif flag == "--label":
            k, _, v = value.partition("=")
            out["labels"][k] = v  # type: ignore[index]
        elif flag == "--mount":
            out["mounts"].append(value)  # type: ignore[attr-defined]
        elif flag == "--ulimit":
            k, _, v = value.partition("=")
            out["ulimits"][k] = int(v)  # type: ignore[index]
        else:
            out.setdefault(flag, []).append(value)  # type: ignore[attr-defined]
    out["image"] = argv[i]
    out["command"] = argv[i + 1 :]
    return out


@pytest.mark.parametrize("gpus", [0, 2, "all", "0,2"])
def test_dry_run_line_matches_sdk_call(gpus: int | str) -> None:
    plan = _plan(gpus=gpus)
    argv = shlex.split(shlex.join(docker_run_argv(plan)))  # survives copy-paste quoting
    cli = _parse_cli(argv)
    sdk = sdk_kwargs(plan)
    assert cli["image"] == sdk["image"]
    assert cli["command"] == sdk["command"]
    assert cli["env"] == sdk["environment"]
    assert cli["labels"] == sdk["labels"]
    assert cli["--user"] == [sdk["user"]]
    assert cli["--workdir"] == [sdk["working_dir"]]
    assert cli["--name"] == [sdk["name"]]
    assert cli["--ipc"] == [sdk["ipc_mode"]]
    assert cli["--network"] == [sdk["network_mode"]]
    assert cli["--cap-add"] == sdk["cap_add"]
    assert cli["--device"] == sdk["devices"]
    assert cli["--cpuset-cpus"] == [sdk["cpuset_cpus"]]
    assert cli["--stop-timeout"] == [str(sdk["stop_timeout"])]
    assert cli.get("--init") is True and sdk["init"] is True
    assert cli["ulimits"] == {u["Name"]: u["Soft"] for u in sdk["ulimits"]}
    assert all(u["Soft"] == u["Hard"] for u in sdk["ulimits"])
    sdk_mounts = [
        f"type=bind,source={m['Source']},target={m['Target']}"
        + (",readonly" if m["ReadOnly"] else "")
        for m in sdk["mounts"]
    ]
    assert cli["mounts"] == sdk_mounts
    if gpus == 0:
        assert "--gpus" not in cli and "device_requests" not in sdk
    else:
        (request,) = sdk["device_requests"]
        assert request["Capabilities"] == [["gpu"]]
        (flag,) = cli["--gpus"]  # type: ignore[misc]
        if gpus == "0,2":
            assert flag == '"device=0,2"' and request["DeviceIDs"] == ["0", "2"]
        elif gpus == "all":
            assert flag == "all" and request["Count"] == -1
        else:
            assert flag == "2" and request["Count"] == 2


def test_ngc_hygiene_defaults() -> None:
    sdk = sdk_kwargs(_plan())
    assert sdk["ipc_mode"] == "host"
    assert {u["Name"]: u["Soft"] for u in sdk["ulimits"]} == {"memlock": -1, "stack": 67108864}
    assert sdk["stop_timeout"] > 30  # outlasts torchrun's 30 s shutdown


def test_parse_mount(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    assert parse_mount("data:/data:ro", tmp_path, "--mount") == Mount(
        str(tmp_path / "data"), "/data", True
    )
    with pytest.raises(ConfigError, match="host path 'nope' does not exist"):
        parse_mount("nope:/x", tmp_path, "--mount")
    for target in ("/workspace", "/", "/workspace/"):
        with pytest.raises(ConfigError, match="would hide the project"):
            parse_mount(f"data:{target}", tmp_path, "--mount")
    with pytest.raises(ConfigError, match="is not host:/container"):
        parse_mount("data", tmp_path, "--mount")


def test_parse_env_flags() -> None:
    assert parse_env_flags(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ConfigError, match="--env: 'NOVALUE' is not NAME=VALUE"):
        parse_env_flags(["NOVALUE"])


def test_script_command(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.py").write_text("")
    one = script_command("sub/t.py", ["--lr", "1"], tmp_path, tmp_path, 1, None)
    assert one == ["python", "/workspace/sub/t.py", "--lr", "1"]
    (tmp_path / "ddp.py").write_text(
        "import torch.distributed as dist\ndist.init_process_group()\n"
    )
    alone = script_command("ddp.py", ["--lr", "x"], tmp_path, tmp_path, 1, None)
    # one rank of a script that makes its own process group: one process, never torchrun
    # (its exit code and last lines stay its own); torchrun's variables are given instead
    assert alone == [
        "env",
        "RANK=0",
        "LOCAL_RANK=0",
        "WORLD_SIZE=1",
        "LOCAL_WORLD_SIZE=1",
        "GROUP_RANK=0",
        "MASTER_ADDR=127.0.0.1",
        "MASTER_PORT=0",  # the kernel picks a free port where the job runs
        "python",
        "/workspace/ddp.py",
        "--lr",
        "x",
    ]
    # 0: one process per GPU where their number is known only in the container
    per_gpu = script_command("ddp.py", [], tmp_path, tmp_path, 0, None)
    assert per_gpu == ["torchrun", "--standalone", "--nproc-per-node", "gpu", "/workspace/ddp.py"]
    bound = script_command("ddp.py", [], tmp_path, tmp_path, 1, "/opt/gpulaunch/bin/numa_bind.py")
    assert "torchrun" not in bound
    assert bound[-3:] == ["python", "/opt/gpulaunch/bin/numa_bind.py", "/workspace/ddp.py"]
    four = script_command(
        "t.py", [], tmp_path, tmp_path / "sub", 4, "/opt/gpulaunch/bin/numa_bind.py"
    )
    assert four == [
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "4",
        "/opt/gpulaunch/bin/numa_bind.py",
        "/workspace/sub/t.py",
    ]
    with pytest.raises(ConfigError, match="not found"):
        script_command("missing.py", [], tmp_path, tmp_path, 1, None)
    outside = tmp_path.parent / "outside.py"
    outside.write_text("")
    with pytest.raises(ConfigError, match="outside the project"):
        script_command(str(outside), [], tmp_path, tmp_path, 1, None)


def test_shell_line_is_pasteable_into_a_posix_shell() -> None:
    assert shell_line(["echo", "a b", "$HOME", "it's"]) == "echo 'a b' '$HOME' 'it'\"'\"'s'"


def test_the_default_stop_timeout_outlasts_torchruns_own_30_s() -> None:
    plan = _plan()
    assert plan.stop_timeout == 45
    argv = docker_run_argv(plan)
    assert argv[argv.index("--stop-timeout") + 1] == "45"
    assert sdk_kwargs(plan)["stop_timeout"] == 45


def test_labels_of_a_run_carry_the_run_id_and_the_project() -> None:
    labels = base_labels("proj", "20261203-abc")
    assert labels["io.gpulaunch.run-id"] == "20261203-abc"
    assert labels["io.gpulaunch.project"] == "proj"
    assert labels["io.gpulaunch.managed"] == "true"


@pytest.mark.parametrize("gpus", [0, "0"])
def test_no_gpu_request_means_no_device_request(gpus: int | str) -> None:
    plan = _plan(gpus=gpus)
    assert "device_requests" not in sdk_kwargs(plan)
    assert "--gpus" not in docker_run_argv(plan)


def test_one_rank_of_a_group_on_the_host_runs_the_host_python(tmp_path: Path) -> None:
    """--no-container: `env NAME=VALUE ... python` keeps its variables and gets the project's
    interpreter, as plain `python` does."""
    (tmp_path / "ddp.py").write_text(
        "import torch.distributed as dist\ndist.init_process_group()\n"
    )
    command = script_command("ddp.py", ["a=b"], tmp_path, tmp_path, 1, None)
    host = host_paths(command, tmp_path, "/venv/bin/python")
    assert host[:8] == command[:8] and host[8:] == ["/venv/bin/python", f"{tmp_path}/ddp.py", "a=b"]
    two = host_paths(script_command("ddp.py", [], tmp_path, tmp_path, 2, None), tmp_path, "/p")
    assert two[:3] == ["/p", "-m", "torch.distributed.run"]
    assert host_paths(["python", "/workspace/t.py"], tmp_path, "/p") == ["/p", f"{tmp_path}/t.py"]
