"""Commands that hand a job to a cluster: `export k8s|slurm` (write manifests or an sbatch
script) and `submit k8s|slurm` (the same, given to kubectl or sbatch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import ConfigOpt, EnvOpt, NcclOpt, PrecisionOpt, ProfileOpt, app
from gpulaunch.cli.common import load_project, output_target, print_warnings, write_output

export_app = typer.Typer(
    help="Write the job for another engine: Kubernetes manifests or a Slurm batch script.",
    no_args_is_help=True,
)
submit_app = typer.Typer(
    help="Export and hand the job to the cluster (kubectl apply, sbatch).", no_args_is_help=True
)
app.add_typer(export_app, name="export")
app.add_typer(submit_app, name="submit")

ScriptArg = Annotated[str, typer.Argument(help="Python script in the project.")]
ArgsArg = Annotated[list[str] | None, typer.Argument(help="Arguments for the script (after --).")]
NodesOpt = Annotated[int, typer.Option("--nodes", help="Nodes (one torchrun per node).")]
GpusOpt = Annotated[str | None, typer.Option(help="GPUs per node (default: launch.gpus).")]
NprocOpt = Annotated[
    int | None, typer.Option(help="Processes per node (default: one per GPU).", min=1, max=1024)
]
NameOpt = Annotated[str | None, typer.Option(help="Job name (default: from the project name).")]
ImageOpt = Annotated[
    str | None,
    typer.Option(help="Pushed image REGISTRY/NAME[:TAG][@sha256:...] (default: build --push)."),
]
RestartsOpt = Annotated[
    int, typer.Option(help="Restarts before the job fails (backoffLimit / maxRestarts).")
]
KindOpt = Annotated[str, typer.Option(help="job (Indexed Job + Service), jobset or pytorchjob.")]
NamespaceOpt = Annotated[str | None, typer.Option(help="metadata.namespace of every object.")]
ContainerOpt = Annotated[str, typer.Option(help="pyxis, apptainer, docker or none (host mode).")]
OutputOpt = Annotated[str, typer.Option("--output", "-o", help="File to write; - for stdout.")]
ForceOpt = Annotated[bool, typer.Option(help="Overwrite an existing output file.")]
PartitionOpt = Annotated[str | None, typer.Option(help="#SBATCH --partition.")]
AccountOpt = Annotated[str | None, typer.Option(help="#SBATCH --account.")]
TimeOpt = Annotated[str | None, typer.Option(help="#SBATCH --time (e.g. 24:00:00).")]
CpusOpt = Annotated[int | None, typer.Option(help="#SBATCH --cpus-per-task.")]


def _export(given: dict[str, Any], to: str) -> Any:
    """Export for Kubernetes (`to="k8s"`) or Slurm from a command's parameters (its
    locals()); its warnings on stderr."""
    from dataclasses import fields

    from gpulaunch.export.api import export_k8s, export_slurm
    from gpulaunch.export.slurm import SlurmOptions
    from gpulaunch.export.spec import ExportOptions
    from gpulaunch.jobs.options import check_flag_lines

    def picked(cls: Any) -> dict[str, Any]:  # the dataclass's fields that are parameters
        return {f.name: given[f.name] for f in fields(cls) if f.name in given}

    if to == "slurm":
        check_flag_lines({"--container": given["container"], "--time": given["time"]})
    config = given["config"]
    cfg, project = load_project(config, write_cache=not given.get("dry_run"))
    check_flag_lines({f"--{k}": given[k] for k in ("gpus", "name", "image", "profile", "nccl")})
    lists = {"args": list(given["args"] or []), "env": list(given["env"] or [])}
    opts = ExportOptions(**picked(ExportOptions) | lists)
    if to == "k8s":
        kind, namespace = given["kind"], given["namespace"]
        result = export_k8s(cfg, project, Path.cwd(), opts, kind, namespace, config)
    else:
        slurm = SlurmOptions(**picked(SlurmOptions))
        result = export_slurm(cfg, project, Path.cwd(), opts, slurm, config)
    print_warnings(result.warnings)
    return result, project


@export_app.command("k8s")
def export_k8s_cmd(
    script: ScriptArg,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    nodes: NodesOpt = 1,
    gpus: GpusOpt = None,
    nproc: NprocOpt = None,
    kind: KindOpt = "job",
    name: NameOpt = None,
    namespace: NamespaceOpt = None,
    image: ImageOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    precision: PrecisionOpt = None,
    env: EnvOpt = None,
    restarts: RestartsOpt = 0,
    output: OutputOpt = "-",
    force: ForceOpt = False,
) -> None:
    """Kubernetes manifests: Indexed Job + headless Service (default), JobSet or PyTorchJob."""
    result, project = _export(locals(), "k8s")
    write_output(result.text, output, output_target(output, project), force)


@export_app.command("slurm")
def export_slurm_cmd(
    script: ScriptArg,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    nodes: NodesOpt = 1,
    gpus: GpusOpt = None,
    nproc: NprocOpt = None,
    container: ContainerOpt = "docker",
    name: NameOpt = None,
    image: ImageOpt = None,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    time: TimeOpt = None,
    cpus: CpusOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    precision: PrecisionOpt = None,
    env: EnvOpt = None,
    output: OutputOpt = "-",
    force: ForceOpt = False,
) -> None:
    """An sbatch script: one torchrun per node via srun, c10d rendezvous at the first node."""
    result, project = _export(locals(), "slurm")
    write_output(result.text, output, output_target(output, project), force)


@submit_app.command("k8s")
def submit_k8s_cmd(
    script: ScriptArg,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    nodes: NodesOpt = 1,
    gpus: GpusOpt = None,
    nproc: NprocOpt = None,
    kind: KindOpt = "job",
    name: NameOpt = None,
    namespace: NamespaceOpt = None,
    image: ImageOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    precision: PrecisionOpt = None,
    env: EnvOpt = None,
    restarts: RestartsOpt = 0,
    context: Annotated[str | None, typer.Option(help="kubectl --context.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the kubectl command and manifest only.")
    ] = False,
) -> None:
    """Export for Kubernetes and `kubectl apply -f -` it."""
    result, _ = _export(locals(), "k8s")  # first: locals() must hold the parameters only
    from gpulaunch.export.api import submit_k8s
    from gpulaunch.jobs.options import check_flag_lines

    check_flag_lines({"--context": context})
    if dry_run:
        ctx = f"--context {context} " if context else ""
        typer.echo(f"# kubectl {ctx}apply -f - <<'MANIFEST'")
        typer.echo(result.text + "MANIFEST")
        return
    typer.echo(submit_k8s(result.text, context), nl=False)


@submit_app.command("slurm")
def submit_slurm_cmd(
    script: ScriptArg,
    args: ArgsArg = None,
    config: ConfigOpt = None,
    nodes: NodesOpt = 1,
    gpus: GpusOpt = None,
    nproc: NprocOpt = None,
    container: ContainerOpt = "docker",
    name: NameOpt = None,
    image: ImageOpt = None,
    partition: PartitionOpt = None,
    account: AccountOpt = None,
    time: TimeOpt = None,
    cpus: CpusOpt = None,
    profile: ProfileOpt = None,
    nccl: NcclOpt = None,
    precision: PrecisionOpt = None,
    env: EnvOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the sbatch command and script only.")
    ] = False,
) -> None:
    """Export the sbatch script and submit it with sbatch; prints the job id."""
    result, _ = _export(locals(), "slurm")  # first: locals() must hold the parameters only
    from gpulaunch.export.api import submit_slurm

    if dry_run:
        typer.echo("# sbatch --parsable <<'SCRIPT'")
        typer.echo(result.text + "SCRIPT")
        return
    typer.echo(submit_slurm(result.text))
