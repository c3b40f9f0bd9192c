"""The `run` use case: config + flags + profiles + topology -> one RunPlan.

The same plan drives a container (docker SDK) and host mode (`--no-container`): env,
torchrun, the NUMA wrapper and the precision helper are identical; only where the process
starts differs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.cpulist import parse_cpulist
from gpulaunch.engine.docker_api import remote_engine
from gpulaunch.engine.nvml import NvmlError
from gpulaunch.engine.runspec import NGC_ULIMITS, WORKSPACE, Mount, RunPlan, base_labels, new_run_id
from gpulaunch.errors import ConfigError, TopologyError
from gpulaunch.fsio import make_dirs
from gpulaunch.gpurequest import GpuRequest
from gpulaunch.launch.exposure import STATE_IN_PROJECT, guard
from gpulaunch.launch.flags import (
    host_paths,
    host_python,
    module_command,
    parse_mount,
    rdzv_options,
    script_command,
    single_process_warning,
)
from gpulaunch.launch.numa import MODES, NumaPlan, numa_bind_script, plan_numa, select_gpus
from gpulaunch.launch.options import RunOptions
from gpulaunch.launch.topology import Topology, discover

if TYPE_CHECKING:
    from gpulaunch.config import ProjectConfig
    from gpulaunch.image.build import PreparedBuild
    from gpulaunch.launch.profiles import ResolvedLaunch

CONTAINER_LIB = "/opt/gpulaunch/lib"
CONTAINER_NUMA_BIND = "/opt/gpulaunch/bin/numa_bind.py"
PRECISION_MODULE = "gpulaunch_precision.py"
# host mode's PYTHONPATH entry: a folder of the installed package that holds only the
# precision helper, so a job never imports gpulaunch code from a file in the project
HOST_LIB = Path(__file__).resolve().parent / "pythonpath"
CHECKPOINTS = "/checkpoints"
CHECKPOINT_ENV = "GPULAUNCH_CHECKPOINT_DIR"


@dataclass
class LaunchPlan:
    """What --dry-run shows: the run plan plus where each setting came from."""

    run: RunPlan
    launch: ResolvedLaunch
    numa: NumaPlan
    topology_source: str
    host_mode: bool = False
    gpu_check: str = "not validated"
    restarts: int = 0
    restart_by: str = ""  # "torchrun" (multi-process) or "gpulaunch" (restarts the job)
    checkpoint_dir: str | None = None  # host folder mounted at /checkpoints

    def summary_lines(self) -> list[str]:
        lines = [f"profile: {self.launch.profile}"]
        for name, item in self.launch.settings().items():
            lines.append(f"{name}: {item.value}  ({item.source})")
        lines.append(f"topology: {self.topology_source}")
        lines.append(f"gpus: {self.gpu_check}")
        lines += [f"numa {line}" for line in self.numa.describe()] or ["numa: no CPU binding"]
        lines += [f"note: {n}" for n in (*self.numa.notes, *self.launch.notes)]
        return lines


def _trusted_topology(env: dict[str, str], request: GpuRequest) -> tuple[Topology | None, str]:
    """The engine host's topology when this machine is that host and it can be known, and
    when it is None, why (shown by --dry-run: the GPUs were then not validated).

    NVML (a driver is present) or a fixture tree (GPULAUNCH_SYSFS_ROOT). Plain sysfs
    without a driver is not trusted for validation, and a remote engine (DOCKER_HOST or the
    docker context, as the engine seam reads them) is not here.
    The driver refusing a query and an unreadable sysfs are advisory. Bindings too old for
    a query discovery needs refuse a GPU request: they would skip the validation on every
    run, not just on this host's odd GPU.
    """
    remote = remote_engine(env)
    if remote:
        return None, remote

    try:
        topo = discover(env)
    except NvmlError as err:
        if err.outdated and not request.none:
            raise ConfigError(f"--gpus: GPUs not validated: {err.message}") from None
        return None, f"GPU discovery failed: {err.message}"
    except OSError as err:
        return None, f"GPU discovery failed: cannot read {err.filename or 'sysfs'}: {err.strerror}"
    if topo.source == "nvml" or env.get("GPULAUNCH_SYSFS_ROOT"):
        return topo, ""
    return None, "no NVML (nvidia-ml-py not installed or no driver); sysfs alone is not trusted"


def _apply_docker_options(plan: RunPlan, launch: ResolvedLaunch, cli_network: str | None) -> None:
    docker = {key: item.value for key, item in launch.docker.items() if item.value}
    for key in ("ipc", "shm_size", "memory", "cpuset_cpus"):
        if key in docker:
            setattr(plan, key, str(docker[key]))
    if "shm_size" in docker and plan.ipc == "host":
        plan.ipc = None  # a private /dev/shm of that size instead of the host's
    if "network" in docker and not cli_network and plan.network is None:
        plan.network = str(docker["network"])
    plan.cap_add = sorted(set(plan.cap_add) | set(docker.get("cap_add", [])))
    plan.devices = sorted(set(plan.devices) | set(docker.get("devices", [])))
    plan.ulimits = {**NGC_ULIMITS, **docker.get("ulimits", {})}


def plan_run(
    config: ProjectConfig,
    project: Path,
    cwd: Path,
    opts: RunOptions,
    image: str,
    env: dict[str, str] | None = None,
    mount_project: bool = True,
) -> LaunchPlan:
    """The launch plan; `mount_project=False` runs the image's own copy of the code at
    /workspace (rerun of a recorded run) instead of mounting today's tree over it."""
    from gpulaunch.launch.presets import detect_interconnect
    from gpulaunch.launch.profiles import resolve_launch
    from gpulaunch.project.pythonpath import import_paths

    if opts.numa is not None and opts.numa not in MODES:
        raise ConfigError(f"--numa: {opts.numa!r} is not one of {', '.join(MODES)}")
    environ = dict(os.environ if env is None else env)
    given = opts.gpus
    request = GpuRequest(config.launch.gpus) if given is None else GpuRequest.parse(given, "--gpus")
    topo, untrusted_why = _trusted_topology(environ, request)
    if not opts.no_container:
        check_host(config, request, environ)
    count = request.count(None if topo is None else len(topo.gpus))
    selected: tuple[Any, ...] = ()
    if topo is not None and not request.none:
        try:
            selected = select_gpus(topo, request)
        except TopologyError as err:
            raise ConfigError(f"--gpus: {err.message}") from None
        count = len(selected)
    if opts.script and opts.command:
        raise ConfigError("run: give either SCRIPT [ARGS] or -- COMMAND, not both")
    nproc = opts.nproc or config.launch.nproc or (count if count and count > 0 else 1)

    use_gpus = not request.none
    launch = resolve_launch(
        config,
        opts,
        interconnect=detect_interconnect(environ) if use_gpus else None,
        gpu_names=[g.name for g in selected if g.name],
    )
    cpuset = launch.docker.get("cpuset_cpus")
    allowed = parse_cpulist(str(cpuset.value)) if cpuset is not None and cpuset.value else None
    numa_mode = str(launch.numa.value)
    if topo is not None and selected and numa_mode != "off":
        try:
            numa = plan_numa(topo, selected, numa_mode, allowed)
        except TopologyError as err:
            raise ConfigError(f"--numa: {err.message}") from None
    else:
        note = "no GPU topology for this run; CPU binding off"
        numa = NumaPlan("off", (), (note,) if topo is None and numa_mode != "off" else ())
    if numa.ranks and len(numa.ranks) < nproc:
        raise ConfigError(
            f"--nproc: {nproc} processes but the NUMA plan has {len(numa.ranks)} ranks"
        )

    host_mode = opts.no_container
    bind_script = None
    if numa.ranks:
        bind_script = str(numa_bind_script()) if host_mode else CONTAINER_NUMA_BIND
    rdzv, network = _multi_node(config, opts, _network(launch, opts))
    if rdzv and not opts.script:
        raise ConfigError("--nnodes: give SCRIPT (torchrun starts it on every node), not -- CMD")
    if opts.script:
        # --gpus all with no count known here: one rank per GPU the container sees (0: `gpu`)
        unknown = count is None and not (opts.nproc or config.launch.nproc)
        ranks = 0 if unknown else nproc
        command = script_command(opts.script, opts.args, project, cwd, ranks, bind_script, rdzv)
        if host_mode:
            command = host_paths(command, project, host_python(config, project, environ))
    elif opts.command:
        if not opts.command[0].strip():
            raise ConfigError("run: the command after -- is empty")
        command = module_command(list(opts.command), nproc)
        if opts.nproc and opts.nproc > 1 and not _is_torchrun(command):
            raise ConfigError(
                f"--nproc {opts.nproc}: `-- COMMAND` runs once, as given; give SCRIPT or "
                "`-- python -m MODULE` for one process per rank, or start torchrun yourself"
            )
    else:
        raise ConfigError("run: missing SCRIPT (or -- COMMAND ...)")
    if bind_script is not None:  # the plan shown is the binding applied, or no plan at all
        bound = bind_ranks(command, bind_script, len(numa.ranks))
        if bound is None:
            numa = NumaPlan("off", (), (f"NUMA binding not applied: {NOT_OURS}",))
        else:
            command = bound
    if count is None and command[0] == "torchrun" and not opts.nproc:
        command[command.index("--nproc-per-node") + 1] = "gpu"
    restart_by = ""
    if opts.restarts:
        restart_by = "torchrun" if _is_torchrun(command) else "gpulaunch"
        if restart_by == "torchrun":
            at = 1 if command[0] == "torchrun" else 3  # host mode: python -m torch.distributed.run
            command[at:at] = ["--max-restarts", str(opts.restarts)]

    lib_dir = str(HOST_LIB) if host_mode else CONTAINER_LIB
    run_env: dict[str, str] = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1"}
    # the project root too, so entry scripts in subfolders import the project's package
    root = str(project) if host_mode else WORKSPACE
    extra = [f"{root}/{p}" for p in import_paths(project, config.image.requirements)]
    run_env["PYTHONPATH"] = ":".join([lib_dir, root, *extra])  # src/ as the image has it
    run_env.update(launch.env_values())
    run_env.update(numa.to_env())
    if host_mode:
        run_env.pop("HOME")
        if request.ids:
            run_env["CUDA_VISIBLE_DEVICES"] = str(request.value)

    binds = [(Mount(str(project), WORKSPACE), "the project")] if mount_project else []
    user_mounts = [(spec, f"launch.mounts[{i}]") for i, spec in enumerate(config.launch.mounts)]
    mount_notes: list[str] = []
    if opts.script:
        lone = single_process_warning((cwd / opts.script).resolve(), nproc)
        mount_notes += [lone] if lone else []
    for spec, where in [*user_mounts, *((spec, "--mount") for spec in opts.mounts)]:
        binds.append((parse_mount(spec, project, where), where))
    if use_gpus and not host_mode and "cpu" in (config.image.cuda, config.image.flavor):
        field = "image.cuda: cpu" if config.image.cuda == "cpu" else "image.flavor: cpu"
        mount_notes.append(
            f"--gpus {request.value}: the image is a CPU build ({field}): torch in it cannot use "
            "the GPUs asked for; choose a CUDA build (image.cuda) to use them"
        )
    checkpoints = checkpoint_folder(config, project)
    if checkpoints is not None:
        binds.append((Mount(str(checkpoints), CHECKPOINTS), "launch.checkpoint_dir"))
        run_env[CHECKPOINT_ENV] = str(checkpoints) if host_mode else CHECKPOINTS
    mounts = [mount for mount, _ in binds]
    if not host_mode:  # a container job sees only what its mounts show: never our state
        masks, unsafe = guard(binds, project, environ, opts.allow_unsafe_mounts)
        mounts += masks
        mount_notes += unsafe
    if mount_notes:
        launch = dataclasses.replace(launch, warnings=(*launch.warnings, *mount_notes))
    # the precision helper (always) and the NUMA wrapper (when binding), read-only
    helper = f"{CONTAINER_LIB}/{PRECISION_MODULE}"
    mounts.append(Mount(str(HOST_LIB / PRECISION_MODULE), helper, True))
    if numa.ranks:
        mounts.append(Mount(str(numa_bind_script()), CONTAINER_NUMA_BIND, True))
    targets = [m.target for m in mounts]
    if len(set(targets)) != len(targets):
        raise ConfigError("--mount: two mounts share the same container path")

    run_id = new_run_id()
    plan = RunPlan(
        image=image,
        name=f"gl-{config.name.replace('/', '-')}-{run_id}",
        command=command,
        env=run_env,
        mounts=mounts,
        user=f"{os.getuid()}:{os.getgid()}",
        gpus=request.value,
        labels=base_labels(config.name, run_id),
        network=None if network == "default" else network,
        nproc=nproc,
        numa=[{k: r[k] for k in ("rank", "gpu", "numa_node", "cpus")} for r in numa.to_json()],
        stop_timeout=config.launch.stop_grace,
    )
    _apply_docker_options(plan, launch, opts.network or (network if rdzv else None))
    if rdzv and not host_mode and plan.network != "host":
        raise ConfigError(f"--nnodes: a multi-node run needs host networking, not {plan.network}")
    if restart_by == "gpulaunch" and opts.detach:
        plan.restart_retries = opts.restarts  # nobody stays to restart it: the engine does
    if plan.network == "none":  # a profile may choose it after the plan was made
        plan.pin_hostname()
    if rdzv:
        where = "this host's network" if host_mode else "host networking (--network host)"
        said = f"multi-node: {where}; the other nodes reach the rendezvous and NCCL/gloo here"
        launch = dataclasses.replace(launch, notes=(*launch.notes, said))
    source = topo.source if topo is not None else "unknown (no NVML; no fixture)"
    return LaunchPlan(
        plan,
        launch,
        numa,
        source,
        host_mode,
        _gpu_check(request, topo, untrusted_why),
        opts.restarts,
        restart_by,
        None if checkpoints is None else str(checkpoints),
    )


