"""What a run record holds, and the observer that writes it when a job starts and ends.

The observer sees the job through `jobs.execute.Job` (duck-typed here: records sit below
jobs). Every value that could carry a secret goes through masking before it is kept: the
environment (secret-looking names keep their name, lose their value), the flags, the command
and the effective config.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gpulaunch import __version__
from gpulaunch.errors import GpulaunchError
from gpulaunch.masking import mask_data, mask_env
from gpulaunch.records.store import (
    Gpus,
    Image,
    Launcher,
    Restarts,
    RunRecord,
    Warn,
    parse_time,
    process_start,
    save,
    utc_now,
)

_VERSION_FIELDS = (
    "flavor",
    "base_image",
    "os",
    "python",
    "torch",
    "torchvision",
    "torchaudio",
    "torch_variant",
    "cuda",
    "cudnn",
    "ngc_tag",
    "ngc_torch",
)


def signal_name(code: int | None) -> str | None:
    """SIGTERM for 143: the shell's 128+N convention that docker and torchrun follow."""
    if code is None or not 128 < code < 128 + 65:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def state_of(code: int | None) -> str:
    if code is None:
        return "running"
    if code == 0:
        return "succeeded"
    return "terminated" if signal_name(code) else "failed"


def _engine_is_here(env: dict[str, str]) -> bool:
    """Whether the engine runs on this machine (the engine seam's `remote_engine`); an
    address docker would not take (ConfigError) is not this machine either."""
    from gpulaunch.engine.docker_api import remote_engine

    try:
        return not remote_engine(env)
    except GpulaunchError:
        return False


def _gpu_devices(indices: list[int] | None, env: dict[str, str]) -> tuple[int | None, list[Any]]:
    """(GPUs on this host, [{index, name, uuid}]) from NVML; (None, []) without it."""
    from gpulaunch.engine.nvml import NvmlError, listing, session

    try:
        with session(env) as nvml:
            if nvml is None:
                return None, []
            found = listing(nvml, required={"name", "uuid"}, indices=indices)
    except NvmlError:
        return None, []
    devices = [{"index": d.index, "name": d.name, "uuid": d.uuid} for d in found.devices]
    return found.count, devices


def gpu_hours(count: int | None, seconds: float | None) -> float | None:
    if count is None or seconds is None:
        return None
    return round(count * seconds / 3600, 4)


def cost(hours: float | None, price: str | None) -> str | None:
    """GPU-hours x price, to the cent, as a decimal string (no float rounding surprises)."""
    if hours is None or price is None:
        return None
    value = Decimal(str(hours)) * Decimal(price)
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """A run's duration (never negative: clocks of two machines), None when a time is unknown."""
    if start is None or end is None:
        return None
    return round(max(0.0, (end - start).total_seconds()), 1)


def complete(record: RunRecord, code: int | None, ended: str | None) -> None:
    """Fill the end of a record: exit code or signal, duration, GPU-hours and cost."""
    record.exit_code = code
    record.signal = signal_name(code)
    record.state = state_of(code)
    record.ended_at = ended
    if record.duration_s is None:
        record.duration_s = seconds_between(parse_time(record.started_at), parse_time(ended))
    record.gpu_hours = gpu_hours(record.gpus.count, record.duration_s)
    record.cost = cost(record.gpu_hours, record.price_per_gpu_hour)


def _options(opts: Any) -> dict[str, Any]:
    data: dict[str, Any] = dict(vars(opts))
    env = dict(item.partition("=")[::2] for item in data.get("env") or [])
    data["env"] = [f"{key}={value}" for key, value in mask_env(env).items()]
    masked = mask_data(data)
    return masked if isinstance(masked, dict) else {}


def _image(job: Any) -> Image | None:
    build = getattr(job, "build", None)
    if build is None:
        return None
    attrs = getattr(getattr(job, "container", None), "attrs", None) or {}
    resolved = getattr(getattr(build, "plan", None), "resolved", None)
    versions = {k: getattr(resolved, k, None) for k in _VERSION_FIELDS} if resolved else {}
    image_id = attrs.get("Image") if isinstance(attrs.get("Image"), str) else None
    digest = getattr(build, "dockerfile_sha256", None)  # a rerun reuses the recorded image
    if digest is None and build.dockerfile:
        digest = hashlib.sha256(build.dockerfile.encode()).hexdigest()
    return Image(
        tag=build.tag,
        id=image_id or getattr(build, "image_id", None),
        dockerfile_sha256=digest,
        builder=build.builder,
        cached=bool(build.cached),
        versions=versions or dict(getattr(build, "versions", None) or {}),
    )


