"""`gpulaunch run` on the real engine: exit codes, torchrun ranks, file ownership, detached
jobs, and the --dry-run command line."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.support import (
    BUILD_TIMEOUT_S,
    SESSION_NAME,
    cli_env,
    container_name,
    gl,
    managed_containers,
    run_job,
    run_shell,
    temp_name,
    tiny_config,
    without_ulimits,
    write_project,
)

pytestmark = pytest.mark.docker

OTHER_UID = 1234  # a uid that is not the test runner's


@pytest.mark.parametrize("code", [0, 3])
def test_exit_code_and_output_pass_through(app: Path, docker_client: Any, code: int) -> None:
    result = run_job(app, "--gpus", "0", "exit_with.py", str(code))

    assert result.returncode == code, result.describe()
    assert f"job output: exiting with {code}" in result.stdout.splitlines()
    assert "job output" not in result.stderr
    # The job's stderr stays on stderr, as with `docker run`.
    assert f"job stderr: exiting with {code}" in result.stderr.splitlines()
    assert "job stderr" not in result.stdout
    assert ("gpulaunch: job exited with 3" in result.stderr) == (code == 3)
    name = container_name(result.stderr)
    assert docker_client.containers.list(all=True, filters={"name": name}) == []
    assert managed_containers(docker_client, SESSION_NAME) == []


def test_two_gloo_ranks_all_reduce(app: Path) -> None:
    result = run_job(app, "--nproc", "2", "allreduce.py")

    assert result.returncode == 0, result.describe()
    assert ": torchrun --standalone --nproc-per-node 2 /workspace/allreduce.py" in result.stderr
    sums = dict(re.findall(r"^rank (\d)/2 all_reduce=(\S+)$", result.stdout, re.M))
    assert sums == {"0": "3.0", "1": "3.0"}, result.describe()


def test_job_files_belong_to_the_host_user(app: Path) -> None:
    target = f"outputs/owned-{secrets.token_hex(3)}.txt"  # outputs/ is not build context

    result = run_job(app, "write_owned.py", target)

    assert result.returncode == 0, result.describe()
    uid, gid = os.getuid(), os.getgid()
    assert f"container uid={uid} gid={gid} wrote /workspace/{target}" in result.stdout
    info = (app / target).stat()
    assert (info.st_uid, info.st_gid) == (uid, gid)
    assert (app / target).read_text() == "written by the job\n"


def _socket_group() -> int | None:
    """Group that may use the engine's unix socket, if group access is how it is shared."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    try:
        info = os.stat(host.removeprefix("unix://"))
    except OSError:
        return None
    return info.st_gid if info.st_mode & stat.S_IRGRP and info.st_mode & stat.S_IWGRP else None


@pytest.fixture
def other_user_project() -> Iterator[Path]:
    """A tiny project in a folder the other uid owns (pytest's tmp dirs are root-only)."""
    base = Path(tempfile.mkdtemp(prefix="gltest-e2e-uid-"))
    try:
        base.chmod(0o755)
        project = write_project(base / "proj", "tiny", tiny_config(temp_name("uid")))
        (base / "home").mkdir()
        for path in [base, *base.rglob("*")]:
            os.chown(path, OTHER_UID, OTHER_UID)
        yield project
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_job_files_belong_to_a_non_root_host_user(
    docker_client: Any, other_user_project: Path
) -> None:
    """gpulaunch run as uid 1234 (setpriv, with the socket's group): image user and files too."""
    group = _socket_group()
    if os.getuid() != 0 or shutil.which("setpriv") is None or group is None:
        pytest.skip("needs root, setpriv and a group-shared engine socket to act as another uid")
    switch = (
        "setpriv",
        f"--reuid={OTHER_UID}",
        f"--regid={OTHER_UID}",
        f"--groups={group}",
        # Read access only (no other privilege): the checkout and its .venv may sit under a
        # 0700 directory (mktemp -d, /root). What is tested is the uid, not file permissions.
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
    )
    env = cli_env(HOME=str(other_user_project.parent / "home"))

    result = gl(
        "run",
        "hello.py",
        "outputs/owned.txt",
        cwd=other_user_project,
        env=env,
        prefix=switch,
        timeout=BUILD_TIMEOUT_S,
    )

    assert result.returncode == 0, result.describe()
    assert f"hello uid={OTHER_UID} gid={OTHER_UID}" in result.stdout
    info = (other_user_project / "outputs" / "owned.txt").stat()
    assert (info.st_uid, info.st_gid) == (OTHER_UID, OTHER_UID)
    tag = re.search(r"^built (\S+) with", result.stderr, re.M)
    assert tag, result.describe()  # its own image: GL_UID/GL_GID are part of the tag
    image = docker_client.images.get(tag.group(1))
    assert image.attrs["Config"]["User"] == f"{OTHER_UID}:{OTHER_UID}"


