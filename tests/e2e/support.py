"""Helpers for the real-engine tests: the CLI as a process, fixture projects, engine checks.

gpulaunch always runs as a separate process (`python -m gpulaunch`), so exit codes, stdout
vs stderr and signals are exactly what a user sees.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from engine_env import base_image, wheelhouse

PROJECTS = Path(__file__).resolve().parent / "projects"
SESSION_NAME = "gltest-e2e"
# The engine is shared (other checkouts, other developers run this suite at the same time):
# a session only ever removes what it made itself. Single-test projects carry the session's
# token in their name; session-project containers are recognised by their /workspace mount,
# which lies in this session's own pytest basetemp (SESSION.root).
SESSION_TOKEN = secrets.token_hex(4)
TEMP_PREFIX = f"gltest-e2e-{SESSION_TOKEN}-"  # images and projects of single tests
MANAGED_LABEL = "io.gpulaunch.managed"
PROJECT_LABEL = "io.gpulaunch.project"
BUILD_TIMEOUT_S = 600
RUN_TIMEOUT_S = 180


# -- running the CLI -----------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_COLOR="1", COLUMNS="200", TERM="dumb")
    env.update(extra)
    return env


def gl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpulaunch", *args]


def gl(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = RUN_TIMEOUT_S,
    prefix: tuple[str, ...] = (),
) -> Result:
    """Run `gpulaunch ARGS` in `cwd` as a real process and capture both streams."""
    argv = [*prefix, *gl_argv(*args)]
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
    )
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


def container_name(result_stderr: str) -> str:
    """The container name from gpulaunch's `running NAME: COMMAND` line."""
    for line in result_stderr.splitlines():
        if line.startswith("running gl-"):
            return line.split()[1].rstrip(":")
    raise AssertionError(f"no `running gl-...` line in stderr:\n{result_stderr}")


class LiveJob:
    """`gpulaunch ...` started in the background, its output collected line by line."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, lines: list[str]) -> None:
        for raw in iter(stream.readline, b""):
            with self._changed:
                lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "\n".join(self.stdout)

    def describe(self) -> str:
        with self._changed:
            out, err = "\n".join(self.stdout[-60:]), "\n".join(self.stderr[-60:])
        return f"$ {' '.join(self.argv)}\n--- stdout\n{out}\n--- stderr\n{err}"

    def wait_for(self, text: str, count: int = 1, timeout: float = 90) -> None:
        """Block until `text` occurs on `count` stdout lines; fail if the process ends first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(text in line for line in self.stdout) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"{text!r} x{count} not seen in {timeout}s\n{self.describe()}")
                if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                    pytest.fail(f"exited {self.proc.returncode} before {text!r}\n{self.describe()}")
                self._changed.wait(min(left, 0.5))

    def send(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 90) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# -- projects ------------------------------------------------------------------------------
def app_config(name: str) -> dict[str, Any]:
    """Like examples/offline-cpu: local base image, CPU torch from wheels/, no network."""
    return {
        "version": 1,
        "name": name,
        "image": {
            "base": base_image(),
            "python": "3.11",
            "torch": "2.13.0",
            "cuda": "cpu",
            "pip": {"no_index": True, "find_links": ["wheels"]},
        },
        "build": {"network": "none"},
        "launch": {"gpus": 0, "network": "none"},
    }


def tiny_config(name: str, run: list[str] | None = None) -> dict[str, Any]:
    """No torch: an image of its own in a few seconds."""
    config: dict[str, Any] = {
        "version": 1,
        "name": name,
        "image": {"base": base_image(), "python": "3.11", "torch": "none", "cuda": "cpu"},
        "build": {"network": "none"},
        "launch": {"gpus": 0, "network": "none"},
    }
    if run:
        config["image"]["run"] = run
    return config


