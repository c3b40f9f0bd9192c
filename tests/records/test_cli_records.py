"""`run` writes records, `history` lists them, `rerun` repeats one: through the typer app,
with `--no-container` jobs (the real-engine side is tests/e2e/test_records.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.records.seal import seal

JOB = """\
import os, sys, pathlib
out = pathlib.Path(sys.argv[1])
count = out.with_suffix(".count")
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
with out.open("a") as fh:
    fh.write(f"attempt {n} args {sys.argv[2:]} token {os.environ.get('API_TOKEN')}\\n")
fail_until = int(os.environ.get("FAIL_UNTIL", "0"))
sys.exit(3 if n <= fail_until else 0)
"""


def invoke(runner: CliRunner, *args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False, env=env)


@pytest.fixture
def project(in_tmp: Path) -> Path:
    (in_tmp / "gpulaunch.yaml").write_text(
        "version: 1\nname: demo\nimage: {torch: none, cuda: cpu}\n"
        "launch: {gpus: 0, price_per_gpu_hour: 2.49}\n"
    )
    (in_tmp / "job.py").write_text(JOB)
    return in_tmp


def _records(project: Path) -> list[dict[str, Any]]:
    runs = project / ".gpulaunch" / "runs"
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*.json"))]


def test_run_writes_a_record_and_history_lists_it(runner: CliRunner, project: Path) -> None:
    result = invoke(runner, "run", "--no-container", "-e", "API_TOKEN=s3cr3t-val", "job.py",
                    "out.txt", "a")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (rec,) = _records(project)
    assert rec["state"] == "succeeded" and rec["exit_code"] == 0 and rec["mode"] == "host"
    assert rec["price_per_gpu_hour"] == "2.49" and rec["cost"] == "0.00"
    assert rec["options"]["script"] == "job.py" and rec["options"]["args"] == ["out.txt", "a"]
    assert "s3cr3t-val" in (project / "out.txt").read_text()  # the job got it
    assert "s3cr3t-val" not in json.dumps(rec)  # the record did not
    result = invoke(runner, "history")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "START", "STATE", "COMMAND", "IMAGE", "GPUS", "DURATION",
                                "EXIT", "GPU-H", "COST"]  # fmt: skip
    assert rec["id"] in lines[1] and "succeeded" in lines[1] and "(host)" in lines[1]
    assert lines[-1] == "total: 1 run(s), 0.0000 GPU-hours, " + lines[-1].split(", ")[2] + (
        ", cost 0.00"
    )


def test_failing_run_and_json_history(runner: CliRunner, project: Path) -> None:
    env = {"FAIL_UNTIL": "5"}
    assert invoke(runner, "run", "--no-container", "job.py", "o.txt", env=env).exit_code == 3
    assert invoke(runner, "run", "--no-container", "job.py", "p.txt").exit_code == 0
    result = invoke(runner, "history", "--json")
    data = json.loads(result.stdout)
    assert [r["state"] for r in data["runs"]] == ["succeeded", "failed"]
    assert data["runs"][1]["exit_code"] == 3
    assert data["totals"]["runs"] == 2 and data["totals"]["cost"] == "0.00"
    one = json.loads(invoke(runner, "history", "--json", "-n", "1").stdout)
    assert [r["id"] for r in one["runs"]] == [data["runs"][0]["id"]]
    assert json.loads(invoke(runner, "history", "--json", "--since", "2d").stdout) == data
    later = json.loads(invoke(runner, "history", "--json", "--since", "2999-01-01").stdout)
    assert later["runs"] == [] and later["totals"]["cost"] is None


def test_restarts_fail_then_succeed(runner: CliRunner, project: Path) -> None:
    result = invoke(runner, "run", "--no-container", "--restarts", "2", "job.py", "r.txt",
                    env={"FAIL_UNTIL": "1"})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "attempt 1 exited 3; restarting (1/2)" in result.stderr
    (rec,) = _records(project)
    assert rec["restarts"]["max"] == 2 and rec["restarts"]["count"] == 1
    assert [a["exit_code"] for a in rec["restarts"]["attempts"]] == [3, 0]
    assert (project / "r.txt").read_text().count("attempt") == 2


def test_restarts_give_up_after_n(runner: CliRunner, project: Path) -> None:
    result = invoke(runner, "run", "--no-container", "--restarts", "1", "job.py", "g.txt",
                    env={"FAIL_UNTIL": "9"})  # fmt: skip
    assert result.exit_code == 3
    (rec,) = _records(project)
    assert rec["restarts"]["count"] == 1 and rec["state"] == "failed"


def test_rerun_repeats_the_command_with_extra_args(runner: CliRunner, project: Path) -> None:
    assert invoke(runner, "run", "--no-container", "job.py", "x.txt", "first").exit_code == 0
    (rec,) = _records(project)
    result = invoke(runner, "rerun", rec["id"], "--", "more")
    assert result.exit_code == 0, result.stderr
    assert f"rerun of {rec['id']}" in result.stderr
    lines = (project / "x.txt").read_text().splitlines()
    assert lines == [
        "attempt 1 args ['first'] token None",
        "attempt 2 args ['first', 'more'] token None",
    ]
    again = [r for r in _records(project) if r["id"] != rec["id"]]
    assert again[0]["rerun_of"] == rec["id"]


def test_current_code_on_a_host_mode_record_is_a_usage_error(
    runner: CliRunner, project: Path
) -> None:
    """A host-mode rerun always runs today's tree: --current-code there is one line, exit 2,
    and nothing runs or is recorded."""
    assert invoke(runner, "run", "--no-container", "job.py", "s.txt", "a").exit_code == 0
    (rec,) = _records(project)
    result = invoke(runner, "rerun", rec["id"], "--current-code")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        "gpulaunch: error: --current-code: a host-mode run always runs the tree as it is now"
    ]
    assert len(_records(project)) == 1


def test_rerun_shows_the_line_it_runs_and_a_changed_command(
    runner: CliRunner, project: Path
) -> None:
    """History shows the recorded command; rerun prints what runs, and says so when they differ."""
    assert invoke(runner, "run", "--no-container", "job.py", "s.txt", "a").exit_code == 0
    (rec,) = _records(project)
    result = invoke(runner, "rerun", rec["id"])
    assert result.exit_code == 0, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("rerun of")]
    assert line.startswith(f"rerun of {rec['id']} on this host: env ")
    assert line.endswith(" ".join(rec["command"]))
    assert "recorded `" not in result.stderr  # the command is the recorded one
    assert "note: this host runs today's tree; it differs from the run's: git cannot tell" in (
        result.stderr
    )

    path = project / ".gpulaunch" / "runs" / f"{rec['id']}.json"
    path.write_text(json.dumps(seal(dict(rec, command=["python", "/elsewhere/job.py"]))))
    changed = invoke(runner, "rerun", rec["id"])
    assert changed.exit_code == 0, changed.stderr
    assert f"note: {rec['id']} recorded `python /elsewhere/job.py`" in changed.stderr


def test_rerun_takes_a_masked_secret_from_the_environment(runner: CliRunner, project: Path) -> None:
    args = ("run", "--no-container", "-e", "API_TOKEN=first-secret", "job.py", "t.txt")
    assert invoke(runner, *args).exit_code == 0
    (rec,) = _records(project)
    result = invoke(runner, "rerun", rec["id"])
    assert result.exit_code == 2
    assert result.stderr == (
        "gpulaunch: error: rerun: --env API_TOKEN was a secret (masked in the record); "
        "set API_TOKEN in the environment to rerun\n"
    )
    assert invoke(runner, "rerun", rec["id"], env={"API_TOKEN": "again"}).exit_code == 0
    assert (project / "t.txt").read_text().splitlines()[-1].endswith("token again")


def test_rerun_refuses_a_masked_part_of_the_arguments(runner: CliRunner, project: Path) -> None:
    """`--api_key=***` in the record: the secret is gone, and passing the mask on would run
    the job with a wrong value."""
    assert (
        invoke(runner, "run", "--no-container", "job.py", "k.txt", "--api_key=abc123").exit_code
        == 0
    )
    (rec,) = _records(project)
    assert rec["options"]["args"] == ["k.txt", "--api_key=***"]
    before = (project / "k.txt").read_text()

    result = invoke(runner, "rerun", rec["id"])

    assert result.exit_code == 2
    assert result.stderr.startswith(
        "gpulaunch: error: rerun: options.args[1] ('--api_key=***') holds a masked secret"
    )
    assert result.stderr.count("\n") == 1
    assert (project / "k.txt").read_text() == before  # the job did not run


def test_rerun_restores_a_masked_url_credential_from_the_current_config(
    runner: CliRunner, project: Path
) -> None:
    config = project / "gpulaunch.yaml"
    config.write_text(
        config.read_text().replace(
            "launch: {", "launch: {env: {MIRROR: 'https://bob:pw1@mirror/simple'}, "
        )
    )
    (project / "env.py").write_text(
        "import os, pathlib\npathlib.Path('m.txt').open('a').write(os.environ['MIRROR'] + '\\n')\n"
    )
    assert invoke(runner, "run", "--no-container", "env.py").exit_code == 0
    (rec,) = _records(project)
    assert rec["config"]["launch"]["env"]["MIRROR"] == "https://***@mirror/simple"

    assert invoke(runner, "rerun", rec["id"]).exit_code == 0  # same credential: restored
    config.write_text(config.read_text().replace("mirror/simple", "other/simple"))
    changed = invoke(runner, "rerun", rec["id"])  # the config no longer masks to the record
    assert changed.exit_code == 2
    assert "config.launch.env.MIRROR was a secret" in changed.stderr
    assert (project / "m.txt").read_text().splitlines() == ["https://bob:pw1@mirror/simple"] * 2


def test_rerun_runs_in_the_project_it_was_found_in(runner: CliRunner, project: Path) -> None:
    """A moved or copied checkout: the record's old path is not where the job runs."""
    (project / "sub").mkdir()
    assert invoke(runner, "run", "--no-container", "job.py", "w.txt").exit_code == 0
    (rec,) = _records(project)
    path = project / ".gpulaunch" / "runs" / f"{rec['id']}.json"
    moved = dict(rec, project="/nonexistent/old-checkout", cwd="/nonexistent/old-checkout")
    path.write_text(json.dumps(seal(moved)))  # as gpulaunch wrote it in the old checkout

    result = invoke(runner, "rerun", rec["id"])

    assert result.exit_code == 0, result.stderr
    assert (project / "w.txt").read_text().count("attempt") == 2  # ran here, on this job.py
    assert len(_records(project)) == 2  # and its record is here too


