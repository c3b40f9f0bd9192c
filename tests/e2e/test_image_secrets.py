"""No secret is baked into an image by default, on the real engine (issue 23, item 2).

A token in `image.env` or in a requirements `--extra-index-url` line is refused before the
engine is asked (no image); the same token as a configured index (a BuildKit secret), in a
`--config` file and in credential files anywhere in the project builds an image whose
`docker history --no-trunc` and every saved layer hold no trace of it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support import BUILD_TIMEOUT_S, gl, temp_name, tiny_config, write_project

pytestmark = pytest.mark.docker

TOKEN = "glTOKEN-" + "b8e2d40c9a77"  # grep for this everywhere a secret must not be
CREDENTIAL_FILES = (
    ".netrc",
    "sub/.pypirc",
    "sub/deep/server.key",
    "sub/tls.pem",
    "sub/.aws/credentials",
    "sub/.docker/config.json",
    "sub/.git-credentials",
)


@pytest.fixture
def project(tmp_path: Path, docker_client: Any) -> Iterator[tuple[Path, str]]:
    name = temp_name("nosecret")
    config = tiny_config(name)
    config["image"]["requirements"] = "requirements.txt"
    config["image"]["env"] = {"GL_PLAIN": "visible"}
    project = write_project(tmp_path / "nosecret", "tiny", config)
    (project / "requirements.txt").write_text("# nothing to install\n")
    yield project, name
    with contextlib.suppress(Exception):
        for image in docker_client.images.list(name=name):
            docker_client.images.remove(image.id, force=True)


def _config(project: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((project / "gpulaunch.yaml").read_text()))


def _refused(project: Path, name: str, docker_client: Any, field: str) -> None:
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 2, result.describe()
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("gpulaunch: error:")]
    assert len(errors) == 1 and field in errors[0], result.describe()
    assert TOKEN not in result.stdout + result.stderr
    assert docker_client.images.list(name=name) == []


def test_a_token_in_image_env_or_a_requirements_index_line_is_refused(
    project: tuple[Path, str], docker_client: Any
) -> None:
    path, name = project
    config = _config(path)
    config["image"]["env"]["HF_TOKEN"] = TOKEN
    (path / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    _refused(path, name, docker_client, "image.env.HF_TOKEN")

    del config["image"]["env"]["HF_TOKEN"]
    (path / "gpulaunch.yaml").write_text(yaml.safe_dump(config))
    (path / "requirements.txt").write_text(
        f"--extra-index-url https://user:{TOKEN}@127.0.0.1:9/simple\n"
    )
    _refused(path, name, docker_client, "requirements.txt:1")


def _layers_with(tag: str, docker_client: Any, needle: bytes) -> list[str]:
    """Every file of `docker save` (layers, configs, manifests), unpacked when gzipped."""
    data = b"".join(docker_client.images.get(tag).save(named=tag))
    hits = []
    with tarfile.open(fileobj=io.BytesIO(data)) as saved:
        for member in saved.getmembers():
            handle = saved.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            blob = handle.read()
            if blob[:2] == b"\x1f\x8b":
                blob = gzip.decompress(blob)
            if needle in blob:
                hits.append(member.name)
    return hits


def test_no_token_in_history_or_any_layer(project: tuple[Path, str], docker_client: Any) -> None:
    path, _name = project
    config = _config(path)
    config["image"]["pip"] = {"extra_index_urls": [f"https://user:{TOKEN}@127.0.0.1:9/simple"]}
    config["launch"]["env"] = {"WANDB_API_KEY": TOKEN}
    conf = path / "prod.yaml"  # a --config file under another name (its folder is the project)
    conf.write_text(yaml.safe_dump(config))
    for rel in CREDENTIAL_FILES:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(f"password {TOKEN}\n")

    built = gl("build", "--config", str(conf), cwd=path, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    assert TOKEN not in built.stdout + built.stderr
    tag = built.stdout.strip().splitlines()[-1]

    history = subprocess.run(
        ["docker", "history", "--no-trunc", tag], capture_output=True, text=True, timeout=60
    )
    assert history.returncode == 0, history.stderr
    assert "pip install" in history.stdout and "GL_PLAIN" in history.stdout
    assert TOKEN not in history.stdout
    assert _layers_with(tag, docker_client, b"GL_PLAIN")  # the scan sees what is there
    assert _layers_with(tag, docker_client, TOKEN.encode()) == []
