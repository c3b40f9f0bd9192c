"""Failed runs explain themselves, on the real engine: each failure the CPU can produce is
produced for real (an OOM kill under a memory limit, DataLoader workers on a tiny /dev/shm,
a port in use, a missing module, a rendezvous nobody joins) and the last line gpulaunch
prints, the run record and `gpulaunch explain` must name its cause and fix.

GPU-only failures (CUDA OOM, no kernel image, driver rule, NCCL) are matched against public
log excerpts in tests/records/test_explain.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.support import Result, cli_env, gl, run_job

pytestmark = pytest.mark.docker

DATALOADER_ON_TINY_SHM = """\
import torch
from torch.utils.data import DataLoader, Dataset
class Big(Dataset):
    def __len__(self): return 8
    def __getitem__(self, i): return torch.ones(8 * 1024 * 1024)  # 32 MiB per sample
for _ in DataLoader(Big(), batch_size=1, num_workers=2): pass
"""
PORT_IN_USE = """\
import datetime, socket
import torch.distributed as dist
held = socket.socket()
held.bind(("127.0.0.1", 29531)); held.listen()
dist.TCPStore("127.0.0.1", 29531, 1, True, timeout=datetime.timedelta(seconds=5))
"""
RENDEZVOUS_ALONE = """\
import datetime
import torch.distributed as dist
dist.TCPStore("127.0.0.1", 29532, 2, True, timeout=datetime.timedelta(seconds=2))
"""
EAT_MEMORY = "chunks = [bytearray(16 * 1024 * 1024) for _ in range(64)]"


def _last_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines, result.describe()
    return lines[-1]


def _newest_record(app: Path) -> dict[str, Any]:
    runs = sorted((app / ".gpulaunch" / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime)
    return dict(json.loads(runs[-1].read_text()))


def _check(app: Path, result: Result, ident: str, *words: str) -> dict[str, Any]:
    last = _last_line(result)
    assert last.startswith("gpulaunch: cause: "), result.describe()
    for word in words:
        assert word in last, f"{word!r} not in the last line\n{result.describe()}"
    record = _newest_record(app)
    assert record["explanation"]["id"] == ident
    assert record["explanation"]["cause"] in last and record["explanation"]["fix"] in last
    return record


@pytest.fixture
def profiles() -> list[str]:
    """Profiles given with --set: they change the launch, never the image (no rebuild)."""
    return [
        "--set",
        "profiles.tight.extends=default",
        "--set",
        "profiles.tight.docker.memory=64m",
        "--set",
        "profiles.tinyshm.extends=default",
        "--set",
        "profiles.tinyshm.docker.shm_size=1m",
    ]


def test_an_oom_kill_under_a_memory_limit_is_explained(app: Path, profiles: list[str]) -> None:
    result = run_job(app, *profiles, "--profile", "tight", "--", "python", "-c", EAT_MEMORY)
    assert result.returncode == 137, result.describe()
    _check(app, result, "container-oom-killed", "OOM", "docker.memory")


def test_dataloader_workers_on_a_tiny_shm_are_explained(app: Path, profiles: list[str]) -> None:
    result = run_job(
        app, *profiles, "--profile", "tinyshm", "--", "python", "-c", DATALOADER_ON_TINY_SHM
    )
    assert result.returncode != 0, result.describe()
    _check(app, result, "shm-exhausted", "shared memory", "docker.shm_size", "docker.ipc")


def test_a_port_in_use_is_explained(app: Path) -> None:
    result = run_job(app, "--", "python", "-c", PORT_IN_USE)
    assert result.returncode == 1, result.describe()
    _check(app, result, "port-in-use", "already in use", "--rdzv-endpoint")


def test_a_rendezvous_nobody_joins_is_explained(app: Path) -> None:
    result = run_job(app, "--", "python", "-c", RENDEZVOUS_ALONE)
    assert result.returncode == 1, result.describe()
    _check(app, result, "rendezvous-timeout", "rendezvous timed out", "--rdzv-endpoint")


def test_a_missing_module_is_explained_and_explain_shows_it_again(app: Path) -> None:
    result = run_job(app, "--", "python", "-c", "import gl_no_such_module")
    assert result.returncode == 1, result.describe()
    record = _check(app, result, "module-missing", "no module gl_no_such_module", "requirements")
    assert record["explanation"]["line"] == (
        "ModuleNotFoundError: No module named 'gl_no_such_module'"
    )
    again = gl("explain", record["id"], cwd=app, env=cli_env())
    assert again.returncode == 0, again.describe()
    assert again.stdout.splitlines()[0] == f"cause: {record['explanation']['cause']}"
    as_json = gl("explain", record["id"], "--json", cwd=app, env=cli_env())
    assert json.loads(as_json.stdout)["explanation"] == record["explanation"]


def test_a_sigkill_without_an_oom_kill_is_explained_as_a_kill(app: Path) -> None:
    result = run_job(app, "--", "python", "-c", "import os; os.kill(os.getpid(), 9)")
    assert result.returncode == 137, result.describe()
    record = _check(app, result, "killed", "SIGKILL", "dmesg")
    assert record["signal"] == "SIGKILL"


def test_a_job_that_succeeds_or_fails_unknown_gets_no_explanation(app: Path) -> None:
    result = run_job(app, "--", "python", "-c", "raise SystemExit(3)")
    assert result.returncode == 3, result.describe()
    assert _last_line(result) == "gpulaunch: job exited with 3"
    assert "explanation" not in _newest_record(app)


def test_a_failed_smoke_explains_itself_in_junit_summary_and_json(
    app: Path, tmp_path: Path
) -> None:
    from junitparser import Failure, JUnitXml

    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    result = gl(
        "smoke", "--junit", str(junit), "--json", "--", "python", "-c", "import gl_no_such_module",
        cwd=app, env=cli_env(GITHUB_STEP_SUMMARY=str(summary)),
    )  # fmt: skip
    assert result.returncode == 1, result.describe()
    data = json.loads(result.stdout)
    assert data["explanation"]["id"] == "module-missing"
    (suite,) = list(JUnitXml.fromfile(str(junit)))
    (case,) = list(suite)
    (failure,) = case.result
    assert isinstance(failure, Failure)
    expected = f"cause: {data['explanation']['cause']}; fix: {data['explanation']['fix']}"
    assert failure.message is not None and expected in failure.message
    assert failure.message.startswith("the job exited with 1; cause: the image has no module")
    assert expected.replace("|", "\\|") in summary.read_text()