def test_a_record_with_a_wrong_shape_is_skipped_not_a_crash(
    runner: CliRunner, project: Path
) -> None:
    assert invoke(runner, "run", "--no-container", "job.py", "s.txt").exit_code == 0
    (rec,) = _records(project)
    runs = project / ".gpulaunch" / "runs"
    bad = "20200101-000000-000003"
    (runs / f"{bad}.json").write_text(
        json.dumps(dict(rec, id=bad, image="sha256:abc", cost="Infinity"))
    )
    history = invoke(runner, "history", "--json")
    assert history.exit_code == 0
    assert [r["id"] for r in json.loads(history.stdout)["runs"]] == [rec["id"]]
    assert "image is not a JSON object" in history.stderr
    rerun = invoke(runner, "rerun", bad)
    assert rerun.exit_code == 2 and "image is not a JSON object" in rerun.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("rerun", "nope"), "ID: 'nope' is not a run id (see `gpulaunch history`)"),
        (("history", "--since", "soon"), "--since: 'soon' is not a date"),
        (("history", "--since", "999999w"), "--since: '999999w' reaches before the year 1"),
        (("run", "--no-container", "--price", "-1", "job.py"), "--price: '-1' is not a price"),
        (("run", "--no-container", "--price", "1e3", "job.py"), "--price: '1e3' is not a price"),
    ],
)
def test_bad_input_is_one_line(
    runner: CliRunner, project: Path, args: tuple[str, ...], message: str
) -> None:
    before = snapshot(project)
    result = invoke(runner, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"gpulaunch: error: {message}")
    assert result.stderr.count("\n") == 1
    assert snapshot(project) == before


