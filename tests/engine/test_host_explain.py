"""`run --no-container` explains its failures too (the usual case on a GPU box without
Docker: on a real H200 a CUDA OOM under --no-container ended with no cause). The job's stderr
passes through gpulaunch: byte for byte when piped, through a pseudo-terminal when gpulaunch's
stderr is a terminal, so the job still sees one."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
JOB = f"""
import os, sys
print("stderr is a tty:", os.isatty(2), flush=True)
sys.stderr.buffer.write(b"bytes \\xff\\xfe kept\\n{OOM}\\nno newline at the end")
sys.stderr.flush()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "gpulaunch.yaml").write_text(
        "version: 1\nname: hx\nimage: {torch: none, cuda: cpu}\nlaunch: {gpus: 0}\n"
    )
    (root / "job.py").write_text(JOB)
    return root


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAUNCH_", "DOCKER_"))}
    env.update(
        GPULAUNCH_STATE_DIR=str(tmp_path / "state"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        NO_COLOR="1",
    )
    return env


def _record(project: Path) -> dict[str, object]:
    (path,) = (project / ".gpulaunch" / "runs").glob("*.json")
    data: dict[str, object] = json.loads(path.read_text())
    return data


def test_piped_stderr_is_byte_exact_and_the_cause_is_the_last_line(
    project: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulaunch", "run", "job.py", "--no-container"],
        cwd=project,
        env=_env(tmp_path),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == b"stderr is a tty: False\n"
    job_err = f"bytes \xff\xfe kept\n{OOM}\nno newline at the end".encode("latin-1")
    assert job_err in proc.stderr  # the job's bytes, undecoded, the unfinished line too
    last = proc.stderr.decode("utf-8", "replace").splitlines()[-1]
    assert last.startswith("gpulaunch: cause: the GPU ran out of memory"), last
    assert "--expandable-segments" in last
    explanation = _record(project)["explanation"]
    assert isinstance(explanation, dict) and explanation["id"] == "cuda-oom"


def test_a_success_gets_no_explanation(project: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulaunch", "run", "job.py", "--no-container", "--", "0"],
        cwd=project,
        env=_env(tmp_path),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"cause:" not in proc.stderr
    assert "explanation" not in _record(project)


def test_a_terminal_stays_a_terminal_for_the_job(project: Path, tmp_path: Path) -> None:
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulaunch", "run", "job.py", "--no-container"],
            cwd=project,
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: gpulaunch has exited and closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 1
    assert out == b"stderr is a tty: True\n"  # through gpulaunch's pty, still a terminal
    text = seen.decode("utf-8", "replace")
    assert OOM in text
    assert "gpulaunch: cause: the GPU ran out of memory" in text.splitlines()[-1]
