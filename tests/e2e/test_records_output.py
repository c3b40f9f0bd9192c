"""Live GPU metrics and `rerun --rebuild` on the real engine (issue 11, the rest of "Must show").

The sampler runs when NVML answers; this machine has no GPU, so the CLI process gets
tests/fake_nvml.py as its `pynvml` through a PYTHONPATH shim (the same seam doctor and smoke
use), fed a time series that advances one row per sampling round. The engine's NVIDIA hook is
the stand-in (`--gpus 1` only sets NVIDIA_VISIBLE_DEVICES), so the job itself runs on the CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    RUN_TIMEOUT_S,
    cli_env,
    gl,
    gl_argv,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

TESTS = Path(__file__).resolve().parent.parent
GIB = 1024**3
# GPU 0's rows, one per sampling round: (utilisation %, memory used, memory total, mW)
SERIES = [(11, 1 * GIB, 40 * GIB, 100_000), (33, 5 * GIB, 40 * GIB, 200_000)]
SERIES += [(55, 3 * GIB, 40 * GIB, 150_000)]
SHIM = """\
import sys
sys.path.insert(0, {tests!r})
from fake_nvml import FakeNvml


class Series(FakeNvml):
    def nvmlDeviceGetPowerUsage(self, handle):
        power = super().nvmlDeviceGetPowerUsage(handle)
        if handle == 0:
            self.tick += 1  # power is the last query of a round: the next round, the next row
        return power


fake = Series()
fake.devices[0].series = {series!r}
sys.modules[__name__] = fake
"""

# Output the sampler must not touch: partial lines, bytes that are not UTF-8, CR and escapes,
# on both streams, written in pieces across several sampling rounds (interval 2 s).
OUTPUT_JOB = """\
import sys, time
out, err = sys.stdout.buffer, sys.stderr.buffer
def put(stream, data):
    stream.write(data)
    stream.flush()
put(out, b"BEGIN-OUT\\nline one\\npartial without newline")
put(err, b"BEGIN-ERR\\nerr partial")
time.sleep(1.5)
put(out, b" continued\\n\\x00\\x01\\x7f\\x80\\xfe\\xff bytes\\r\\nCR\\rback ")
put(out, b"\\x1b[31mred\\x1b[0m\\n")
put(err, b" err continued\\n\\xff\\xfe err bytes\\n")
time.sleep(1.5)
put(out, b"tail without newline")
put(err, b"END-ERR without newline")
"""
OUT = (
    b"BEGIN-OUT\nline one\npartial without newline continued\n"
    b"\x00\x01\x7f\x80\xfe\xff bytes\r\nCR\rback \x1b[31mred\x1b[0m\ntail without newline"
)
ERR = b"BEGIN-ERR\nerr partial err continued\n\xff\xfe err bytes\nEND-ERR without newline"


@pytest.fixture(scope="module")
def proj(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = write_project(
        tmp_path_factory.mktemp("output") / "out", "tiny", tiny_config(temp_name("output"))
    )
    (project / "output.py").write_text(OUTPUT_JOB)
    result = gl("build", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.describe()
    return project


@pytest.fixture(scope="module")
def nvml_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    shim = tmp_path_factory.mktemp("nvml-shim")
    (shim / "pynvml.py").write_text(SHIM.format(tests=str(TESTS), series=SERIES))
    return cli_env(PYTHONPATH=str(shim))


def _run_bytes(proj: Path, env: dict[str, str], *args: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(
        gl_argv("run", *args),
        cwd=proj,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _newest_record(proj: Path) -> dict[str, Any]:
    result = gl("history", "--json", "-n", "1", cwd=proj)
    assert result.returncode == 0, result.describe()
    (record,) = json.loads(result.stdout)["runs"]
    return record


def _job_part(stderr: bytes) -> tuple[bytes, bytes]:
    """(gpulaunch's own lines before the job, the job's stderr): the job's starts at BEGIN-ERR."""
    at = stderr.find(b"BEGIN-ERR")
    assert at >= 0, stderr
    return stderr[:at], stderr[at:]


