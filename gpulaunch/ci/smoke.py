"""`gpulaunch smoke`: a short run of the job for CI, with a timeout and a result to report.

The run itself is `jobs.execute` (plan, then `start_job`) with three additions: the
smoke variables in the job's environment (GPULAUNCH_SMOKE=1, GPULAUNCH_SMOKE_STEPS=N),
`--gpus auto` (every GPU when the engine has the NVIDIA runtime and NVML sees GPUs, else the
CPU), and a clock that stops the container when the timeout expires. The job's output is
copied to a log under `.gpulaunch/logs/` and kept (tail, capped text) for the reports in
`ci.report`. Build and engine failures after the plan become an `error` result, so CI still
gets its JUnit file; bad input before the plan is raised as it is (nothing written).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

from gpulaunch.ci.gpus import choose_gpus
from gpulaunch.ci.imports import Checks, failed_imports, import_checks, import_command
from gpulaunch.engine.supervise import StopRequest
from gpulaunch.errors import ConfigError, ExitCode, GpulaunchError
from gpulaunch.jobs.execute import Job, JobIO, JobSpec, Observer, Start, plan_job, start_job
from gpulaunch.masking import mask

SMOKE_ENV = "GPULAUNCH_SMOKE"
STEPS_ENV = "GPULAUNCH_SMOKE_STEPS"
DEFAULT_STEPS = 2
DEFAULT_TIMEOUT_S = 600.0
TAIL_LINES = 50
OUTPUT_CAP = 64 * 1024  # characters of output kept for JUnit's <system-out>


@dataclass
class SmokeOptions:
    steps: int = DEFAULT_STEPS
    timeout: float = DEFAULT_TIMEOUT_S
    grace: int | None = None  # seconds between SIGTERM and SIGKILL (default: the plan's)
    gpus: str = "auto"  # --gpus as given: "auto" or what `run --gpus` takes
    require_gpu: bool = False
    imports: bool = False  # --imports: import the entry's third-party modules, nothing else
    checks: Checks = field(default_factory=list)  # set by prepare() with --imports
    entry: str = ""  # the entry point whose imports are checked


@dataclass
class SmokeResult:
    """How one smoke run went; `ci.report` turns it into JUnit, Markdown and JSON."""

    project: str
    command: str
    outcome: str = "error"  # passed | failed | timeout | error
    exit_code: int = int(ExitCode.FAILURE)  # what gpulaunch exits with
    job_code: int | None = None
    duration: float = 0.0
    started_at: str = ""
    steps: int = DEFAULT_STEPS
    timeout: float = DEFAULT_TIMEOUT_S
    image: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    gpus: str = "0"
    gpu_notice: str | None = None
    profile: str = ""
    log_path: Path | None = None
    message: str = ""
    tail: list[str] = field(default_factory=list)
    output: str = ""
    explanation: dict[str, Any] | None = None  # records.explain: a failure's known cause
    imports: dict[str, Any] | None = None  # --imports: {"checked": N, "failed": [modules]}
    error: GpulaunchError | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The JUnit test case: project and command."""
        return f"{self.project}: {self.command}"

    def to_json(self) -> dict[str, Any]:
        out = {
            "result": self.outcome,
            "exit_code": self.exit_code,
            "job_exit_code": self.job_code,
            "project": self.project,
            "command": self.command,
            "duration_s": round(self.duration, 3),
            "started_at": self.started_at,
            "steps": self.steps,
            "timeout_s": self.timeout,
            "image": self.image,
            "versions": self.versions,
            "gpus": self.gpus,
            "cpu_fallback": self.gpu_notice,
            "profile": self.profile,
            "log": str(self.log_path) if self.log_path else None,
            "message": self.message,
            "explanation": self.explanation,
            "tail": self.tail,
        }
        if self.imports is not None:
            out["imports"] = self.imports
        return out


class _Capture:
    """The job's output, line by line: masked into the log, kept as a tail and capped text."""

    def __init__(self, log: TextIO) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.kept: deque[str] = deque()
        self.kept_chars = 0
        self.dropped = 0

    def line(self, text: str) -> None:
        text = mask(text)
        with self.lock:
            self.log.write(text + "\n")
            self.log.flush()
            self.tail.append(text)
            self.kept.append(text)
            self.kept_chars += len(text) + 1
            while self.kept_chars > OUTPUT_CAP and len(self.kept) > 1:
                self.kept_chars -= len(self.kept.popleft()) + 1
                self.dropped += 1

    def text(self) -> str:
        with self.lock:
            head = f"[{self.dropped} earlier lines in the log]\n" if self.dropped else ""
            return head + "\n".join(self.kept)


class _Tee(io.RawIOBase):
    """One output stream of the job: passed through as it comes, and fed to the capture."""

    def __init__(self, target: BinaryIO, capture: _Capture) -> None:
        super().__init__()
        self.target = target
        self.capture = capture
        self.partial = b""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.target.write(chunk)
        self.partial += chunk
        *lines, self.partial = self.partial.split(b"\n")
        for raw in lines:
            self.capture.line(raw.decode("utf-8", "replace").rstrip("\r"))
        return len(chunk)

    def flush(self) -> None:
        self.target.flush()

    def close_line(self) -> None:
        if self.partial:
            self.capture.line(self.partial.decode("utf-8", "replace"))
            self.partial = b""


