"""`gpulaunch doctor`: what a freshly rented GPU box (or a CI runner) lacks, with the fix.

Each check is one line: ok, warn or fail, what was seen, and for anything not ok a concrete
fix. The inputs are injectable: NVML through the `pynvml` module (tests install
tests/fake_nvml.py), sysfs through GPULAUNCH_SYSFS_ROOT, the engine through DOCKER_HOST. A
configured project (gpulaunch.yaml) adds the checks against its image: the driver rule of
its base image, its torch build's GPU architectures, and the imports of its entry points
that nothing the image installs provides (init's findings, `imports` lines).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from gpulaunch.ci.gpus import NO_GPU_FIX, NO_RUNTIME_FIX, engine_host, runtime_error
from gpulaunch.engine import nvml
from gpulaunch.engine.docker_api import is_remote
from gpulaunch.engine.podman import engine_kind
from gpulaunch.errors import GpulaunchError

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_API = (1, 40)  # DeviceRequests (--gpus) arrived with API 1.40 (Docker 19.03)
SHM_MIN = 1 << 30
GIB = 1 << 30
# Rough size of an image by flavor, for the free-disk check (CUDA runtime + torch wheels ~8 GB).
IMAGE_GIB = {"cpu": 2, "runtime": 10, "devel": 14, "ngc": 22}


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]

    @property
    def failed(self) -> bool:
        return any(c.status == FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.failed, "checks": [asdict(c) for c in self.checks]}


def run_doctor(
    engine: Any,
    config: Any | None,
    env: Mapping[str, str] | None = None,
    project: Path | None = None,
) -> Report:
    """`project`: the configured project's folder, whose entry points' imports are checked."""
    environ = dict(os.environ if env is None else env)
    host = engine_host(engine, environ)
    checks: list[Check] = []
    facts = _engine_checks(engine, config, checks)
    resolved = _resolve(config, checks)
    _gpu_checks(resolved, environ, checks, host)
    if resolved is not None and resolved.cuda is None:
        _runtime_not_needed(checks)
    checks.append(_shm_check())
    checks.append(_disk_check(facts, config, resolved, host))
    checks.append(_numa_check(environ))
    if config is not None and project is not None:
        checks += _import_checks(config, project, resolved)
    return Report(tuple(checks))


def _import_checks(config: Any, root: Path, resolved: Any) -> list[Check]:
    """init's findings on the project as configured: each import of its entry points that
    nothing the image installs provides (image.requirements and what that pulls in, torch and
    image.torch_extras), with the file:line and the requirement to add."""
    from gpulaunch.project.discover import read_project
    from gpulaunch.project.imports import NO_ENTRY, entry_gaps
    from gpulaunch.project.layout import find_import_paths
    from gpulaunch.project.model import Project

    img = config.image
    entry = img.requirements
    pinned = [name for name in ("torchvision", "torchaudio") if getattr(img, name)]
    image = [] if img.torch == "none" else ["torch", *img.torch_extras, *pinned]
    try:
        if entry is None:  # the image installs none of the project's dependency files
            model = Project()
            find_import_paths(root, model)
        else:
            gpu = None if resolved is None else resolved.cuda is not None
            model = read_project(root, entry, gpu)
        found, gaps = entry_gaps(root, model, image)
    except GpulaunchError as err:
        return [Check("imports", WARN, err.message, "fix image.requirements (gpulaunch init)")]
    if not found.entries:
        return [Check("imports", OK, NO_ENTRY.partition(";")[0])]
    if not gaps:
        shown = ", ".join(found.entries)
        return [Check("imports", OK, f"every third-party import of {shown} is provided")]
    return [Check("imports", WARN, gap.finding, gap.fix) for gap in gaps]


# -- the engine ------------------------------------------------------------------------------
def _engine_checks(engine: Any, config: Any | None, checks: list[Check]) -> dict[str, Any]:
    try:
        where = engine.host + (" (DOCKER_HOST)" if engine.env.get("DOCKER_HOST") else "")
        version, info, tags = engine.facts()
    except GpulaunchError as err:
        fix = "start dockerd (systemctl start docker), or point DOCKER_HOST at a running engine"
        if "context" in err.message:
            fix = "docker context ls: choose an existing context (docker context use NAME)"
        checks.append(Check("engine", FAIL, err.message, fix))
        return {}
    kind = engine_kind(version, info)
    if kind.podman:
        kind = engine.kind()  # rootless or not: Podman says it in its own info only
    checks.append(Check("engine", OK, f"{kind.describe()}, reachable at {where}"))
    checks.append(_mode_check(kind, info))
    api = str(version.get("ApiVersion", "?"))
    detail = f"Docker {version.get('Version', '?')}, API {api}"
    if kind.podman:
        detail = f"Podman {kind.version}, Docker-compatible API {api}"
    if _vt(api) >= MIN_API:
        checks.append(Check("API version", OK, detail))
    else:
        fix = "upgrade Docker to 19.03 or newer (GPU requests need API 1.40)"
        checks.append(Check("API version", FAIL, detail, fix))
    if kind.podman:
        checks.append(_podman_builder(engine))
        checks.append(_cdi_check(engine))
        return dict(info)
    cli = engine.docker_cli()
    if cli is None:
        fix = "install the docker buildx plugin (docker-buildx-plugin); classic builds work"
        checks.append(Check("BuildKit", WARN, "no BuildKit client: classic builder only", fix))
    elif cli.mode == "buildx":
        checks.append(Check("BuildKit", OK, f"docker buildx ({cli.path})"))
    else:
        checks.append(Check("BuildKit", OK, f"built-in, DOCKER_BUILDKIT=1 ({cli.path})"))
    checks.append(_runtime_check(engine, info, tags, config))
    return dict(info)


def _mode_check(kind: Any, info: Mapping[str, Any]) -> Check:
    """Rootless or not, and the cgroup version: what limits and file ownership depend on."""
    mode = {True: "rootless", False: "rootful", None: "rootful or rootless: not said"}
    cgroup = info.get("CgroupVersion")
    driver = info.get("CgroupDriver")
    where = f"cgroup v{cgroup}" if cgroup else "cgroup version not said"
    detail = f"{mode[kind.rootless]}, {where}" + (f" ({driver})" if driver else "")
    if kind.rootless and str(cgroup) == "1":
        fix = "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1): rootless needs it"
        return Check("engine mode", WARN, detail + ": --memory and --cpuset are not applied", fix)
    return Check("engine mode", OK, detail)


def _podman_builder(engine: Any) -> Check:
    """Podman's API has no BuildKit session: `podman build` (Buildah) builds instead."""
    podman = engine.podman_cli()
    if podman is None:
        fix = "install podman (its CLI builds with Buildah), or build with --builder classic"
        return Check("BuildKit", WARN, "Podman's API has no BuildKit; no podman CLI", fix)
    return Check("BuildKit", OK, f"podman build (Buildah, {podman.path}): cache and secret mounts")


