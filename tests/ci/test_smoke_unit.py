"""`gpulaunch smoke` without an engine: GPU choice, reports, bad input (exit 2, nothing written)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot
from fake_nvml import FakeNvml, install
from junitparser import Error, Failure, JUnitXml
from typer.testing import CliRunner

from gpulaunch.ci import gpus as ci_gpus
from gpulaunch.ci.report import append_summary, check_output_file, junit_xml, write_junit
from gpulaunch.ci.smoke import SmokeOptions, SmokeResult, _Capture, _Clock, _Tee
from gpulaunch.cli import app
from gpulaunch.errors import ConfigError, EngineError

CONFIG = """\
version: 1
name: demo
image: {python: "3.11", torch: "2.4.1", flavor: cpu}
launch: {gpus: 0}
"""


class FakeEngine:
    """create_container either refuses like an engine without the NVIDIA runtime or starts."""

    def __init__(self, runtime: bool, host: str = "unix:///var/run/docker.sock") -> None:
        self.runtime = runtime
        self.host = host  # as Engine.host resolves it (DOCKER_HOST, else the docker context)
        self.created: list[dict[str, Any]] = []
        self.discarded: list[Any] = []

    def create_container(self, kwargs: dict[str, Any]) -> Any:
        self.created.append(kwargs)
        if not self.runtime:
            raise EngineError(
                "the Docker engine has no NVIDIA GPU runtime (could not select device driver "
                '"" with capabilities [[gpu]])'
            )
        return object()

    def discard(self, container: Any) -> None:
        self.discarded.append(container)


class _Job:
    build = None  # not built in these tests: the CUDA question is left to the engine

    class plan:
        class run:
            image = "demo:gl-123"

    class spec:
        class cfg:
            name = "demo"


def _choose(engine: FakeEngine, require: bool = False, gpus: str = "auto") -> tuple[str, Any]:
    return ci_gpus.choose_gpus(engine, _Job, SmokeOptions(gpus=gpus, require_gpu=require), {})


def test_auto_without_nvml_falls_back_without_a_probe() -> None:
    engine = FakeEngine(runtime=True)
    gpus, notice = _choose(engine)
    assert gpus == "0"
    assert notice == "no GPU: NVML found no driver (no nvidia-ml-py, no NVIDIA driver, or no GPU)"
    assert engine.created == []  # a CPU runner pays for no probe container


def test_auto_with_gpus_and_runtime_takes_them_all(fake_nvml: FakeNvml) -> None:
    engine = FakeEngine(runtime=True)
    assert _choose(engine) == ("all", None)
    (probe,) = engine.created
    assert probe["Cmd"] == ["true"]  # the engine's create body (runspec.create_body)
    assert probe["Labels"]["io.gpulaunch.run-id"]  # ours, like any job
    assert probe["HostConfig"]["DeviceRequests"][0]["Count"] == -1
    assert len(engine.discarded) == 1


def test_auto_with_gpus_but_no_runtime_falls_back(fake_nvml: FakeNvml) -> None:
    gpus, notice = _choose(FakeEngine(runtime=False))
    assert gpus == "0"
    assert notice is not None and "no NVIDIA GPU runtime" in notice


def test_require_gpu_without_runtime_is_exit_3_naming_the_toolkit(fake_nvml: FakeNvml) -> None:
    with pytest.raises(EngineError) as caught:
        _choose(FakeEngine(runtime=False), require=True)
    assert caught.value.exit_code == 3
    assert "no NVIDIA GPU runtime" in caught.value.message
    assert caught.value.hint is not None and "NVIDIA Container Toolkit" in caught.value.hint


def test_require_gpu_without_gpus_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([], driver="550.54.15"))
    with pytest.raises(EngineError) as caught:
        _choose(FakeEngine(runtime=True), require=True)
    assert "lists no GPU" in caught.value.message
    assert caught.value.hint is not None and "nvidia-smi" in caught.value.hint


def test_auto_with_a_cpu_build_stays_on_the_cpu(fake_nvml: FakeNvml) -> None:
    class CpuJob(_Job):
        class build:
            class plan:
                class resolved:
                    cuda = None

    engine = FakeEngine(runtime=True)
    got = ci_gpus.choose_gpus(engine, CpuJob, SmokeOptions(), {})
    assert got == ("0", "the image is a CPU build (image.cuda: cpu)")
    assert engine.created == []
    with pytest.raises(ConfigError, match="is a CPU build"):
        ci_gpus.choose_gpus(engine, CpuJob, SmokeOptions(require_gpu=True), {})


def test_clock_sets_stop_only_after_the_timeout() -> None:
    clock = _Clock(0.2)
    clock.started(None)  # type: ignore[arg-type]
    assert not clock.stop.is_set()
    assert clock.stop.wait(5)
    assert not clock.timed_out  # nothing stopped a job for it yet
    clock.stop.honoured = True  # what supervise does when it sends SIGTERM for the request
    assert clock.timed_out
    early = _Clock(30)
    early.started(None)  # type: ignore[arg-type]
    early.finished(None)  # type: ignore[arg-type]
    assert not early.timed_out and not early.stop.is_set()


def test_tee_passes_bytes_through_and_masks_the_log() -> None:
    log = io.StringIO()
    capture = _Capture(log)
    target = io.BytesIO()
    tee = _Tee(target, capture)
    tee.write(b"API_TOKEN=abc123 li")
    tee.write(b"ne\nsecond")
    tee.close_line()
    assert target.getvalue() == b"API_TOKEN=abc123 line\nsecond"
    assert "abc123" not in log.getvalue()
    assert list(capture.tail)[-1] == "second"


def _result(outcome: str, **extra: Any) -> SmokeResult:
    base: dict[str, Any] = {
        "project": "demo",
        "command": "train.py --fast",
        "outcome": outcome,
        "duration": 3.25,
        "started_at": "2026-12-03T10:00:00Z",
        "image": "demo:gl-abc",
        "versions": {"torch": "2.4.1"},
        "tail": ["line 1", "ValueError: boom \x1b[31mred\x1b[0m \x00"],
        "output": "line 1\nValueError: boom",
    }
    base.update(extra)
    return SmokeResult(**base)


@pytest.mark.parametrize(
    ("outcome", "kind", "cls"),
    [("failed", "exit", Failure), ("timeout", "timeout", Failure), ("error", "error", Error)],
)
def test_junit_failure_parses(tmp_path: Path, outcome: str, kind: str, cls: type) -> None:
    path = tmp_path / "junit.xml"
    write_junit(_result(outcome, message=f"the job {outcome}"), path)
    suite = next(iter(JUnitXml.fromfile(str(path))))
    assert suite.tests == 1
    (case,) = list(suite)
    assert case.name == "demo: train.py --fast"
    assert case.time == pytest.approx(3.25)
    (problem,) = case.result
    assert isinstance(problem, cls)
    assert problem.type == kind
    assert "ValueError: boom red" in (problem.text or "")  # ANSI gone, NUL replaced


def test_junit_pass_has_no_failure(tmp_path: Path) -> None:
    text = junit_xml(_result("passed", tail=["ok"], output="ok"))
    path = tmp_path / "j.xml"
    path.write_text(text)
    suite = next(iter(JUnitXml.fromfile(str(path))))
    assert (suite.tests, suite.failures, suite.errors) == (1, 0, 0)
    assert next(iter(suite)).system_out == "ok"


def test_summary_is_appended_markdown(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("earlier step\n")
    append_summary(_result("failed", message="the job exited with 1"), path)
    text = path.read_text()
    assert text.startswith("earlier step\n### gpulaunch smoke: demo\n")
    assert "| result | ❌ **failed** (exit 1) |" in text
    assert "ValueError: boom red" in text


def test_job_output_cannot_close_the_summary_code_fence(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    tail = ["before", "````", "# not a heading", "```` ``"]
    append_summary(_result("failed", message="exit 1", tail=tail), path)
    lines = path.read_text().splitlines()
    opening = lines.index("`````text")  # longer than the longest run of backticks (4)
    assert lines[opening + 1 : opening + 6] == [*tail, "`````"]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda p: str(p / "missing" / "j.xml"), "does not exist"),
        (lambda p: str(p), "is a folder"),
    ],
)
def test_report_target_checked_first(tmp_path: Path, make: Any, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        check_output_file(make(tmp_path), "--junit")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "-5"], "--timeout"),
        (["--timeout", "soon"], "--timeout"),
        (["--steps", "-1"], "--steps"),
        (["--steps", "0"], "--steps"),
        (["--junit", "nowhere/j.xml"], "--junit"),
        (["--junit", "."], "--junit"),
        (["--gpus", "0", "--require-gpu"], "--require-gpu"),
        (["--gpus", "00", "--require-gpu"], "--require-gpu"),
        (["--gpus", "0 ", "--require-gpu"], "--require-gpu"),
        (["--set", "image.torhc=2.4.1"], "image.torhc"),
    ],
)
def test_bad_input_is_exit_2_and_writes_nothing(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], needle: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/never-asked.sock")
    (in_tmp / "gpulaunch.yaml").write_text(CONFIG)
    (in_tmp / "train.py").write_text("print('hi')\n")
    before = snapshot(in_tmp)

    result = runner.invoke(app, ["smoke", "train.py", *args])

    assert result.exit_code == 2, result.output
    # one line of reason; a flag click refuses also gets the `hint: see ... --help` line
    lines = result.output.splitlines()
    assert lines[0].startswith("gpulaunch: error:") and needle in lines[0], result.output
    assert lines[1:] in ([], ["hint: see `gpulaunch smoke --help`"]), result.output
    assert snapshot(in_tmp) == before
    assert not (in_tmp / ".gpulaunch").exists()


def test_no_engine_is_exit_3_after_writing_the_reports(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine failure after the plan is still a result CI can read: JUnit <error>."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/gpulaunch.sock")
    summary = in_tmp.parent / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (in_tmp / "gpulaunch.yaml").write_text(CONFIG)
    (in_tmp / "train.py").write_text("print('hi')\n")

    result = runner.invoke(app, ["smoke", "train.py", "--junit", "../j.xml", "--json"])

    assert result.exit_code == 3, result.output
    suite = next(iter(JUnitXml.fromfile(str(in_tmp.parent / "j.xml"))))
    (case,) = list(suite)
    assert isinstance(case.result[0], Error)
    assert "cannot reach the Docker engine" in (case.result[0].message or "")
    assert "### gpulaunch smoke: demo" in summary.read_text()
    assert list((in_tmp / ".gpulaunch" / "logs").glob("smoke-*.log"))


def test_clock_thread_is_daemon() -> None:
    clock = _Clock(60)
    clock.started(None)  # type: ignore[arg-type]
    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
    assert timers and all(t.daemon for t in timers)
    clock.finished(None)  # type: ignore[arg-type]


def test_a_remote_engine_from_the_docker_context_is_probed_not_judged_here() -> None:
    """No DOCKER_HOST, the context points at tcp://: this machine has no GPU, the engine's
    machine may; the probe decides (auto) and --require-gpu passes on its word."""
    engine = FakeEngine(runtime=True, host="tcp://gpubox:2376")
    assert _choose(engine) == ("all", None) and len(engine.created) == 1
    assert _choose(FakeEngine(runtime=True, host="tcp://gpubox:2376"), require=True) == (
        "all",
        None,
    )
