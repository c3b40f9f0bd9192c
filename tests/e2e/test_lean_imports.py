"""`run` on an image already built (the tag cache answers) and `ps` never import the docker
SDK or the HTTP stack under it: they talk to the engine through gpulaunch.engine.api (the
standard library), which is what keeps `run -- true` close to a bare SDK script. Nor do they
import what only a failure or a project read needs (the failure explainer, `packaging`). The
same check catches one of them coming back through any import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.support import cli_env

pytestmark = pytest.mark.docker

SDK_STACK = ("docker", "requests", "urllib3", "paramiko", "websocket")
# What a successful run of a built image has no use for: explaining a failure, reading
# requirement/wheel names (the tag cache answered without reading the project).
NOT_ON_SUCCESS = ("gpulaunch.records.explain", "packaging")

SCRIPT = """
import json, runpy, sys
watched = set(json.loads(sys.argv[2]))
sys.argv = ["gpulaunch", *json.loads(sys.argv[1])]
code = 0
try:
    runpy.run_module("gpulaunch", run_name="__main__")
except SystemExit as exit:
    code = exit.code
heavy = sorted(name for name in watched if name in sys.modules)
sys.stdout.write("\\nMODULES " + json.dumps([code, heavy]) + "\\n")
"""


def _loaded(cwd: Path, *args: str, **env: str) -> tuple[int, list[str], str]:
    watched = [*SDK_STACK, *NOT_ON_SUCCESS]
    argv = [sys.executable, "-c", SCRIPT, json.dumps(list(args)), json.dumps(watched)]
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env={**cli_env(), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    last = [line for line in proc.stdout.splitlines() if line.startswith("MODULES ")]
    assert last, proc.stderr[-3000:]
    code, heavy = json.loads(last[-1][len("MODULES ") :])
    return code, heavy, proc.stderr


def test_run_on_a_built_image_and_ps_import_no_docker_sdk_nor_failure_paths(app: Path) -> None:
    code, heavy, stderr = _loaded(app, "run", "--gpus", "0", "--", "true")
    assert code in (0, None), stderr
    assert "is up to date" in stderr, stderr  # the tag cache answered: no build
    assert heavy == [], f"`run -- true` imported {heavy}"

    code, heavy, stderr = _loaded(app, "ps", "--all")
    assert code in (0, None), stderr
    assert heavy == [], f"`ps` imported {heavy}"


def test_the_check_sees_the_sdk_when_a_command_needs_it(app: Path) -> None:
    """An engine that is not a local socket is reached through the SDK's session (its TLS
    and ssh): the same check reports the SDK for `ps` there (nothing listens on the port)."""
    _code, heavy, _stderr = _loaded(app, "ps", "--all", DOCKER_HOST="tcp://127.0.0.1:9")
    assert "docker" in heavy