def test_detach_then_ps_logs_stop(app: Path, docker_client: Any) -> None:
    result = run_job(app, "--detach", "sleeper.py")

    assert result.returncode == 0, result.describe()
    name = result.stdout.strip().splitlines()[-1]
    assert name.startswith(f"gl-{SESSION_NAME}-"), result.describe()
    (container,) = docker_client.containers.list(filters={"name": name})
    assert container.status == "running"

    listing = gl("ps", cwd=app)
    assert listing.returncode == 0, listing.describe()
    row = next((line for line in listing.stdout.splitlines() if name in line), "")
    assert SESSION_NAME in row and "running" in row, listing.describe()

    deadline = time.monotonic() + 60
    logs = gl("logs", name, cwd=app)
    while "ready rank 0" not in logs.stdout and time.monotonic() < deadline:
        time.sleep(0.5)
        logs = gl("logs", name, cwd=app)
    assert logs.returncode == 0, logs.describe()
    assert "ready rank 0" in logs.stdout, logs.describe()

    output: list[bytes] = []
    follower = threading.Thread(
        target=lambda: output.extend(container.logs(stream=True, follow=True)), daemon=True
    )
    follower.start()
    stopped = gl("stop", "--timeout", "20", name, cwd=app)
    assert stopped.returncode == 0, stopped.describe()
    assert stopped.stdout.strip() == f"stopped {name}"
    follower.join(30)
    # the job's SIGTERM handler ran (a SIGKILL after the timeout would leave no such line)
    assert b"got SIGTERM rank 0" in b"".join(output), output
    assert docker_client.containers.list(all=True, filters={"name": name}) == []

    gone = gl("logs", name, cwd=app)
    assert gone.returncode == 3, gone.describe()
    assert f"no container {name!r}" in gone.stderr
    assert name not in gl("ps", "--all", cwd=app).stdout


def test_dry_run_line_runs_the_same_job(app: Path, docker_client: Any) -> None:
    """The `# run` line of --dry-run, pasted into a shell, does what `gpulaunch run` does."""
    args = ["echo_args.py", "two words", "it's", "$HOME"]
    dry = gl("run", "--dry-run", *args, cwd=app)
    assert dry.returncode == 0, dry.describe()
    lines = dry.stdout.splitlines()
    line = lines[lines.index("# run") + 1]
    assert line.startswith("docker run --rm "), line

    real = run_job(app, *args)
    assert real.returncode == 0, real.describe()
    assert "args=['two words', \"it's\", '$HOME']" in real.stdout

    # Debian's client (/usr/bin/docker) first; /usr/local/bin/docker is a newer one.
    shell_env = cli_env(PATH="/usr/bin:/bin:/usr/sbin:/sbin")
    pasted = run_shell(line, shell_env)
    refused = re.findall(r"the engine refused ulimit (\w+)", real.stderr)
    if pasted.returncode != 0 and "error setting rlimit" in pasted.stderr:
        # This engine may not raise some ulimit (an unprivileged sandbox): gpulaunch warned
        # and dropped it; the pasted line fails the same way. Drop the same ones and retry.
        assert refused, f"the line hit an rlimit gpulaunch did not warn about:\n{pasted.stderr}"
        line = without_ulimits(line, refused)
        pasted = run_shell(line, shell_env)
    assert pasted.returncode == 0, f"$ {line}\n{pasted.stderr}"
    assert pasted.stdout == real.stdout
    assert pasted.stderr == "echo_args: a line on stderr\n"
    assert "echo_args: a line on stderr" in real.stderr.splitlines()
    name = shlex.split(line)[shlex.split(line).index("--name") + 1]
    assert docker_client.containers.list(all=True, filters={"name": name}) == []