def _is_torchrun(command: list[str]) -> bool:
    return command[:1] == ["torchrun"] or command[1:3] == ["-m", "torch.distributed.run"]


def checkpoint_folder(config: ProjectConfig, project: Path) -> Path | None:
    """launch.checkpoint_dir as an absolute host path (relative ones are in the project)."""
    value = config.launch.checkpoint_dir
    if value is None:
        return None
    path = Path(os.path.abspath(project / os.path.expanduser(value)))
    if "," in str(path) or '"' in str(path):
        raise ConfigError(f"launch.checkpoint_dir: {str(path)!r} contains a comma or quote")
    if path == project or project.is_relative_to(path):
        raise ConfigError("launch.checkpoint_dir: must not be the project folder or above it")
    return path


def _network(launch: ResolvedLaunch, opts: RunOptions) -> tuple[str, str]:
    """(network, where it was set) by the one precedence `profiles show` reports: --network,
    else the resolved `docker.network` (default profile < launch.network < the selected
    profile), else default."""
    if opts.network:
        return opts.network, "--network"
    chosen = launch.docker.get("network")
    if chosen is None:
        return "default", "launch.network"
    return str(chosen.value), f"network ({chosen.source})"


def _multi_node(
    config: ProjectConfig, opts: RunOptions, chosen: tuple[str, str]
) -> tuple[list[str] | None, str]:
    """torchrun's rendezvous options and the network: host for a multi-node run.

    The other nodes reach this one's rendezvous and NCCL/gloo sockets on the host's own
    addresses, so `--network none` cannot work and is refused with the reason.
    """
    network, where = chosen
    rdzv = rdzv_options(opts, config.name.replace("/", "-"))
    if rdzv is None or opts.no_container:
        return rdzv, network  # one node, or the host's own network: nothing to choose
    if network == "none":
        raise ConfigError(
            f"{where}: none cannot reach the other nodes of --nnodes {opts.nnodes} "
            "(multi-node runs use host networking)"
        )
    if opts.nccl == "ib-gdr" and opts.network not in (None, "host"):
        raise ConfigError("--nccl: ib-gdr needs host networking (RDMA devices, IB interfaces)")
    return rdzv, "host"


