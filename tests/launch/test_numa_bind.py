"""numa_bind.py run for real: affinity, memory policy and exec are checked in the worker."""

from __future__ import annotations

import ast
import ctypes
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from gpulaunch.cpulist import current_allowed_cpus
from gpulaunch.launch.numa import plan_numa
from gpulaunch.launch.topology import discover

WRAPPER = REPO / "gpulaunch" / "launch" / "numa_bind.py"
TINY2 = REPO / "tests" / "fixtures" / "sysfs" / "tiny2"
ALLOWED = sorted(os.sched_getaffinity(0))

WORKER = """\
import json, os, sys
try:
    with open("/proc/self/numa_maps") as f:
        policy = f.readline().split()[1]
except OSError:
    policy = None
print(json.dumps({
    "cpus": sorted(os.sched_getaffinity(0)),
    "argv": sys.argv,
    "pid": os.getpid(),
    "write_through": sys.stdout.write_through,
    "policy": policy,
}))
sys.exit(int(os.environ.get("WORKER_EXIT", "0")))
"""

needs_two_cpus = pytest.mark.skipif(
    not {0, 1} <= set(ALLOWED), reason="needs CPUs 0 and 1 in this process's affinity"
)


def _set_mempolicy_works() -> bool:
    if platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    # MPOL_DEFAULT (0) with no nodes only probes that the call is permitted
    ok = libc.syscall(ctypes.c_long(238), ctypes.c_int(0), None, ctypes.c_ulong(0)) == 0
    return ok and os.path.exists("/proc/self/numa_maps")


needs_mempolicy = pytest.mark.skipif(
    not _set_mempolicy_works(), reason="set_mempolicy or /proc/self/numa_maps unavailable"
)


def plan(*ranks: dict[str, Any]) -> str:
    return json.dumps({"version": 1, "mode": "node", "ranks": list(ranks)})


def rank(r: int, cpus: Any, mems: list[int] | None = None) -> dict[str, Any]:
    return {
        "rank": r,
        "gpu": f"0000:{r:02x}:00.0",
        "numa_node": 0,
        "cpus": cpus,
        "mems": mems or [],
    }


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def clean_env(**extra: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "PYTHONUNBUF"))}
    env.pop("LOCAL_RANK", None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run(
    args: list[str],
    *,
    python_flags: tuple[str, ...] = (),
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    extra: dict[str, str] | None = None,
    **env: str | None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *python_flags, str(WRAPPER), *args],
        env=clean_env(**(extra or {}), **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec_fn,
    )


def report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- binding


@needs_two_cpus
@pytest.mark.parametrize("cpu", [0, 1])
def test_pins_the_worker_to_the_rank_cpus(worker: Path, cpu: int) -> None:
    proc = run(
        [str(worker)],
        LOCAL_RANK=str(cpu),
        GPULAUNCH_NUMA_PLAN=plan(rank(0, [0]), rank(1, [1])),
    )
    assert proc.returncode == 0, proc.stderr
    assert report(proc)["cpus"] == [cpu]
    assert proc.stderr == ""


@needs_two_cpus
def test_cpus_may_be_a_cpulist_string(worker: Path) -> None:
    proc = run([str(worker)], LOCAL_RANK="0", GPULAUNCH_NUMA_PLAN=plan(rank(0, "1")))
    assert report(proc)["cpus"] == [1]


@needs_two_cpus
def test_module_form(tmp_path: Path) -> None:
    (tmp_path / "affmod.py").write_text(WORKER)
    proc = run(
        ["-m", "affmod", "--lr", "0.1"],
        cwd=tmp_path,
        LOCAL_RANK="0",
        GPULAUNCH_NUMA_PLAN=plan(rank(0, [1])),
    )
    assert proc.returncode == 0, proc.stderr
    out = report(proc)
    assert out["cpus"] == [1]
    assert out["argv"] == [str(tmp_path / "affmod.py"), "--lr", "0.1"]


def test_argv_passes_through_unchanged(worker: Path) -> None:
    args = ["--name", "two words", "-m", "x", "--flag=a=b", "", "ü"]
    proc = run([str(worker), *args], LOCAL_RANK="0", GPULAUNCH_NUMA_PLAN=plan(rank(0, ALLOWED)))
    assert report(proc)["argv"] == [str(worker), *args]


def test_exit_code_passes_through(worker: Path) -> None:
    proc = run(
        [str(worker)], LOCAL_RANK="0", GPULAUNCH_NUMA_PLAN=plan(rank(0, ALLOWED)), WORKER_EXIT="7"
    )
    assert proc.returncode == 7


def test_worker_keeps_the_wrapper_pid(worker: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), str(worker)],
        env=clean_env(LOCAL_RANK="0", GPULAUNCH_NUMA_PLAN=plan(rank(0, ALLOWED))),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, _ = proc.communicate(timeout=60)
    assert json.loads(stdout)["pid"] == proc.pid  # exec, not a child: signals reach the worker


