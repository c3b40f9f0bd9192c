"""The run flags and config values that become parts of a run: mounts (what they may expose
is launch/exposure.py's), `--env`, and the script command line (GPU requests are
gpurequest.GpuRequest).
One validator serves a flag and its config field.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from gpulaunch.engine.runspec import WORKSPACE, Mount
from gpulaunch.errors import ConfigError
from gpulaunch.launch.options import RunOptions
from gpulaunch.textcheck import ascii_int, env_item, single_line, split_mount


def parse_mount(spec: str, project: Path, where: str) -> Mount:
    """`host:container[:ro|rw]`; the host path must exist and /workspace must stay the project.

    The resolved host path must also be printable in docker's comma-separated --mount
    syntax, so the dry-run line and the SDK call mount the same thing.
    """
    try:
        host, norm, read_only = split_mount(spec)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    source = (project / os.path.expanduser(host)).resolve()
    if not source.exists():
        raise ConfigError(f"{where}: host path {host!r} does not exist")
    try:
        single_line(str(source))
    except ValueError as err:
        raise ConfigError(f"{where}: host path {str(source)!r} {err}") from None
    if "," in str(source) or '"' in str(source):
        raise ConfigError(f"{where}: host path {str(source)!r} contains a comma or quote")
    if norm == WORKSPACE or WORKSPACE.startswith(norm.rstrip("/") + "/") or norm == "/":
        raise ConfigError(f"{where}: {norm!r} would hide the project mounted at {WORKSPACE}")
    return Mount(str(source), norm, read_only)


def parse_env_flags(values: list[str]) -> dict[str, str]:
    """--env KEY=VALUE with the same rules as the config's `env:` maps."""
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env: {item!r} is not NAME=VALUE")
        try:
            env_item(key, value)
        except ValueError as err:
            raise ConfigError(f"--env: {err}") from None
        env[key] = value
    return env


# What torchrun gives each worker of a one-process group, given directly instead: torchrun
# around one process adds ~35 lines of its own to any failure, turns the exit code into 1 and
# hides the process's last lines from the explainer. MASTER_PORT=0: rank 0's store binds a
# port the kernel picks where the job runs (torchrun --standalone does the same), so no port
# chosen here can be taken there, on any network.
ONE_RANK_ENV = (
    ("RANK", "0"),
    ("LOCAL_RANK", "0"),
    ("WORLD_SIZE", "1"),
    ("LOCAL_WORLD_SIZE", "1"),
    ("GROUP_RANK", "0"),
    ("MASTER_ADDR", "127.0.0.1"),
    ("MASTER_PORT", "0"),
)


def script_command(
    script: str,
    args: list[str],
    project: Path,
    cwd: Path,
    nproc: int,
    wrapper: str | None,
    rdzv: list[str] | None = None,
) -> list[str]:
    """python SCRIPT (one process), torchrun --standalone --nproc-per-node N SCRIPT (N > 1;
    N = 0: `gpu`, one per GPU the container sees), or with `rdzv` (multi-node torchrun
    options) torchrun RDZV --nproc-per-node N SCRIPT.

    One process is one process: never torchrun. A script that calls init_process_group
    itself gets torchrun's worker variables instead (`env RANK=0 ... python SCRIPT`; under
    bare python its env:// rendezvous finds no RANK/WORLD_SIZE/MASTER_ADDR and fails at
    once, seen with examples/ddp at --gpus 1 on a real H200 host), so its output, last lines
    and exit code are its own, as without gpulaunch."""
    path, rel = project_script(script, project, cwd, "script")
    target = str(PurePosixPath(WORKSPACE) / rel)
    worker = [wrapper, target, *args] if wrapper else [target, *args]
    if rdzv:
        return ["torchrun", *rdzv, "--nproc-per-node", str(nproc), *worker]
    if nproc != 1:  # 0: one per GPU, their count known only where the job runs
        return ["torchrun", "--standalone", "--nproc-per-node", str(nproc or "gpu"), *worker]
    plain = ["python", *worker]
    if "init_process_group(" in (_script_text(path) or ""):
        return ["env", *(f"{name}={value}" for name, value in ONE_RANK_ENV), *plain]
    return plain


def project_script(script: str, project: Path, cwd: Path, where: str) -> tuple[Path, str]:
    """SCRIPT (relative to `cwd`) as a file of the project: (its resolved path, its POSIX path
    relative to the project, which the image holds under /workspace)."""
    path = (cwd / script).resolve()
    if not path.is_file():
        raise ConfigError(f"{where}: {script!r} not found")
    try:
        return path, path.relative_to(project.resolve()).as_posix()
    except ValueError:
        raise ConfigError(f"{where}: {script!r} is outside the project {project}") from None


def _script_text(script: Path) -> str | None:
    """What the script says, for the two guesses below; None when it cannot be read."""
    try:
        return script.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def module_command(command: list[str], nproc: int) -> list[str]:
    """`-- python -m pkg.mod ARGS` with several processes: `torchrun -m pkg.mod ARGS` (one
    process per rank), never one plain python."""
    is_module = len(command) >= 3 and command[0] in ("python", "python3") and command[1] == "-m"
    if nproc > 1 and is_module:
        head = ["torchrun", "--standalone", "--nproc-per-node", str(nproc)]
        return [*head, "-m", *command[2:]]
    return command