def _cdi_check(engine: Any) -> Check:
    """On Podman GPUs go through CDI: which NVIDIA devices the engine's CDI specs define."""
    from gpulaunch.engine.podman import CDI_DIRS, CDI_FIX, CDI_GPU_KIND

    if is_remote(engine.host):
        fix = "run gpulaunch doctor on the engine's machine for its CDI specs"
        detail = "the engine is remote: its CDI specs are not on this machine"
        return Check("NVIDIA runtime", WARN, detail, fix)
    found = engine.cdi_devices()
    gpus = sorted(n for n in found if n.startswith(CDI_GPU_KIND + "="))
    if not gpus:
        detail = f"Podman hands GPUs over through CDI: no spec in {', '.join(CDI_DIRS)}"
        return Check("NVIDIA runtime", FAIL, detail, CDI_FIX)
    files = sorted({found[n] for n in gpus})
    return Check("NVIDIA runtime", OK, f"CDI {', '.join(gpus)} ({', '.join(files)})")


def _runtime_check(engine: Any, info: dict[str, Any], tags: list[str], config: Any) -> Check:
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi = [str(d) for d in info.get("CDISpecDirs") or []]
    named = "nvidia" in runtimes
    preferred = [f"{config.name}:latest"] if config is not None else []
    image = next((t for t in [*preferred, *tags] if t in tags), None)
    if image is None:
        how = "nvidia runtime registered" if named else "not probed"
        status = OK if named else WARN
        fix = "" if named else "build an image (gpulaunch build), then rerun doctor to probe --gpus"
        return Check("NVIDIA runtime", status, f"{how}; no local image to probe with", fix)
    why = runtime_error(engine, image, "doctor")
    if why is not None:
        return Check("NVIDIA runtime", FAIL, why, NO_RUNTIME_FIX)
    how = "nvidia runtime" if named else ("CDI " + ",".join(cdi) if cdi else "device hook")
    return Check("NVIDIA runtime", OK, f"GPU requests accepted ({how}; probed with {image})")


# -- driver and GPUs -----------------------------------------------------------------------
def _resolve(config: Any | None, checks: list[Check]) -> Any:
    if config is None:
        return None
    from gpulaunch.catalog.resolver import resolve
    from gpulaunch.image.render import image_request

    try:
        return resolve(image_request(config))
    except GpulaunchError as err:
        checks.append(Check("image", FAIL, err.message, "fix gpulaunch.yaml (gpulaunch versions)"))
        return None


