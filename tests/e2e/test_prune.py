"""`gpulaunch prune` on the real engine: it removes only this project's own unused images.

One temp project (its name is this session's: every prune here is scoped to it, never
--all-projects, as the engine is shared) gets six builds; a running container uses one, a
stopped container another, a sealed run record names a third, the newest two are kept by
--keep 2; one image is left to remove. Two look-alikes are never touched: NAME:gl-<hash>
without the managed label, and an image with both labels under another repository."""

from __future__ import annotations

import io
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from engine_env import busybox_image

from e2e.support import BUILD_TIMEOUT_S, cli_env, gl, temp_name, tiny_config, write_project

pytestmark = pytest.mark.docker


def _build(project: Path, name: str, step: str) -> str:
    config = tiny_config(name, run=[step])
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    time.sleep(1.1)  # the engine's creation times are in seconds: one build per second
    return result.stdout.strip().splitlines()[-1]


def _look_alike(client: Any, tag: str, labels: dict[str, str]) -> str:
    """An image gpulaunch did not build (from busybox, labels by hand), tagged `tag`."""
    lines = [f"FROM {busybox_image()}", f"LABEL nonce={secrets.token_hex(4)}"]
    lines += [f"LABEL {key}={value}" for key, value in labels.items()]
    dockerfile = io.BytesIO("\n".join(lines).encode())
    image, _ = client.images.build(fileobj=dockerfile, tag=tag, rm=True, network_mode="none")
    return str(image.id)


def _seal_record(project: Path, run_id: str, tag: str, image_id: str) -> None:
    from gpulaunch.records.seal import seal
    from gpulaunch.records.store import utc_now

    runs = project / ".gpulaunch" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    record = {
        "schema_version": 1,
        "id": run_id,
        "started_at": utc_now(),
        "image": {"tag": tag, "id": image_id},
    }
    (runs / f"{run_id}.json").write_text(json.dumps(seal(record)))


def _present(client: Any, ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


def _prune(project: Path, *args: str) -> dict[str, Any]:
    result = gl("prune", "--json", *args, cwd=project)
    assert result.returncode == 0, result.describe()
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_prune_removes_only_our_unused_images(docker_client: Any, tmp_path: Path) -> None:
    name = temp_name("prune")
    project = write_project(tmp_path / "prune", "tiny", tiny_config(name))
    label = {"io.gpulaunch.project": name}
    unlabelled = _look_alike(docker_client, f"{name}:gl-000000000000", label)
    other_repo = f"{name}-copy:gl-111111111111"
    copied = _look_alike(docker_client, other_repo, {**label, "io.gpulaunch.managed": "true"})
    running, stopped, recorded, old, new1, new2 = (
        _build(project, name, f"echo {step}") for step in range(6)
    )
    _seal_record(project, "20261201-000000-abcdef", recorded, docker_client.images.get(recorded).id)
    containers = []
    try:
        job = docker_client.containers.run(
            running, ["sleep", "300"], detach=True, network_mode="none", name=f"{name}-running"
        )
        containers.append(job)
        done = docker_client.containers.run(
            stopped, ["true"], detach=True, network_mode="none", name=f"{name}-stopped"
        )
        containers.append(done)
        done.wait(timeout=60)

        planned = _prune(project, "--keep", "2", "--dry-run")
        assert [(d["tags"], d["outcome"]) for d in planned["removed"]] == [([old], "would remove")]
        assert {d["tags"][0]: d["reasons"] for d in planned["kept"]} == {
            new2: ["among the newest 2", f"tagged {name}:latest"],
            new1: ["among the newest 2"],
            recorded: ["named by run record 20261201-000000-abcdef"],
            stopped: [f"used by container {name}-stopped (exited)"],
            running: [f"used by container {name}-running (running)"],
        }
        assert _present(docker_client, old), "--dry-run removed an image"

        done_report = _prune(project, "--keep", "2")
        assert [(d["tags"], d["outcome"]) for d in done_report["removed"]] == [([old], "removed")]
        assert done_report["removed_bytes"] > 0
        assert not _present(docker_client, old)
        for tag in (running, stopped, recorded, new1, new2, f"{name}:latest"):
            assert _present(docker_client, tag), tag
        assert _present(docker_client, unlabelled) and _present(docker_client, copied)

        # the running job gone, --keep 0 --include-recorded leaves the stopped one's and latest
        job.remove(force=True)
        containers.remove(job)
        again = _prune(project, "--keep", "0", "--include-recorded")
        assert sorted(d["tags"][0] for d in again["removed"]) == sorted([running, recorded, new1])
        assert {d["tags"][0]: d["reasons"] for d in again["kept"]} == {
            new2: [f"tagged {name}:latest"],
            stopped: [f"used by container {name}-stopped (exited)"],
        }
        assert _present(docker_client, stopped) and _present(docker_client, new2)
        assert _present(docker_client, f"{name}:gl-000000000000")
        assert _present(docker_client, other_repo)
    finally:
        for container in containers:
            container.remove(force=True)


def test_build_notice_counts_the_real_images(docker_client: Any, tmp_path: Path) -> None:
    """The notice `build` prints reads the engine's sizes of the project's older images."""
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.image.prune import older_images_notice

    name = temp_name("notice")
    project = write_project(tmp_path / "notice", "tiny", tiny_config(name))
    first = _build(project, name, "echo a")
    second = _build(project, name, "echo b")
    size = docker_client.images.get(first).attrs["Size"]
    engine = Engine()
    line = older_images_notice(engine, name, second, {"GPULAUNCH_PRUNE_NOTICE": "1k"})
    assert line is not None and line.startswith(f"note: 1 older image(s) of {name} take ")
    limit = {"GPULAUNCH_PRUNE_NOTICE": str(size)}
    assert older_images_notice(engine, name, second, limit) is None


def test_build_says_when_older_images_pass_the_notice_size(
    docker_client: Any, tmp_path: Path
) -> None:
    """`gpulaunch build` itself prints the notice after a new image, and not when up to date."""
    name = temp_name("notice-cli")
    project = write_project(tmp_path / "notice-cli", "tiny", tiny_config(name))
    _build(project, name, "echo one")
    config = tiny_config(name, run=["echo two"])
    (project / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = cli_env(GPULAUNCH_PRUNE_NOTICE="1k")
    built = gl("build", cwd=project, env=env, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.describe()
    notes = [line for line in built.stderr.splitlines() if "gpulaunch prune" in line]
    assert len(notes) == 1 and f"1 older image(s) of {name}" in notes[0], built.stderr
    again = gl("build", cwd=project, env=env, timeout=BUILD_TIMEOUT_S)
    assert again.returncode == 0 and "gpulaunch prune" not in again.stderr, again.describe()
