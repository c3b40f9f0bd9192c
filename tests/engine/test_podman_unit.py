"""Podman as the engine (gpulaunch/engine/podman.py and its seam in docker_api.Engine): which
engine answers, the container as Podman's SpecGenerator (GPUs as CDI devices, masks that stay
empty), CDI specs checked before a GPU run, `podman build` instead of the docker CLI, and the
limits Podman adds itself. The real engine runs the same in tests/e2e/test_podman.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.engine.buildspec import BuildRequest
from gpulaunch.engine.docker_api import Engine
from gpulaunch.engine.podman import (
    LIBPOD_CREATE,
    LIBPOD_INFO,
    PodmanCli,
    cdi_devices,
    check_cdi,
    engine_kind,
    libpod_spec,
)
from gpulaunch.engine.runspec import Mount, RunPlan, create_body
from gpulaunch.errors import EngineError

# Podman 4.3.1's /version answer (its Docker-compatible API), cut to what is read
PODMAN_VERSION = {
    "Components": [
        {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}},
        {"Name": "Conmon", "Version": "conmon version 2.1.6"},
    ],
    "Version": "4.3.1",
    "ApiVersion": "1.41",
}
DOCKER_VERSION = {
    "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}],
    "Version": "20.10.24+dfsg1",
    "ApiVersion": "1.41",
}
RUN_ID = "20261205-101500-a1b2c3"
STANDIN_SPEC = """cdiVersion: "0.5.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      env: [NVIDIA_VISIBLE_DEVICES=0]
  - name: all
    containerEdits:
      env: [NVIDIA_VISIBLE_DEVICES=all]