def test_rerun_of_an_unknown_id(runner: CliRunner, project: Path) -> None:
    result = invoke(runner, "rerun", "20261203-201500-a1b2c3")
    assert result.exit_code == 2
    assert "no run record 20261203-201500-a1b2c3" in result.stderr


def test_bad_config_price(runner: CliRunner, project: Path) -> None:
    (project / "gpulaunch.yaml").write_text(
        "version: 1\nname: demo\nlaunch: {gpus: 0, price_per_gpu_hour: cheap}\n"
    )
    result = invoke(runner, "history")
    assert result.exit_code == 2
    assert "launch.price_per_gpu_hour" in result.stderr and "is not a price" in result.stderr


def test_dry_run_writes_no_record(runner: CliRunner, project: Path) -> None:
    result = invoke(runner, "run", "--no-container", "--dry-run", "job.py", "d.txt")
    assert result.exit_code == 0, result.stderr
    assert not (project / ".gpulaunch" / "runs").exists()


def test_bad_records_warn_and_run_and_history_still_work(runner: CliRunner, project: Path) -> None:
    runs = project / ".gpulaunch" / "runs"
    runs.mkdir(parents=True)
    (runs / "20261203-201501-000000.json").write_text("{corrupt")
    (runs / "20261203-201502-000000.json").write_text(
        json.dumps({"schema_version": 2, "id": "20261203-201502-000000"})
    )
    assert invoke(runner, "run", "--no-container", "job.py", "w.txt").exit_code == 0
    result = invoke(runner, "history", "--json")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["runs"]) == 1
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2 and all(w.startswith("warning: skipped ") for w in warnings)
    assert "schema_version 2 is newer than this gpulaunch reads (1)" in result.stderr


def test_unwritable_records_do_not_stop_a_run(runner: CliRunner, project: Path) -> None:
    (project / ".gpulaunch").mkdir()
    (project / ".gpulaunch" / "runs").symlink_to(project / "elsewhere")
    result = invoke(runner, "run", "--no-container", "job.py", "u.txt")
    assert result.exit_code == 0
    assert "warning: run record not written:" in result.stderr
    assert not (project / "elsewhere").exists()
    assert sys.executable  # the job itself ran
    assert (project / "u.txt").exists()
