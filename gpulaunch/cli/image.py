"""Commands about the image: init, render, versions, schema, build, and `catalog update`
(PyPI -> a user overlay) with the catalog staleness warning the image commands print.

Each parses its flags, calls one core function and prints the result; heavy modules are
imported inside the command so `gpulaunch --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulaunch.cli.app import ConfigOpt, NetworkOpt, SetOpt, app
from gpulaunch.cli.common import echo_err, load_project, make_engine, print_warnings
from gpulaunch.errors import ConfigError
from gpulaunch.jobs.options import check_choice

# the init prompts: (choice, question, the answer that leaves it to detection)
_QUESTIONS = (
    ("torch", "PyTorch version (or none)", "latest"),
    ("cuda", "CUDA (x.y, cpu, or auto)", "auto"),
    ("python", "Python (x.y or auto)", "auto"),
)


def _ask(opts: Any) -> None:
    """The init prompts (a TTY only): each answer fills one choice of the init options."""
    from rich.prompt import Prompt

    for name, question, detect in _QUESTIONS:
        answer = Prompt.ask(question, default=getattr(opts, name) or detect)
        setattr(opts, name, None if answer == detect else answer)
    opts.flavor = Prompt.ask(
        "Image flavor", choices=["runtime", "devel", "ngc", "cpu"], default=opts.flavor or "runtime"
    )


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Project folder.")] = Path("."),
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="No prompts; use flags/detection.")
    ] = False,
    torch: Annotated[str | None, typer.Option(help='PyTorch version, or "none".')] = None,
    cuda: Annotated[str | None, typer.Option(help='CUDA version like "12.4", or "cpu".')] = None,
    python: Annotated[str | None, typer.Option(help='Python version like "3.11".')] = None,
    flavor: Annotated[
        str | None, typer.Option(help="runtime | devel | ngc | cpu (default: runtime).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Image name (default: folder name).")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing gpulaunch.yaml.")] = False,
    check_pins: Annotated[
        bool,
        typer.Option(help="Ask the index what exactly pinned dependencies require of torch."),
    ] = False,
    entries: Annotated[
        list[str] | None,
        typer.Option(
            "--entry",
            metavar="FILE",
            help="Entry point whose imports are checked (repeatable; default: the top-level "
            "scripts with a __main__ block).",
        ),
    ] = None,
    add_missing: Annotated[
        bool,
        typer.Option(
            help="Write the imports no dependency provides to requirements-gpulaunch.txt, "
            "which image.requirements then installs."
        ),
    ] = False,
) -> None:
    """Write a validated gpulaunch.yaml (and a .dockerignore) for a project.

    Names each import of the entry points (--entry) that no dependency provides, with its
    file:line; --add-missing installs them from requirements-gpulaunch.txt."""
    choices = {k: v for k, v in locals().items() if k != "yes"}  # named as InitOptions' fields
    from gpulaunch.image.init import InitOptions, run_init

    if not yes and not sys.stdin.isatty():
        raise ConfigError("init: stdin is not a terminal; pass --yes (with --torch/--cuda/...)")
    # env: NVML, the driver and GPUs choose the default build
    result = run_init(InitOptions(**choices, ask=None if yes else _ask, env=dict(os.environ)))
    for note in result.notes:
        echo_err(note)
    warn_if_stale()
    if result.requirements_path is not None:
        typer.echo(f"wrote {result.requirements_path}")
    typer.echo(f"wrote {result.config_path}")
    if result.dockerignore_written:
        typer.echo(f"wrote {result.dockerignore_path}")
    typer.echo(f"image: {result.summary}")


@app.command()
def render(
    config: ConfigOpt = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", help="File to write; -, /dev/stdout or /dev/fd/1: stdout."),
    ] = "-",
    builder: Annotated[
        str | None,
        typer.Option(help="buildkit or classic (default: what `build` would use)."),
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing output file.")] = False,
    sets: SetOpt = None,
) -> None:
    """Print the Dockerfile for gpulaunch.yaml."""
    from gpulaunch.cli.common import output_target, write_output
    from gpulaunch.engine.cliprobe import remember_probes
    from gpulaunch.image.render import plan_image, render_dockerfile

    kind = builder_choice(builder)
    cfg, project = load_project(config, sets)
    target = output_target(output, project)  # before any work: a refused -o writes nothing
    plan = plan_image(cfg, project, kind)  # type: ignore[arg-type]
    text = render_dockerfile(plan, remember=True)  # not a dry run: jinja2 keeps its code
    print_warnings(plan.resolved.warnings)
    warn_if_stale()
    remember_probes()  # no dry run: the next render, build or dry run skips the CLI probe
    write_output(text, output, target, force)


def builder_choice(builder: str | None) -> str:
    """--builder, else the builder `build` will use: decided from the docker client binary
    alone, so render, dry runs and the real build agree whether or not a daemon answers."""
    check_choice("--builder", builder, ("buildkit", "classic"))
    return builder if builder is not None else str(make_engine().builder_kind())


@app.command()
def versions(
    torch: Annotated[str | None, typer.Option(help="Only this PyTorch version.")] = None,
    cuda: Annotated[str | None, typer.Option(help="Only this CUDA version.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the catalog: valid torch / CUDA / Python / driver combinations."""
    from gpulaunch.cli.views import matrix_json, matrix_table, matrix_text

    warn_if_stale()
    if as_json:
        typer.echo(json.dumps(matrix_json(torch, cuda), indent=2))
    elif not sys.stdout.isatty():
        typer.echo(matrix_text(torch, cuda), nl=False)
    else:
        from rich.console import Console

        Console().print(matrix_table(torch, cuda))