# Words a script that really runs as several ranks shows (itself or through a framework).
_DISTRIBUTED_SIGNS = (
    "torch.distributed",
    "init_process_group",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "DistributedDataParallel",
    "accelerate",
    "lightning",
    "deepspeed",
    "transformers",
    "dist.",
)


def single_process_warning(script: Path, nproc: int) -> str | None:
    """A warning when several processes would start a script that shows no sign of
    distributed use: each would run the whole script as an identical copy."""
    text = _script_text(script) if nproc > 1 else None
    if text is None or any(sign in text for sign in _DISTRIBUTED_SIGNS):
        return None
    return (
        f"{script.name} shows no sign of distributed use (torch.distributed, LOCAL_RANK, "
        f"accelerate, lightning ...): each of the {nproc} processes runs the whole script"
    )


MAX_NODES = 4096
_RDZV_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]{1,63})*")


def parse_endpoint(value: str) -> tuple[str, int]:
    """--rdzv-endpoint HOST:PORT (a name, an IPv4 address or [IPv6]) with a port 1-65535."""
    import ipaddress

    host, sep, port_text = value.rpartition(":")
    port = ascii_int(port_text)
    if not sep or not host or port is None or not 1 <= port <= 65535:
        raise ConfigError(f"--rdzv-endpoint: {value!r} is not HOST:PORT (port 1-65535)")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host.removeprefix("[").removesuffix("]"))
        except ValueError:
            raise ConfigError(f"--rdzv-endpoint: {host!r} is not an IPv6 address") from None
    elif not _HOSTNAME.fullmatch(host):
        raise ConfigError(f"--rdzv-endpoint: {host!r} is not a host name or address")
    return host, port


def parse_local_addr(value: str) -> str:
    """--local-addr: this node's host name or IP address (IPv6 without brackets)."""
    import ipaddress

    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(value):
        raise ConfigError(f"--local-addr: {value!r} is not a host name or IP address")
    return value


def rdzv_options(opts: RunOptions, default_id: str) -> list[str] | None:
    """torchrun's c10d rendezvous options for `run --nnodes N` (checked: exit 2 naming the
    flag); None for a run on one node."""
    nnodes, node_rank = opts.nnodes, opts.node_rank
    multi = (node_rank, opts.rdzv_endpoint, opts.rdzv_id, opts.local_addr)
    if nnodes is None:
        if any(v is not None for v in multi):
            raise ConfigError("--node-rank/--rdzv-endpoint/--rdzv-id/--local-addr: need --nnodes N")
        return None
    if not 1 <= nnodes <= MAX_NODES:
        raise ConfigError(f"--nnodes: {nnodes} is not between 1 and {MAX_NODES}")
    if node_rank is not None and not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank: {node_rank} is not below --nnodes {nnodes} (0-based)")
    if opts.rdzv_endpoint is None:
        raise ConfigError(
            "--rdzv-endpoint: required with --nnodes (HOST:PORT of the first node, same on all)"
        )
    host, port = parse_endpoint(opts.rdzv_endpoint)
    ident = opts.rdzv_id or default_id
    if not _RDZV_ID.fullmatch(ident):
        raise ConfigError(f"--rdzv-id: {ident!r} must be letters, digits, _ . - (at most 128)")
    argv = ["--nnodes", str(nnodes), "--rdzv-backend", "c10d"]
    argv += ["--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", ident]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    if opts.local_addr is not None:  # the node's name in the rendezvous (default: its FQDN)
        argv += ["--local-addr", parse_local_addr(opts.local_addr)]
    return argv


def host_python(config: Any, project: Path, env: dict[str, str]) -> str:
    """--no-container's interpreter: the project's, never gpulaunch's own (pipx installs
    gpulaunch in a venv without torch). launch.python (a path, relative to the project, or a
    command on PATH), else the active venv ($VIRTUAL_ENV), else the project's .venv, else
    python3 on PATH."""
    import shutil

    wanted: str | None = config.launch.python
    if wanted is not None:
        if "/" in wanted:
            path = Path(os.path.abspath(project / os.path.expanduser(wanted)))
            if not os.access(path, os.X_OK) or path.is_dir():
                raise ConfigError(f"launch.python: {str(path)!r} is not an executable file")
            return str(path)
        found = shutil.which(wanted, path=env.get("PATH"))
        if found is None:
            raise ConfigError(f"launch.python: {wanted!r} is not on PATH")
        return found
    for folder in (env.get("VIRTUAL_ENV"), str(project / ".venv")):
        if folder and os.access(Path(folder) / "bin" / "python", os.X_OK):
            return str(Path(folder) / "bin" / "python")
    found = shutil.which("python3", path=env.get("PATH"))
    if found is None:
        raise ConfigError("run --no-container: no python3 on PATH; set launch.python")
    return found


def host_paths(command: list[str], project: Path, python: str) -> list[str]:
    """Container paths (/workspace/...) back to host paths for --no-container."""
    out = []
    for part in command:
        if part == WORKSPACE or part.startswith(WORKSPACE + "/"):
            part = str(project) + part[len(WORKSPACE) :]
        out.append(part)
    at = 1 if out[:1] == ["env"] else 0  # env NAME=VALUE ... python (one rank of a group)
    while at and at < len(out) and "=" in out[at]:
        at += 1
    if out[at : at + 1] == ["python"]:
        out[at] = python
    elif out[:1] == ["torchrun"]:
        out[:1] = [python, "-m", "torch.distributed.run"]
    return out
