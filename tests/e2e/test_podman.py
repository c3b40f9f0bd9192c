"""The engine suite's core on both engines: the main Docker engine and Podman's service beside
it (dev/engine-setup starts it rootful on GPULAUNCH_TEST_PODMAN_HOST). The same tests, the same
assertions: a build (`podman build` on Podman, BuildKit on Docker), a run with stdin, exit
codes, SIGTERM, no containers left behind, run records, the state mask that stays empty, and
GPUs: on Docker through the stub NVIDIA hook, on Podman through a CDI stand-in spec that maps
`nvidia.com/gpu=0` to a harmless device (/dev/null) and sets NVIDIA_VISIBLE_DEVICES. The
stand-in is not a GPU: it proves that gpulaunch asks for the right device the engine's way.

Each engine gets its own small project (no torch), named for this session and removed with its
images and containers at the end. Podman reads CDI specs only from /etc/cdi and /var/run/cdi
(4.3 has no `cdi_spec_dirs` setting), so the stand-in spec is written to /etc/cdi for the
length of one test, under a lock, and removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from engine_env import require_docker

from e2e.support import (
    BUILD_TIMEOUT_S,
    PROJECT_LABEL,
    LiveJob,
    Result,
    cli_env,
    gl,
    gl_argv,
    temp_name,
    tiny_config,
    write_project,
)

pytestmark = pytest.mark.docker

DEFAULT_PODMAN_HOST = "unix:///run/podman/podman.sock"
MAIN_HOST = "unix:///var/run/docker.sock"
CDI_SPEC = Path("/etc/cdi/gpulaunch-test-standin.yaml")
CDI_LOCK = "/tmp/gpulaunch-test-cdi.lock"
STANDIN = textwrap.dedent(
    """\
    # gpulaunch tests/e2e/test_podman.py: a CDI STAND-IN, not a GPU (removed after the test)
    cdiVersion: "0.5.0"
    kind: nvidia.com/gpu
    devices:
      - name: "0"
        containerEdits:
          env: [NVIDIA_VISIBLE_DEVICES=0, GPULAUNCH_CDI_STANDIN=gpu0]
          deviceNodes:
            - path: /dev/gpulaunch-standin-gpu0
              hostPath: /dev/null
    """
)
SCRIPTS = {
    "upper.py": "import sys\nprint(sys.stdin.read().upper(), end='')\nsys.exit(7)\n",
    "mask.py": (
        "import os\nstate = '/workspace/.gpulaunch'\n"
        "print('state:', sorted(os.listdir(state)))\n"
        "try:\n    open(state + '/planted', 'w')\nexcept OSError as err:\n"
        "    print('write refused:', err.errno)\n"
    ),
    "gpu.py": (
        "import os\nprint('visible=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', '-'))\n"
        "print('standin=' + os.environ.get('GPULAUNCH_CDI_STANDIN', '-'))\n"
        "print('device=' + str(os.path.exists('/dev/gpulaunch-standin-gpu0')))\n"
    ),
}


def podman_host() -> str:
    return os.environ.get("GPULAUNCH_TEST_PODMAN_HOST") or DEFAULT_PODMAN_HOST


@dataclass
class Built:
    engine: str  # docker | podman
    host: str
    project: Path
    tag: str
    client: Any
    build: Result

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(DOCKER_HOST=self.host, **extra)

    def gl(self, *args: str, stdin: str | None = None) -> Result:
        if stdin is None:
            return gl(*args, cwd=self.project, env=self.env())
        import subprocess

        argv = gl_argv(*args)
        proc = subprocess.run(
            argv,
            cwd=self.project,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return Result(argv, proc.returncode, proc.stdout, proc.stderr)

    def containers(self) -> list[Any]:
        name = json.loads(json.dumps(self.project.name))
        filters = {"label": f"{PROJECT_LABEL}={name}"}
        return list(self.client.containers.list(all=True, filters=filters))


@pytest.fixture(scope="module", params=["docker", "podman"])
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Built]:
    """A small project built through `gpulaunch build` on one engine (once per module)."""
    import docker

    host = podman_host() if request.param == "podman" else os.environ.get("DOCKER_HOST", MAIN_HOST)
    require_docker(host)
    name = temp_name(f"pm-{request.param}")
    project = write_project(tmp_path_factory.mktemp(request.param) / name, "app", tiny_config(name))
    for script, text in SCRIPTS.items():
        (project / script).write_text(text)
    client = docker.DockerClient(base_url=host, timeout=120)
    try:
        result = gl("build", cwd=project, env=cli_env(DOCKER_HOST=host), timeout=BUILD_TIMEOUT_S)
        assert result.returncode == 0, result.describe()
        tag = result.stdout.strip().splitlines()[-1]
        yield Built(request.param, host, project, tag, client, result)
    finally:
        for container in client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={name}"}
        ):
            container.remove(force=True)
        for image in client.images.list(all=True, filters={"label": f"{PROJECT_LABEL}={name}"}):
            with contextlib.suppress(Exception):
                client.images.remove(image.id, force=True)
        client.close()


def test_the_build_took_the_engines_own_path(built: Built) -> None:
    log = "".join(p.read_text() for p in (built.project / ".gpulaunch" / "logs").glob("build-*"))
    if built.engine == "podman":
        assert f"podman --url {built.host} build" in log, log[-2000:]
        assert built.client.images.get(built.tag).labels[PROJECT_LABEL] == built.project.name
    else:
        assert "podman" not in log and "docker build" in log, log[-2000:]
    assert built.client.images.get(built.tag) is not None


def test_stdin_reaches_the_job_and_its_exit_code_comes_back(built: Built) -> None:
    result = built.gl("run", "-i", "upper.py", stdin="hello podman\n")
    assert result.returncode == 7, result.describe()
    assert result.stdout == "HELLO PODMAN\n", result.describe()
    assert "gpulaunch: job exited with 7" in result.stderr
    assert built.containers() == [], "a finished run left its container"


def test_exit_codes_and_records(built: Built) -> None:
    ok = built.gl("run", "exit_with.py", "0")
    failed = built.gl("run", "exit_with.py", "3")
    assert (ok.returncode, failed.returncode) == (0, 3), ok.describe() + failed.describe()
    assert "job stderr: exiting with 3" in failed.stderr
    history = built.gl("history", "--json")
    assert history.returncode == 0, history.describe()
    runs = json.loads(history.stdout)["runs"]
    last_two = [(r["state"], r["exit_code"]) for r in runs[:2]]
    assert sorted(last_two) == [("failed", 3), ("succeeded", 0)], last_two
    assert built.containers() == []


def test_sigterm_reaches_the_job_and_nothing_is_left(built: Built) -> None:
    job = LiveJob(gl_argv("run", "sleeper.py"), cwd=built.project, env=built.env())
    try:
        job.wait_for("ready rank 0")
        job.send(signal.SIGTERM)
        code = job.finish(timeout=90)
    finally:
        job.kill()
    assert code == 143, job.describe()
    assert "got SIGTERM rank 0" in job.stdout, job.describe()
    assert built.containers() == [], job.describe()


def test_the_state_mask_stays_empty(built: Built) -> None:
    """.gpulaunch/ holds build logs and records: the job sees an empty read-only folder (on
    Podman only because the mask is a tmpfs without copy-up)."""
    assert any((built.project / ".gpulaunch").iterdir())
    result = built.gl("run", "mask.py")
    assert result.returncode == 0, result.describe()
    assert "state: []" in result.stdout and "write refused: 30" in result.stdout, result.describe()


@pytest.fixture
def standin_spec() -> Iterator[Path]:
    """The CDI stand-in in /etc/cdi for the length of one test (Podman reads no other folder)."""
    CDI_SPEC.parent.mkdir(parents=True, exist_ok=True)
    with open(CDI_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        CDI_SPEC.write_text(STANDIN)
        try:
            yield CDI_SPEC
        finally:
            CDI_SPEC.unlink(missing_ok=True)


def test_one_gpu_reaches_the_container_the_engines_way(built: Built, standin_spec: Path) -> None:
    result = built.gl("run", "--gpus", "1", "gpu.py")
    assert result.returncode == 0, result.describe()
    assert "visible=0" in result.stdout, result.describe()
    if built.engine == "podman":  # through CDI: the spec's env and its device node
        assert "standin=gpu0" in result.stdout and "device=True" in result.stdout
    else:  # through the stub NVIDIA hook: DeviceRequests, no CDI edits
        assert "standin=-" in result.stdout
    assert built.containers() == []


def test_a_gpu_no_cdi_spec_defines_is_one_line_on_podman(built: Built, standin_spec: Path) -> None:
    result = built.gl("run", "--gpus", "2", "--nproc", "1", "gpu.py")
    if built.engine == "docker":
        assert result.returncode == 0, result.describe()  # the stub hook takes any count
        assert "visible=0,1" in result.stdout
        return
    assert result.returncode == 3, result.describe()
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("gpulaunch: error:")]
    assert line == (
        "gpulaunch: error: Podman hands GPUs over through CDI: no CDI spec defines "
        "nvidia.com/gpu=1 (the specs define nvidia.com/gpu=0); generate one with "
        "`nvidia-ctk cdi generate`"
    )
    assert "Traceback" not in result.stderr
    assert built.containers() == []


def test_the_dry_run_shows_the_line_this_engine_runs(built: Built, tmp_path: Path) -> None:
    """--dry-run asks no daemon: it shows the line of the engine a real command last found at
    this address (Podman: `podman run`, GPUs as CDI devices), Docker's line when none did."""
    cache = tmp_path / "cache"
    cache.mkdir()

    def dry_run() -> str:
        env = built.env(XDG_CACHE_HOME=str(cache))
        result = gl("run", "--dry-run", "--gpus", "1", "gpu.py", cwd=built.project, env=env)
        assert result.returncode == 0, result.describe()
        return result.stdout.strip().splitlines()[-1]

    assert dry_run().startswith("docker run ")  # nothing known yet: no daemon was asked
    real = gl(
        "run", "exit_with.py", "0", cwd=built.project, env=built.env(XDG_CACHE_HOME=str(cache))
    )
    assert real.returncode == 0, real.describe()
    line = dry_run()
    if built.engine == "podman":
        assert line.startswith("podman run ") and " --device nvidia.com/gpu=0 " in line, line
        assert " --gpus " not in line and ",notmpcopyup " in line
    else:
        assert line.startswith("docker run ") and " --gpus 1 " in line, line
