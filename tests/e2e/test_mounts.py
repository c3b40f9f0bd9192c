"""--mount against the real engine: the normalised container path is what the job sees, the
dry-run line and the SDK call mount the same folder, and a refused spec never reaches the
engine."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from e2e.support import gl, run_job

pytestmark = pytest.mark.docker


def test_mount_is_normalised_and_read_only(app: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("from-the-host\n")
    spec = f"{data}:/mnt//in/./:ro"

    dry = gl("run", "--gpus", "0", "--mount", spec, "--dry-run", "--", "true", cwd=app)
    assert dry.returncode == 0, dry.describe()
    argv = shlex.split(dry.stdout.strip().splitlines()[-1])
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert f"type=bind,source={data},target=/mnt/in,readonly" in mounts

    result = run_job(
        app, "--gpus", "0", "--mount", spec, "--", "sh", "-c", "cat /mnt/in/f; touch /mnt/in/g"
    )
    assert "from-the-host" in result.stdout, result.describe()
    assert result.returncode != 0  # read-only: touch fails, so the job exits non-zero
    assert not (data / "g").exists()


@pytest.mark.parametrize("spec", [":/x", "data:/data,source=/etc", ".:/a/../b"])
def test_refused_mount_never_reaches_the_engine(app: Path, spec: str) -> None:
    result = gl("run", "--gpus", "0", "--mount", spec, "--", "true", cwd=app)
    assert result.returncode == 2, result.describe()
    assert "is up to date" not in result.stderr  # refused before the build step
    assert result.stderr.startswith("gpulaunch: error: --mount:"), result.describe()