"""


def _plan(**changes: Any) -> RunPlan:
    fields: dict[str, Any] = {
        "image": "p:gl-1",
        "name": "gl-p-" + RUN_ID,
        "command": ["python", "/workspace/t.py"],
        "env": {"A": "x=y"},
        "mounts": [Mount("/src", "/workspace"), Mount.mask("/workspace/.gpulaunch")],
        "user": "1000:1000",
        "gpus": 0,
        "labels": {"io.gpulaunch.run-id": RUN_ID},
        "network": "none",
    }
    return RunPlan(**{**fields, **changes})


def _spec(plan: RunPlan, rlimits: bool = True) -> dict[str, Any]:
    body = create_body(plan)
    return libpod_spec(body, str(body.pop("name")), rlimits=rlimits)


# -- which engine --------------------------------------------------------------------------
def test_podman_names_itself_in_the_version_components() -> None:
    """Rootless or not comes from Podman's own info: its Docker-style /info says nothing
    (a rootless 4.3.1 service answers SecurityOptions ["name=seccomp,profile=default"])."""
    kind = engine_kind(PODMAN_VERSION, {"SecurityOptions": ["name=seccomp,profile=default"]})
    assert (kind.name, kind.version, kind.rootless) == ("podman", "4.3.1", None)
    rootless = engine_kind(PODMAN_VERSION, {"host": {"security": {"rootless": True}}})
    assert rootless.describe() == "Podman 4.3.1, rootless"
    rootful = engine_kind(PODMAN_VERSION, {"host": {"security": {"rootless": False}}})
    assert rootful.describe() == "Podman 4.3.1, rootful"
    assert engine_kind(PODMAN_VERSION, {"host": "?"}).rootless is None


def test_a_rootless_docker_says_so_in_its_info() -> None:
    assert engine_kind(DOCKER_VERSION, {"SecurityOptions": ["name=rootless"]}).rootless is True


def test_docker_is_docker_and_an_unsaid_mode_stays_unknown() -> None:
    kind = engine_kind(DOCKER_VERSION, {})
    assert (kind.name, kind.podman, kind.rootless) == ("docker", False, None)
    assert kind.describe() == "Docker 20.10.24+dfsg1"


# -- the container, spelled for Podman -----------------------------------------------------
def test_the_spec_carries_the_same_container_as_the_docker_body() -> None:
    plan = _plan(shm_size="1g", memory="2g", cpuset_cpus="0-3", cap_add=["SYS_NICE"], stdin=True)
    spec = _spec(plan)
    assert spec["name"] == plan.name and spec["image"] == "p:gl-1"
    assert spec["command"] == ["python", "/workspace/t.py"]
    assert spec["env"] == {"A": "x=y"}  # the first "=" splits
    assert (spec["user"], spec["work_dir"], spec["create_working_dir"]) == (
        "1000:1000",
        "/workspace",
        True,
    )
    assert spec["labels"] == plan.labels
    assert (spec["init"], spec["stop_signal"], spec["stop_timeout"]) == (True, 15, 45)
    assert (spec["stdin"], spec["terminal"]) == (True, False)
    assert spec["netns"] == {"nsmode": "none"} and spec["ipcns"] == {"nsmode": "host"}
    assert spec["hostname"] == plan.hostname
    assert f"{plan.hostname}:127.0.0.1" in spec["hostadd"]
    assert spec["shm_size"] == 1 << 30
    assert spec["resource_limits"] == {"memory": {"limit": 2 << 30}, "cpu": {"cpus": "0-3"}}
    assert spec["cap_add"] == ["SYS_NICE"]
    assert spec["r_limits"] == [
        {"type": "memlock", "soft": (1 << 64) - 1, "hard": (1 << 64) - 1},  # -1: unlimited
        {"type": "stack", "soft": 67108864, "hard": 67108864},
    ]
    assert "devices" not in spec


def test_a_mask_stays_empty_on_podman() -> None:
    """Podman copies what lies under a tmpfs into it unless told not to: the mask over
    .gpulaunch/ would then hand the job the very state it hides."""
    bind, mask = _spec(_plan())["mounts"]
    assert bind == {
        "destination": "/workspace",
        "type": "bind",
        "source": "/src",
        "options": ["rbind", "rw"],
    }
    assert mask["destination"] == "/workspace/.gpulaunch" and mask["type"] == "tmpfs"
    assert set(mask["options"]) == {"ro", "size=4096", "notmpcopyup"}


@pytest.mark.parametrize(
    ("gpus", "devices"),
    [
        (1, ["nvidia.com/gpu=0"]),
        (2, ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]),
        ("all", ["nvidia.com/gpu=all"]),
        ("1,3", ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]),
        (
            "GPU-8f2c6b1e-0000-4a4a-9c9c-000000000001",
            ["nvidia.com/gpu=GPU-8f2c6b1e-0000-4a4a-9c9c-000000000001"],
        ),
    ],
)
def test_a_gpu_request_becomes_cdi_devices(gpus: int | str, devices: list[str]) -> None:
    spec = _spec(_plan(gpus=gpus, devices=["/dev/fuse"]))
    assert spec["devices"] == [{"path": "/dev/fuse:/dev/fuse:rwm"}] + [{"path": d} for d in devices]


def test_without_rlimits_none_are_sent_and_networks_map() -> None:
    assert "r_limits" not in _spec(_plan(), rlimits=False)
    assert _spec(_plan(network="host"))["netns"] == {"nsmode": "host"}
    assert "netns" not in _spec(_plan(network=None))  # the engine's default
    named = _spec(_plan(network="trainnet"))
    assert (named["netns"], named["Networks"]) == ({"nsmode": "bridge"}, {"trainnet": {}})


# -- CDI specs ---------------------------------------------------------------------------------
def test_cdi_devices_are_read_from_the_spec_folders(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.yaml").write_text(STANDIN_SPEC)
    (run / "other.json").write_text(
        '{"cdiVersion": "0.5.0", "kind": "vendor.com/x", "devices": [{"name": "a"}]}'
    )
    (run / "notes.txt").write_text(STANDIN_SPEC)  # not a spec name: the engine skips it too
    found = cdi_devices([str(etc), str(run), str(tmp_path / "missing")])
    assert found == {
        "nvidia.com/gpu=0": str(etc / "nvidia.yaml"),
        "nvidia.com/gpu=all": str(etc / "nvidia.yaml"),
        "vendor.com/x=a": str(run / "other.json"),
    }


def test_a_link_a_fifo_or_a_broken_spec_defines_nothing(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(STANDIN_SPEC)
    specs = tmp_path / "cdi"
    specs.mkdir()
    (specs / "link.yaml").symlink_to(real)
    os.mkfifo(specs / "fifo.yaml")  # never waited on
    (specs / "broken.yaml").write_text("kind: [unclosed")
    (specs / "huge.yaml").write_text(STANDIN_SPEC + "#" * (5 << 20))
    assert cdi_devices([str(specs)]) == {}


def test_a_gpu_without_a_spec_is_one_line_naming_nvidia_ctk(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(STANDIN_SPEC)
    check_cdi(["nvidia.com/gpu=0", "nvidia.com/gpu=all"], [str(tmp_path)])
    with pytest.raises(EngineError) as caught:
        check_cdi(["nvidia.com/gpu=0", "nvidia.com/gpu=1"], [str(tmp_path)])
    message = caught.value.message
    assert message == (
        "Podman hands GPUs over through CDI: no CDI spec defines nvidia.com/gpu=1 (the specs "
        "define nvidia.com/gpu=0, nvidia.com/gpu=all); generate one with `nvidia-ctk cdi generate`"
    )
    assert "\n" not in message
    with pytest.raises(EngineError, match=r"\(no GPU spec in /nonexistent/cdi\); generate one"):
        check_cdi(["nvidia.com/gpu=0"], ["/nonexistent/cdi"])


# -- the seam: create and build --------------------------------------------------------------
class FakeApi:
    """The engine's HTTP API as Engine uses it: answers /version as `version` says, records
    every call with its body, and refuses the first container start when told to."""

    host = "unix:///run/podman/podman.sock"
    timeout = 60.0

    def __init__(
        self, version: dict[str, Any], refuse_start: str = "", rootless: bool = False
    ) -> None:
        self.version = version
        self.rootless = rootless
        self.refuse_start = refuse_start
        self.calls: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, query: Any = None, body: Any = None, **_: Any) -> Any:
        from gpulaunch.engine.api.http import ApiError

        self.calls.append((method, path, body))
        if path == "/version":
            return self.version
        if path == LIBPOD_INFO:
            return {"host": {"security": {"rootless": self.rootless}}}
        if path == "/info":  # Podman 4.3.1 answers a new random ID each time
            return {"ID": os.urandom(8).hex(), "ServerVersion": "4.3.1", "KernelVersion": "6"}
        if path.endswith("/start") and self.refuse_start:
            refusal, self.refuse_start = self.refuse_start, ""
            raise ApiError(500, refusal)
        if path in ("/containers/create", LIBPOD_CREATE):
            return {"Id": "c1"}
        return {"Id": "c1", "Name": "/gl-x", "Config": {"Labels": {}}}


def _engine(api: FakeApi, **env: str) -> Engine:
    engine = Engine({"PATH": "", "DOCKER_HOST": api.host, **env})
    engine._api = api  # type: ignore[assignment]
    return engine


def test_a_run_on_podman_is_created_through_podmans_own_endpoint() -> None:
    api = FakeApi(PODMAN_VERSION)
    _engine(api).create_container(create_body(_plan()))
    (create,) = [c for c in api.calls if "create" in c[1]]
    assert create[1] == LIBPOD_CREATE
    assert create[2]["name"] == "gl-p-" + RUN_ID  # in the body: libpod takes no query name
    assert create[2]["mounts"][1]["options"][-1] == "notmpcopyup"


def test_on_rootless_podman_the_users_ids_are_kept() -> None:
    """Rootless: uid 1000 inside is a subordinate id outside unless the user namespace keeps
    the user's own ids, and the files the job writes into the project would not be theirs."""
    rootless, rootful = FakeApi(PODMAN_VERSION, rootless=True), FakeApi(PODMAN_VERSION)
    for api in (rootless, rootful):
        _engine(api).create_container(create_body(_plan()))
    (keeps,) = [c[2] for c in rootless.calls if c[1] == LIBPOD_CREATE]
    (plain,) = [c[2] for c in rootful.calls if c[1] == LIBPOD_CREATE]
    assert keeps["userns"] == {"nsmode": "keep-id"} and keeps["user"] == "1000:1000"
    assert "userns" not in plain  # rootful Podman refuses keep-id