def test_unbuffered_flag_is_kept(worker: Path) -> None:
    env = {"LOCAL_RANK": "0", "GPULAUNCH_NUMA_PLAN": plan(rank(0, ALLOWED))}
    assert report(run([str(worker)], python_flags=("-u",), extra=env))["write_through"] is True
    assert report(run([str(worker)], extra=env))["write_through"] is False


# --------------------------------------------------------------------------- running unbound


def test_missing_rank_runs_unbound(worker: Path) -> None:
    proc = run([str(worker)], LOCAL_RANK="5", GPULAUNCH_NUMA_PLAN=plan(rank(0, [0])))
    assert proc.returncode == 0
    assert report(proc)["cpus"] == ALLOWED
    assert proc.stderr == (
        "gpulaunch-numa: rank 5 is not in GPULAUNCH_NUMA_PLAN; running without CPU binding\n"
    )


def test_missing_plan_runs_unbound(worker: Path) -> None:
    proc = run([str(worker)], LOCAL_RANK="0")
    assert proc.returncode == 0
    assert report(proc)["cpus"] == ALLOWED
    assert "GPULAUNCH_NUMA_PLAN is not set; running without CPU binding" in proc.stderr


def test_missing_local_rank_runs_unbound_when_the_plan_has_several_ranks(worker: Path) -> None:
    proc = run([str(worker)], GPULAUNCH_NUMA_PLAN=plan(rank(0, [0]), rank(1, [1])))
    assert report(proc)["cpus"] == ALLOWED
    assert "LOCAL_RANK is not set; running without CPU binding" in proc.stderr


def test_a_single_process_job_takes_the_plans_one_rank(worker: Path) -> None:
    """One GPU runs without torchrun, so no LOCAL_RANK: seen on a real H200 host, where the
    job ran unbound although the plan named its CPUs."""
    cpu = sorted(ALLOWED)[-1]
    proc = run([str(worker)], GPULAUNCH_NUMA_PLAN=plan(rank(0, [cpu])))
    assert proc.returncode == 0, proc.stderr
    assert report(proc)["cpus"] == [cpu]
    assert "LOCAL_RANK" not in proc.stderr


def test_cpus_outside_the_allowed_set_run_unbound(worker: Path) -> None:
    proc = run([str(worker)], LOCAL_RANK="0", GPULAUNCH_NUMA_PLAN=plan(rank(0, [4000, 4001])))
    assert proc.returncode == 0
    assert report(proc)["cpus"] == ALLOWED
    assert "rank 0: none of CPUs 4000-4001 are allowed here" in proc.stderr


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"GPULAUNCH_NUMA_PLAN": "{not json", "LOCAL_RANK": "0"},
            "GPULAUNCH_NUMA_PLAN is not valid JSON: ",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": '{"version": 2, "ranks": []}', "LOCAL_RANK": "0"},
            "GPULAUNCH_NUMA_PLAN version 2 is not supported (want 1)",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": plan(rank(0, ["a"])), "LOCAL_RANK": "0"},
            "GPULAUNCH_NUMA_PLAN: ranks[0].cpus must be a list of CPU numbers",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": plan(rank(0, "0-x")), "LOCAL_RANK": "0"},
            "GPULAUNCH_NUMA_PLAN: ranks[0].cpus: bad CPU list '0-x'",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": "[1]", "LOCAL_RANK": "0"},
            "GPULAUNCH_NUMA_PLAN must be a JSON object",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": plan(rank(0, [0])), "LOCAL_RANK": "zero"},
            "LOCAL_RANK='zero' is not an integer",
        ),
        (
            {"GPULAUNCH_NUMA_PLAN": plan(rank(0, [0])), "GPULAUNCH_NUMA_MEMPOLICY": "interleave"},
            "GPULAUNCH_NUMA_MEMPOLICY='interleave': expected preferred, bind or off",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    worker: Path, tmp_path: Path, env: dict[str, str], message: str
) -> None:
    proc = run([str(worker)], extra=env)
    assert proc.returncode == 2
    assert proc.stdout == ""  # the worker never ran
    assert proc.stderr.startswith("gpulaunch-numa: " + message)
    assert proc.stderr.count("\n") == 1


