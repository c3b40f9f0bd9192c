"""`rerun` runs the recorded code (issue 31 §1), on the real engine.

Edit the script after a run: `rerun ID` runs the recorded image's own /workspace (the old
line prints), `--current-code` mounts today's tree (the new line prints, and the note names
the changed file). With the image gone, `--rebuild` rebuilds only from a tree that gives the
run's image tag: refused while the edit is there, rebuilt once it is undone.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from e2e.support import BUILD_TIMEOUT_S, gl, temp_name, tiny_config, write_project

pytestmark = pytest.mark.docker

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def _git(project: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(project), *args],
        check=True,
        capture_output=True,
        timeout=30,
        env={**os.environ, **GIT_ENV},
    )


@pytest.fixture(scope="module")
def proj(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = write_project(
        tmp_path_factory.mktemp("rerun") / "code", "tiny", tiny_config(temp_name("rerun"))
    )
    (project / "code.py").write_text('print("version 1", flush=True)\n')
    (project / ".gitignore").write_text(".gpulaunch/\n")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "one")
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    return project


def test_rerun_runs_the_recorded_code_and_current_code_runs_todays(
    proj: Path, docker_client: Any
) -> None:
    first = gl("run", "code.py", cwd=proj)
    assert first.returncode == 0 and "version 1" in first.stdout, first.describe()
    history = gl("history", "--json", cwd=proj)
    (record,) = json.loads(history.stdout)["runs"]
    run_id = record["id"]

    (proj / "code.py").write_text('print("version 2", flush=True)\n')
    again = gl("rerun", run_id, cwd=proj)
    assert again.returncode == 0, again.describe()
    assert "version 1" in again.stdout and "version 2" not in again.stdout, again.describe()
    assert "runs the recorded code (the image's own /workspace)" in again.stderr
    assert "type=bind,source=" + str(proj) + "," not in again.stderr  # no tree mounted

    today = gl("rerun", run_id, "--current-code", cwd=proj)
    assert today.returncode == 0, today.describe()
    assert "version 2" in today.stdout, today.describe()
    assert "it differs from the run's: 1 file(s) changed: code.py" in today.stderr

    docker_client.images.remove(record["image"]["id"], force=True)
    gone = gl("rerun", run_id, cwd=proj)
    assert gone.returncode == 3 and "is gone" in gone.stderr, gone.describe()
    refused = gl("rerun", run_id, "--rebuild", cwd=proj)
    assert refused.returncode == 2, refused.describe()
    error = [ln for ln in refused.stderr.splitlines() if ln.startswith("gpulaunch: error:")]
    assert len(error) == 1 and "code.py" in error[0] and record["image"]["tag"] in error[0]

    _git(proj, "checkout", "--", "code.py")
    rebuilt = gl("rerun", run_id, "--rebuild", cwd=proj, timeout=BUILD_TIMEOUT_S)
    assert rebuilt.returncode == 0, rebuilt.describe()
    assert "version 1" in rebuilt.stdout