def new_record(job: Any, kind: str, price: str | None, env: dict[str, str]) -> RunRecord:
    """A record in state `running` for a job that has just started."""
    from gpulaunch.outside.git import git_state

    spec, plan = job.spec, job.plan
    run = plan.run
    request = run.gpu_request
    here = plan.host_mode or _engine_is_here(env)
    asks = not request.none and here  # a remote engine's GPUs are not this machine's
    host_count, devices = _gpu_devices(request.indices(None), env) if asks else (None, [])
    container = getattr(job, "container", None)
    cfg = spec.cfg
    config = cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else {}
    return RunRecord(
        id=run.run_id,
        kind=kind,
        gpulaunch_version=__version__,
        started_at=utc_now(),
        mode="host" if plan.host_mode else "container",
        detached=bool(getattr(spec.opts, "detach", False)),
        project=str(spec.project),
        project_name=getattr(cfg, "name", ""),
        cwd=str(spec.cwd),
        config_file=None if spec.config_file is None else str(spec.config_file),
        command=list(mask_data(list(run.command))),  # type: ignore[call-overload]
        options=_options(spec.opts),
        git=git_state(spec.project),
        image=_image(job),
        config=mask_data(config),  # type: ignore[arg-type]
        profile=plan.launch.profile,
        env=mask_env(run.env),
        gpus=Gpus(
            request=run.gpus,
            count=request.count(host_count),
            indices=request.indices(host_count),
            devices=devices,
        ),
        nproc=run.nproc,
        container=None if container is None else str(getattr(container, "name", run.name)),
        launcher=Launcher(
            pid=os.getpid(),
            host=os.uname().nodename,  # socket.gethostname() without socket
            started=process_start(os.getpid()),  # tells a recycled pid from this one
        ),
        restarts=Restarts(max=getattr(plan, "restarts", 0)),
        checkpoint_dir=getattr(plan, "checkpoint_dir", None),
        stop_grace_s=run.stop_timeout,
        price_per_gpu_hour=price,
    )


@dataclass(eq=False, repr=False)
class RunRecorder:
    """The records observer: `.gpulaunch/runs/<id>.json` at start (running) and at the end.

    It never fails a job: a record that cannot be written is a warning.
    """

    warn: Warn
    _: KW_ONLY
    price: str | None = None
    kind: str = "run"
    rerun_of: str | None = None
    metrics: bool = True
    on_sample: Callable[[list[Any]], None] | None = None
    interval: float = 2.0
    record: RunRecord | None = field(default=None, init=False)
    sampler: Any = field(default=None, init=False)
    _t0: float = field(default=0.0, init=False)
    # the start's save failed and said so: the end's says nothing
    _unwritten: bool = field(default=False, init=False)

    def started(self, job: Any) -> None:
        self._t0 = time.monotonic()
        price = self.price or getattr(job.spec.cfg.launch, "price_per_gpu_hour", None)
        try:
            self.record = new_record(job, self.kind, price, dict(os.environ))
            self.record.rerun_of = self.rerun_of
        except (GpulaunchError, OSError) as err:
            self.warn(f"warning: run record not written: {err}")
            return
        self._unwritten = not save(job.spec.project, self.record, self.warn)
        self._start_sampler(self.record)

    def _start_sampler(self, record: RunRecord) -> None:
        """Attached GPU runs only: nobody watches a detached one, CPU runs have no GPUs, and
        the GPUs of a remote engine (no devices recorded) cannot be sampled from here."""
        indices = record.gpus.indices
        remote = record.mode == "container" and not _engine_is_here(dict(os.environ))
        if not self.metrics or record.detached or not indices or remote:
            return
        from gpulaunch.records.metrics import Sampler

        self.sampler = Sampler(dict(os.environ), list(indices), self.interval, self.on_sample)
        self.sampler.start()

    def finished(self, job: Any) -> None:
        """The record completed and saved again (one warning a run: a folder that refused the
        start's record is not reported twice)."""
        summary = self.sampler.stop() if self.sampler is not None else None
        record = self.record
        if record is None:
            return
        record.gpu_metrics = summary
        attempts = list(getattr(job, "attempts", []) or [])
        record.restarts.attempts = attempts
        record.restarts.count = max(0, len(attempts) - 1)
        record.duration_s = round(time.monotonic() - self._t0, 1)
        explanation = getattr(job, "explanation", None)
        if explanation is not None:  # data-file text and a masked line: no raw output
            record.explanation = explanation.to_json()
        complete(record, job.code, utc_now())
        quiet = self._unwritten
        save(job.spec.project, record, (lambda _m: None) if quiet else self.warn)