def test_the_users_podman_socket_when_dockers_is_not_theirs(tmp_path: Path) -> None:
    import socket

    from gpulaunch.engine.podman import rootless_socket

    runtime = tmp_path / "run"
    (runtime / "podman").mkdir(parents=True)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    missing = str(tmp_path / "docker.sock")
    assert rootless_socket(env, missing) is None  # no Podman socket either
    with socket.socket(socket.AF_UNIX) as podman:
        podman.bind(str(runtime / "podman" / "podman.sock"))
        assert rootless_socket(env, missing) == runtime / "podman" / "podman.sock"
        assert rootless_socket({"XDG_RUNTIME_DIR": "run"}, missing) is None  # not absolute
        with socket.socket(socket.AF_UNIX) as docker:
            docker.bind(missing)
            assert rootless_socket(env, missing) is None  # docker's socket answers: docker


def test_a_run_on_docker_keeps_dockers_create() -> None:
    api = FakeApi(DOCKER_VERSION)
    _engine(api).create_container(create_body(_plan()))
    (create,) = [c for c in api.calls if "create" in c[1]]
    assert create[1] == "/containers/create" and "HostConfig" in create[2]


def test_limits_podman_adds_itself_are_dropped_once_refused() -> None:
    """Given any ulimit, Podman adds nofile and nproc at its maximum; an engine that may not
    grant them refuses the start. The job then runs with no ulimits sent, and the engine is
    remembered (by its address: Podman's /info ID is new on every call) so the next run
    creates once."""
    refusal = (
        "runc create failed: error setting rlimits for ready process: error setting rlimit "
        "type 7: operation not permitted"
    )
    Path(os.environ["XDG_CACHE_HOME"]).mkdir(parents=True)  # the user's cache folder exists
    api = FakeApi(PODMAN_VERSION, refuse_start=refusal)
    _engine(api).create_container(create_body(_plan()))
    first, second = [c[2] for c in api.calls if c[1] == LIBPOD_CREATE]
    assert "r_limits" in first and "r_limits" not in second
    assert ("DELETE", "/containers/c1", None) in api.calls  # the refused one is removed

    again = FakeApi(PODMAN_VERSION)
    _engine(again).create_container(create_body(_plan()))
    (only,) = [c[2] for c in again.calls if c[1] == LIBPOD_CREATE]
    assert "r_limits" not in only


