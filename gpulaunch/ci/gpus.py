"""`--gpus auto` and `--require-gpu`: is there a GPU this engine can hand to a container?

Two facts decide: the engine's NVIDIA runtime (proved by starting a throw-away container of
the job's image with a GPU request: only the engine knows whether it can select a device
driver, `docker info` does not show a hook-based toolkit) and the host's GPUs (NVML). The
probe container carries the run-id label like any gpulaunch job and is removed at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gpulaunch.engine.docker_api import PROBE_SUFFIX, is_remote
from gpulaunch.errors import ConfigError, EngineError, GpulaunchError

NO_RUNTIME_FIX = (
    "install the NVIDIA Container Toolkit (nvidia-container-toolkit), run "
    "`nvidia-ctk runtime configure --runtime=docker` and restart dockerd"
)
NO_GPU_FIX = (
    "install the NVIDIA driver and NVML bindings (pip install 'gpulaunch[nvml]'); "
    "`nvidia-smi` must list the GPUs"
)


def runtime_error(engine: Any, image: str, project: str) -> str | None:
    """None when the engine starts a container of `image` with every GPU requested, else why
    not (the engine's own reason). Any start failure other than the device driver (say the
    image has no `true`) happens after the driver was selected, so it proves the runtime."""
    from gpulaunch.engine.runspec import base_labels, new_run_id

    run_id = new_run_id()
    name = f"gl-{project.replace('/', '-')}-{run_id}{PROBE_SUFFIX}"
    try:
        labels = base_labels(project, run_id)
        container = throwaway(engine, image, name, ["true"], gpus="all", labels=labels)
    except EngineError as err:
        if "NVIDIA" in err.message or "device driver" in err.message:
            return err.message
        return None
    engine.discard(container)
    return None


def throwaway(engine: Any, image: str, name: str, command: list[str], **plan: Any) -> Any:
    """A container of `image` made (not started) to run `command` as this user, with no
    network, mount or environment of a job's; `plan`: its GPUs, labels and other RunPlan
    settings. The caller discards it."""
    from gpulaunch.engine.runspec import RunPlan, create_body

    user = f"{os.getuid()}:{os.getgid()}"
    body = RunPlan(image, name, command, {}, [], user, network="none", ulimits={}, **plan)
    return engine.create_container(create_body(body))


def engine_host(engine: Any, env: Mapping[str, str]) -> str:
    """The engine's address as the engine seam resolves it (`engine_address`: DOCKER_HOST,
    else the docker context); DOCKER_HOST alone when the context cannot be read."""
    try:
        return str(engine.host)
    except GpulaunchError:
        return env.get("DOCKER_HOST", "")


def host_gpus(env: Mapping[str, str], host: str) -> tuple[list[str], str]:
    """GPU names NVML reports on this machine, and, when there are none, why. `host`: the
    engine's address (engine_host)."""
    from gpulaunch.catalog import compat
    from gpulaunch.engine.nvml import NvmlError

    if is_remote(host):
        return [], f"the engine is remote ({host}); its GPUs are not visible here"
    try:
        info = compat.probe(env)
    except NvmlError as err:
        return [], str(err)
    if info is None:
        return [], "NVML found no driver (no nvidia-ml-py, no NVIDIA driver, or no GPU)"
    if not info.names:
        return [], f"NVML (driver {info.driver}) lists no GPU"
    return list(info.names), ""


def choose_gpus(engine: Any, job: Any, opts: Any, env: Mapping[str, str]) -> tuple[str, str | None]:
    """("all", None) when a GPU run is possible; ("0", why) for the CPU fallback; with
    --require-gpu a missing runtime or GPU is an EngineError (exit 3) instead.

    With --require-gpu the runtime is checked first (a GPU runner whose toolkit broke must
    say so); `auto` alone asks NVML first and starts the probe only when it sees GPUs, so a
    CPU runner pays nothing. A remote engine's GPUs are taken on the probe's word."""
    image = str(job.plan.run.image)
    project = str(job.spec.cfg.name)
    where = engine_host(engine, env)
    remote = is_remote(where)
    cpu_image = _cpu_build(job)
    if opts.require_gpu:
        why = runtime_error(engine, image, project)
        if why is not None:
            raise EngineError(f"--require-gpu: {why}", hint=NO_RUNTIME_FIX)
        names, no_gpu = host_gpus(env, where)
        if not names and not remote:
            raise EngineError(f"--require-gpu: no GPU on this host: {no_gpu}", hint=NO_GPU_FIX)
        if cpu_image:
            raise ConfigError(
                f"--require-gpu: {image} is a CPU build (image.cuda: cpu)",
                hint="set image.cuda (or --set image.cuda=12.4) for a GPU build",
            )
        return ("all" if opts.gpus == "auto" else opts.gpus), None
    if cpu_image:
        return "0", "the image is a CPU build (image.cuda: cpu)"
    names, no_gpu = host_gpus(env, where)
    if not names and not remote:
        return "0", f"no GPU: {no_gpu}"
    why = runtime_error(engine, image, project)
    if why is not None:
        return "0", f"no GPU runtime: {why}"
    return "all", None


def _cpu_build(job: Any) -> bool:
    """A CPU torch build (or no CUDA at all) cannot use a GPU: auto picks the CPU for it."""
    resolved = getattr(getattr(job.build, "plan", None), "resolved", None)
    return resolved is not None and resolved.cuda is None
