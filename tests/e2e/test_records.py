"""Run records, history, rerun and preemption on the real engine (issue 11, "Must show").

One small project (no torch: it builds in seconds) per module, with launch.checkpoint_dir
inside it (never part of the build context: no job here may cause a rebuild).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES

from e2e.support import (
    BUILD_TIMEOUT_S,
    LiveJob,
    cli_env,
    container_name,
    gl,
    gl_argv,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

ECHO = """\
import os, sys, time
print("echo", sys.argv[1:], flush=True)
time.sleep(float(os.environ.get("SLEEP", "0")))
sys.exit(int(sys.argv[-1]))
"""
SLEEP = """\
import time
print("ready", flush=True)
time.sleep(300)
"""
FLAKY = """\
import os, sys
from pathlib import Path
count = Path(os.environ["GPULAUNCH_CHECKPOINT_DIR"]) / "flaky.count"
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print(f"flaky attempt {n}", flush=True)
sys.exit(3 if n == 1 else 0)
"""

# A job that goes for gpulaunch's state in the project (issue 29 §2): it lists the folder,
# reads an honest record, and plants a forged record, the tag cache, a build log and the
# precision helper module. `.gpulaunch/` is masked in the container: every try must fail.
ATTACK = """\
import os, sys
from pathlib import Path
state = Path("/workspace/.gpulaunch")
print("listing", sorted(os.listdir(state)), flush=True)
try:
    print("READ", (state / "runs" / (sys.argv[1] + ".json")).read_text()[:20], flush=True)
except OSError as err:
    print("unreadable", err.errno, flush=True)
for rel in ("runs/" + sys.argv[1] + ".json", "runs/20990101-000000-abcdef.json", "tag-cache.json",
            "logs/build-20990101-000000-x.log", "lib/gpulaunch_precision.py"):
    try:
        (state / rel).parent.mkdir(parents=True, exist_ok=True)
        (state / rel).write_text("planted")
        print("WROTE", rel, flush=True)
    except OSError as err:
        print("refused", rel, err.errno, flush=True)
