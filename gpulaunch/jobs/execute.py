"""The one job-start sequence of run, rerun, shell and smoke: plan (`plan_job`), then
`start_job`: the image (built or reused), the container (or the host process tree) started,
supervised and recorded. What differs between the four commands is data (`Start`); observers
(run records: records.record.RunRecorder, smoke's clock) see the job when it starts and when
it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from gpulaunch.launch.options import RunOptions
from gpulaunch.launch.plan import LaunchPlan, plan_run, write_run_files

PENDING_IMAGE = "(pending)"  # a container job before its build
HOST_IMAGE = "(host)"  # a --no-container job: no image at all


@dataclass
class JobSpec:
    """Everything a job needs that is known before the image is built."""

    cfg: Any
    project: Path
    cwd: Path
    opts: RunOptions
    config_file: Path | None = None
    rebuild: bool = False
    price: str | None = None  # --price: per GPU-hour, for the run record's cost
    # False: the job runs the image's own /workspace (rerun: the recorded code), not the tree
    mount_project: bool = True


@dataclass
class Job:
    """One job as observers see it: the plan, the image, and how it ended."""

    spec: JobSpec
    plan: LaunchPlan
    build: Any = None  # image.build.BuildOutcome once built (None on the host)
    container: Any = None
    code: int | None = None
    # one {started_at, ended_at, exit_code} per attempt (--restarts); records keep them
    attempts: list[dict[str, Any]] = field(default_factory=list)
    # why it failed (records.explain.Explanation), when a known signature matched
    explanation: Any = None


class Observer(Protocol):
    """Told when a job has started and when it has ended (exit code in job.code)."""

    def started(self, job: Job) -> None: ...

    def finished(self, job: Job) -> None: ...


@dataclass
class JobIO:
    """Where output goes and how the caller shows a build (the CLI draws its progress)."""

    out: BinaryIO
    err: BinaryIO
    say: Callable[[str], None]
    build: Callable[[Any, Path, Any, Any], Any]  # (cfg, project, BuildOptions, engine)


def plan_job(spec: JobSpec, image: str | None = None) -> Job:
    """Validate flags and profiles into a launch plan (before any build: bad flags fail fast).

    Without an image tag the plan names a placeholder: the host, or the image still to build.
    """
    if image is None:
        image = HOST_IMAGE if spec.opts.no_container else PENDING_IMAGE
    plan = plan_run(
        spec.cfg, spec.project, spec.cwd, spec.opts, image, mount_project=spec.mount_project
    )
    return Job(spec, plan)


@dataclass(frozen=True)
class Start:
    """What differs between run, rerun, shell and smoke once the job is planned."""

    detach: bool = False  # start and return (job.container), no supervision
    # how the image is got: build (or reuse by tag) by default; rerun: the recorded image
    image: Callable[[Job, Any, JobIO], None] | None = None
    # called with the image in place, just before the start (engine None on the host):
    # smoke picks the GPUs and re-plans, rerun shows the line that runs
    ready: Callable[[Job, Any], None] | None = None
    stop: threading.Event | None = None  # smoke's timeout: stops the job as SIGTERM would


def start_job(
    job: Job,
    io: JobIO,
    engine: Callable[[], Any],
    observers: Sequence[Observer],
    how: Start,
) -> Job:
    """Image, start, supervise, record: the job as it ended (`job.code`), or as it started
    (`job.container`) with `how.detach`. A --no-container job asks no engine (`engine` is only
    called for a container). A container's build or start failure of a known kind gets its
    cause and fix as the error's hint."""
    from gpulaunch.engine.supervise import start
    from gpulaunch.errors import GpulaunchError

    client = None if job.spec.opts.no_container else engine()  # one client for image and run
    try:
        if client is not None:
            (how.image or build_image)(job, client, io)
        if how.ready is not None:
            how.ready(job, client)
        write_run_files(job.plan, job.spec.project)
        if client is not None and how.detach:
            job.container = start(client, job.plan.run, io.say)  # ps/logs/stop see it end
            _tell(observers, "started", job)
        else:
            _run(job, client, io, observers, how.stop)
    except GpulaunchError as err:
        if client is not None:
            explain_error(job, err)  # a driver rule, a missing package, ...
        raise
    return job


