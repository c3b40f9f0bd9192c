"""Smaller classes at `run`'s edge: an empty command after `--`, `--nproc` with a raw command,
and mounts that hand the container the host through a folder that holds the Docker socket or
the home folder (`/run`, `/var/run`), including `launch.checkpoint_dir`.
"""

from __future__ import annotations

import pytest

from hostile.conftest import MINIMAL_CONFIG, Hostile


@pytest.mark.parametrize("command", [[""], [" "], ["", "x"]])
def test_an_empty_command_after_dashdash_is_exit_2(hostile: Hostile, command: list[str]) -> None:
    for extra in ((), ("--dry-run",)):
        outcome = hostile.invoke_unchanged("run", *extra, "--", *command)
        outcome.assert_clean_error(2, "command after --", "empty")


@pytest.mark.parametrize("command", [["./job.sh"], ["python", "train.py"], ["bash", "-c", "x"]])
def test_nproc_with_a_raw_command_is_refused(hostile: Hostile, command: list[str]) -> None:
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--nproc", "2", "--", *command)
    outcome.assert_clean_error(2, "--nproc 2", "python -m MODULE")


@pytest.mark.parametrize(
    "command", [["python", "-m", "pkg.train"], ["torchrun", "--nproc-per-node", "2", "t.py"]]
)
def test_nproc_with_a_module_or_torchrun_is_fine(hostile: Hostile, command: list[str]) -> None:
    outcome = hostile.invoke_unchanged("run", "--dry-run", "--nproc", "2", "--", *command)
    assert outcome.code == 0, outcome
    assert "torchrun" in outcome.stdout


NETWORK_CONFIG = MINIMAL_CONFIG + "  network: {launch}\n  profile: p\nprofiles:\n  p:\n{docker}"


@pytest.mark.parametrize(
    ("launch", "profile", "flag", "expected"),
    [
        ("none", "host", None, "host"),  # the selected profile is above launch:
        ("host", "none", None, "none"),
        ("none", None, None, "none"),  # no profile network: launch.network
        ("none", "host", "none", "none"),  # --network above all
        ("host", None, "default", None),
    ],
)
def test_one_network_precedence_that_profiles_show_reports(
    hostile: Hostile, launch: str, profile: str | None, flag: str | None, expected: str | None
) -> None:
    docker = f"    docker:\n      network: {profile}\n" if profile else "    env: {A: '1'}\n"
    hostile.write_config(NETWORK_CONFIG.format(launch=launch, docker=docker))
    shown = hostile.invoke_unchanged("profiles", "show", "p")
    assert shown.code == 0, shown
    line = next(x for x in shown.stdout.splitlines() if x.strip().startswith("network"))
    if flag is None:
        assert line.split("=")[1].split()[0] == expected, line
    extra = ("--network", flag) if flag else ()
    run = hostile.invoke_unchanged("run", "--dry-run", *extra, "train.py")
    assert run.code == 0, run
    assert (f"--network {expected}" in run.stdout) if expected else "--network" not in run.stdout
