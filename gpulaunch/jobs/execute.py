"""What `run` does once its flags are parsed: plan, build if needed, start, supervise.

The CLI (and later `smoke`) call these functions; observers (run records, smoke results)
see the job when it starts and when it ends, so none of them has to copy this sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from gpulaunch.launch.plan import LaunchPlan, RunOptions, plan_run, write_run_files

PENDING_IMAGE = "(pending)"


@dataclass
class JobSpec:
    """Everything a job needs that is known before the image is built."""

    cfg: Any
    project: Path
    cwd: Path
    opts: RunOptions
    config_file: Path | None = None
    rebuild: bool = False


@dataclass
class Job:
    """One job as observers see it: the plan, the image, and how it ended."""

    spec: JobSpec
    plan: LaunchPlan
    build: Any = None  # image.build.BuildOutcome once built (None on the host)
    container: Any = None
    code: int | None = None


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


def plan_job(spec: JobSpec, image: str = PENDING_IMAGE) -> Job:
    """Validate flags and profiles into a launch plan (before any build: bad flags fail fast)."""
    return Job(spec, plan_run(spec.cfg, spec.project, spec.cwd, spec.opts, image))


def run_on_this_host(job: Job, io: JobIO, observers: Sequence[Observer] = ()) -> int:
    """`run --no-container`: the same plan as a process tree on this machine."""
    from gpulaunch.engine.host import run_on_host
    from gpulaunch.engine.runspec import shell_line

    write_run_files(job.plan, job.spec.project)
    io.say(f"running on this host: {shell_line(job.plan.run.command)}")
    _tell(observers, "started", job)
    job.code = run_on_host(job.plan.run, job.spec.cwd)
    _tell(observers, "finished", job)
    return job.code


def build_image(job: Job, engine: Any, io: JobIO) -> None:
    """Build (or reuse) the image and point the plan at its tag."""
    from gpulaunch.image.build import BuildOptions

    spec = job.spec
    pushed = spec.opts.image or spec.cfg.launch.image
    if pushed:  # run what was pushed (pulled when this engine lacks it), never a rebuild
        engine.pull(pushed)
        job.plan.run.image = pushed
        return
    job.build = io.build(
        spec.cfg,
        spec.project,
        BuildOptions(rebuild=spec.rebuild, config_file=spec.config_file),
        engine,
    )
    job.plan.run.image = job.build.tag


def start_detached(job: Job, engine: Any, io: JobIO, observers: Sequence[Observer] = ()) -> str:
    """Start the container and return its name; ps/logs/stop see it end."""
    from gpulaunch.engine.supervise import start

    write_run_files(job.plan, job.spec.project)
    job.container = start(engine, job.plan.run, io.say)
    _tell(observers, "started", job)
    return str(job.container.name)


def run_attached(job: Job, engine: Any, io: JobIO, observers: Sequence[Observer] = ()) -> int:
    """Start the container, stream its output, forward signals; return the exit code."""
    from gpulaunch.engine.runspec import shell_line
    from gpulaunch.engine.supervise import supervise

    write_run_files(job.plan, job.spec.project)
    io.say(f"running {job.plan.run.name}: {shell_line(job.plan.run.command)}")

    def on_started(container: Any) -> None:
        job.container = container
        _tell(observers, "started", job)

    job.code = supervise(
        engine, job.plan.run, out=io.out, err=io.err, warn=io.say, on_started=on_started
    )
    _tell(observers, "finished", job)
    return job.code


def _tell(observers: Sequence[Observer], event: str, job: Job) -> None:
    for observer in observers:
        getattr(observer, event)(job)
