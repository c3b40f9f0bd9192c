"""examples/ci/github-cpu.yml, executed: its job's `run:` steps in order, against the real engine.

No hosted runner is reachable from here, so this is the closest real check of the workflow: the
YAML is parsed, each `run:` script runs with `bash -euo pipefail` in a temp copy of the offline
CPU example (the "checkout"), with the files and variables a GitHub runner provides
(`$GITHUB_OUTPUT`, `$GITHUB_PATH`, `$GITHUB_STEP_SUMMARY`, `$RUNNER_TEMP`), and every step must
exit 0. Then the JUnit file parses (junitparser) and the smoke step's summary has its section.

What stands in for GitHub, and why (each is also named where the code does it):

- `${{ matrix.torch }}`: the matrix's FIRST entry (the torch of the offline wheelhouse).
- `${{ steps.ID.outputs.NAME }}`: what step ID wrote to its `$GITHUB_OUTPUT`, as on GitHub.
- `${{ runner.temp }}` / `$RUNNER_TEMP`: a temp folder of this test.
- job env `SCRIPT`: `train_ddp.py`, the example's script (the workflow's knob for that name).
- the step "Install gpulaunch" (`pip install "$GPULAUNCH"` from PyPI) is REPLACED: it appends the
  bin folder of the venv this checkout is installed in (editable) to `$GITHUB_PATH`, so the
  later steps find this checkout's `gpulaunch` first; the test checks that they do.
- `uses:` steps need GitHub itself and are not run: checkout (the temp copy is the workspace),
  setup-python (the dev venv's Python 3.11), cache restore (a first run: `cache-hit` is
  'false'), cache save (nothing), upload-artifact (the test checks its paths exist instead).
- `if:` conditions: only the forms the workflow uses (`always()`, `A == 'x'`, `A != 'x'`); any
  other expression fails the test rather than being guessed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES, REPO
from junitparser import JUnitXml

from e2e.support import BUILD_TIMEOUT_S, link_wheels

pytestmark = pytest.mark.docker
WORKFLOW = EXAMPLES / "ci" / "github-cpu.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
DEV_BIN = Path(sys.executable).parent  # the venv that has this checkout installed (editable)
INSTALL_STEP = "Install gpulaunch"
REPLACED_INSTALL = 'echo "$DEV_BIN" >> "$GITHUB_PATH"'
JOB_ENV_OVERRIDES = {"SCRIPT": "train_ddp.py"}
# Outputs of the `uses:` steps on a first run (no cache yet): actions/cache/restore says miss.
USES_OUTPUTS = {"actions/cache/restore": {"cache-hit": "false"}}
STANDS_IN = {  # every action the workflow uses, and what replaces it here
    "actions/checkout": "the temp copy of examples/offline-cpu is the workspace",
    "actions/setup-python": "the dev venv's Python",
    "actions/cache/restore": "a cache miss",
    "actions/cache/save": "nothing kept",
    "actions/upload-artifact": "its paths are checked to exist",
}


class FakeRunner:
    """Just enough of a GitHub runner for this workflow: expressions, outputs, PATH, files."""

    def __init__(self, workspace: Path, temp: Path, matrix: dict[str, Any]) -> None:
        self.workspace = workspace
        self.temp = temp
        self.matrix = {name: values[0] for name, values in matrix.items()}  # first entry
        self.outputs: dict[str, dict[str, str]] = {}
        self.path: list[str] = []  # $GITHUB_PATH lines, newest first (as the runner prepends)
        self.summaries: dict[str, str] = {}

    def value(self, expression: str) -> str:
        if expression.startswith("matrix."):
            return str(self.matrix[expression.removeprefix("matrix.")])
        if expression == "runner.temp":
            return str(self.temp)
        step = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expression)
        if step:
            return self.outputs.get(step[1], {}).get(step[2], "")
        pytest.fail(f"no stand-in for the expression ${{{{ {expression} }}}}")

    def substitute(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.value(m[1]), text)

    def condition(self, text: str | None) -> bool:
        if text is None:
            return True  # success(): an earlier failure already stopped the test
        expression = EXPRESSION.sub(lambda m: m[1], str(text)).strip()
        if expression == "always()":
            return True
        compare = re.fullmatch(r"(\S+)\s*(==|!=)\s*'([^']*)'", expression)
        if compare is None:
            pytest.fail(f"no stand-in for the condition {text!r}")
        equal = self.value(compare[1]) == compare[3]
        return equal if compare[2] == "==" else not equal

    def env(
        self, job_env: dict[str, str], step: dict[str, Any], files: dict[str, Path]
    ) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
        # the dev venv is NOT on PATH until the replaced install step puts it there
        path = [p for p in base.get("PATH", "").split(os.pathsep) if p and Path(p) != DEV_BIN]
        base["PATH"] = os.pathsep.join([*self.path, *path])
        base.pop("VIRTUAL_ENV", None)
        base.update(NO_COLOR="1", COLUMNS="200", CI="true", GITHUB_ACTIONS="true")
        base.update(RUNNER_TEMP=str(self.temp), GITHUB_WORKSPACE=str(self.workspace))
        base.update({name: str(path) for name, path in files.items()})
        base.update({k: self.substitute(str(v)) for k, v in job_env.items()})
        base.update(JOB_ENV_OVERRIDES)
        base.update({k: self.substitute(str(v)) for k, v in (step.get("env") or {}).items()})
        return base

    def run(self, number: int, job_env: dict[str, str], step: dict[str, Any]) -> None:
        name = step.get("name", f"step {number}")
        files = {
            var: self.temp / f"step{number}-{var.lower()}"
            for var in ("GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")
        }
        for path in files.values():
            path.write_text("")
        env = self.env(job_env, step, files)
        env["DEV_BIN"] = str(DEV_BIN)
        script = REPLACED_INSTALL if name == INSTALL_STEP else self.substitute(step["run"])
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-euo", "pipefail", "-c", script],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        assert proc.returncode == 0, (
            f"step {name!r} exited {proc.returncode}\n$ {script}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
        if "id" in step:
            self.outputs[step["id"]] = dict(
                line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines()
            )
        added = [line for line in files["GITHUB_PATH"].read_text().splitlines() if line]
        self.path = [*reversed(added), *self.path]
        self.summaries[name] = files["GITHUB_STEP_SUMMARY"].read_text()


def _job() -> dict[str, Any]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    return dict(job)


def test_the_cpu_workflow_runs_its_steps_against_the_engine(
    docker_client: Any, example_copy: Any, tmp_path: Path
) -> None:
    job = _job()
    workspace = example_copy("offline-cpu")
    link_wheels(workspace)
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    runner = FakeRunner(workspace, temp, job["strategy"]["matrix"])
    assert runner.matrix == {"torch": "2.13.0"}  # the wheelhouse's torch: an offline build
    ran: list[str] = []
    skipped: list[str] = []
    try:
        for number, step in enumerate(job["steps"]):
            name = step.get("name", step.get("uses", f"step {number}"))
            if "uses" in step:
                action = step["uses"].split("@")[0]
                assert action in STANDS_IN, f"no stand-in for the action {action}"
                if action == "actions/upload-artifact" and runner.condition(step.get("if")):
                    for line in step["with"]["path"].split():
                        assert (workspace / line).exists(), f"{line} missing for {name!r}"
                if "id" in step:
                    runner.outputs[step["id"]] = dict(USES_OUTPUTS.get(action, {}))
                continue
            if not runner.condition(step.get("if")):
                skipped.append(name)
                continue
            runner.run(number, job.get("env") or {}, step)
            ran.append(name)
            if name == INSTALL_STEP:  # from here on, `gpulaunch` must be this checkout's
                where = subprocess.run(
                    ["bash", "-c", "command -v gpulaunch && python -c "
                     "'import gpulaunch; print(gpulaunch.__file__)'"],
                    env=runner.env({}, {}, {}), capture_output=True, text=True, check=True,
                )  # fmt: skip
                assert where.stdout.split() == [
                    str(DEV_BIN / "gpulaunch"),
                    str(REPO / "gpulaunch" / "__init__.py"),
                ]

        assert ran == ["Install gpulaunch", "Image tag", "Smoke", "Save the image"]
        assert skipped == ["Load the cached image"]  # a cache miss: the image is built, then saved
        tag = runner.outputs["tag"]["tag"]
        assert re.fullmatch(r"example-offline-cpu:gl-[0-9a-f]{12}", tag), tag

        suites = list(JUnitXml.fromfile(str(workspace / "smoke-junit.xml")))
        assert [(s.tests, s.failures, s.errors) for s in suites] == [(1, 0, 0)]
        (case,) = list(suites[0])
        assert case.name == "example-offline-cpu: train_ddp.py"
        assert "steps=2 ok" in (case.system_out or "")  # the script stopped after the smoke steps
        summary = runner.summaries["Smoke"]
        assert summary.startswith("### gpulaunch smoke: example-offline-cpu\n")
        assert "| result | ✅ **passed** (exit 0) |" in summary
        assert tag in summary  # the image smoke ran is the one the cache key names
        assert list((workspace / ".gpulaunch" / "logs").glob("smoke-*.log"))

        with tarfile.open(temp / "gpulaunch-image.tar") as saved:  # what the cache would keep
            member = saved.extractfile("manifest.json")
            assert member is not None
            manifest = json.loads(member.read())
        assert manifest[0]["RepoTags"] == [tag]
    finally:
        (temp / "gpulaunch-image.tar").unlink(missing_ok=True)  # ~1.4 GB