@app.command()
def schema() -> None:
    """Print the JSON Schema of gpulaunch.yaml (for editors)."""
    from gpulaunch.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


ProgressOpt = Annotated[
    str,
    typer.Option(
        "--progress",
        help="How a build shows its steps: auto (a live line on a terminal, else plain), "
        "plain (one line per step as the builder starts it), quiet (none).",
    ),
]
PROGRESS = ("auto", "plain", "quiet")


def build_with_progress(
    cfg: Any, project: Path, opts: Any, engine: Any, progress: str = "auto"
) -> Any:
    """Run a build and show its steps on stderr: on a terminal (`auto`) a live line with the
    step's number and name, elsewhere (`plain`, or `auto` on a pipe or in CI) one line per
    step as the builder starts it, flushed, so a long build never looks hung; `quiet` shows
    none. The end says the tag, the time and the image's size.

    rich is imported only for the live line or a failed build's log tail: `run` on an image
    that is up to date pays nothing for it."""
    import contextlib

    from gpulaunch.errors import BuildError
    from gpulaunch.image.build import run_build

    mode = progress  # checked by the command (PROGRESS)
    if mode == "auto":
        mode = "live" if sys.stderr.isatty() else "plain"
    live: Any = None
    if mode == "live":
        from rich.console import Console

        live = Console(stderr=True).status("building…")
    with live or contextlib.nullcontext():

        def on_progress(step: Any) -> None:
            where = f"step {step.step}/{step.total}: {step.current[:160]}"
            if live is not None:
                live.update(f"{where[:110]} ({step.elapsed:.0f}s)")
            elif mode == "plain" and step.fresh:
                echo_err(f"{where} ({step.elapsed:.0f}s)")
                sys.stderr.flush()

        try:
            outcome = run_build(cfg, project, engine, opts, on_progress)
        except BuildError as err:
            if err.log_tail and mode != "quiet":
                from rich.console import Console

                Console(stderr=True).print(
                    err.log_tail, markup=False, highlight=False, soft_wrap=True
                )
            raise
    if mode == "quiet":
        return outcome
    if outcome.cached:
        echo_err(f"image {outcome.tag} is up to date (cached; --rebuild to force)")
    else:
        size = f", {_human_size(outcome.size)}" if outcome.size is not None else ""
        echo_err(
            f"built {outcome.tag} with {outcome.builder} in {outcome.seconds:.1f}s{size}; "
            f"log: {outcome.log_path}"
        )
    return outcome