"""


@pytest.fixture(scope="module")
def proj(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = tiny_config(temp_name("records"))
    config["launch"].update(checkpoint_dir="ckpt", stop_grace=20, price_per_gpu_hour="1.50")
    project = write_project(tmp_path_factory.mktemp("records") / "rec", "tiny", config)
    shutil.copy(EXAMPLES / "spot-resume" / "train.py", project / "train.py")
    for name, text in (
        ("echo.py", ECHO),
        ("sleep.py", SLEEP),
        ("flaky.py", FLAKY),
        ("attack.py", ATTACK),
    ):
        (project / name).write_text(text)
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    return project


def _run(proj: Path, *args: str) -> Any:
    result = gl("run", *args, cwd=proj)
    assert "is up to date" in result.stderr, "rebuilt:\n" + result.describe()
    return result


def _records(proj: Path) -> dict[str, dict[str, Any]]:
    result = gl("history", "--json", cwd=proj)
    assert result.returncode == 0, result.describe()
    return {r["id"]: r for r in json.loads(result.stdout)["runs"]}


def _new_record(proj: Path, before: set[str]) -> dict[str, Any]:
    (new,) = [r for i, r in _records(proj).items() if i not in before]
    return new


@pytest.fixture
def live(proj: Path) -> Iterator[Any]:
    jobs: list[LiveJob] = []

    def start(*args: str, **env: str) -> LiveJob:
        job = LiveJob(gl_argv("run", *args), cwd=proj, env=cli_env(**env))
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()


def test_spot_resume_sigterm_saves_and_the_next_run_resumes(proj: Path, live: Any) -> None:
    before = set(_records(proj))
    job = live("-e", "STEPS=1000", "-e", "STEP_SECONDS=0.1", "train.py")
    job.wait_for("step 5")
    job.send(signal.SIGTERM)
    assert job.finish(timeout=60) == 143, job.describe()
    saved = [line for line in job.stdout if line.startswith("SIGTERM: saved step ")]
    assert saved, job.describe()
    step = int(saved[0].split()[3])
    assert step >= 5
    checkpoint = proj / "ckpt" / f"step-{step:08d}.json"
    assert json.loads(checkpoint.read_text()) == {"step": step, "weight": step * 0.5}
    record = _new_record(proj, before)
    assert (record["state"], record["exit_code"], record["signal"]) == (
        "terminated",
        143,
        "SIGTERM",
    )
    assert record["checkpoint_dir"] == str(proj / "ckpt") and record["stop_grace_s"] == 20

    resumed = _run(proj, "-e", f"STEPS={step + 3}", "-e", "STEP_SECONDS=0", "train.py")
    assert resumed.returncode == 0, resumed.describe()
    first = resumed.stdout.splitlines()[0]
    assert first == f"resumed from step {step}" and step > 0
    assert f"done at step {step + 3}" in resumed.stdout


def test_restarts_fail_then_succeed(proj: Path) -> None:
    (proj / "ckpt" / "flaky.count").unlink(missing_ok=True)
    before = set(_records(proj))
    result = _run(proj, "--restarts", "2", "flaky.py")
    assert result.returncode == 0, result.describe()
    assert result.stdout.splitlines() == ["flaky attempt 1", "flaky attempt 2"]
    assert "attempt 1 exited 3; restarting (1/2)" in result.stderr
    record = _new_record(proj, before)
    assert record["state"] == "succeeded"
    assert record["restarts"]["count"] == 1 and record["restarts"]["max"] == 2
    assert [a["exit_code"] for a in record["restarts"]["attempts"]] == [3, 0]


def test_detached_restarts_are_the_engines(proj: Path, docker_client: Any) -> None:
    (proj / "ckpt" / "flaky.count").unlink(missing_ok=True)
    before = set(_records(proj))
    result = _run(proj, "-d", "--restarts", "2", "flaky.py")
    assert result.returncode == 0, result.describe()
    name = result.stdout.strip().splitlines()[-1]
    count = proj / "ckpt" / "flaky.count"
    deadline = time.monotonic() + 60
    while (
        not count.exists()
        or count.read_text() != "2"
        or docker_client.containers.get(name).status not in ("exited", "dead")
    ):
        assert time.monotonic() < deadline, "the engine did not restart the job"
        time.sleep(0.3)
    record = _new_record(proj, before)  # completed by `history` from the engine
    assert record["state"] == "succeeded" and record["restarts"]["count"] == 1
    assert gl("stop", name, cwd=proj).returncode == 0


def _wait_exited(client: Any, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container = client.containers.get(name)
        if container.status == "exited":
            return
        time.sleep(0.3)
    pytest.fail(f"{name} did not exit in {timeout}s")


def test_history_of_failing_detached_and_killed_runs_and_rerun(
    proj: Path, live: Any, docker_client: Any
) -> None:
    before = set(_records(proj))
    # it runs a second, so its GPU-hours are over the 4-decimal rounding (the supervisor
    # sees the end at once: a job of a few ms is 0.0 GPU-hours)
    failing = _run(proj, "--gpus", "1", "-e", "SLEEP=1", "echo.py", "failing", "3")
    assert failing.returncode == 3, failing.describe()
    failed = _new_record(proj, before)

    detached = _run(proj, "-d", "-e", "SLEEP=1", "echo.py", "detached", "0")
    assert detached.returncode == 0, detached.describe()
    name = detached.stdout.strip().splitlines()[-1]
    det = _new_record(proj, before | {failed["id"]})
    assert det["state"] == "running" and det["detached"] and det["container"] == name
    _wait_exited(docker_client, name)

    killed = live("sleep.py")
    killed.wait_for("ready")
    killed_name = container_name("\n".join(killed.stderr))
    killed.kill()  # SIGKILL: the launcher cannot complete its record
    records = _records(proj)  # history completes the detached run from the engine
    assert records[det["id"]]["state"] == "succeeded"
    assert records[det["id"]]["exit_code"] == 0 and records[det["id"]]["ended_at"]
    (kill_rec,) = [r for r in records.values() if r.get("container") == killed_name]
    assert kill_rec["state"] == "running"  # its container still runs
    docker_client.containers.get(killed_name).kill(signal="SIGKILL")
    _wait_exited(docker_client, killed_name)

    table = gl("history", cwd=proj)
    assert table.returncode == 0, table.describe()
    lines = {line.split()[0]: line for line in table.stdout.splitlines()[1:-1]}
    assert " failed " in lines[failed["id"]] and " 3 " in lines[failed["id"]]
    assert " succeeded " in lines[det["id"]]
    assert " terminated " in lines[kill_rec["id"]] and "137 (SIGKILL)" in lines[kill_rec["id"]]
    assert table.stdout.splitlines()[-1].startswith("total: ")
    # the GPU run (stand-in GPU) has GPU-hours and a cost at 1.50 per GPU-hour
    final = _records(proj)
    assert final[failed["id"]]["gpus"]["count"] == 1
    assert final[failed["id"]]["gpu_hours"] > 0 and final[failed["id"]]["cost"] is not None
    # a removed container of a dead launcher is lost
    docker_client.containers.get(killed_name).remove()
    docker_client.containers.get(name).remove()

    again = gl("rerun", failed["id"], cwd=proj)
    assert again.returncode == 3, again.describe()
    assert again.stdout == failing.stdout
    rerun_rec = _new_record(proj, set(final))
    assert rerun_rec["rerun_of"] == failed["id"]
    assert rerun_rec["image"]["id"] == failed["image"]["id"]
    assert rerun_rec["image"]["id"].startswith("sha256:")


def test_no_secret_in_records_logs_or_labels(proj: Path, docker_client: Any) -> None:
    token = "tok-" + secrets.token_hex(8)
    attached = _run(proj, "--env", f"API_TOKEN={token}", "echo.py", "x", "0")
    assert attached.returncode == 0, attached.describe()
    detached = _run(proj, "-d", "--env", f"API_TOKEN={token}", "-e", "SLEEP=30", "echo.py", "0")
    name = detached.stdout.strip().splitlines()[-1]
    container = docker_client.containers.get(name)
    labels = {**(container.labels or {}), **(docker_client.images.get(container.image.id).labels)}
    assert token not in json.dumps(labels)
    stopped = gl("stop", "--timeout", "5", name, cwd=proj)
    assert stopped.returncode == 0, stopped.describe()
    hits = [p for p in (proj / ".gpulaunch").rglob("*") if p.is_file() and token in p.read_text()]
    assert hits == []
    assert token not in attached.stderr + detached.stdout + detached.stderr + stopped.stdout
    # `stop` completed the detached run's record before removing the container
    (rec,) = [r for r in _records(proj).values() if r.get("container") == name]
    assert rec["state"] == "terminated" and rec["exit_code"] in (143, 137)


def _tree(folder: Path) -> dict[str, bytes]:
    """gpulaunch's state under `folder`; build-context/ is the build's mirror of the project's
    own files (attack.py among them), made again from the project by every build."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.relative_to(folder).parts[0] != "build-context"
    }