def test_piped_output_is_byte_identical_with_and_without_the_sampler(
    proj: Path, nvml_env: dict[str, str]
) -> None:
    code, out, err = _run_bytes(proj, nvml_env, "--gpus", "1", "output.py")
    assert code == 0, err.decode(errors="replace")
    sampled = _newest_record(proj)
    code_off, out_off, err_off = _run_bytes(
        proj, cli_env(), "--gpus", "1", "--no-status", "output.py"
    )
    assert code_off == 0, err_off.decode(errors="replace")
    unsampled = _newest_record(proj)

    # the sampler did run, on the fake series: a row per round, in order
    metrics = sampled["gpu_metrics"]
    (gpu,) = metrics["gpus"]
    rounds = gpu["samples"]
    assert rounds >= 2  # the job runs 3 s at a 2 s interval
    rows = [SERIES[min(i, len(SERIES) - 1)] for i in range(rounds)]
    assert gpu["index"] == 0 and gpu["memory_total_mib"] == 40 * 1024
    assert gpu["mean_utilization_pct"] == round(sum(r[0] for r in rows) / rounds, 1)
    assert gpu["peak_memory_mib"] == max(r[1] for r in rows) // 2**20
    assert gpu["peak_power_w"] == max(r[3] for r in rows) / 1000
    assert gpu["energy_wh"] > 0
    assert sampled["gpus"]["devices"][0]["uuid"].startswith("GPU-")
    # ... and without NVML there is no sampler
    assert unsampled.get("gpu_metrics") is None and unsampled["gpus"]["devices"] == []

    assert out == OUT  # stdout: exactly the job's bytes, both times
    assert out_off == out
    own, job_err = _job_part(err)
    own_off, job_err_off = _job_part(err_off)
    assert job_err == ERR and job_err_off == job_err
    # piped: no status line at all (no redraw, no erase, no GPU text) in gpulaunch's own lines
    for text in (own, own_off):
        assert b"running gl-" in text
        assert b"\r" not in text and b"\x1b" not in text and b"GPU0" not in text, text


