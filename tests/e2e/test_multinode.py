"""Multi-node `run` for real: two gpulaunch runs on loopback (host networking, CPU, gloo,
2 processes each, --nnodes 2) form one world of 4 and agree on an all-reduce."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.support import cli_env, gl_argv

pytestmark = pytest.mark.docker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    """Whether something listens on the port (our bind fails), without talking to it."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@pytest.mark.parametrize("mode", ["container", "host"])
def test_two_nodes_on_loopback_form_one_world(app: Path, mode: str) -> None:
    """`container`: both nodes in containers on one host network. torchrun names a node by
    its address (default: the FQDN) and PID; both agents have the host's name and the same low
    PID in their containers, so without `--local-addr` the rendezvous takes them for one node
    and waits forever (seen here; on a real cluster the hostnames differ). Node 1 therefore
    says `--local-addr 127.0.0.2` (all of 127/8 is loopback). `host`: --no-container."""
    port = _free_port()
    common = ["run", "--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    common += ["--rdzv-id", f"e2e-{port}", "--network", "host"]

    def start(rank: int) -> subprocess.Popen[str]:
        where = ["--no-container"] if mode == "host" else []
        if mode == "container" and rank == 1:
            where = ["--local-addr", "127.0.0.2"]
        return subprocess.Popen(
            gl_argv(
                *common,
                *where,
                "--node-rank",
                str(rank),
                "allreduce.py",
            ),
            cwd=app,
            env=cli_env(VIRTUAL_ENV=sys.prefix),  # --no-container: this venv's python and torch
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    # Both "nodes" share one host here, so both see the endpoint as their own address and
    # would race to host the rendezvous store (on real nodes only the first node matches).
    # Node 1 therefore starts once node 0's store listens, as on a real cluster where the
    # first node is up first.
    procs = [start(0)]
    deadline = time.monotonic() + 180
    while procs[0].poll() is None and time.monotonic() < deadline:
        if _listening(port):  # not a connect: a silent client upsets the store
            break
        time.sleep(0.5)
    procs.append(start(1))
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for code, out, err in outputs:
        assert code == 0, f"exit {code}\n--- stdout\n{out}\n--- stderr\n{err}"
    if mode == "container":
        for _, _, err in outputs:
            assert "running gl-" in err  # each node ran in a container
            assert "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" in err
        assert "--local-addr 127.0.0.2" in outputs[1][2]
    ranks: dict[str, tuple[str, str]] = {}
    for _, out, _ in outputs:
        for rank, world, total in re.findall(r"^rank (\d)/(\d) all_reduce=(\S+)$", out, re.M):
            ranks[rank] = (world, total)
    assert ranks == {str(r): ("4", "10.0") for r in range(4)}, outputs