class _Clock:
    """Observer: starts the timeout when the container has started; sets `stop` on expiry."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.stop = StopRequest()  # set: the timeout ran out (a job still there or not)
        self._timer: threading.Timer | None = None

    @property
    def timed_out(self) -> bool:
        """The timeout stopped the job (not merely expired after the job had ended)."""
        return self.stop.honoured

    def started(self, job: Job) -> None:
        self._timer = threading.Timer(self.timeout, self.stop.set)
        self._timer.daemon = True
        self._timer.start()

    def finished(self, job: Job) -> None:
        if self._timer is not None:
            self._timer.cancel()


def command_text(spec: JobSpec) -> str:
    opts = spec.opts
    parts = [opts.script, *opts.args] if opts.script else list(opts.command)
    return shlex.join(str(p) for p in parts if p is not None) or "(no command)"


def prepare(spec: JobSpec, opts: SmokeOptions) -> Job:
    """Check the smoke flags and plan the job (with the CPU for `--gpus auto`): bad input
    fails here, before anything is built or written."""
    if opts.steps < 1:
        raise ConfigError(f"--steps: {opts.steps} is not a positive number of steps")
    if not opts.timeout > 0:
        raise ConfigError(f"--timeout: {opts.timeout} is not a positive number of seconds")
    if opts.grace is not None and opts.grace < 0:
        raise ConfigError(f"--grace: {opts.grace} is negative")
    if opts.require_gpu and re.fullmatch(r"\s*0*\s*", opts.gpus):  # 0, 00, "0 ", ""
        raise ConfigError("--require-gpu: contradicts --gpus 0")
    spec.opts.env = [*spec.opts.env, f"{SMOKE_ENV}=1", f"{STEPS_ENV}={opts.steps}"]
    spec.opts.gpus = "0" if opts.gpus == "auto" else opts.gpus
    if opts.imports:
        _import_check(spec, opts)
    return plan_job(spec)


_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def _import_check(spec: JobSpec, opts: SmokeOptions) -> None:
    """Replace the job's command by the import check of its entry point (the script, or the
    FILE / -m MODULE of `-- python ...` or `-- torchrun ...`): the same image, mounts and
    environment, no training."""
    from gpulaunch.project.imports import walk
    from gpulaunch.project.pythonpath import import_paths

    run = spec.opts
    project = spec.project
    files, modules = _entry_of(run.script, run.command, project, spec.cwd)
    found = walk(project, files, modules, paths=import_paths(project, spec.cfg.image.requirements))
    opts.entry = ", ".join(found.entries)
    opts.checks = import_checks(found.required())
    run.script, run.args = None, []
    run.command = import_command(opts.checks)


def _entry_of(
    script: str | None, command: list[str], project: Path, cwd: Path
) -> tuple[list[str], list[str]]:
    """([project-relative file], [module]) of what the job runs; ConfigError when smoke
    cannot tell (a shell, `python -c`, a launcher other than python and torchrun)."""
    if script:
        return [_in_project(cwd / script, project, script)], []
    words = list(command)
    if words and os.path.basename(words[0]) == "torchrun":
        words = words[1:]
        if "-m" in words or "--module" in words:
            at = words.index("-m") if "-m" in words else words.index("--module")
            if at + 1 < len(words):
                return [], [words[at + 1]]
        scripts = [w for w in words if w.endswith(".py")]
        if scripts:
            return [_in_project(project / scripts[0], project, scripts[0])], []
    elif words and _PYTHON.fullmatch(os.path.basename(words[0])):
        rest = [w for w in words[1:] if w not in ("-u", "-B", "-O", "-OO", "-s", "-E", "-I")]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return [], [rest[1]]
        if rest and not rest[0].startswith("-"):
            return [_in_project(project / rest[0], project, rest[0])], []
    shown = shlex.join(command) if command else "(no command)"
    raise ConfigError(
        f"--imports: cannot tell the entry point of {shown!r}; give SCRIPT, -- python FILE "
        "or -- python -m MODULE"
    )


def _in_project(path: Path, project: Path, given: str) -> str:
    """`path` relative to the project (/workspace/x.py means the project's x.py)."""
    if given.startswith("/workspace/"):
        path = project / given.removeprefix("/workspace/")
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(project))
    if rel.startswith(".."):
        raise ConfigError(f"--imports: {given!r} is outside the project")
    return rel


