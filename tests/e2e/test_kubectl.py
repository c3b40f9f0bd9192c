"""`submit k8s` with the real kubectl: no cluster can run here (kind/k3s images are not
reachable), so this proves the real tool gets the manifest and that a cluster that does not
answer is a quick exit 3 with kubectl's reason, not a hang."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from e2e.support import cli_env, gl

pytestmark = pytest.mark.docker
IMAGE = "127.0.0.1:5000/trainer@sha256:" + "0" * 64


def test_kubectl_apply_against_an_absent_cluster(app: Path, tmp_path: Path) -> None:
    assert shutil.which("kubectl"), "kubectl is not installed"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\n"
        f"clusters: [{{name: gone, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: gone, context: {cluster: gone, user: u}}]\n"
        "users: [{name: u, user: {token: not-a-secret}}]\n"
    )
    started = time.monotonic()
    result = gl(
        "submit",
        "k8s",
        "allreduce.py",
        "--image",
        IMAGE,
        "--gpus",
        "0",
        cwd=app,
        env=cli_env(KUBECONFIG=str(kubeconfig)),
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.describe()
    assert result.stderr.startswith("gpulaunch: error: kubectl apply failed:"), result.describe()
    assert "connection refused" in result.stderr, result.describe()
    assert elapsed < 60, elapsed
