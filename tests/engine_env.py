"""Where the tests find the real Docker engine and what `dev/engine-setup` prepared in it.

Every value comes from an environment variable (written by `dev/engine-setup` to
`/var/cache/gpulaunch/test-env`, which `dev/test` sources) with the setup script's default.
Nothing here runs at import time: each function reads the environment when it is called.

The main engine has a *stub* `nvidia-container-runtime-hook` on its PATH: it accepts
`--gpus` requests but is a stand-in, not a GPU. The engine at `nogpu_docker_host()` has no
hook, so it answers GPU requests with the "could not select device driver" error.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_BASE_IMAGE = "local/base:bookworm"
DEFAULT_BUSYBOX_IMAGE = "gpulaunch-test/busybox:latest"
DEFAULT_WHEELHOUSE = "/var/cache/gpulaunch/wheels"
DEFAULT_NOGPU_HOST = "unix:///run/gpulaunch-nogpu/docker.sock"
PING_TIMEOUT_S = 3


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def base_image() -> str:
    """Debian bookworm image with python3, python3-venv and pip (no registry needed)."""
    return _env("GPULAUNCH_TEST_BASE_IMAGE", DEFAULT_BASE_IMAGE)


def busybox_image() -> str:
    """A 2 MB busybox image present in both engines (sh, true, echo, sleep, id, cat, env...)."""
    return _env("GPULAUNCH_TEST_BUSYBOX_IMAGE", DEFAULT_BUSYBOX_IMAGE)


def wheelhouse() -> Path:
    """Directory with the CPU torch wheel and its dependencies, for `--no-index` installs."""
    return Path(_env("GPULAUNCH_TEST_WHEELHOUSE", DEFAULT_WHEELHOUSE))


def nogpu_docker_host() -> str:
    """DOCKER_HOST of the second engine, started without any NVIDIA hook."""
    return _env("GPULAUNCH_TEST_NOGPU_HOST", DEFAULT_NOGPU_HOST)


def docker_required() -> bool:
    """True when a missing engine must fail the tests instead of skipping them."""
    return os.environ.get("GPULAUNCH_REQUIRE_DOCKER", "") not in ("", "0", "false", "no")


def docker_available(base_url: str | None = None) -> bool:
    """Whether an engine answers a ping within a few seconds.

    `base_url` None means the environment's engine (DOCKER_HOST or the default socket).
    """
    try:
        import docker  # lazily: keeps collection fast when no docker test runs
    except ImportError:
        return False
    try:
        if base_url is None:
            client = docker.from_env(timeout=PING_TIMEOUT_S)
        else:
            client = docker.DockerClient(base_url=base_url, timeout=PING_TIMEOUT_S)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


def require_docker(base_url: str | None = None) -> None:
    """Skip the calling test when no engine answers, or fail it if GPULAUNCH_REQUIRE_DOCKER=1."""
    import pytest

    if docker_available(base_url):
        return
    where = base_url or os.environ.get("DOCKER_HOST") or "the default Docker socket"
    message = f"no Docker engine answers at {where}; run dev/engine-setup"
    if docker_required():
        pytest.fail(f"{message} (GPULAUNCH_REQUIRE_DOCKER is set)", pytrace=False)
    pytest.skip(message)
