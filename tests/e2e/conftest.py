"""Real-engine tests (marker `docker`): one image built per session, shared by every test.

Like repo2docker's integration tests: a small project (tests/e2e/projects/app) is copied to a
temporary folder, given a gpulaunch.yaml for the local base image and the offline torch
wheelhouse, and built once through the real CLI; tests then run jobs in that image.

The engine is whatever DOCKER_HOST (or the default socket) points at. `require_docker()` skips
the tests without one, or fails them with GPULAUNCH_REQUIRE_DOCKER=1 (as `dev/test` and CI do).
The engine is shared with other checkouts running this suite at the same time, so a session
removes only what it made: single-test projects are named `gltest-e2e-<session token>-<what>-
<random>` (their images are removed when the session ends), and `gltest-e2e` containers count
as ours only when they mount this session's project folder (e2e.support.is_ours). The session
image (`gltest-e2e:gl-<hash>`) is shared and kept, so a rerun reuses it; tags of older fixture
versions are left for a person to remove (`docker image ls gltest-e2e`): another checkout may
still be using one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_env import base_image, nogpu_docker_host, require_docker

from e2e.support import (
    BUILD_TIMEOUT_S,
    SESSION,
    SESSION_NAME,
    SessionImage,
    app_config,
    build_logs,
    gl,
    link_wheels,
    project_containers,
    reap,
    remove_project_images,
    temp_project_names,
    write_project,
)


@pytest.fixture(scope="session", autouse=True)
def _session_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One GPULAUNCH_STATE_DIR (so one record key) for the session, set before any module
    fixture copies the environment: module-scoped projects keep records that later tests
    read, and records are sealed with the key found there."""
    path = tmp_path_factory.mktemp("state")
    patch = pytest.MonkeyPatch()
    patch.setenv("GPULAUNCH_STATE_DIR", str(path))
    yield path
    patch.undo()


@pytest.fixture(autouse=True)
def _one_record_key(
    _isolated_env: None, _session_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's own state folder (tests/conftest.py) gives way to the session's."""
    monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(_session_state))


@pytest.fixture(scope="session")
def docker_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The engine, required: skips without one, fails with GPULAUNCH_REQUIRE_DOCKER=1."""
    require_docker()
    SESSION.root = tmp_path_factory.getbasetemp().resolve()
    import docker
    from docker.errors import ImageNotFound

    client = docker.from_env(timeout=120)
    try:
        client.images.get(base_image())
    except ImageNotFound:
        pytest.fail(f"base image {base_image()} is missing; run dev/engine-setup", pytrace=False)
    yield client
    reap(client)
    for name in temp_project_names(client):
        remove_project_images(client, name)
    client.close()


@pytest.fixture(scope="session")
def nogpu_client(docker_client: Any) -> Iterator[Any]:
    """The second engine, started without the NVIDIA hook (dev/engine-setup)."""
    require_docker(nogpu_docker_host())
    import docker

    client = docker.DockerClient(base_url=nogpu_docker_host(), timeout=120)
    yield client
    for name in temp_project_names(client):
        for container in project_containers(client, name):
            container.remove(force=True)
        remove_project_images(client, name)
    client.close()


@pytest.fixture(scope="session")
def session_image(
    docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionImage]:
    """The shared image: tests/e2e/projects/app built once through `gpulaunch build`."""
    project = write_project(tmp_path_factory.mktemp("e2e") / "app", "app", app_config(SESSION_NAME))
    link_wheels(project)
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    if result.returncode != 0:
        pytest.fail(f"the session image did not build\n{result.describe()}", pytrace=False)
    tag = result.stdout.strip().splitlines()[-1]
    yield SessionImage(tag, project, result, build_logs(project))


@pytest.fixture
def app(session_image: SessionImage) -> Path:
    """The session project folder: the cwd of `gpulaunch run` in most tests."""
    return session_image.project


@pytest.fixture(autouse=True)
def _no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test (and its own assertions), remove what a failed test left behind."""
    yield
    if "docker_client" in request.fixturenames:
        reap(request.getfixturevalue("docker_client"))
