#!/usr/bin/env python3
"""Per-rank NUMA binding wrapper: `python numa_bind.py train.py ARGS` (or `-m pkg ARGS`).

torchrun starts this once per local rank. It looks up LOCAL_RANK in the plan that
gpulaunch put in GPULAUNCH_NUMA_PLAN, pins the process to that rank's CPUs, asks
the kernel to prefer that rank's memory nodes, and then execs the real worker with
the same Python, so the worker keeps this process id (torchrun's signals still reach
it) and inherits the affinity before it starts any thread.

It runs with the image's Python, which gpulaunch does not control, so it stays a
single stdlib-only file that parses on Python 3.8.

Plan (compact JSON):
    {"version": 1, "mode": "node",
     "ranks": [{"rank": 0, "gpu": "0000:17:00.0", "numa_node": 0,
                "cpus": [0, 1], "mems": [0]}]}
"cpus" may also be a kernel CPU list string ("0-27,56-83"); "mems" may be omitted.

Environment:
    GPULAUNCH_NUMA_MEMPOLICY  preferred (default) | bind | off
    GPULAUNCH_NUMA_VERBOSE=1  one line per decision on stderr

Docker's default seccomp profile refuses set_mempolicy without CAP_SYS_NICE; that
refusal (EPERM) is expected and silent, because binding CPUs is the part that
matters and Linux allocates on the local node of the CPU anyway.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from typing import NamedTuple

PLAN_ENV = "GPULAUNCH_NUMA_PLAN"
VERBOSE_ENV = "GPULAUNCH_NUMA_VERBOSE"
MEMPOLICY_ENV = "GPULAUNCH_NUMA_MEMPOLICY"
PLAN_VERSION = 1
PREFIX = "gpulaunch-numa: "

MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_PREFERRED_MANY = 5  # Linux >= 5.15
SET_MEMPOLICY_NR = {
    "x86_64": 238,
    "aarch64": 237,
    "arm64": 237,
    "riscv64": 237,
    "ppc64le": 261,
    "ppc64": 261,
    "s390x": 270,
}


class PlanError(Exception):
    """The plan or LOCAL_RANK is malformed: a gpulaunch bug or a hand-edited plan."""


class Binding(NamedTuple):
    """One rank's entry of the plan, validated."""

    rank: int
    gpu: object
    cpus: list[int]
    mems: list[int]


def main(argv: list[str]) -> int:
    """Bind, then exec the worker; returns only when it cannot start it."""
    if not argv:
        _say("usage: numa_bind.py SCRIPT [ARGS…] | -m MODULE [ARGS…]")
        return 2
    verbose = os.environ.get(VERBOSE_ENV, "") not in ("", "0")
    try:
        policy = _mempolicy_choice(os.environ.get(MEMPOLICY_ENV, ""))
        binding = _find_binding(os.environ)
    except PlanError as exc:
        _say(str(exc))
        return 2
    if binding is not None:
        _apply(binding, policy, verbose)
    return _exec_python(argv)


def _find_binding(env: Mapping[str, str]) -> Binding | None:
    raw = env.get(PLAN_ENV, "").strip()
    if not raw:
        _say(f"{PLAN_ENV} is not set; running without CPU binding")
        return None
    try:
        plan = json.loads(raw)
    except ValueError as exc:
        raise PlanError(f"{PLAN_ENV} is not valid JSON: {exc}") from None
    ranks = _validate(plan)
    local_rank = env.get("LOCAL_RANK", "").strip()
    if not local_rank and len(ranks) == 1:
        # a single-process job runs without torchrun (no LOCAL_RANK): the plan's one rank is it
        return ranks[0]
    if not local_rank:
        _say("LOCAL_RANK is not set; running without CPU binding")
        return None
    try:
        rank = int(local_rank)
    except ValueError:
        raise PlanError(f"LOCAL_RANK={local_rank!r} is not an integer") from None
    for entry in ranks:
        if entry.rank == rank:
            return entry
    _say(f"rank {rank} is not in {PLAN_ENV}; running without CPU binding")
    return None


def _validate(plan: object) -> list[Binding]:
    if not isinstance(plan, dict):
        raise PlanError(f"{PLAN_ENV} must be a JSON object")
    if plan.get("version") != PLAN_VERSION:
        raise PlanError(f"{PLAN_ENV} version {plan.get('version')!r} is not supported (want 1)")
    ranks = plan.get("ranks")
    if not isinstance(ranks, list):
        raise PlanError(f"{PLAN_ENV}: 'ranks' must be a list")
    out = []
    for i, entry in enumerate(ranks):
        where = f"{PLAN_ENV}: ranks[{i}]"
        if not isinstance(entry, dict):
            raise PlanError(f"{where} must be an object")
        rank = entry.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise PlanError(f"{where}.rank must be an integer")
        cpus = entry.get("cpus")
        if isinstance(cpus, str):
            cpus = _parse_cpulist(cpus, where + ".cpus")
        cpu_list = _index_list(cpus, f"{where}.cpus must be a list of CPU numbers")
        mems = _index_list(entry.get("mems", []), f"{where}.mems must be a list of node numbers")
        out.append(Binding(rank, entry.get("gpu"), cpu_list, mems))
    return out