def _gpu_check(request: GpuRequest, topo: Topology | None, why: str) -> str:
    """One line for --dry-run: whether --gpus was checked against this host's GPUs."""
    if request.none:
        return "no GPUs requested"
    if topo is None:
        return f"not validated: {why}"
    return f"validated against this host's {len(topo.gpus)} GPU(s) ({topo.source})"


def check_host(config: ProjectConfig, request: GpuRequest, env: dict[str, str]) -> None:
    """Refuse a driver/CUDA or GPU-arch mismatch on this host before building (NVML only)."""
    if request.none or remote_engine(env):
        return
    from gpulaunch.catalog import compat

    try:
        info = compat.probe(env)
    except NvmlError as err:  # bindings too old to read the driver: never a silent pass
        raise ConfigError(f"--gpus: GPUs not validated: {err}") from None
    if info is None:
        return
    from gpulaunch.catalog.request import image_request
    from gpulaunch.catalog.resolver import resolve

    indices = request.indices(None)  # "all" and GPUs named by UUID: every GPU is checked
    selected = None if indices is None else [i for i in indices if i < len(info.names)]
    compat.check(resolve(image_request(config)), info, selected)


NOT_OURS = (
    "gpulaunch binds the ranks it starts (SCRIPT, -- python -m MODULE, and -- python FILE "
    "on one GPU), not those of the command's own launcher (torchrun can bind its own with "
    "--numa-binding node) nor one process that uses several GPUs"
)
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def bind_ranks(command: list[str], wrapper: str, ranks: int) -> list[str] | None:
    """`command` with the per-rank NUMA wrapper in front of the worker, or None when gpulaunch
    does not start the ranks itself (a user's own torchrun, accelerate, a shell): the plan
    then says "not applied" rather than show a binding that would not happen.

    The wrapper is a Python file that binds the rank's CPUs and memory and then execs the
    same Python with the rest of the line, so it goes where the worker's own script would."""
    if wrapper in command:  # SCRIPT: script_command put it there
        return command
    if _PYTHON.fullmatch(os.path.basename(command[0])):  # one process: one rank's binding
        return [command[0], wrapper, *command[1:]] if ranks == 1 else None
    ours = ["torchrun", "--standalone", "--nproc-per-node"]
    if command[:3] == ours and len(command) > 5 and command[4] == "-m":  # module_command
        return [*command[:4], wrapper, *command[4:]]
    return None