def test_a_limit_the_plan_asked_for_is_still_the_plans_to_drop() -> None:
    """memlock refused is supervise's business (it warns and drops it), not a Podman default."""
    from gpulaunch.errors import RlimitRefused

    refusal = "error setting rlimit type 8: operation not permitted"
    api = FakeApi(PODMAN_VERSION, refuse_start=refusal)
    with pytest.raises(RlimitRefused) as caught:
        _engine(api).create_container(create_body(_plan()))
    assert caught.value.rlimit == "memlock"
    assert len([c for c in api.calls if c[1] == LIBPOD_CREATE]) == 1


def _fake_podman(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    podman = folder / "podman"
    podman.write_text("#!/bin/sh\nexit 0\n")
    podman.chmod(0o755)
    return podman


def test_a_build_on_podman_runs_podman_build_at_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    podman = _fake_podman(tmp_path / "bin")
    engine = _engine(FakeApi(PODMAN_VERSION), PATH=str(podman.parent))
    ran: list[list[str]] = []

    def run_cli(_self: Engine, _cli: Any, argv: list[str], _on_line: Any) -> int:
        ran.append(argv)
        return 0

    monkeypatch.setattr(Engine, "_run_cli", run_cli)
    (tmp_path / "proj").mkdir()
    req = BuildRequest(
        dockerfile="FROM x\n",
        context=tmp_path / "proj",
        tags=("demo:gl-1", "demo:latest"),
        build_args={"A": "1"},
        network="none",
        secrets={"pip_index": "s3cret"},
        labels={"io.gpulaunch.managed": "true"},
    )
    engine.build(req, lambda _line: None)
    (argv,) = ran
    assert argv[:5] == [
        str(podman),
        "--url",
        "unix:///run/podman/podman.sock",
        "build",
        "--progress=plain",
    ]
    for pair in (
        ["-t", "demo:gl-1"],
        ["-t", "demo:latest"],
        ["--build-arg", "A=1"],
        ["--label", "io.gpulaunch.managed=true"],
        ["--network", "none"],
    ):
        assert any(argv[i : i + 2] == pair for i in range(len(argv)))
    secret = argv[argv.index("--secret") + 1]
    assert secret.startswith("id=pip_index,src=") and "s3cret" not in " ".join(argv)


def test_a_build_on_podman_without_its_cli_is_one_line(tmp_path: Path) -> None:
    engine = _engine(FakeApi(PODMAN_VERSION))
    req = BuildRequest(dockerfile="FROM x\n", context=tmp_path, tags=("demo:gl-1",))
    with pytest.raises(EngineError, match=r"^the engine is Podman: its API has no BuildKit"):
        engine.build(req, lambda _line: None)


def test_podman_on_path_alone_builds_the_buildkit_dockerfile(tmp_path: Path) -> None:
    podman = _fake_podman(tmp_path / "bin")
    engine = Engine({"PATH": str(podman.parent)})
    assert engine.builder_kind() == "buildkit"
    assert engine.podman_cli() == PodmanCli(str(podman), "env", url=engine.host)
    assert Engine({"PATH": str(podman.parent), "GPULAUNCH_BUILDER": "classic"}).podman_cli() is None


# -- export slurm: the Podman path on the nodes ---------------------------------------------
def _export_spec(gpus: int) -> Any:
    from gpulaunch.export.spec import ExportSpec

    return ExportSpec(
        name="trainer",
        image="registry.example.com/ml/train:v1",
        script="/workspace/t.py",
        args=("--lr", "0.1"),
        rel_script="t.py",
        nodes=2,
        gpus=gpus,
        nproc=max(gpus, 1),
        env={"WANDB_MODE": "offline"},
        shm=None,
        memory="64g",
        host_network=True,
        cap_add=(),
        node_selector={},
        node_affinity={},
        checkpoint_pvc=None,
        restarts=0,
    )


def test_slurm_on_podman_nodes_asks_for_gpus_as_cdi_devices(tmp_path: Path) -> None:
    from gpulaunch.export.slurm import SlurmOptions, render_sbatch, srun_argv

    argv = srun_argv(_export_spec(2), SlurmOptions(container="podman"), tmp_path)
    assert argv[:12] == [
        "podman",
        "run",
        "--rm",
        "--init",
        "--network",
        "host",
        "--ipc",
        "host",
        "--device",
        "nvidia.com/gpu=0",
        "--device",
        "nvidia.com/gpu=1",
    ]
    assert "--gpus" not in argv and argv[argv.index("--memory") + 1] == "64g"
    assert argv[argv.index("--env") + 1] == "WANDB_MODE"  # the value comes from the batch shell
    cpu = srun_argv(_export_spec(0), SlurmOptions(container="podman"), tmp_path)
    assert not any(a.startswith("nvidia.com/gpu") for a in cpu)
    script = render_sbatch(_export_spec(2), SlurmOptions(container="podman"), tmp_path)
    assert f"#SBATCH --chdir={tmp_path}" in script
    assert "# gpulaunch export slurm --container podman" in script


# -- --dry-run: the line the engine at this address runs -------------------------------------
def test_the_dry_run_line_is_podmans_once_a_run_found_podman_there() -> None:
    from gpulaunch.engine.podman import EngineKind, known_kind, remember_kind
    from gpulaunch.engine.runspec import docker_run_argv, engine_run_argv
    from gpulaunch.fsio import cache_dir

    cache_dir().mkdir(parents=True)
    plan = _plan(gpus="1,3", command=["python", "t.py", "--gpus", "2"])
    assert engine_run_argv(plan, None) == docker_run_argv(plan)  # not known: Docker's line
    address = "unix:///run/podman/podman.sock"
    assert known_kind(address) is None
    remember_kind(address, EngineKind("podman", "4.3.1", True))
    kind = known_kind(address)
    assert kind == EngineKind("podman", "4.3.1", True)
    argv = engine_run_argv(plan, kind)
    assert argv[:5] == ["podman", "run", "--userns", "keep-id", "--rm"]
    assert "--gpus" not in argv[: -len(plan.command)]  # the job's own --gpus argument stays
    assert argv[-len(plan.command) :] == plan.command and argv[-5] == plan.image
    options = argv[: -len(plan.command) - 1]
    for device in ("nvidia.com/gpu=1", "nvidia.com/gpu=3"):
        assert options[options.index(device) - 1] == "--device"
    assert "type=tmpfs,target=/workspace/.gpulaunch,readonly,tmpfs-size=4096,notmpcopyup" in argv
    docker = docker_run_argv(plan)
    assert len(argv) == len(docker) + 2 + 2  # keep-id, one more --device pair; nothing lost
    assert known_kind(address, now=__import__("time").time() + 2 * 86400) is None  # a day


def test_a_planted_or_odd_kinds_cache_is_not_known(tmp_path: Path) -> None:
    import json

    from gpulaunch.engine.podman import KINDS_FILE, known_kind
    from gpulaunch.fsio import cache_dir

    cache_dir().mkdir(parents=True)
    now = __import__("time").time()
    for entry in (
        {"at": now, "name": "lxc", "version": "1", "rootless": False},
        {"at": now, "name": "podman", "version": 4, "rootless": False},
        {"at": now, "name": "podman", "version": "4", "rootless": "yes"},
        {"at": "now", "name": "podman", "version": "4", "rootless": None},
    ):
        (cache_dir() / KINDS_FILE).write_text(json.dumps({"unix:///x.sock": entry}))
        assert known_kind("unix:///x.sock") is None, entry


def test_podman_whose_libpod_info_fails_is_still_podman_with_rootless_unknown() -> None:
    """/version names Podman but its own info endpoint fails: the engine is still Podman
    (libpod create, notmpcopyup on the state mask), rootless left unknown, not Docker."""
    from gpulaunch.engine.api.http import ApiError

    class NoInfo(FakeApi):
        def call(
            self, method: str, path: str, query: Any = None, body: Any = None, **k: Any
        ) -> Any:
            if path == LIBPOD_INFO:
                raise ApiError(404, "page not found")
            return super().call(method, path, query, body, **k)

    api = NoInfo(PODMAN_VERSION)
    engine = _engine(api)
    kind = engine.kind()
    assert (kind.name, kind.rootless) == ("podman", None)
    engine.create_container(create_body(_plan()))
    (create,) = [c for c in api.calls if "create" in c[1]]
    assert create[1] == LIBPOD_CREATE
    assert create[2]["mounts"][1]["options"][-1] == "notmpcopyup"
