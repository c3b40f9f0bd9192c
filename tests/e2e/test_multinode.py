"""Multi-node `run` for real: two gpulaunch runs on loopback (host networking, CPU, gloo,
2 processes each, --nnodes 2) form one world of 4 and agree on an all-reduce."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from e2e.support import cli_env, gl_argv

pytestmark = pytest.mark.docker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("mode", ["container", "host"])
def test_two_nodes_on_loopback_form_one_world(app: Path, mode: str) -> None:
    port = _free_port()
    common = ["run", "--nproc", "2", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    common += ["--rdzv-id", f"e2e-{port}", "--network", "host"]
    if mode == "host":
        common.append("--no-container")
    procs = [
        subprocess.Popen(
            gl_argv(*common, "--node-rank", str(rank), "allreduce.py"),
            cwd=app,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
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
        assert "--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" in outputs[0][2]
    ranks: dict[str, tuple[str, str]] = {}
    for _, out, _ in outputs:
        for rank, world, total in re.findall(r"^rank (\d)/(\d) all_reduce=(\S+)$", out, re.M):
            ranks[rank] = (world, total)
    assert ranks == {str(r): ("4", "10.0") for r in range(4)}, outputs