def build_image(job: Job, engine: Any, io: JobIO) -> None:
    """Build the image (or pull the pushed one) and point the plan at its tag."""
    from gpulaunch.image.build import BuildOptions

    spec = job.spec
    pushed = spec.opts.image or spec.cfg.launch.image
    if pushed:  # run what was pushed (pulled when this engine lacks it), never a rebuild
        engine.pull(pushed)
        job.plan.run.image = pushed
        return
    options = BuildOptions(rebuild=spec.rebuild, config_file=spec.config_file)
    job.build = io.build(spec.cfg, spec.project, options, engine)
    job.plan.run.image = job.build.tag


def _run(
    job: Job, engine: Any, io: JobIO, observers: Sequence[Observer], stop: threading.Event | None
) -> None:
    """Run the job to its end, the exit code in job.code: a container (its output streamed,
    signals forwarded, removed on every path) or, with no engine (`run --no-container`), the
    same plan as a process tree on this machine.

    Setting `stop` (smoke's timeout) stops a container as SIGTERM would, SIGKILL after the
    stop timeout."""
    from gpulaunch.engine.runspec import shell_line
    from gpulaunch.engine.supervise import OutputTail, supervise

    where = "on this host" if engine is None else job.plan.run.name
    io.say(f"running {where}: {shell_line(job.plan.run.command)}")
    # the job's output passes through a tail (the explainer reads its end): one per container
    # attempt; on the host one for all attempts
    tails: list[OutputTail] = [] if engine is not None else [OutputTail()]
    try:
        err_fd: int | None = io.err.fileno()
    except (AttributeError, OSError, ValueError):
        err_fd = None  # a stream without a descriptor (a test runner's): a host job inherits

    def on_started(container: Any) -> None:
        first = job.container is None
        job.container = container
        if first:
            _tell(observers, "started", job)

    def attempt() -> int:
        if engine is None:
            from gpulaunch.engine.host import run_on_host  # a container run needs none of it

            return run_on_host(job.plan.run, job.spec.cwd, tails[-1], err_fd)
        tails.append(OutputTail())
        return supervise(
            engine,
            job.plan.run,
            out=io.out,
            err=io.err,
            warn=io.say,
            on_started=on_started,
            stop=stop,
            tail=tails[-1],
        )

    if engine is None:
        _tell(observers, "started", job)
    job.code = _with_restarts(job, io, attempt)
    tail = tails[-1]
    job.explanation = _explain(job, tail.text(), job.code, tail.oom_killed)
    _tell(observers, "finished", job)


def _explain(job: Job, text: str, code: int | None, oom_killed: bool = False) -> Any:
    """The known cause of a failure (records.explain), or None; never an error of its own."""
    if code == 0 and not oom_killed:  # success: nothing to explain (nor its import to pay)
        return None
    import os

    from gpulaunch.errors import GpulaunchError
    from gpulaunch.records.explain import Evidence, explain_failure

    resolved = getattr(getattr(job.build, "plan", None), "resolved", None)
    evidence = Evidence(text, code, oom_killed, job.spec.project, resolved, dict(os.environ))
    try:
        return explain_failure(evidence)
    except GpulaunchError:
        return None


def explain_error(job: Job, err: Any) -> None:
    """A build or start failure of a known kind gets its cause and fix as the error's hint."""
    if err.hint:
        return
    text = f"{getattr(err, 'log_tail', '')}\n{err.message}"
    job.explanation = _explain(job, text, None)
    if job.explanation is not None:
        err.hint = job.explanation.text()


def _with_restarts(job: Job, io: JobIO, attempt: Callable[[], int]) -> int:
    """Run the job; with `--restarts N` on a single-process job, up to N more times while it
    fails. A stop (129/130/143: SIGHUP, Ctrl-C, SIGTERM, a preemption notice) is never restarted."""
    from gpulaunch.records.store import utc_now

    restarts = job.plan.restarts if job.plan.restart_by == "gpulaunch" else 0
    while True:
        started = utc_now()
        code = attempt()
        job.attempts.append({"started_at": started, "ended_at": utc_now(), "exit_code": code})
        if code in (0, 129, 130, 143) or len(job.attempts) > restarts:
            return code
        io.say(
            f"gpulaunch: attempt {len(job.attempts)} exited {code}; restarting "
            f"({len(job.attempts)}/{restarts})"
        )


def _tell(observers: Sequence[Observer], event: str, job: Job) -> None:
    for observer in observers:
        getattr(observer, event)(job)
