"""The docker SDK's `containers.run` kwargs for a RunPlan: what `run` sent through the SDK
before it spoke the engine API itself (gpulaunch/engine/api). Kept here, as a test oracle
only: test_create_body.py proves `runspec.create_body` sends the same, and test_sdk_parity.py
ties these kwargs to `docker run`'s flags."""

from __future__ import annotations

from typing import Any

from gpulaunch.engine.runspec import RunPlan


def sdk_kwargs(plan: RunPlan) -> dict[str, Any]:
    """kwargs for docker-py `containers.run(detach=True, **kwargs)`; mirrors docker_run_argv."""
    from docker.types import DeviceRequest, Ulimit
    from docker.types import Mount as SdkMount

    kwargs: dict[str, Any] = {
        "image": plan.image,
        "command": plan.command,
        "name": plan.name,
        "user": plan.user,
        "working_dir": plan.workdir,
        "environment": dict(plan.env),
        "labels": dict(plan.labels),
        "init": plan.init,
        "stop_signal": "SIGTERM",
        "stop_timeout": plan.stop_timeout,
        "ulimits": [Ulimit(name=k, soft=v, hard=v) for k, v in sorted(plan.ulimits.items())],
        "mounts": [
            SdkMount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            if m.kind == "bind"
            else SdkMount(
                target=m.target, source=None, type="tmpfs", read_only=True, tmpfs_size=4096
            )
            for m in plan.mounts
        ],
    }
    if plan.gpus not in (0, "0"):
        if isinstance(plan.gpus, int):
            kwargs["device_requests"] = [DeviceRequest(count=plan.gpus, capabilities=[["gpu"]])]
        elif plan.gpus == "all":
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        else:
            ids = plan.gpus.split(",")
            kwargs["device_requests"] = [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    if plan.stdin:
        kwargs["stdin_open"] = True
    if plan.tty:
        kwargs["tty"] = True
    if plan.ipc:
        kwargs["ipc_mode"] = plan.ipc
    if plan.shm_size:
        kwargs["shm_size"] = plan.shm_size
    if plan.memory:
        kwargs["mem_limit"] = plan.memory
    if plan.network:
        kwargs["network_mode"] = plan.network
    if plan.hostname:
        kwargs["hostname"] = plan.hostname
    if plan.extra_hosts:
        kwargs["extra_hosts"] = dict(plan.extra_hosts)
    if plan.cap_add:
        kwargs["cap_add"] = list(plan.cap_add)
    if plan.devices:
        kwargs["devices"] = list(plan.devices)
    if plan.cpuset_cpus:
        kwargs["cpuset_cpus"] = plan.cpuset_cpus
    if plan.restart_retries:
        kwargs["restart_policy"] = {"Name": "on-failure", "MaximumRetryCount": plan.restart_retries}
    return kwargs