def write_run_files(plan: LaunchPlan, project: Path) -> None:
    """The folders a real run needs; plan_run itself writes nothing (--dry-run).

    Through the one writer's folder maker: a planted link (`.gpulaunch -> /elsewhere`) is
    refused, never followed. A container run needs `.gpulaunch/` to be a real folder of the
    user's: the mask is laid over it, and the engine would make a missing one as root.
    """
    if any(m.kind == "tmpfs" for m in plan.run.mounts):
        make_dirs(project / STATE_IN_PROJECT, root=project)
    if plan.launch.log_dir:
        make_dirs(project / plan.launch.log_dir, root=project)
    if plan.checkpoint_dir is not None:
        folder = Path(plan.checkpoint_dir)
        if folder.is_relative_to(project):
            make_dirs(folder, root=project)
        elif not folder.is_dir():  # outside the project: create below what exists
            top = next(p for p in folder.parents if p.is_dir())
            make_dirs(folder, root=top)


def dry_run_json(prepared: PreparedBuild | None, plan: LaunchPlan) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if prepared is not None:
        data["image"] = {
            "tag": prepared.tag,
            "builder": prepared.plan.builder,
            "build_args": prepared.request.build_args,
            "network": prepared.request.network,
            "base_image": prepared.plan.resolved.base_image,
        }
    run = plan.run.to_json()
    if plan.host_mode:
        run = {k: run[k] for k in ("command", "nproc", "env", "numa")}
        run["mode"] = "host"
    data["run"] = run
    data["profile"] = plan.launch.profile
    data["sources"] = {k: v.source for k, v in sorted(plan.launch.env.items())}
    data["settings"] = {
        name: {"value": item.value, "source": item.source}
        for name, item in plan.launch.settings().items()
    }
    data["numa_plan"] = plan.run.numa
    data["gpu_check"] = {
        "validated": plan.gpu_check.startswith("validated"),
        "detail": plan.gpu_check,
    }
    data["warnings"] = list(plan.launch.warnings)
    data["notes"] = [*plan.numa.notes, *plan.launch.notes]
    return data