def test_a_job_cannot_read_or_plant_gpulaunch_state(proj: Path) -> None:
    """The project is mounted read-write, but `.gpulaunch/` is masked by an empty read-only
    tmpfs: the job sees nothing there and every write fails; history, rerun, explain and a
    host-mode run afterwards behave as if it had never tried."""
    before = set(_records(proj))
    honest = _run(proj, "echo.py", "honest", "0")
    assert honest.returncode == 0, honest.describe()
    target = _new_record(proj, before)
    state = proj / ".gpulaunch"
    kept = _tree(state)

    attack = _run(proj, "attack.py", target["id"])
    assert attack.returncode == 0, attack.describe()
    assert "listing []" in attack.stdout, attack.stdout
    assert "unreadable 2" in attack.stdout and "READ" not in attack.stdout, attack.stdout
    assert "WROTE" not in attack.stdout and attack.stdout.count("refused") == 5, attack.stdout
    attacker = _new_record(proj, before | {target["id"]})

    after = _tree(state)
    assert {k: v for k, v in after.items() if k in kept} == kept  # nothing earlier changed
    assert "planted" not in "".join(v.decode("utf-8", "replace") for v in after.values())
    records = _records(proj)
    assert records[target["id"]]["command"] == target["command"]
    assert "20990101-000000-abcdef" not in records

    again = gl("rerun", target["id"], cwd=proj)
    assert again.returncode == 0 and "honest" in again.stdout, again.describe()
    explained = gl("explain", attacker["id"], cwd=proj)
    assert explained.returncode == 1, explained.describe()  # its own run, nothing planted
    assert explained.stderr == f"run {attacker['id']} (exit 0): no known cause found\n"
    host = gl("run", "--no-container", "echo.py", "host", "0", cwd=proj)
    assert host.returncode == 0 and "'host'" in host.stdout, host.describe()
    assert not (state / "lib").exists()  # host mode imports its helper from the package


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """A folder nobody (root included) may write into: immutable for root, mode 500 else."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o500)
    try:
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def test_bad_records_and_a_read_only_folder_are_warnings(proj: Path) -> None:
    runs = proj / ".gpulaunch" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "20200101-000000-000001.json").write_text("{corrupt")
    (runs / "20200101-000000-000002.json").write_text(
        json.dumps({"schema_version": 7, "id": "20200101-000000-000002"})
    )
    before = set(_records(proj))
    assert _run(proj, "echo.py", "rw", "0").returncode == 0
    kept = _new_record(proj, before)  # a good record, written before the lock
    try:
        with _read_only(runs):
            listed = _records(proj)  # history --json still lists it, next to the bad files
            assert listed[kept["id"]]["state"] == "succeeded"
            assert not {"20200101-000000-000001", "20200101-000000-000002"} & set(listed)
            result = _run(proj, "echo.py", "ro", "0")
            assert result.returncode == 0, result.describe()
            assert result.stdout == "echo ['ro', '0']\n"
            assert result.stderr.count("warning: run record not written:") == 1
            history = gl("history", cwd=proj)
            assert history.returncode == 0, history.describe()
            assert "schema_version 7 is newer" in history.stderr
            assert "not valid JSON" in history.stderr
            assert "Traceback" not in history.stderr + result.stderr
    finally:
        for name in ("20200101-000000-000001.json", "20200101-000000-000002.json"):
            (runs / name).unlink(missing_ok=True)
