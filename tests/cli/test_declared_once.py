"""Launch options are declared once: the commands that start or export a job (run, shell,
smoke, rerun, export and submit) share one typer declaration (gpulaunch/cli/app.py) for each
flag they take with the same meaning, so its words, type and limits cannot drift apart."""

from __future__ import annotations

import typing
from collections import defaultdict
from typing import Any

from typer.models import ArgumentInfo, OptionInfo

import gpulaunch.cli.ci as ci
import gpulaunch.cli.cluster as cluster
import gpulaunch.cli.jobs as jobs
import gpulaunch.cli.records as records

LAUNCHERS = {
    "run": jobs.run,
    "shell": jobs.shell,
    "smoke": ci.smoke,
    "rerun": records.rerun,
    "export k8s": cluster.export_k8s_cmd,
    "export slurm": cluster.export_slurm_cmd,
    "submit k8s": cluster.submit_k8s_cmd,
    "submit slurm": cluster.submit_slurm_cmd,
}


def _declarations() -> dict[tuple[str, ...], dict[int, list[str]]]:
    """(flag names, help) -> {id of the typer declaration: ["command parameter", ...]}."""
    found: dict[tuple[str, ...], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for command, fn in LAUNCHERS.items():
        hints = typing.get_type_hints(getattr(fn, "__wrapped__", fn), include_extras=True)
        for param, hint in hints.items():
            for info in getattr(hint, "__metadata__", ()):
                if isinstance(info, OptionInfo | ArgumentInfo):
                    key = (*_names(info, param), str(info.help))
                    found[key][id(info)].append(f"{command} {param}")
    return found


def _names(info: Any, param: str) -> tuple[str, ...]:
    """The flag's names as declared (typer keeps the first of an Annotated Option as default)."""
    first = [info.default] if isinstance(info.default, str) and info.default[:1] == "-" else []
    return tuple(first + list(info.param_decls or ())) or (f"<{param}>",)


def test_a_flag_said_alike_in_two_commands_is_one_declaration() -> None:
    copies = {
        key: sorted(users.values()) for key, users in _declarations().items() if len(users) > 1
    }
    assert copies == {}


def test_the_launch_options_are_shared() -> None:
    """The shared declarations reach the commands named (a flag dropped from one shows)."""
    users: dict[tuple[str, ...], list[list[str]]] = defaultdict(list)
    for key, by_id in _declarations().items():
        for names in by_id.values():
            users[key[:-1]].append(sorted(name.rsplit(" ", 1)[0] for name in names))
    exports = ["export k8s", "export slurm", "submit k8s", "submit slurm"]
    assert users[("--env", "-e")] == [sorted(["run", "shell", "smoke", *exports])]
    assert users[("--mount",)] == [["run", "shell", "smoke"]]
    assert users[("--network",)] == [["run", "shell", "smoke"]]
    assert users[("<rebuild>",)] == [["run", "shell", "smoke"], ["rerun"]]  # rerun's: its own
    assert users[("<nproc>",)] == [["run", "smoke"], sorted(exports)]  # export's: per node
    for each in ("<precision>", "<nccl>"):
        assert users[(each,)] == [sorted(["run", "smoke", *exports])], each
    assert users[("<profile>",)] == [sorted(["run", "shell", "smoke", *exports])]
    assert users[("<numa>",)] == [["run", "smoke"]]
    assert users[("--config", "-c")] == [sorted(["run", "shell", "smoke", "rerun", *exports])]
    assert users[("--set",)] == [["run", "shell", "smoke"]]