def test_no_arguments_is_a_usage_error() -> None:
    proc = run([])
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulaunch-numa: usage: numa_bind.py SCRIPT")


# --------------------------------------------------------------------------- memory policy


@needs_mempolicy
@pytest.mark.parametrize(
    ("choice", "policy"), [(None, "prefer:0"), ("bind", "bind:0"), ("off", "default")]
)
def test_memory_policy(worker: Path, choice: str | None, policy: str) -> None:
    proc = run(
        [str(worker)],
        LOCAL_RANK="0",
        GPULAUNCH_NUMA_PLAN=plan(rank(0, ALLOWED, [0])),
        GPULAUNCH_NUMA_MEMPOLICY=choice,
    )
    assert proc.stderr == ""
    assert report(proc)["policy"] == policy


@needs_mempolicy
def test_memory_nodes_outside_the_cpuset_are_skipped(worker: Path) -> None:
    env = {"LOCAL_RANK": "0", "GPULAUNCH_NUMA_PLAN": plan(rank(0, ALLOWED, [63]))}
    quiet = run([str(worker)], extra=env)
    assert quiet.stderr == ""
    assert report(quiet)["policy"] == "default"
    loud = run([str(worker)], GPULAUNCH_NUMA_VERBOSE="1", extra=env)
    assert "rank 0: memory nodes 63 are not allowed here; memory policy not set\n" in loud.stderr


def _deny_set_mempolicy() -> None:
    """Install a seccomp filter like Docker's default: set_mempolicy -> EPERM."""
    libc = ctypes.CDLL(None, use_errno=True)

    class SockFilter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    ld_nr, jeq, ret = 0x20, 0x15, 0x06
    prog = (SockFilter * 4)(
        SockFilter(ld_nr, 0, 0, 0),  # A = seccomp_data.nr
        SockFilter(jeq, 0, 1, 238),  # set_mempolicy on x86_64?
        SockFilter(ret, 0, 0, 0x00050000 | 1),  # SECCOMP_RET_ERRNO | EPERM
        SockFilter(ret, 0, 0, 0x7FFF0000),  # SECCOMP_RET_ALLOW
    )
    fprog = SockFprog(4, prog)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


@needs_mempolicy
def test_seccomp_refusal_is_silent_unless_verbose(worker: Path) -> None:
    cpu = ALLOWED[-1]
    env = {"LOCAL_RANK": "0", "GPULAUNCH_NUMA_PLAN": plan(rank(0, [cpu], [0]))}
    quiet = run([str(worker)], preexec_fn=_deny_set_mempolicy, extra=env)
    assert quiet.returncode == 0
    assert quiet.stderr == ""
    out = report(quiet)
    assert out["cpus"] == [cpu]  # CPU binding still happened
    assert out["policy"] == "default"
    loud = run([str(worker)], preexec_fn=_deny_set_mempolicy, GPULAUNCH_NUMA_VERBOSE="1", extra=env)
    assert report(loud)["cpus"] == [cpu]
    lines = loud.stderr.splitlines()
    assert lines == [
        "gpulaunch-numa: rank 0: set_mempolicy(preferred, 0): Operation not permitted; "
        "memory policy not set (--cap-add SYS_NICE allows it)",
        f"gpulaunch-numa: rank 0 GPU 0000:00:00.0: CPUs {cpu}, memory preferred 0",
    ]


# --------------------------------------------------------------------------- two ranks at once


@needs_two_cpus
def test_two_ranks_from_the_tiny2_plan(worker: Path) -> None:
    topo = discover({"GPULAUNCH_SYSFS_ROOT": str(TINY2)})
    numa = plan_numa(topo, topo.gpus, "node", allowed_cpus=current_allowed_cpus())
    assert [r.cpus for r in numa.ranks] == [(0,), (1,)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRAPPER), str(worker), f"--rank={r}"],
            env=clean_env(LOCAL_RANK=str(r), **numa.to_env()),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    for binding, proc, (stdout, stderr) in zip(numa.ranks, procs, results, strict=True):
        assert proc.returncode == 0, stderr
        out = json.loads(stdout)
        assert out["cpus"] == list(binding.cpus)
        assert out["argv"][1] == f"--rank={binding.rank}"


# --------------------------------------------------------------------------- the file itself


def test_wrapper_parses_as_python_3_8_and_imports_only_the_stdlib() -> None:
    source = WRAPPER.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