def write_project(dest: Path, template: str, config: dict[str, Any]) -> Path:
    shutil.copytree(PROJECTS / template, dest, dirs_exist_ok=True)
    (dest / "gpulaunch.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def write_files(project: Path, files: dict[str, str]) -> Path:
    """A project made of `files` (relative path: text), folders made as needed."""
    for rel, text in files.items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return project


def link_wheels(project: Path) -> None:
    """Hard links of the wheelhouse (a copy across file systems) in project/wheels/."""
    wheels = sorted(wheelhouse().glob("*.whl"))
    if not any(w.name.startswith("torch-") for w in wheels):
        pytest.fail(f"no torch wheel in {wheelhouse()}; run dev/engine-setup", pytrace=False)
    target = project / "wheels"
    target.mkdir(exist_ok=True)
    for wheel in wheels:
        dest = target / wheel.name
        if dest.exists():
            continue
        try:
            os.link(wheel, dest)
        except OSError:
            shutil.copy2(wheel, dest)


@dataclass
class _Session:
    root: Path | None = None  # pytest's basetemp: every session-project folder is below it
    temp_projects: set[str] = field(default_factory=set)


SESSION = _Session()


def temp_name(what: str) -> str:
    """A project (and image) name only this session uses; removed when the session ends."""
    name = f"{TEMP_PREFIX}{what}-{secrets.token_hex(3)}"
    SESSION.temp_projects.add(name)
    return name


def build_logs(project: Path) -> set[Path]:
    return set((project / ".gpulaunch" / "logs").glob("*.log"))


# -- engine helpers ------------------------------------------------------------------------
def _mounted_from_session(container: Any) -> bool:
    root = SESSION.root
    if root is None:
        return False
    prefix = str(root).rstrip("/") + "/"
    return any(
        str(m.get("Source", "")).startswith(prefix) for m in container.attrs.get("Mounts") or []
    )


def is_ours(container: Any) -> bool:
    """Made by this session: a single-test project of ours, or the session project run from
    this session's folder. Another checkout's `gltest-e2e` job is never ours."""
    name = (container.labels or {}).get(PROJECT_LABEL, "")
    if name in SESSION.temp_projects:
        return True
    return name == SESSION_NAME and _mounted_from_session(container)


def managed_containers(client: Any, project_name: str) -> list[Any]:
    """gpulaunch containers of one project made by this session, in any state."""
    filters = {"label": [MANAGED_LABEL, f"{PROJECT_LABEL}={project_name}"]}
    return [c for c in client.containers.list(all=True, filters=filters) if is_ours(c)]


def project_containers(client: Any, project_name: str) -> list[Any]:
    """Any container (builder ones included) carrying the project's image label."""
    filters = {"label": f"{PROJECT_LABEL}={project_name}"}
    found = list(client.containers.list(all=True, filters=filters))
    if project_name in SESSION.temp_projects:
        return found  # builder containers have no mount: the name alone is ours
    return [c for c in found if is_ours(c)]


def remove_project_images(client: Any, project_name: str) -> None:
    """Every image (tagged or intermediate) built from one of this session's projects."""
    from docker.errors import APIError

    assert project_name in SESSION.temp_projects, f"{project_name} is not this session's"
    images = client.images.list(all=True, filters={"label": f"{PROJECT_LABEL}={project_name}"})
    for image in images:
        with contextlib.suppress(APIError):  # already gone with a child
            client.images.remove(image.id, force=True)


def temp_project_names(client: Any) -> set[str]:
    """This session's single-test projects that left an image in this engine."""
    names = set()
    for image in client.images.list(all=True, filters={"label": PROJECT_LABEL}):
        name = (image.labels or {}).get(PROJECT_LABEL, "")
        if name in SESSION.temp_projects:
            names.add(name)
    return names


def reap(client: Any) -> None:
    """Remove this session's leftover containers (a failed test's), never anyone else's."""
    from docker.errors import APIError

    for container in client.containers.list(all=True, filters={"label": PROJECT_LABEL}):
        if is_ours(container):
            with contextlib.suppress(APIError):
                container.remove(force=True)


@dataclass
class SessionImage:
    """The image every run test uses, and how its (first) build went."""

    tag: str
    project: Path
    build: Result
    logs_after_build: set[Path] = field(default_factory=set)


def run_job(app: Path, *args: str, timeout: float = RUN_TIMEOUT_S, **env: str) -> Result:
    """`gpulaunch run ARGS` in the session project; asserts the image was reused, not rebuilt."""
    result = gl("run", *args, cwd=app, env=cli_env(**env), timeout=timeout)
    assert "is up to date" in result.stderr, (
        "the session image was rebuilt: did a job change the build context?\n" + result.describe()
    )
    return result


# -- pasted `docker run` lines ---------------------------------------------------------------
def run_shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A printed command line run through /bin/sh, as a user pasting it would."""
    return subprocess.run(
        ["/bin/sh", "-c", line],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def without_ulimits(line: str, names: list[str]) -> str:
    """The line without `--ulimit NAME=…` for the limits the engine refused."""
    argv = shlex.split(line)
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--ulimit" and argv[i + 1].split("=")[0] in names:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return shlex.join(out)