def _read_all(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


def test_status_line_on_a_terminal_stderr_never_in_piped_stdout(
    proj: Path, nvml_env: dict[str, str]
) -> None:
    master, slave = os.openpty()
    terminal = bytearray()
    reader = threading.Thread(target=_read_all, args=(master, terminal), daemon=True)
    try:
        proc = subprocess.Popen(
            gl_argv("run", "--gpus", "1", "output.py"),
            cwd=proj,
            env={**nvml_env, "TERM": "xterm"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        reader.start()
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        reader.join(10)
    finally:
        os.close(master)
    shown = bytes(terminal)
    assert proc.returncode == 0, shown.decode(errors="replace")
    assert out == OUT  # the status line never reaches piped stdout
    # the first round's line of the fake series, drawn in place on the terminal
    assert b"\r\x1b[KGPU0 11% 1.0/40.0 GiB 100 W" in shown, shown
    assert b"GPU0 33% 5.0/40.0 GiB 200 W" in shown, shown
    # job stderr still reaches the terminal whole (the tty turns \n into \r\n)
    for piece in (b"BEGIN-ERR", b"err partial", b" err continued", b"\xff\xfe err bytes"):
        assert piece in shown
    assert shown.rstrip().endswith(b"\r\x1b[K") or shown.endswith(b"END-ERR without newline")
    record = _newest_record(proj)
    assert record["gpu_metrics"]["gpus"][0]["samples"] >= 2


# -- rerun of a run whose image is gone ------------------------------------------------------
REPRO_JOB = """\
import os, sys
print("repro", sys.argv[1:], os.path.exists("/changed"), flush=True)
"""


def test_rerun_when_the_image_is_gone_and_with_rebuild(docker_client: Any, tmp_path: Path) -> None:
    project = write_project(tmp_path / "gone", "tiny", tiny_config(temp_name("gone")))
    (project / "repro.py").write_text(REPRO_JOB)
    first = gl("run", "repro.py", "a", "1", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert first.returncode == 0, first.describe()
    assert first.stdout == "repro ['a', '1'] False\n"
    recorded = _newest_record(project)
    image_id = recorded["image"]["id"]
    assert image_id.startswith("sha256:")
    docker_client.images.remove(image_id, force=True)  # every tag of it, then the image
    # the current config now asks for another image: --rebuild must use the recorded one
    changed = tiny_config(recorded["config"]["name"], run=["touch /changed"])
    write_project(project, "tiny", changed)

    gone = gl("rerun", recorded["id"], cwd=project)
    assert gone.returncode == 3, gone.describe()
    assert gone.stdout == "" and "Traceback" not in gone.stderr
    errors = [line for line in gone.stderr.splitlines() if line.startswith("gpulaunch: error:")]
    assert errors == [
        f"gpulaunch: error: run {recorded['id']}: its image {recorded['image']['tag']} "
        f"({image_id[:19]}) is gone"
    ], gone.describe()
    assert f"hint: `gpulaunch rerun {recorded['id']} --rebuild`" in gone.stderr
    assert _newest_record(project)["id"] == recorded["id"]  # no record for a run never started

    rebuilt = gl("rerun", recorded["id"], "--rebuild", cwd=project, timeout=BUILD_TIMEOUT_S)
    assert rebuilt.returncode == 0, rebuilt.describe()
    assert rebuilt.stdout == first.stdout  # no /changed: the recorded config, not the current
    again = _newest_record(project)
    assert again["rerun_of"] == recorded["id"] and again["id"] != recorded["id"]
    assert again["image"]["tag"] == recorded["image"]["tag"]
    assert again["image"]["dockerfile_sha256"] == recorded["image"]["dockerfile_sha256"]
    docker_client.images.get(again["image"]["id"])  # it exists now
    # and a plain rerun uses that rebuilt image as it is
    plain = gl("rerun", again["id"], cwd=project)
    assert plain.returncode == 0, plain.describe()
    assert plain.stdout == first.stdout
    assert _newest_record(project)["image"]["id"] == again["image"]["id"]


# Much more than a pipe and the engine's attach buffer hold, then a line on stderr.
FLOOD_JOB = """\
import sys
for _ in range(2000):
    sys.stdout.write("x" * 4095 + "\\n")
sys.stdout.flush()
print("flood done", file=sys.stderr, flush=True)
"""


def test_a_reader_that_leaves_early_neither_hangs_the_run_nor_the_engine(
    proj: Path, docker_client: Any
) -> None:
    """`gpulaunch run job.py | head -c 10`: gpulaunch drains the rest (the engine would block on
    an unread attach stream, the job and every inspect of it with it), the job finishes, its
    exit code is the result, and its container is gone."""
    (proj / "flood.py").write_text(FLOOD_JOB)
    reader = subprocess.Popen(["head", "-c", "10"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert reader.stdin is not None and reader.stdout is not None
    proc = subprocess.Popen(
        gl_argv("run", "--no-status", "flood.py"),
        cwd=proj,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
    )
    reader.stdin.close()  # only gpulaunch holds the pipe's writing end
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert reader.stdout.read() == b"x" * 10
    reader.wait(10)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "flood done" in text  # the job ran to its end, its stderr still shown
    assert "warning: cannot write the job's output" in text
    assert "Traceback" not in text and "Exception ignored" not in text
    record = _newest_record(proj)
    assert record["state"] == "succeeded" and record["exit_code"] == 0
    assert docker_client.containers.list(all=True, filters={"name": record["container"]}) == []