def _runtime_not_needed(checks: list[Check]) -> None:
    """A project with a CPU image: a missing GPU runtime is a warning, not a failure. (With no
    project, or a CUDA image, it stays a failure even where NVML sees no GPU: that is what a
    GPU box whose driver or toolkit broke looks like.)"""
    for i, check in enumerate(checks):
        if check.name == "NVIDIA runtime" and check.status == FAIL:
            detail = f"{check.detail} (the image is a CPU build: needed only for GPU runs)"
            checks[i] = Check(check.name, WARN, detail, check.fix)


def _nvml_gpus(env: Mapping[str, str]) -> nvml.Listing | None:
    try:
        with nvml.session(env) as lib:
            if lib is None:
                return None
            return nvml.listing(
                lib, required={"driver", "name"}, optional={"brand", "cc", "memory"}
            )
    except nvml.NvmlError:
        return None


def _gpu_checks(resolved: Any, env: Mapping[str, str], checks: list[Check], engine_at: str) -> None:
    from gpulaunch.catalog import compat, driver_rule

    if is_remote(engine_at):
        checks.append(
            Check(
                "NVML",
                WARN,
                f"the engine is remote ({engine_at}): this machine's driver and GPUs are not "
                "its own",
                "run gpulaunch doctor on the engine's machine for the driver and GPU lines",
            )
        )
        return
    found = _nvml_gpus(env)
    if found is None:
        checks.append(Check("NVML", WARN, "no NVML: no GPU driver seen on this host", NO_GPU_FIX))
        return
    driver, gpus = found.driver, found.devices
    checks.append(Check("NVML", OK, f"driver {driver}, {len(gpus)} GPU(s)"))
    newest = driver_rule.driver_cuda(driver or "0") or "none"
    if resolved is None or resolved.cuda is None:
        what = "no configured image" if resolved is None else "the image is a CPU build"
        checks.append(Check("driver", OK, f"{driver}: runs CUDA {newest} and older ({what})"))
    else:
        names = tuple(str(g.name) for g in gpus)  # required: never None
        host = compat.HostGpus(driver, names, tuple(driver_rule.brand_name(g.brand) for g in gpus))
        checks.append(_driver_check(resolved, host, newest))
    checks += (_arch_check(index, gpu, resolved, driver) for index, gpu in enumerate(gpus))


def _driver_check(resolved: Any, host: Any, newest: str) -> Check:
    from gpulaunch.catalog import compat

    image = resolved.base_image
    verdicts = compat.driver_verdicts(resolved, host)
    for verdict in verdicts:  # any GPU brand refused decides, whatever the GPUs' order
        if not verdict.ok:
            fits = [_set_args(row) for row in _fitting(resolved, host)]
            use = f", or use {'; '.join(fits)}" if fits else ""
            return Check(
                "driver",
                FAIL,
                f"{verdict.driver} cannot start {image} (needs {verdict.reason}); "
                f"the newest CUDA this driver runs is {newest}",
                f"upgrade the driver to {verdict.needed or 'a newer branch'} or newer{use}",
            )
    for verdict in verdicts:
        if verdict.forward:
            return Check(
                "driver",
                WARN,
                f"{verdict.driver} starts {image} only through a forward-compatibility branch "
                f"({verdict.reason}); the newest CUDA this driver runs natively is {newest}",
                "keep the image's cuda-compat libraries (datacenter GPUs only), or upgrade the "
                f"driver to {verdict.needed} or newer",
            )
    return Check("driver", OK, f"{host.driver} runs {image}; newest CUDA: {newest}")


def _fitting(resolved: Any, host: Any) -> list[Any]:
    """Up to 3 catalog builds this host can run, judged on the configured base image's rule
    (a `python:*-slim` or other explicit base: the wheel's floor, not the nvidia/cuda image's):
    of the configured torch when any fits, else the newest of any torch."""
    import dataclasses

    from gpulaunch.catalog import compat, driver_rule

    rows = compat.matrix()
    if driver_rule.requirement_for(resolved.base_image, None) is None:  # not nvidia/cuda, NGC
        rows = [dataclasses.replace(row, image=resolved.base_image) for row in rows]
    fits = compat.host_builds(host, rows)
    same = [row for row in fits if row.torch == resolved.torch]
    return (same or fits)[:3]


