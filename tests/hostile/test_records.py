"""Hostile run records: a record is data, never authority.

A job can write `.gpulaunch/runs/` (the project is mounted read-write), so `rerun` reads a
record only when this user's gpulaunch sealed it, and even a sealed one asks for nothing a
`run` flag could not: each case is exit 2, one line naming the field, nothing run, nothing
changed inside or outside the project.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.records.seal import seal
from hostile.conftest import Hostile


def _recorded(hostile: Hostile) -> tuple[Path, dict[str, Any]]:
    """A real record: `run --no-container train.py` in the project."""
    assert hostile.invoke("run", "--no-container", "train.py").code == 0
    (path,) = (hostile.project / ".gpulaunch" / "runs").glob("*.json")
    record = json.loads(path.read_text())
    record.pop("seal")
    return path, record


def _plant(hostile: Hostile) -> dict[str, Any]:
    """What a forged record asks for: a shell command on the host that leaves a mark outside."""
    mark = hostile.outside / "pwned"
    return {"command": ["sh", "-c", f"touch {mark}"], "script": None, "args": []}


# (id, change to the record's options (or a top-level field with a `.`), names in the error line)
SEALED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("nproc-negative", {"nproc": -5}, ("--nproc", "-5")),
    ("nproc-too-many", {"nproc": 5000}, ("--nproc",)),
    ("nproc-string", {"nproc": "5"}, ("options.nproc", "--nproc")),
    ("nproc-bool", {"nproc": True}, ("options.nproc",)),
    ("restarts-huge", {"restarts": 10_000}, ("--restarts",)),
    ("restarts-negative", {"restarts": -1}, ("--restarts",)),
    ("unknown-privileged", {"privileged": True}, ("options.privileged", "no `run` flag")),
    ("unknown-cap-add", {"cap_add": ["SYS_ADMIN"]}, ("options.cap_add",)),
    ("unknown-devices", {"devices": ["/dev/mem"]}, ("options.devices",)),
    ("network-bridge", {"network": "bridge"}, ("--network",)),
    ("mounts-not-strings", {"mounts": [{"source": "/etc"}]}, ("options.mounts", "--mount")),
    ("mounts-not-a-list", {"mounts": "/etc/shadow:/x"}, ("options.mounts",)),
    ("mount-comma-smuggle", {"mounts": [".:/data,source=/etc"]}, ("--mount", "commas")),
    ("mount-missing-host", {"mounts": ["nope:/data"]}, ("--mount", "does not exist")),
    ("env-bad-name", {"env": ["1A=b"]}, ("--env", "variable name")),
    ("env-newline", {"env": ["A=b\nc"]}, ("--env",)),
    ("gpus-newline", {"gpus": "0\n"}, ("--gpus",)),
    ("gpus-int", {"gpus": 2}, ("options.gpus",)),
    ("profile-empty", {"profile": " "}, ("--profile", "empty")),
    ("image-bad-ref", {"image": "UPPER/Case@sha256:zz"}, ("--image",)),
    ("detach-on-host", {"detach": True}, ("--detach", "--no-container")),
    ("command-with-script", {"command": ["true"]}, ("-- COMMAND", "SCRIPT")),
    ("options-not-object", {".options": ["--privileged"]}, ("options",)),
    ("mode-mismatch", {".mode": "container"}, ("mode", "no_container")),
    ("price-bad", {".price_per_gpu_hour": "1e999"}, ("price_per_gpu_hour",)),
    ("price-number", {".price_per_gpu_hour": 3}, ("price_per_gpu_hour",)),
    ("cwd-newline", {".cwd": "/x\n/y"}, ("cwd",)),
    ("config-file-number", {".config_file": 7}, ("config_file",)),
    ("script-outside", {"script": "../../../bin/sh"}, ("script",)),
]


def _changed(record: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(record))
    for key, value in change.items():
        if key.startswith("."):
            out[key[1:]] = value
        else:
            out["options"][key] = value
    return out


@pytest.mark.parametrize(("change", "names"), [pytest.param(c, n, id=i) for i, c, n in SEALED])
def test_a_sealed_record_asks_for_nothing_a_flag_would_refuse(
    hostile: Hostile, change: dict[str, Any], names: tuple[str, ...]
) -> None:
    path, record = _recorded(hostile)
    path.write_text(json.dumps(seal(_changed(record, change))))
    hostile.invoke_unchanged("rerun", record["id"]).assert_clean_error(2, *names)


def test_a_recorded_config_that_fails_validation_is_one_line(hostile: Hostile) -> None:
    path, record = _recorded(hostile)
    record["config"]["launch"]["gpus"] = "lots"
    path.write_text(json.dumps(seal(record)))
    line = hostile.invoke_unchanged("rerun", record["id"]).assert_clean_error(
        2, "recorded config", "launch.gpus"
    )
    assert "validation error" not in line and "errors.pydantic.dev" not in line


# (id, how the forged record is sealed: given the planted record and the honest one's seal)
FORGED: list[tuple[str, Any]] = [
    ("unsealed", lambda rec, honest: rec),
    ("honest-seal-kept-after-edit", lambda rec, honest: {**rec, "seal": honest}),
    ("seal-of-another-key", lambda rec, honest: {**rec, "seal": "hmac-sha256:" + "0" * 64}),
    ("seal-not-a-string", lambda rec, honest: {**rec, "seal": {"sha256": honest}}),
]


@pytest.mark.parametrize("forge", [pytest.param(f, id=i) for i, f in FORGED])
def test_a_forged_record_runs_nothing(hostile: Hostile, forge: Any) -> None:
    """A job that rewrote a record to run a shell command on the host (as the user, root)."""
    path, record = _recorded(hostile)
    honest = seal(record)["seal"]
    record["options"].update(_plant(hostile))
    path.write_text(json.dumps(forge(record, honest)))
    hostile.invoke_unchanged("rerun", record["id"]).assert_clean_error(2, "seal")
    assert not (hostile.outside / "pwned").exists()


def test_history_skips_a_forged_record_and_never_reseals_it(hostile: Hostile) -> None:
    path, record = _recorded(hostile)
    record["options"].update(_plant(hostile))
    record["state"] = "running"  # what reconcile would complete and write back
    path.write_text(json.dumps(record))
    outcome = hostile.invoke_unchanged("history", "--json")
    assert outcome.code == 0
    assert json.loads(outcome.stdout)["runs"] == []
    assert "seal" in outcome.stderr and path.name in outcome.stderr


def test_every_run_option_has_its_flag_check() -> None:
    """A new `run` flag needs its row, or `rerun` would refuse every record that carries it."""
    import dataclasses

    from gpulaunch.jobs.options import FLAGS
    from gpulaunch.launch.plan import RunOptions

    assert set(FLAGS) == {f.name for f in dataclasses.fields(RunOptions)}


@pytest.mark.parametrize("image_id", ["alpine", "sha256:XYZ", "sha256:" + "0" * 63, "--rm"])
def test_a_recorded_image_id_must_be_one(image_id: str) -> None:
    """`rerun` hands the record's image id to the engine: an id, never a name or a flag."""
    from gpulaunch.errors import ConfigError
    from gpulaunch.jobs.rerun import reuse_image
    from gpulaunch.records.store import RunRecord

    class Engine:
        def image_exists(self, ref: str) -> bool:
            raise AssertionError(f"the engine was asked about {ref!r}")

    record = {"id": "20261203-201500-a1b2c3", "mode": "container", "image": {"id": image_id}}
    with pytest.raises(ConfigError, match=r"image\.id"):
        reuse_image(object(), RunRecord.from_json(record), Engine())


def test_no_record_key_is_a_warning_and_the_job_runs(hostile: Hostile) -> None:
    """The key cannot be made (its folder is a file): the job runs, the record is not written."""
    blocker = hostile.outside / "state-is-a-file"
    blocker.write_text("")
    hostile.monkeypatch.setenv("GPULAUNCH_STATE_DIR", str(blocker / "gpulaunch"))
    outcome = hostile.invoke("run", "--no-container", "train.py")
    assert outcome.code == 0, outcome.stderr
    assert "warning: run record not written" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert not list((hostile.project / ".gpulaunch" / "runs").glob("*.json"))
