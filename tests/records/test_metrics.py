"""Live GPU metrics: the sampler over the fake NVML fed a time series, the record's summary,
the status line text, and a run that records them (its status line only on a terminal)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeNvml

from gpulaunch.engine.nvml import Nvml
from gpulaunch.launch.plan import RunOptions
from gpulaunch.records import metrics, record
from gpulaunch.records.metrics import GpuSample, Sampler

from .test_records import _job

GIB = 1024**3


def _series(fake: FakeNvml) -> None:
    fake.devices[0].series = [
        (10, 2 * GIB, 80 * GIB, 100_000),
        (90, 30 * GIB, 80 * GIB, 300_000),
        (50, 20 * GIB, 80 * GIB, 200_000),
    ]
    fake.devices[1].series = [(0, 1 * GIB, 80 * GIB, 60_000)]


def test_summary_from_a_time_series(fake_nvml: FakeNvml) -> None:
    _series(fake_nvml)
    now = [0.0]
    sampler = Sampler({}, [0, 1], interval=2.0, clock=lambda: now[0])
    for tick in range(3):
        fake_nvml.tick = tick
        now[0] = tick * 2.0
        sampler.sample(Nvml(fake_nvml))  # what the NVML session lends
    summary = sampler.summary()
    assert summary is not None
    gpu0, gpu1 = summary["gpus"]
    assert gpu0["mean_utilization_pct"] == 50.0  # (10 + 90 + 50) / 3
    assert gpu0["peak_memory_mib"] == 30 * 1024 and gpu0["memory_total_mib"] == 80 * 1024
    assert gpu0["peak_power_w"] == 300.0
    # trapezoids: 2 s x (100+300)/2 W + 2 s x (300+200)/2 W = 900 J = 0.25 Wh
    assert gpu0["energy_wh"] == 0.25
    assert gpu1["energy_wh"] == round(4 * 60 / 3600, 4) and gpu1["samples"] == 3


def test_unsupported_queries_are_left_out(fake_nvml: FakeNvml) -> None:
    fake_nvml.failing = {"nvmlDeviceGetPowerUsage"}
    fake_nvml.missing = {"nvmlDeviceGetUtilizationRates"}  # older bindings lack it
    sampler = Sampler({}, [0], clock=lambda: 1.0)
    (sample,) = sampler.sample(Nvml(fake_nvml))
    assert sample.power_w is None and sample.utilization is None
    assert sample.memory_total == 80 * GIB
    summary = sampler.summary()
    assert summary is not None
    assert summary["gpus"][0]["energy_wh"] is None and summary["gpus"][0]["peak_power_w"] is None


def test_an_error_that_is_not_nvmls_is_not_hidden(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampler catches what NVML's seam raises (NvmlError), not a fault of its own."""

    def broken(_handle: Any) -> Any:
        raise ZeroDivisionError("a bug, not a refused query")

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetPowerUsage", broken, raising=False)
    with pytest.raises(ZeroDivisionError):
        Sampler({}, [0], clock=lambda: 1.0).sample(Nvml(fake_nvml))


def test_thread_samples_until_stopped_and_measures_itself(fake_nvml: FakeNvml) -> None:
    seen: list[list[GpuSample]] = []
    got_two = threading.Event()

    def on_sample(samples: list[GpuSample]) -> None:
        seen.append(samples)
        if len(seen) >= 2:
            got_two.set()

    sampler = Sampler({}, [0, 1], interval=0.01, on_sample=on_sample)
    sampler.start()
    assert got_two.wait(10)
    summary = sampler.stop()
    assert summary is not None and summary["gpus"][0]["samples"] >= 2
    assert summary["sampler_cpu_s"] >= 0 and summary["sampler_wall_s"] > 0
    assert fake_nvml.shut  # the session was closed


def test_no_nvml_no_sampler() -> None:
    sampler = Sampler({}, [0], interval=0.01)
    sampler.start()
    assert sampler.stop() is None


def test_status_text() -> None:
    samples = [
        GpuSample(0, 87, int(40.1 * GIB), 80 * GIB, 310.4),
        GpuSample(1, None, None, None, None),
    ]
    assert metrics.status_text(samples) == "GPU0 87% 40.1/80.0 GiB 310 W | GPU1 - -"


def test_attached_gpu_run_records_metrics(tmp_path: Path, fake_nvml: FakeNvml) -> None:
    _series(fake_nvml)
    shown: list[Any] = []
    recorder = record.RunRecorder(lambda _m: None, on_sample=shown.append, interval=0.01)
    job = _job(tmp_path, gpus=2)
    recorder.started(job)
    assert recorder.sampler is not None
    job.code = 0
    recorder.finished(job)
    assert shown and [s.index for s in shown[0]] == [0, 1]
    assert recorder.record is not None
    assert recorder.record.gpu_metrics is not None
    gpus = recorder.record.gpu_metrics["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["memory_total_mib"] == 80 * 1024


def test_detached_and_cpu_runs_are_not_sampled(tmp_path: Path, fake_nvml: FakeNvml) -> None:
    for job in (_job(tmp_path, gpus=0), _job(tmp_path, gpus=1, opts=RunOptions(detach=True))):
        recorder = record.RunRecorder(lambda _m: None, interval=0.01)
        recorder.started(job)
        assert recorder.sampler is None
        job.code = 0
        recorder.finished(job)
        assert recorder.record is not None and recorder.record.gpu_metrics is None
        assert "gpu_metrics" not in recorder.record.to_json()


def test_status_line_keeps_job_output_off_it() -> None:
    import io

    from gpulaunch.cli.common import StatusLine

    term = io.BytesIO()
    line = StatusLine(term)
    out = line.guard(term)
    line.show([GpuSample(0, 50, GIB, 2 * GIB, 100.0)])
    out.write(b"job line\n")
    line.close()
    assert term.getvalue() == (
        b"\r\x1b[KGPU0 50% 1.0/2.0 GiB 100 W"  # drawn
        b"\r\x1b[Kjob line\n"  # cleared before the job's line
        b"\r\x1b[KGPU0 50% 1.0/2.0 GiB 100 W"  # redrawn below it
        b"\r\x1b[K"  # gone at the end
    )


def test_no_status_line_off_a_terminal(monkeypatch: Any) -> None:
    from gpulaunch.cli.common import StatusLine

    assert not StatusLine.wanted(False)  # the test's stderr is not a terminal
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm")
    assert StatusLine.wanted(False) and not StatusLine.wanted(True)  # --no-status
    monkeypatch.setenv("TERM", "dumb")
    assert not StatusLine.wanted(False)
