"""Run records below the CLI: what a record holds, masking, storage, reconciliation, history."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fake_nvml import FakeNvml

from gpulaunch.config import ProjectConfig
from gpulaunch.engine.runspec import RunPlan
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.launch.plan import RunOptions
from gpulaunch.records import history, reconcile, record, store
from gpulaunch.records.seal import seal

RUN_ID = "20261203-201500-a1b2c3"


def _job(project: Path, *, gpus: int | str = 0, env: dict[str, str] | None = None,
         opts: RunOptions | None = None, price: str | None = None, container: Any = None,
         build: Any = None, host: bool = False) -> Any:  # fmt: skip
    cfg = ProjectConfig.model_validate(
        {"name": "demo", "launch": {"env": {"HF_TOKEN": "hf_cfgsecret", "A": "1"}}}
        | ({"launch": {"price_per_gpu_hour": price}} if price else {})
    )
    run = RunPlan(
        image="demo:gl-abc",
        name=f"gl-demo-{RUN_ID}",
        command=["python", "/workspace/train.py", "--url", "https://u:pw1234@host/x"],
        env=env if env is not None else {"API_TOKEN": "tok-123456", "PLAIN": "ok"},
        mounts=[],
        user="1000:1000",
        gpus=gpus,
        labels={"io.gpulaunch.run-id": RUN_ID},
        stop_timeout=77,
    )
    plan = SimpleNamespace(
        run=run,
        launch=SimpleNamespace(profile="default"),
        host_mode=host,
        restarts=0,
        checkpoint_dir=None,
    )
    spec = SimpleNamespace(
        cfg=cfg,
        project=project,
        cwd=project,
        opts=opts or RunOptions(script="train.py", env=["API_TOKEN=tok-123456", "X=1"]),
        config_file=None,
    )
    return SimpleNamespace(
        spec=spec, plan=plan, build=build, container=container, code=None, attempts=[]
    )


def _build() -> Any:
    resolved = SimpleNamespace(python="3.11", torch="2.4.1", cuda="12.4", base_image="b:1")
    return SimpleNamespace(
        tag="demo:gl-abc", cached=True, builder="classic", dockerfile="FROM b:1\n",
        plan=SimpleNamespace(resolved=resolved),
    )  # fmt: skip


def _read(project: Path) -> dict[str, Any]:
    return json.loads((project / ".gpulaunch" / "runs" / f"{RUN_ID}.json").read_text())


# -- the observer ------------------------------------------------------------------------
def test_record_at_start_and_end_with_masked_secrets(tmp_path: Path) -> None:
    container = SimpleNamespace(name=f"gl-demo-{RUN_ID}", attrs={"Image": "sha256:" + "ab" * 32})
    job = _job(tmp_path, container=container, build=_build())
    warnings: list[str] = []
    recorder = record.RunRecorder(warnings.append, price="2.00")
    recorder.started(job)
    data = _read(tmp_path)
    assert data["state"] == "running" and data["exit_code"] is None
    assert data["schema_version"] == store.SCHEMA_VERSION
    assert data["id"] == RUN_ID and data["container"] == container.name
    assert data["image"]["id"] == "sha256:" + "ab" * 32
    assert data["image"]["versions"]["torch"] == "2.4.1"
    assert len(data["image"]["dockerfile_sha256"]) == 64
    assert data["stop_grace_s"] == 77
    assert data["env"] == {"API_TOKEN": "***", "PLAIN": "ok"}
    assert data["options"]["env"] == ["API_TOKEN=***", "X=1"]
    assert data["config"]["launch"]["env"]["HF_TOKEN"] == "***"
    assert "https://***@host/x" in data["command"]
    job.code = 1
    job.attempts = [{"started_at": "a", "ended_at": "b", "exit_code": 1}]
    recorder.finished(job)
    text = (tmp_path / ".gpulaunch" / "runs" / f"{RUN_ID}.json").read_text()
    for secret in ("tok-123456", "hf_cfgsecret", "pw1234"):
        assert secret not in text
    data = json.loads(text)
    assert data["state"] == "failed" and data["exit_code"] == 1 and data["signal"] is None
    assert data["ended_at"] and data["duration_s"] is not None
    assert data["gpu_hours"] == 0 and data["cost"] == "0.00"
    assert warnings == []


def test_gpu_hours_and_cost() -> None:
    assert record.gpu_hours(4, 5400) == 6.0
    assert record.cost(6.0, "2.49") == "14.94"
    assert record.cost(0.0001, "2.49") == "0.00"
    assert record.cost(1.0, None) is None and record.gpu_hours(None, 10) is None
    rec = store.RunRecord(RUN_ID, started_at="2026-12-03T10:00:00Z",
                          gpus=store.Gpus(count=2), price_per_gpu_hour="3")  # fmt: skip
    record.complete(rec, 143, "2026-12-03T11:30:00Z")
    assert rec.duration_s == 5400.0 and rec.gpu_hours == 3.0 and rec.cost == "9.00"
    assert rec.state == "terminated" and rec.signal == "SIGTERM"


@pytest.mark.parametrize(
    ("gpus", "indices", "count"),
    [(2, [0, 1], 2), ("1,3", [1, 3], 2), ("all", [0, 1, 2, 3], 4), (0, [], 0)],
)
def test_gpus_with_nvml_names(
    tmp_path: Path, fake_nvml: FakeNvml, gpus: int | str, indices: list[int], count: int
) -> None:
    fake_nvml.devices = fake_nvml.devices * 2  # four GPUs
    recorder = record.RunRecorder(lambda _m: None)
    recorder.started(_job(tmp_path, gpus=gpus))
    data = _read(tmp_path)["gpus"]
    assert data["count"] == count
    assert data["indices"] == indices
    if count:
        assert [d["index"] for d in data["devices"]] == data["indices"]
        assert data["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
        assert data["devices"][0]["uuid"].startswith("GPU-")
    else:
        assert data["devices"] == []


def test_unknown_gpu_count_without_nvml(tmp_path: Path) -> None:
    recorder = record.RunRecorder(lambda _m: None)
    job = _job(tmp_path, gpus="all")
    recorder.started(job)
    job.code = 0
    recorder.finished(job)
    data = _read(tmp_path)
    assert data["gpus"]["count"] is None and data["gpu_hours"] is None and data["cost"] is None


def test_read_only_folder_is_a_warning(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        runs = tmp_path / ".gpulaunch" / "runs"
        runs.parent.mkdir()
        runs.write_text("a file where the folder should be")  # root ignores modes
    else:
        (tmp_path / ".gpulaunch").mkdir(mode=0o500)
    warnings: list[str] = []
    recorder = record.RunRecorder(warnings.append)
    job = _job(tmp_path)
    recorder.started(job)
    job.code = 0
    recorder.finished(job)
    assert len(warnings) == 1, warnings  # the end's save fails too, and is not said twice
    assert warnings[0].startswith("warning: run record not written:")


def test_git_state(tmp_path: Path) -> None:
    import subprocess

    from gpulaunch.outside.git import git_state

    assert git_state(tmp_path) is None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    (tmp_path / "a.py").write_text("1\n")
    for argv in (["init", "-q"], ["add", "a.py"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(tmp_path), *argv], check=True, env=env)
    state = git_state(tmp_path)
    assert state is not None and len(state["commit"]) == 40 and state["dirty"] is False
    (tmp_path / "new.txt").write_text("untracked\n")
    assert git_state(tmp_path) == state  # untracked files (records) do not count
    (tmp_path / "a.py").write_text("2\n")
    assert git_state(tmp_path) == {**state, "dirty": True}


# -- storage -----------------------------------------------------------------------------
def _save(project: Path, run_id: str, **fields: Any) -> store.RunRecord:
    """A record of an earlier, smaller layout (only these fields), as written."""
    data = {"schema_version": 1, "id": run_id, "state": "succeeded",
            "started_at": "2026-12-03T10:00:00Z"} | fields  # fmt: skip
    path = store.record_path(project, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(seal(data)))
    return store.RunRecord.from_json(data)


def test_corrupt_foreign_and_future_records_are_skipped(tmp_path: Path) -> None:
    good = _save(tmp_path, RUN_ID)
    runs = tmp_path / ".gpulaunch" / "runs"
    (runs / "20261203-201501-000000.json").write_text("{not json")
    (runs / "20261203-201502-000000.json").write_text(
        json.dumps({"schema_version": 99, "id": "20261203-201502-000000"})
    )
    (runs / "20261203-201503-000000.json").write_text("[1, 2]")
    (runs / "notes.txt").write_text("ignored")
    loaded = store.load_all(tmp_path)
    assert [r.to_json() for r in loaded.records] == [good.to_json()]
    assert len(loaded.warnings) == 3
    assert any("schema_version 99 is newer" in w for w in loaded.warnings)
    assert any("not valid JSON" in w for w in loaded.warnings)
    with pytest.raises(ConfigError, match="schema_version 99"):
        store.load(tmp_path, "20261203-201502-000000")
    with pytest.raises(ConfigError, match="not a run id"):
        store.load(tmp_path, "../../etc/passwd")


def test_parse_time_accepts_engine_nanoseconds() -> None:
    value = store.parse_time("2026-12-03T10:00:01.123456789Z")
    assert value == datetime(2026, 12, 3, 10, 0, 1, 123456, tzinfo=UTC)
    assert store.parse_time("0001-01-01T00:00:00Z") is None
    assert store.parse_time("garbage") is None


# -- reconciliation ----------------------------------------------------------------------
class FakeContainer:
    def __init__(self, state: dict[str, Any], restarts: int = 0) -> None:
        self.attrs = {"State": state, "RestartCount": restarts, "Mounts": []}
        self.reloads = 0

    def reload(self) -> None:
        self.reloads += 1


class FakeEngine:
    def __init__(self, containers: dict[str, Any], fail: bool = False) -> None:
        self.containers = containers
        self.fail = fail

    def find_leftover(self, name: str, run_id: str) -> Any:
        if self.fail:
            raise EngineError("cannot reach the Docker engine")
        return self.containers.get(name)


def _running(project: Path, run_id: str, **fields: Any) -> dict[str, Any]:
    base = {"state": "running", "container": f"gl-x-{run_id}", "mode": "container",
            "detached": True, "gpus": {"count": 2}, "price_per_gpu_hour": "1",
            "launcher": {"pid": os.getpid(), "host": socket.gethostname()},
            "restarts": {"max": 0, "count": 0, "attempts": []}}  # fmt: skip
    return _save(project, run_id, **(base | fields))


def test_reconcile_completes_exited_keeps_running_and_marks_gone_lost(tmp_path: Path) -> None:
    exited, running, gone = (f"20261203-10000{i}-00000{i}" for i in range(3))
    _running(tmp_path, exited)
    _running(tmp_path, running)
    _running(tmp_path, gone)
    engine = FakeEngine({
        f"gl-x-{exited}": FakeContainer({"Running": False, "Status": "exited", "ExitCode": 137,
            "StartedAt": "2026-12-03T10:00:00.5Z", "FinishedAt": "2026-12-03T11:00:00.5Z"}),
        f"gl-x-{running}": FakeContainer({"Running": True, "Status": "running"}),
    })  # fmt: skip
    warnings: list[str] = []
    records = {r.id: r for r in reconcile.reconcile(tmp_path, engine, warnings.append)}
    assert warnings == []
    assert records[exited].state == "terminated" and records[exited].signal == "SIGKILL"
    assert records[exited].exit_code == 137 and records[exited].gpu_hours == 2.0
    assert records[exited].ended_at == "2026-12-03T11:00:00.500Z"
    assert records[running].state == "running"
    assert records[gone].state == "lost"
    on_disk = {r.id: r.state for r in store.load_all(tmp_path).records}
    assert on_disk == {exited: "terminated", running: "running", gone: "lost"}


def test_reconcile_leaves_a_live_attached_launcher_alone(tmp_path: Path) -> None:
    _running(tmp_path, RUN_ID, detached=False)
    records = reconcile.reconcile(tmp_path, FakeEngine({}), pytest.fail)
    assert records[0].state == "running"
    # the same record from a launcher that is gone (another host's pid) is checked
    _running(tmp_path, RUN_ID, detached=False, launcher={"pid": 1, "host": "elsewhere"})
    assert reconcile.reconcile(tmp_path, FakeEngine({}), pytest.fail)[0].state == "lost"


def test_reconcile_without_an_engine_warns_and_changes_nothing(tmp_path: Path) -> None:
    _running(tmp_path, RUN_ID)
    warnings: list[str] = []
    records = reconcile.reconcile(tmp_path, FakeEngine({}, fail=True), warnings.append)
    assert records[0].state == "running"
    assert warnings == [f"warning: run {RUN_ID}: cannot check its container: "
                        "cannot reach the Docker engine"]  # fmt: skip


def test_host_record_of_a_dead_launcher_is_lost(tmp_path: Path) -> None:
    _running(tmp_path, RUN_ID, mode="host", detached=False,
             launcher={"pid": 2**22 + 7, "host": socket.gethostname()})  # fmt: skip
    assert reconcile.reconcile(tmp_path, FakeEngine({}), pytest.fail)[0].state == "lost"


def test_a_recycled_launcher_pid_is_not_the_launcher(tmp_path: Path) -> None:
    """The recorded pid now names another process (even one whose command line says
    gpulaunch, like `vim gpulaunch.yaml`): its start time differs, so the record is lost."""
    with subprocess.Popen(["sleep", "30"]) as other:  # a live pid that is not the launcher
        try:
            started = store.process_start(other.pid)
            assert isinstance(started, int) and started > 0
            host = socket.gethostname()
            _running(tmp_path, RUN_ID, mode="host", detached=False,
                     launcher={"pid": other.pid, "host": host, "started": started - 1})  # fmt: skip
            assert reconcile.reconcile(tmp_path, FakeEngine({}), pytest.fail)[0].state == "lost"
            _running(tmp_path, RUN_ID, mode="host", detached=False,
                     launcher={"pid": other.pid, "host": host, "started": started})  # fmt: skip
            records = reconcile.reconcile(tmp_path, FakeEngine({}), pytest.fail)
            assert records[0].state == "running"  # the same process: still its launcher
        finally:
            other.kill()


def test_finish_container_uses_the_workspace_mount(tmp_path: Path) -> None:
    _running(tmp_path, RUN_ID)
    state = {"Running": False, "ExitCode": 0, "StartedAt": "2026-12-03T10:00:00Z",
             "FinishedAt": "2026-12-03T10:30:00Z"}  # fmt: skip
    container = FakeContainer(state, restarts=2)
    container.attrs["Mounts"] = [{"Destination": "/workspace", "Source": str(tmp_path)}]
    reconcile.finish_container(container, RUN_ID, pytest.fail)
    data = store.load(tmp_path, RUN_ID)
    assert data.state == "succeeded" and data.duration_s == 1800.0
    assert data.restarts.count == 2 and container.reloads == 1


# -- history -----------------------------------------------------------------------------
def test_since_forms() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert history.parse_since("3d", now) == datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert history.parse_since("90m", now) == datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    assert history.parse_since("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
    assert history.parse_since("2026-12-01T08:00") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    for bad in ("yesterday", "3 d", "2026-13-01", "-1d", "3d\n"):
        with pytest.raises(ConfigError, match=r"^--since: "):
            history.parse_since(bad)


def test_select_and_totals() -> None:
    runs = [
        store.RunRecord("c", started_at="2026-12-03T10:00:00Z", duration_s=60.0,
                        gpu_hours=0.5, cost="1.25"),
        store.RunRecord("b", started_at="2026-12-02T10:00:00Z", duration_s=30.0,
                        gpu_hours=0.25, cost=None),
        store.RunRecord("a", started_at="2026-12-01T10:00:00Z", duration_s=None,
                        gpu_hours=None, cost="2.00"),
    ]  # fmt: skip
    assert [r.id for r in history.select(runs, 2)] == ["c", "b"]
    since = datetime(2026, 12, 2, tzinfo=UTC)
    assert [r.id for r in history.select(runs, None, since)] == ["c", "b"]
    total = history.totals(runs)
    assert (total.runs, total.duration_s, total.gpu_hours, total.cost) == (3, 90.0, 0.75, "3.25")
    assert history.totals(runs[1:2]).cost is None
    runs[0].exit_code, runs[0].signal = 143, "SIGTERM"
    assert history.row(runs[0])["exit"] == "143 (SIGTERM)"


def test_totals_skip_costs_that_are_not_finite_numbers() -> None:
    costs = ["Infinity", "NaN", "1.50", "x", "0.25"]  # hand-edited (and resealed) files
    records = [store.RunRecord(RUN_ID, cost=cost) for cost in costs]
    assert history.totals(records).cost == "1.75"


# -- the record type -----------------------------------------------------------------------
def test_a_record_reads_back_exactly_as_written(tmp_path: Path, fake_nvml: FakeNvml) -> None:
    """RunRecord is the one place a record meets JSON: what `run` writes reads back into the
    same fields and writes out the same JSON."""
    container = SimpleNamespace(name=f"gl-demo-{RUN_ID}", attrs={"Image": "sha256:" + "ab" * 32})
    job = _job(tmp_path, gpus=2, container=container, build=_build())
    recorder = record.RunRecorder(lambda _m: None, rerun_of="20261203-201400-000000")
    recorder.started(job)
    job.code = 0
    recorder.finished(job)
    written = _read(tmp_path)
    loaded = store.load(tmp_path, RUN_ID)
    assert recorder.record is not None
    assert loaded.to_json() == recorder.record.to_json()
    assert loaded.to_json() == {k: v for k, v in written.items() if k != "seal"}
    assert loaded.image is not None and loaded.image.tag == "demo:gl-abc"
    assert (loaded.gpus.count, loaded.gpus.indices) == (2, [0, 1])
    assert loaded.launcher.pid == os.getpid() and loaded.rerun_of == "20261203-201400-000000"


def test_an_older_layout_reads_with_defaults_and_keeps_what_it_does_not_know() -> None:
    data = {"schema_version": 1, "id": RUN_ID, "state": "succeeded", "note": {"x": 1},
            "launcher": {"pid": 7, "host": "h"}, "image": {"tag": "t", "digest": "d"}}  # fmt: skip
    rec = store.RunRecord.from_json(data)
    assert rec.launcher.started is None and rec.gpus.count is None and rec.command == []
    assert rec.restarts.count == 0 and rec.mode == "container" and rec.explanation is None
    out = rec.to_json()
    assert out["note"] == {"x": 1} and out["image"]["digest"] == "d"  # kept as read
    assert "explanation" not in out and out["launcher"] == {"pid": 7, "host": "h", "started": None}
    nulls = store.RunRecord.from_json(data | {"gpus": None, "command": None, "image": None})
    assert nulls.gpus.count is None and nulls.command == [] and nulls.image is None
    assert history.row(nulls)["command"] == "" and history.row(nulls)["gpus"] == "?"
    for field in ("image", "gpus", "launcher", "restarts"):
        with pytest.raises(ValueError, match=f"^not a run record \\({field} is not a JSON object"):
            store.RunRecord.from_json(data | {field: [1]})