def _arch_check(index: int, gpu: nvml.Device, resolved: Any, driver: str | None) -> Check:
    from gpulaunch.catalog import compat, driver_rule

    cc = gpu.cc or compat.gpu_compute_capability(str(gpu.name))
    memory = f", {gpu.memory / GIB:.0f} GiB" if gpu.memory else ""
    label = f"GPU {index}"
    seen = f"{gpu.name}{memory}, compute capability {cc or 'unknown'}"
    if cc is None:
        return Check(label, WARN, seen, "not in gpulaunch's GPU table: check the torch archs")
    if resolved is None or resolved.cuda is None:
        return Check(label, OK, seen)
    build = resolved.torch_variant or f"CUDA {resolved.cuda}"
    if compat.supports_arch(resolved, cc):
        return Check(label, OK, f"{seen}: supported by the {build} build")
    fits = _builds_for(cc, resolved.torch, driver, driver_rule.brand_name(gpu.brand))
    return Check(
        label,
        FAIL,
        f"{seen}: sm_{cc.replace('.', '')} is not in the {build} build "
        f"(archs: {' '.join(resolved.cuda_archs) or 'its toolkit'})",
        f"use a build with sm_{cc.replace('.', '')}: {'; '.join(fits) or 'a newer torch'}",
    )


def _builds_for(cc: str, torch: str | None, driver: str | None, brand: str | None) -> list[str]:
    """Stable builds of this torch (else of any torch, newest first) whose wheels carry
    kernels for `cc` and whose image this driver can start, as `--set` arguments."""
    from gpulaunch.catalog import compat, driver_rule

    out: list[str] = []
    for scope in ([torch] if torch else []) + [None]:
        for row in compat.matrix(scope):
            if not (row.cuda and row.archs and row.status == "stable"):
                continue
            archs = SimpleNamespace(cuda_archs=row.archs, cuda=row.cuda)  # what it reads
            if not compat.supports_arch(cast(Any, archs), cc):
                continue
            req = driver_rule.requirement_for(row.image, row.cuda)
            if driver and req is not None and not driver_rule.host_can_run(req, driver, brand).ok:
                continue
            if not any(x.startswith(row.variant + " ") for x in out):
                out.append(_set_args(row))
        if out:
            break
    return out[:3]


def _set_args(row: Any) -> str:
    return f"{row.variant} (--set image.torch={row.torch} --set image.cuda={row.cuda})"


# -- host resources ----------------------------------------------------------------------
def _shm_check() -> Check:
    try:
        usage = shutil.disk_usage("/dev/shm")
    except OSError as err:
        return Check(
            "shared memory", WARN, f"/dev/shm: {err.strerror}", "mount a tmpfs on /dev/shm"
        )
    detail = f"/dev/shm {usage.total / GIB:.1f} GiB (jobs use --ipc host: the host's)"
    if usage.total < SHM_MIN:
        fix = "mount -o remount,size=16G /dev/shm, or a profile with docker.shm_size: 16g"
        return Check("shared memory", WARN, detail, fix)
    return Check("shared memory", OK, detail)


def _disk_check(info: dict[str, Any], config: Any | None, resolved: Any, host: str) -> Check:
    root = str(info.get("DockerRootDir") or "")
    flavor = str(config.image.flavor) if config is not None else "runtime"
    if resolved is not None and resolved.cuda is None:
        flavor = "cpu"
    need = IMAGE_GIB.get(flavor, 10)
    if not info:
        return Check("disk", WARN, "not checked: the engine did not answer", "see the engine line")
    if not root or is_remote(host) or not Path(root).is_dir():
        why = "the engine is remote" if is_remote(host) else "not readable here"
        return Check(
            "disk", WARN, f"free space at {root or '?'}: {why}", "check `docker system df`"
        )
    free = shutil.disk_usage(root).free / GIB
    detail = f"{free:.0f} GiB free at {root}; a {flavor} image needs about {need} GiB"
    if free < need:
        fix = "free space (docker image prune, docker builder prune) or move data-root"
        return Check("disk", FAIL, detail, fix)
    if free < 2 * need:
        return Check("disk", WARN, detail, "docker builder prune frees the build cache")
    return Check("disk", OK, detail)


def _numa_check(env: Mapping[str, str]) -> Check:
    from gpulaunch.launch.topology import discover

    try:
        topo = discover(env)
    except (OSError, GpulaunchError) as err:
        reason = getattr(err, "message", None) or getattr(err, "strerror", None) or str(err)
        return Check("NUMA", WARN, f"topology unreadable: {reason}", "check /sys is mounted")
    nodes = {n: cpus for n, cpus in topo.nodes.items() if cpus}
    allowed = os.sched_getaffinity(0)
    total = len(set().union(*nodes.values())) if nodes else os.cpu_count() or len(allowed)
    layout = ", ".join(f"node {n}: {len(c)} CPUs" for n, c in sorted(nodes.items())) or "no NUMA"
    detail = f"{layout}; this process may use {len(allowed)} of {total} CPUs ({topo.source})"
    if len(allowed) < total:
        fix = "a cpuset or taskset limits this shell: NUMA binding uses only the allowed CPUs"
        return Check("NUMA / affinity", WARN, detail, fix)
    return Check("NUMA / affinity", OK, detail)


def _vt(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return (0,)
