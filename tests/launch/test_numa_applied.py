"""The NUMA plan shown is the binding applied (issue 31 §2): on the dgx8 fixture, for every
form of command, `run --dry-run --json` shows a per-rank plan exactly when the argv starts
the ranks through the binding wrapper; a launcher gpulaunch did not start gets "not applied".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from affinity_check import FIXTURES
from conftest import EXAMPLES
from typer.testing import CliRunner

from gpulaunch.cli.app import app

WRAPPER = "/opt/gpulaunch/bin/numa_bind.py"

FORMS = [
    # (id, gpus, argv after `run`, bound?)
    ("script-2", "2", ["train_ddp.py"], True),
    ("script-1", "1", ["train_ddp.py"], True),
    ("module-2", "2", ["--", "python", "-m", "train_ddp"], True),
    ("module-1", "1", ["--", "python", "-m", "train_ddp"], True),
    ("python-file-1", "1", ["--", "python", "train_ddp.py"], True),
    ("python3-file-1", "1", ["--", "python3", "-u", "train_ddp.py"], True),
    ("python-file-2", "2", ["--", "python", "train_ddp.py"], False),  # one process, two GPUs
    ("own-torchrun", "2", ["--", "torchrun", "--nproc-per-node", "2", "train_ddp.py"], False),
    (
        "own-torchrun-binding",
        "2",
        ["--", "torchrun", "--numa-binding", "node", "--nproc-per-node", "2", "train_ddp.py"],
        False,
    ),
    ("accelerate", "2", ["--", "accelerate", "launch", "train_ddp.py"], False),
    ("shell", "1", ["--", "sh", "-c", "python train_ddp.py"], False),
]


@pytest.mark.parametrize(
    ("gpus", "argv", "bound"), [pytest.param(g, a, b, id=i) for i, g, a, b in FORMS]
)
@pytest.mark.parametrize("host", [False, True], ids=["container", "host"])
def test_the_plan_is_shown_exactly_when_the_argv_binds(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    gpus: str,
    argv: list[str],
    bound: bool,
    host: bool,
) -> None:
    import shutil

    project = tmp_path / "ddp"
    shutil.copytree(EXAMPLES / "ddp", project)
    monkeypatch.setenv("GPULAUNCH_SYSFS_ROOT", str(FIXTURES / "dgx8"))
    monkeypatch.chdir(project)
    mode = ["--no-container"] if host else []
    head, tail = (
        (argv, []) if "--" not in argv else (argv[: argv.index("--")], argv[argv.index("--") :])
    )
    result = runner.invoke(
        app, ["run", "--gpus", gpus, "--numa", "node", *mode, "--dry-run", "--json", *head, *tail]
    )
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    command = plan["run"]["command"]
    wrappers = [part for part in command if part.endswith("numa_bind.py")]
    assert bool(plan["numa_plan"]) is bound, plan["numa_plan"]
    assert len(wrappers) == (1 if bound else 0), command
    assert ("GPULAUNCH_NUMA_PLAN" in plan["run"]["env"]) is bound
    if bound:
        assert len(plan["numa_plan"]) == int(gpus)
        if not host:
            assert wrappers == [WRAPPER]
            targets = {m["target"] for m in plan["run"]["options"]["mounts"]}
            assert WRAPPER in targets
    else:
        assert any("NUMA binding not applied" in note for note in plan["notes"]), plan["notes"]
