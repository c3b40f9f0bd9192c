"""`build --push` against a real registry (Debian's docker-registry on loopback, no TLS):
the digest gpulaunch records is the one the registry reports, and a run from
NAME@sha256:... works after every local copy of the image is gone (pulled back)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.support import gl, remove_project_images, temp_name, tiny_config, write_project

pytestmark = pytest.mark.docker
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A docker-registry on 127.0.0.1:<free port>, its storage in a temp folder."""
    tool = shutil.which("docker-registry")
    assert tool, "docker-registry is not installed (apt-get install docker-registry)"
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{address}'}}\n"
    )
    log = (root / "registry.log").open("w")
    proc = subprocess.Popen([tool, "serve", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                NO_PROXY.open(f"http://{address}/v2/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"docker-registry did not start:\n{(root / 'registry.log').read_text()}"
                    )
                time.sleep(0.3)
        yield address
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()
        log.close()


def _registry_digest(address: str, path: str, tag: str) -> str:
    accept = "application/vnd.docker.distribution.manifest.v2+json"
    request = urllib.request.Request(
        f"http://{address}/v2/{path}/manifests/{tag}", method="HEAD", headers={"Accept": accept}
    )
    with NO_PROXY.open(request, timeout=10) as answer:
        return str(answer.headers["Docker-Content-Digest"])


def test_push_records_the_registry_digest_and_runs_from_it(
    registry: str, tmp_path: Path, docker_client: Any
) -> None:
    name = temp_name("push")
    project = write_project(tmp_path / "tiny", "tiny", tiny_config(name))
    repository = f"{registry}/{name.replace('gltest-e2e-', 'gltest/')}"
    try:
        result = gl("build", "--push", repository, cwd=project, timeout=600)
        assert result.returncode == 0, result.describe()
        local_tag, reference = result.stdout.strip().splitlines()[-2:]
        hash_tag = local_tag.rpartition(":")[2]
        assert f"pushed {repository}:{hash_tag}" in result.stderr
        path = repository.split("/", 1)[1]
        digest = _registry_digest(registry, path, hash_tag)
        assert reference == f"{repository}@{digest}"
        record = json.loads((project / ".gpulaunch" / "pushed.json").read_text())
        assert record == {local_tag: reference}

        # every local copy gone: the run must pull it back from the registry
        image_id = docker_client.images.get(local_tag).id
        docker_client.images.remove(image_id, force=True)
        assert not docker_client.images.list(name=repository)
        run = gl("run", "--image", reference, "hello.py", cwd=project, timeout=300)
        assert run.returncode == 0, run.describe()
        assert docker_client.images.get(reference).id == image_id  # the same bytes came back

        exported = gl("export", "k8s", "hello.py", "--gpus", "0", cwd=project)
        assert exported.returncode == 0, exported.describe()
        assert f'image: "{reference}"' in exported.stdout  # every scalar quoted
    finally:
        for image in docker_client.images.list(name=repository):
            with contextlib.suppress(Exception):
                docker_client.images.remove(image.id, force=True)
        remove_project_images(docker_client, name)


def test_unreachable_registry_is_a_quick_clear_error(tmp_path: Path, docker_client: Any) -> None:
    name = temp_name("nopush")
    project = write_project(tmp_path / "tiny", "tiny", tiny_config(name))
    closed = f"127.0.0.1:{_free_port()}"
    try:
        built = gl("build", cwd=project, timeout=600)
        assert built.returncode == 0, built.describe()
        started = time.monotonic()
        result = gl("build", "--push", f"{closed}/gltest/nothing", cwd=project)
        elapsed = time.monotonic() - started
        assert result.returncode == 3, result.describe()
        first = result.stderr.splitlines()[-2]
        assert first.startswith(f"gpulaunch: error: registry {closed} does not answer"), first
        assert result.stderr.splitlines()[-1].startswith("hint: start the registry")
        assert elapsed < 20, elapsed
        assert not (project / ".gpulaunch" / "pushed.json").exists()
    finally:
        remove_project_images(docker_client, name)
