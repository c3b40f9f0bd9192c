"""A real one-node Slurm for the tests: munge, slurmctld and slurmd from Debian, configured
in a temp folder (SLURM_CONF), started by the fixture and stopped afterwards (only the
processes it started)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _munge_answers() -> bool:
    if shutil.which("munge") is None:
        return False
    cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10, check=False)
    if cred.returncode != 0:
        return False
    check = subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=10)
    return check.returncode == 0


def _conf(root: Path, host: str) -> str:
    mem_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return "\n".join(
        [
            "ClusterName=gltest",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "ReturnToService=2",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmdSpoolDir={root}/slurmd",
            f"StateSaveLocation={root}/slurmctld",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            "SlurmUser=root",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MinJobAge=3600",
            f"NodeName={host} CPUs={os.cpu_count()} RealMemory={max(mem_mib - 1024, 512)}"
            " State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@contextlib.contextmanager
def slurm_cluster(root: Path) -> Iterator[dict[str, str]]:
    """Yields the environment for the Slurm clients (SLURM_CONF); stops what it started."""
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "scontrol"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            pytest.fail(f"{tool} missing: apt-get install slurmctld slurmd slurm-client munge")
    host = socket.gethostname().split(".")[0]
    for sub in ("slurmd", "slurmctld"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, host))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[Path] = []  # pid files of the daemons this fixture started
    try:
        if not _munge_answers():
            Path("/run/munge").mkdir(exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(
                ["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True, timeout=30
            )
            started.append(Path("/run/munge/munged.pid"))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run(
                [f"/usr/sbin/{daemon}", "-f", str(conf)], env=env, check=True, timeout=60
            )
            started.append(root / f"{daemon}.pid")
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
            ).stdout.strip()
            if state == "idle":
                break
            if time.monotonic() > deadline:
                logs = (root / "slurmctld.log").read_text()[-2000:]
                pytest.fail(f"the Slurm node did not become idle (state {state!r})\n{logs}")
            time.sleep(1)
        yield env
    finally:
        for pid_file in reversed(started):
            _stop(pid_file)


def _stop(pid_file: Path, grace: float = 15) -> None:
    """SIGTERM the daemon named by its pid file, SIGKILL if it is still there after `grace`."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return
        if state == "Z":  # exited; its parent (init) reaps it
            return
        time.sleep(0.2)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def wait_for_job(job_id: str, env: dict[str, str], timeout: float = 300) -> str:
    """The job's final state (COMPLETED, FAILED, ...) from `scontrol show job`."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", job_id],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
        state = fields.get("JobState", "")
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(1)
    pytest.fail(f"job {job_id} still {state!r} after {timeout} s")