def run_smoke(
    job: Job,
    opts: SmokeOptions,
    engine: Any,
    jobio: JobIO,
    log: TextIO,
    log_path: Path,
    observers: Sequence[Observer] = (),
    env: Mapping[str, str] | None = None,
) -> SmokeResult:
    """Build, pick the GPUs, run with the timeout; every failure after planning is a result."""
    environ = dict(os.environ if env is None else env)
    spec = job.spec
    result = SmokeResult(
        project=str(spec.cfg.name),
        command=f"imports of {opts.entry}" if opts.imports else command_text(spec),
        steps=opts.steps,
        timeout=opts.timeout,
        log_path=log_path,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        profile=str(job.plan.launch.profile),
    )
    capture = _Capture(log)
    streams = [_Tee(jobio.out, capture), _Tee(jobio.err, capture)]

    def say(message: str) -> None:
        jobio.say(message)
        capture.line(message)

    tee_io = JobIO(cast(BinaryIO, streams[0]), cast(BinaryIO, streams[1]), say, jobio.build)
    clock = _Clock(opts.timeout)
    began = time.monotonic()
    log.write(f"# gpulaunch smoke of {result.project}: {result.command}\n")

    def ready(job: Job, engine: Any) -> None:  # the image is there: pick the GPUs, re-plan
        result.image = job.plan.run.image
        result.versions = _versions(job.build)
        if opts.gpus == "auto" or opts.require_gpu:
            gpus, notice = choose_gpus(engine, job, opts, environ)
            result.gpu_notice = notice
            if notice:
                say(f"smoke: {notice}; CPU fallback: --gpus 0 (--require-gpu makes this fail)")
            if opts.gpus == "auto" and gpus != "0":
                spec.opts.gpus = gpus
                job.plan = plan_job(spec, job.plan.run.image).plan  # the GPU plan: NCCL, NUMA
        result.gpus = str(job.plan.run.gpus)
        result.profile = str(job.plan.launch.profile)
        for warning in job.plan.launch.warnings:
            say(f"warning: {warning}")
        if opts.grace is not None:
            job.plan.run.stop_timeout = opts.grace

    try:
        how = Start(ready=ready, stop=clock.stop)
        code = start_job(job, tee_io, lambda: engine, [clock, *observers], how).code or 0
        for stream in streams:
            stream.close_line()
        result.job_code = code
        if clock.timed_out:
            result.outcome = "timeout"
            result.exit_code = int(ExitCode.TIMEOUT)
            result.message = (
                f"timed out after {opts.timeout:g} s (SIGTERM, then SIGKILL after "
                f"{job.plan.run.stop_timeout} s); the job exited with {code}"
            )
        elif code == 0:
            result.outcome, result.exit_code = "passed", 0
        else:
            result.outcome, result.exit_code = "failed", code
            result.message = f"the job exited with {code}"
            if job.explanation is not None:  # JUnit's message, the step summary, --json
                result.explanation = job.explanation.to_json()
                result.message += f"; {job.explanation.text()}"
        if opts.imports and not clock.timed_out:  # the check's own account of what failed
            _import_result(result, opts, capture)
    except GpulaunchError as err:
        for stream in streams:
            stream.close_line()
        result.outcome = "error"
        result.exit_code = int(err.exit_code)
        result.message = err.message + (f" ({err.hint})" if err.hint else "")
        result.error = err
        if job.explanation is not None:  # a build or start failure of a known kind
            result.explanation = job.explanation.to_json()
        tail = getattr(err, "log_tail", "")
        for line in str(tail).splitlines():
            capture.line(line)
        capture.line(f"gpulaunch: error: {err.message}")
    result.duration = time.monotonic() - began
    result.tail = list(capture.tail)
    result.output = capture.text()
    log.write(f"# result: {result.outcome} (exit {result.exit_code}) in {result.duration:.1f} s\n")
    return result


def _import_result(result: SmokeResult, opts: SmokeOptions, capture: _Capture) -> None:
    """The check's own summary line: a failed module counts only when it was one asked
    about (the line comes from the job's output, which the image's code can write to)."""
    with capture.lock:
        failed = failed_imports(list(capture.kept), opts.checks)
    count = len(opts.checks)
    result.imports = {"checked": count, "failed": failed}
    if failed is None:
        if result.outcome == "passed":  # exit 0 without the summary: not the check's run
            result.outcome, result.exit_code = "failed", int(ExitCode.FAILURE)
        result.message = "the import check did not finish" + (
            f" ({result.message})" if result.message else ""
        )
    elif failed:
        result.message = (
            f"{len(failed)} of {count} imports failed in the image: {', '.join(failed)}"
        )
    elif result.outcome == "passed":
        result.message = f"all {count} third-party imports of {opts.entry} work in the image"


def _versions(build: Any) -> dict[str, str]:
    plan = getattr(build, "plan", None)
    resolved = getattr(plan, "resolved", None)
    if resolved is None:
        return {}
    fields = {
        "base image": resolved.base_image,
        "python": resolved.python,
        "torch": resolved.torch,
        "torch build": resolved.torch_variant,
        "cuda": resolved.cuda,
    }
    return {k: str(v) for k, v in fields.items() if v}


def log_file(project: Path, run_id: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return project / ".gpulaunch" / "logs" / f"smoke-{stamp}-{run_id[-6:]}.log"
