"""`ps`, `logs` and `stop` on the real engine: a container started by hand with gpulaunch's
labels copied onto it is not ours. Ours is all `run` sets together: its own run id, the
managed and project labels, and the name gl-PROJECT-RUNID (`Engine.is_job`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_env import busybox_image

from e2e.support import gl, temp_name

RUN_ID = "20261205-101500-c0ffee"  # of `new_run_id`'s format


def _labels(project: str, drop: tuple[str, ...] = ()) -> dict[str, str]:
    labels = {
        "io.gpulaunch.managed": "true",
        "io.gpulaunch.project": project,
        "io.gpulaunch.run-id": RUN_ID,
    }
    return {k: v for k, v in labels.items() if k.rsplit(".", 1)[1] not in drop}


def _listed(cwd: Path) -> list[str]:
    listing = gl("ps", "--all", "--json", cwd=cwd)
    assert listing.returncode == 0, listing.describe()
    return [row["name"] for row in json.loads(listing.stdout)]


@pytest.mark.docker
@pytest.mark.parametrize(
    ("name", "drop"),
    [
        ("hand", ()),  # every label copied, any other name
        ("job", ("project",)),  # run's name and run id, no project label
        ("job", ("managed",)),  # run's name and run id, no managed label
    ],
)
def test_copied_labels_never_make_a_container_ours(
    docker_client: Any, tmp_path: Path, name: str, drop: tuple[str, ...]
) -> None:
    project = temp_name("ours")
    job_name = f"gl-{project}-{RUN_ID}"
    labels = _labels(project, drop)
    shown = temp_name("hand") if name == "hand" else job_name
    stranger = docker_client.containers.run(
        busybox_image(), ["sleep", "300"], name=shown, labels=labels, detach=True,
        network_mode="none",
    )  # fmt: skip
    try:
        assert shown not in _listed(tmp_path)
        for args in (("logs", shown), ("stop", "--timeout", "0", shown)):
            result = gl(*args, cwd=tmp_path)
            assert result.returncode == 3, result.describe()
            lines = [x for x in result.stderr.splitlines() if x and not x.startswith("hint:")]
            assert len(lines) == 1 and "Traceback" not in result.stderr, result.describe()
            assert f"container {shown!r} was not started by `gpulaunch run`" in result.stderr
        stranger.reload()
        assert stranger.status == "running"  # not stopped, not removed
    finally:
        stranger.remove(force=True)


@pytest.mark.docker
def test_a_container_with_all_run_sets_is_listed_and_stopped(
    docker_client: Any, tmp_path: Path
) -> None:
    """The control: the same container with the name and all three labels `run` gives is
    listed and stopped, so the cases above fail for what they leave out."""
    project = temp_name("ours")
    job_name = f"gl-{project}-{RUN_ID}"
    docker_client.containers.run(
        busybox_image(), ["sleep", "300"], name=job_name, labels=_labels(project),
        detach=True, network_mode="none",
    )  # fmt: skip
    try:
        assert job_name in _listed(tmp_path)
        result = gl("stop", "--timeout", "0", job_name, cwd=tmp_path)
        assert result.returncode == 0, result.describe()
        assert result.stdout.strip() == f"stopped {job_name}"
        assert job_name not in [c.name for c in docker_client.containers.list(all=True)]
    finally:
        for left in docker_client.containers.list(all=True, filters={"name": job_name}):
            left.remove(force=True)