def _apply(binding: Binding, policy: str, verbose: bool) -> None:
    rank = binding.rank
    wanted = set(binding.cpus)
    allowed = os.sched_getaffinity(0)
    cpus = wanted & allowed
    if not cpus:
        _say(
            f"rank {rank}: none of CPUs {_fmt(wanted)} are allowed here "
            f"(allowed: {_fmt(allowed)}); running without CPU binding"
        )
    else:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as exc:
            _say(f"rank {rank}: sched_setaffinity({_fmt(cpus)}) failed: {exc.strerror}")
            cpus = set()
    note, expected = _set_mempolicy(binding.mems, policy)
    if note and (verbose or not expected):
        _say(f"rank {rank}: {note}")
    if verbose:
        partial = "" if cpus == wanted else f" (plan: {_fmt(wanted)})"
        _say(
            f"rank {rank} GPU {binding.gpu}: CPUs {_fmt(cpus) or 'unbound'}{partial}, "
            f"memory {policy} {_fmt(binding.mems) or '-'}"
        )


def _set_mempolicy(mems: list[int], policy: str) -> tuple[str, bool]:
    """Set the memory policy; returns ("", True) on success, else (reason, expected).

    Expected failures (seccomp's EPERM, no syscall, nodes outside the cpuset) are
    reported only in verbose mode; anything else means the plan does not fit.
    """
    if policy == "off" or not mems:
        return "", True
    allowed = _mems_allowed()
    nodes = sorted(set(mems) & allowed) if allowed is not None else sorted(set(mems))
    if not nodes:
        return f"memory nodes {_fmt(mems)} are not allowed here; memory policy not set", True
    nr = SET_MEMPOLICY_NR.get(platform.machine().lower())
    if nr is None:
        return f"set_mempolicy unsupported on {platform.machine()}; memory policy not set", True
    if policy == "bind":
        mode = MPOL_BIND
    else:
        mode = MPOL_PREFERRED if len(nodes) == 1 else MPOL_PREFERRED_MANY
    err = _syscall_set_mempolicy(nr, mode, nodes)
    if err == errno.EINVAL and mode == MPOL_PREFERRED_MANY:  # kernel < 5.15
        err = _syscall_set_mempolicy(nr, MPOL_PREFERRED, nodes[:1])
    if err == 0:
        return "", True
    reason = f"set_mempolicy({policy}, {_fmt(nodes)}): {os.strerror(err)}"
    if err in (errno.EPERM, errno.ENOSYS):  # Docker seccomp without CAP_SYS_NICE
        return reason + "; memory policy not set (--cap-add SYS_NICE allows it)", True
    return reason + "; memory policy not set", False


def _syscall_set_mempolicy(nr: int, mode: int, nodes: list[int]) -> int:
    """set_mempolicy(2) through libc's syscall(); glibc has no wrapper. Returns errno."""
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    words = max(nodes) // bits + 1
    mask = (ctypes.c_ulong * words)()
    for node in nodes:
        mask[node // bits] |= 1 << (node % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    # maxnode counts bits and the kernel drops the last one, hence the + 1 (as libnuma does)
    rc = libc.syscall(ctypes.c_long(nr), ctypes.c_int(mode), mask, ctypes.c_ulong(words * bits + 1))
    return 0 if rc == 0 else ctypes.get_errno()


def _mems_allowed() -> set[int] | None:
    """The memory nodes the cpuset allows; a policy naming others fails with EINVAL."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Mems_allowed_list:"):
                    return set(_parse_cpulist(line.split(":", 1)[1], "Mems_allowed_list"))
    except (OSError, PlanError):
        pass
    return None


def _mempolicy_choice(value: str) -> str:
    choice = value.strip().lower() or "preferred"
    if choice not in ("preferred", "bind", "off"):
        raise PlanError(f"{MEMPOLICY_ENV}={value!r}: expected preferred, bind or off")
    return choice


def _exec_python(argv: list[str]) -> int:
    python = sys.executable or "python3"
    # torchrun starts workers with `python -u`; keep that for the real worker.
    flags = ["-u"] if getattr(sys.stdout, "write_through", False) else []
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(python, [python, *flags, *argv])
    except OSError as exc:
        _say(f"cannot start {python}: {exc.strerror}")
    return 127


def _parse_cpulist(text: str, where: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise PlanError(f"{where}: bad CPU list {text.strip()!r}") from None
        if first < 0 or last < first:
            raise PlanError(f"{where}: bad CPU list {text.strip()!r}")
        cpus.extend(range(first, last + 1))
    return cpus


def _fmt(numbers: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8": consecutive numbers share their distance from their index."""
    parts = []
    for _, run in itertools.groupby(enumerate(sorted(set(numbers))), lambda p: p[1] - p[0]):
        items = [n for _, n in run]
        parts.append(str(items[0]) if len(items) == 1 else f"{items[0]}-{items[-1]}")
    return ",".join(parts)


def _index_list(value: object, problem: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise PlanError(problem)
    return list(value)


def _say(message: str) -> None:
    sys.stderr.write(PREFIX + message + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