def _human_size(size: int) -> str:
    """Decimal units, as `docker image ls` shows sizes."""
    value = float(size)
    for unit in ("B", "kB", "MB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


@app.command()
def build(
    config: ConfigOpt = None,
    network: NetworkOpt = None,
    rebuild: Annotated[bool, typer.Option(help="Build even if the tag exists.")] = False,
    no_cache: Annotated[bool, typer.Option(help="Build without the layer cache.")] = False,
    builder: Annotated[
        str | None, typer.Option(help="buildkit | classic (default: what the engine offers).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the docker build command; no daemon.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --dry-run: JSON plan.")] = False,
    sets: SetOpt = None,
    push: Annotated[
        str | None,
        typer.Option(help="Then push to REGISTRY/NAME[:TAG] (default tag: gl-<hash>)."),
    ] = None,
    progress: ProgressOpt = "auto",
    import_check: Annotated[
        str,
        typer.Option(
            "--import-check",
            help="After a new image: import the entry points' third-party modules in it "
            "(seconds; no network, no GPU; a pass is not repeated when only the code "
            "changed) and name each that fails: warn (the build still exits 0), fail (exit 1, "
            "nothing pushed) or off.",
        ),
    ] = "warn",
) -> None:
    """Build the image (tagged NAME:gl-<hash>); skipped when that tag already exists."""
    from gpulaunch.image.build import BuildOptions, dry_run_argv, dry_run_text, prepare_build
    from gpulaunch.jobs.options import NETWORKS

    check_choice("--network", network, NETWORKS)
    check_choice("--progress", progress, PROGRESS)
    check_choice("--import-check", import_check, ("warn", "fail", "off"))
    ref = None
    if push is not None:
        from gpulaunch.export.images import push_target

        ref = push_target(push)  # a bad reference fails before anything is built or printed
    kind = builder_choice(builder)
    cfg, project = load_project(config, sets, write_cache=not dry_run)
    opts = BuildOptions(
        network=network,
        rebuild=rebuild,
        no_cache=no_cache,
        builder=kind,  # type: ignore[arg-type]
        config_file=config,
    )
    if dry_run:
        cli = make_engine().docker_cli() if kind == "buildkit" else None
        prepared = prepare_build(cfg, project, kind, opts)  # type: ignore[arg-type]
        if as_json:
            from gpulaunch.masking import mask_data

            data = {
                "tag": prepared.tag,
                "tags": list(prepared.request.tags),
                "builder": kind,
                "build_args": prepared.request.build_args,
                "network": prepared.request.network,
                "argv": dry_run_argv(prepared, cli),
                "context": [e.rel for e in prepared.request.entries],
                "dockerfile": prepared.dockerfile,
            }
            typer.echo(json.dumps(mask_data(data), indent=2))
        else:
            typer.echo(dry_run_text(prepared, cli), nl=False)
            if ref is not None:
                tag = ref.tag or prepared.tag.rpartition(":")[2]
                typer.echo("# push (digest recorded in .gpulaunch/pushed.json)")
                typer.echo(f"docker tag {prepared.tag} {ref.repository}:{tag}")
                typer.echo(f"docker push {ref.repository}:{tag}")
        return
    engine = make_engine()  # one for the build, its notice and the push
    outcome = build_with_progress(cfg, project, opts, engine, progress=progress)
    typer.echo(outcome.tag)
    if not outcome.cached:  # a new image: say when the older ones pile up
        from gpulaunch.cli.prune import prune_notice

        prune_notice(cfg.name, outcome.tag, engine)
        if import_check != "off":
            _import_check(cfg, project, outcome.tag, engine, strict=import_check == "fail")
    if push is not None:
        from gpulaunch.export.api import push_image

        pushed = push_image(engine, project, outcome.tag, push, lambda line: None)
        echo_err(f"pushed {pushed.pushed_tag}")
        typer.echo(pushed.reference)


def _import_check(cfg: Any, project: Path, tag: str, engine: Any, strict: bool) -> None:
    """A new image's check (ci.imports): what it says goes to stderr. A module that fails
    to import is the project's omission, and the image is built and usable for everything
    else, so the build's exit code stands unless --import-check fail asks otherwise."""
    from gpulaunch.ci.imports import check_image
    from gpulaunch.errors import GpulaunchError

    try:
        found = check_image(engine, tag, cfg.name, project, cfg.image.requirements)
    except GpulaunchError as err:  # the image is built: the check's own failure is a line
        echo_err(f"imports: not checked: {err.message}")
        if strict:
            raise typer.Exit(1) from None
        return
    for line in found.lines() if found is not None else []:
        echo_err(line)
    if strict and found is not None and (found.failed or not found.finished):
        raise typer.Exit(1)


catalog_app = typer.Typer(
    help="The version catalog: refresh it from PyPI into a user overlay.",
    no_args_is_help=True,
)
app.add_typer(catalog_app, name="catalog")


def warn_if_stale() -> None:
    """One stderr line, at most once a day, when the catalog's facts are ~90+ days old.
    Never fails the command it is part of."""
    from gpulaunch.catalog.data import load_catalog
    from gpulaunch.catalog.staleness import due_warning
    from gpulaunch.errors import GpulaunchError

    try:
        cat = load_catalog()
        message = due_warning(cat.research_date, [Path(p) for p in cat.overlays], date.today())
    except (GpulaunchError, OSError):
        return
    if message:
        echo_err(f"warning: {message}")


@catalog_app.command("update")
def update(
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Overlay file to write (default: $XDG_CONFIG_HOME/gpulaunch/catalog.d/pypi.yaml).",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds the whole update may spend reading (each answer gets what is left).",
            min=1,
            max=300,
        ),
    ] = 20.0,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
) -> None:
    """Read torch / torchvision / torchaudio releases from PyPI's JSON API (and the PyTorch
    wheel index and Docker Hub where reachable) and write what the packaged catalog lacks as
    an overlay, with confidence levels and the sources it could not reach."""
    from gpulaunch.catalog.data import check_overlay
    from gpulaunch.catalog.overlay import overlay_dir
    from gpulaunch.catalog.update import OVERLAY_NAME, Sources, run_update

    target = output.absolute() if output else overlay_dir() / OVERLAY_NAME
    report = run_update(
        output=target,
        today=date.today(),
        check=lambda data: check_overlay(data, str(target)),  # replaces the file it rewrites
        sources=Sources(timeout=timeout),
    )
    if as_json:
        data = {
            "path": str(report.path),
            "added": report.added,
            "unconfirmed": report.unconfirmed,
            "not_reached": report.unreachable,
        }
        typer.echo(json.dumps(data, indent=2))
        return
    for line in report.added:
        typer.echo(f"added: {line}")
    if not report.added:
        typer.echo("nothing new on PyPI: the catalog knows every torch release")
    for line in report.unconfirmed:
        typer.echo(f"unconfirmed: {line}")
    for line in report.unreachable:
        typer.echo(f"not reached: {line}")
    typer.echo(f"wrote {report.path}")
