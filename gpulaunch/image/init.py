"""The `init` use case: read the project (gpulaunch.project), weigh its word against the
catalog, ask (on a TTY), validate, write atomically."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpulaunch.catalog import compat
from gpulaunch.catalog.compat import HostGpus, matrix
from gpulaunch.catalog.request import ImageRequest, MatrixRow, ResolvedImage, summarize
from gpulaunch.catalog.resolver import resolve
from gpulaunch.config import (
    CONFIG_NAME,
    ProjectConfig,
    dump_config,
    sanitize_name,
    validate_data,
)
from gpulaunch.engine import nvml
from gpulaunch.errors import ConfigError, FileExistsRefusal
from gpulaunch.image.render import image_request, render_dockerignore
from gpulaunch.project.discover import nested_requirements, read_project
from gpulaunch.project.imports import NO_ENTRY, Missing, entry_gaps, requirement_lines
from gpulaunch.project.layout import keep_code, output_notes
from gpulaunch.project.model import TORCH_FAMILY, Project
from gpulaunch.project.reconcile import Choice, reconcile
from gpulaunch.project.syspkgs import COMPILERS, needs
from gpulaunch.yamlio import atomic_write

OWNED_REQUIREMENTS = "requirements-gpulaunch.txt"
HEADER = (
    "# gpulaunch.yaml: build and launch settings for this project.\n"
    "# Schema: `gpulaunch schema`; valid versions: `gpulaunch versions`.\n"
)


@dataclass
class InitOptions:
    directory: Path
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    flavor: str | None = None
    name: str | None = None
    force: bool = False
    # Fills in the choices (the CLI prompts on a TTY); None: flags and detection only.
    ask: Callable[[InitOptions], None] | None = None
    # Where NVML is asked (GPULAUNCH_SYSFS_ROOT etc.); None: the host is not looked at.
    env: Mapping[str, str] | None = None
    # Read what each exactly pinned dependency requires of torch from the package index
    # (PyPI's JSON API, $GPULAUNCH_PYPI_URL), so a torch they exclude is never chosen.
    check_pins: bool = False
    # The entry points whose imports are checked (project-relative .py files); None: the
    # top-level scripts with a `__main__` block.
    entries: list[str] | None = None
    # Write what no dependency provides to OWNED_REQUIREMENTS and install that file.
    add_missing: bool = False


@dataclass
class InitResult:
    config_path: Path
    dockerignore_path: Path
    dockerignore_written: bool
    summary: str
    notes: list[str] = field(default_factory=list)
    requirements_path: Path | None = None  # OWNED_REQUIREMENTS, when --add-missing wrote it


def _default_python(torch: str, cuda: str | None) -> str:
    flavor = "cpu" if cuda == "cpu" else "runtime"
    return resolve(ImageRequest(torch=torch, cuda=cuda, flavor=flavor)).python


def _report(directory: Path, project: Project) -> list[str]:
    """Every source found and every part not understood, by name."""
    notes = [f"found: {source}" for source in project.sources]
    if project.entry:
        notes.append(f"installing the dependencies of {project.entry}")
    elif not project.sources:
        notes.append("found: no dependency file (requirements.txt, pyproject.toml, ...)")
    notes += [f"warning: not understood: {item}" for item in project.not_understood]
    notes += project.notes
    notes += nested_requirements(directory, project)
    for local in project.locals:
        notes.append(
            f"{local.where}: {local.path} is installed after the project is copied (--no-deps)"
        )
    if any(local.path == "." for local in project.locals):
        notes.append("the project itself is installed (pip install --no-deps -e /workspace)")
    for folder, why in project.import_paths:
        notes.append(
            f"the project itself is not installed: /workspace/{folder} goes on PYTHONPATH "
            f"({why}); add `-e .` to the requirements to install it instead"
        )
    return notes


def run_init(opts: InitOptions) -> InitResult:
    directory = opts.directory
    if not directory.is_dir():
        raise ConfigError(f"init: {directory} is not a folder")
    config_path = directory / CONFIG_NAME
    if config_path.exists() and not opts.force:
        raise FileExistsRefusal(f"{config_path}: already exists; use --force to overwrite")
    # a CUDA image unless a CPU one is asked: the project's [gpu] extra over its [cpu] one
    gpu = "cpu" not in (opts.cuda, opts.flavor)
    project = read_project(directory, gpu=gpu)
    notes: list[str] = []
    if opts.check_pins:
        notes += _index_constraints(project)
    host = None
    if opts.env is not None:
        try:
            host = compat.probe(opts.env)
        except nvml.NvmlError as err:  # chosen without this host's GPUs, and said so
            notes.append(f"GPUs not checked: {err}")
    flagged = opts.torch is not None or opts.cuda is not None  # the user's word
    choice = Choice()
    if opts.flavor != "ngc":
        rows = matrix()
        choice = reconcile(
            project,
            rows,
            torch=opts.torch,
            cuda=opts.cuda,
            python=opts.python,
            default_python=_default_python,
        )
        if host is not None and (picked := _for_host(opts, project, host, rows, choice)):
            row, choice = picked
            opts.cuda = row.cuda
            notes.append(_host_reason(host, row, project))
        notes += choice.notes + [f"warning: {w}" for w in choice.warnings]
        opts.torch = opts.torch or choice.torch
        opts.cuda = opts.cuda or choice.cuda
        opts.python = opts.python or choice.python
    if opts.flavor is None and opts.cuda == "cpu":
        opts.flavor = "cpu"
    if gpu and "cpu" in (opts.cuda, opts.flavor):  # the project chose a CPU build itself
        project = read_project(directory, gpu=False)
    notes[:0] = _report(directory, project)
    _toolchain(opts, project, notes)
    image_dists = [] if opts.torch == "none" else ["torch", *choice.extras]
    gaps = _missing_imports(opts, project, image_dists, notes)
    with _add_missing(opts, project, gaps, notes) as written:
        if written is not None:  # the config installs it: the project's entry, then the rest
            project = read_project(directory, OWNED_REQUIREMENTS, gpu=project.gpu)
        return _finish(opts, project, choice, host, flagged, notes, written)


def _finish(
    opts: InitOptions,
    project: Project,
    choice: Choice,
    host: HostGpus | None,
    flagged: bool,
    notes: list[str],
    written: Path | None,
) -> InitResult:
    directory = opts.directory
    if opts.ask is not None:
        chosen = (opts.torch, opts.cuda)
        opts.ask(opts)
        flagged = flagged or (opts.torch, opts.cuda) != chosen

    image: dict[str, object] = {"flavor": opts.flavor or "runtime"}
    for key in ("python", "torch", "cuda"):
        value = getattr(opts, key)
        if value is not None:
            image[key] = value
    if project.entry:
        image["requirements"] = project.entry
    if choice.extras:
        image["torch_extras"] = sorted(set(choice.extras))
    image.update(choice.pins)
    system = _system_packages(project, notes)
    if system:
        image["system_packages"] = system
    if opts.name is not None:
        try:
            validate_data({"version": 1, "name": opts.name})
        except ConfigError as err:
            raise ConfigError(f"--name: {err.message.removeprefix('name: ')}") from None
    name = opts.name or sanitize_name(directory.resolve().name)
    config = validate_data({"version": 1, "name": name, "image": image})
    resolved = resolve(image_request(config))
    headers = _python_headers(resolved, system)
    if headers is not None:
        notes.append(
            f"system packages {headers}: the headers of the image's Python "
            f"({resolved.python_source} {resolved.python}), which a compiled package needs"
        )
        image["system_packages"] = [*system, headers]
        config = validate_data({"version": 1, "name": name, "image": image})
    if resolved.cuda and "cuda" not in image:
        notes.append(
            f"CUDA {resolved.cuda}: the project names no CUDA build, so the catalog's default "
            f"for torch {resolved.torch} was chosen (driver >= {resolved.min_driver}); "
            "pass --cuda to change it"
        )
    # Pin what was resolved so a newer catalog never changes this project's image silently.
    pinned = config.image.model_copy(
        update={
            "python": resolved.python,
            "torch": opts.torch if resolved.ngc_tag else (resolved.torch or "none"),
            "cuda": ".".join(resolved.cuda.split(".")[:2]) if resolved.cuda else "cpu",
        }
    )
    config = config.model_copy(update={"image": pinned})
    validate_data(config.model_dump(mode="json"))  # the file we write must load back
    _renders(config, directory)
    if opts.check_pins and resolved.torch:
        notes.append(_replay(project, resolved.torch))

    config_path = directory / CONFIG_NAME
    atomic_write(config_path, HEADER + dump_config(config), force=opts.force)
    ignore_path = directory / ".dockerignore"
    wrote_ignore = False
    if not ignore_path.exists():
        text, kept, present = keep_code(render_dockerignore(), directory)
        atomic_write(ignore_path, text)
        wrote_ignore = True
        notes += [
            f".dockerignore keeps {name}/ in the build context: {why}" for name, why in kept.items()
        ]
        if present:
            shown = ", ".join(n + "/" if (directory / n).is_dir() else n for n in present)
            notes.append(f".dockerignore leaves out of the build context: {shown}")
    notes += output_notes(directory)  # left out by gpulaunch itself, whatever the rules
    notes += [f"warning: {w}" for w in resolved.warnings]
    if host is not None and host.names:
        notes += _host_warning(resolved, host, project, opts, flagged)
    return InitResult(config_path, ignore_path, wrote_ignore, summarize(resolved), notes, written)


def _missing_imports(
    opts: InitOptions, project: Project, image_dists: list[str], notes: list[str]
) -> list[Missing]:
    """One line per import of the entry points that no dependency provides."""
    found, gaps = entry_gaps(opts.directory, project, image_dists, opts.entries)
    if not found.entries:
        notes.append(f"imports: {NO_ENTRY}")
        return []
    notes += found.notes
    notes += [gap.line() for gap in gaps]
    if not gaps:
        notes.append(f"imports: every third-party import of {', '.join(found.entries)} is provided")
    return gaps


@contextlib.contextmanager
def _add_missing(
    opts: InitOptions, project: Project, gaps: list[Missing], notes: list[str]
) -> Iterator[Path | None]:
    """With --add-missing, OWNED_REQUIREMENTS written (its path; None: nothing to add), and
    what stood there before put back when init fails after it: a refusal changes no file."""
    lines = requirement_lines(gaps) if opts.add_missing else []
    if opts.add_missing and not lines:
        notes.append(f"--add-missing: nothing to add; {OWNED_REQUIREMENTS} not written")
    if not lines:
        yield None
        return
    names = ", ".join(line.split()[0] for line in lines)
    if project.entry is None:
        head = []
    elif project.entry_kind == "requirements":
        head = [f"-r {project.entry}"]
    elif project.install_project:
        head = ["-e ."]  # the project installs itself, with its own dependencies
    else:
        raise ConfigError(
            f"--add-missing: {project.entry} is not a pip requirements file or an "
            f"installable project; add {names} to it"
        )
    from gpulaunch.fsio import read_back, write_file

    root = opts.directory
    path = root / OWNED_REQUIREMENTS
    try:
        before: bytes | None = read_back(path, MAX_OWNED_BYTES)
        mode = os.lstat(path).st_mode & 0o7777  # put back as it was, 0600 included
    except FileNotFoundError:
        before = None
    except ValueError as err:
        raise ConfigError(f"--add-missing: {OWNED_REQUIREMENTS} {err}") from None
    text = "\n".join([*OWNED_HEADER, *head, *lines]) + "\n"
    write_file(path, text, root=root, force=opts.force)
    notes.append(f"--add-missing: {OWNED_REQUIREMENTS} installs {names} (image.requirements)")
    try:
        yield path
    except BaseException:
        if before is not None:
            write_file(path, before, root=root, force=True, mode=mode)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise


MAX_OWNED_BYTES = 1024 * 1024
OWNED_HEADER = (
    "# Written by `gpulaunch init --add-missing`; image.requirements installs it: the",
    "# project's own dependencies, then what its entry points import that no dependency",
    "# file declares (where each is first imported). Rerun init to rewrite it.",
)


PIN_CHECK_TIMEOUT_S = 10.0
PIN_CHECK_MAX = 40  # exact pins asked about; a long lock file is read by its own lock path


def _index_constraints(project: Project) -> list[str]:
    """Each exactly pinned dependency's own torch requirement, from the index (`zetascale
    ==2.1.6` requires torch==2.2.0): replayed before the build, so the choice resolves.
    An index that does not answer is said, and the check stops."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from gpulaunch.outside import pypi

    env = {str(k): str(v) for k, v in default_environment().items()}
    env.update(sys_platform="linux", platform_system="Linux", extra="")
    exact = [
        d
        for d in project.deps
        if d.url is None and d.name not in TORCH_FAMILY and _exact_version(d.specifier)
    ]
    for dep in exact[:PIN_CHECK_MAX]:
        version = _exact_version(dep.specifier)
        try:
            info = pypi.release(dep.name, version, timeout=PIN_CHECK_TIMEOUT_S).get("info", {})
        except pypi.Unreachable as err:
            if err.message.endswith(": HTTP 404"):  # not on this index: nothing it says
                continue
            return [f"warning: pins not checked against the index: {err.message}"]
        requires = info.get("requires_dist") if isinstance(info, dict) else None
        for text in requires if isinstance(requires, list) else []:
            try:
                req = Requirement(str(text))
            except InvalidRequirement:
                continue
            if canonicalize_name(req.name) != "torch" or not req.specifier:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            why = f"{dep.name}=={version} ({dep.where}) requires torch{req.specifier}"
            project.torch_constraints.append((str(req.specifier), why))
    return [f"checked {min(len(exact), PIN_CHECK_MAX)} exact pins against the index"]


def _replay(project: Project, torch: str) -> str:
    """pip's own resolution of the project's requirements with the torch chosen (a dry
    run for this machine's interpreter: markers are evaluated here, not in the image)."""
    import platform

    from gpulaunch.outside import pip

    texts = [d.text for d in project.deps if d.url is None and d.name not in TORCH_FAMILY]
    try:
        answer = pip.dry_run([*texts, f"torch=={torch}"])
    except pip.PipUnavailable as err:
        return f"warning: the resolution was not replayed: {err.message}"
    if not answer.ok:
        raise ConfigError(
            f"--check-pins: pip cannot install torch {torch} with the requirements of "
            f"{project.entry}: {answer.conflict}"
        )
    return (
        f"pip resolves torch {torch} with the {len(texts)} requirements of {project.entry} "
        f"(a dry run for this machine's Python {platform.python_version()})"
    )


def _exact_version(spec: str) -> str:
    if spec.startswith("==") and "," not in spec and "*" not in spec:
        return spec[2:]
    return ""


def _toolchain(opts: InitOptions, project: Project, notes: list[str]) -> None:
    """A local package whose build imports torch needs torch in the image; a CUDA extension
    needs nvcc, which only devel (and NGC) images have."""
    needing = next((b for b in project.builds if not b.isolated), None)
    if needing is not None and opts.torch == "none":
        raise ConfigError(
            f"--torch: none, but the build of {needing.shown} imports torch ({needing.torch})"
        )
    editable = {local.path for local in project.locals if local.editable}
    for build in project.builds:
        if build.compiles and build.path in editable:
            notes.append(
                f"warning: {build.shown} compiles its extension into the project tree at build "
                "time, and `gpulaunch run` mounts the project over /workspace, hiding it: build "
                "it in the tree once (gpulaunch run -- python setup.py build_ext --inplace)"
            )
    cuda = next((b for b in project.builds if b.cuda), None)
    if cuda is None:
        return
    if opts.flavor == "cpu" or opts.cuda == "cpu":
        notes.append(
            f"warning: {cuda.shown} builds a CUDA extension ({cuda.cuda}), which a CPU image "
            "cannot compile (no nvcc): the build fails unless its setup.py skips it"
        )
    elif opts.flavor is None:
        opts.flavor = "devel"
        notes.append(
            f"flavor devel (nvcc and the CUDA headers): {cuda.shown} builds a CUDA extension "
            f"({cuda.cuda})"
        )
    elif opts.flavor == "runtime":
        raise ConfigError(
            f"--flavor: runtime images have no nvcc, and {cuda.shown} builds a CUDA extension "
            f"({cuda.cuda}); use --flavor devel"
        )


def _python_headers(resolved: ResolvedImage, system: list[str]) -> str | None:
    """The package with the image's Python headers, when a compiler is installed for a
    package that builds an extension (Python.h comes from the interpreter's own -dev
    package; python:*-slim, NGC and standalone CPython ship them)."""
    if not any(p in COMPILERS for p in system):
        return None
    source = resolved.python_source
    if source == "deadsnakes":
        package = f"python{resolved.python}-dev"
    elif source == "distro" or (source == "image" and resolved.flavor not in ("cpu", "ngc")):
        package = "python3-dev"  # the OS's Python (a base image of the user's: its python3)
    else:
        package = ""
    return package if package and package not in system else None


def _renders(config: ProjectConfig, directory: Path) -> None:
    """The config init writes must render: a refusal of render is init's, before writing."""
    from gpulaunch.image.render import plan_image, render_dockerfile

    try:
        render_dockerfile(plan_image(config, directory, "buildkit"))
    except ConfigError as err:
        raise ConfigError(f"init: the config would not render: {err.message}") from None


def _system_packages(project: Project, notes: list[str]) -> list[str]:
    """OS packages from gpulaunch/data/system_packages.yaml, each with its reason."""
    packages: list[str] = []
    for need in needs(project):
        if need.packages:
            notes.append(
                f"system packages {' '.join(need.packages)} for {need.because} "
                "(edit image.system_packages to change)"
            )
            packages += need.packages
    return list(dict.fromkeys(packages))


def _for_host(
    opts: InitOptions, project: Project, host: HostGpus, rows: list[MatrixRow], today: Choice
) -> tuple[MatrixRow, Choice] | None:
    """The newest stable build this machine's driver and GPUs run (compat.host_builds), when
    no flag or project chose one. The project's word still binds: a build whose choice warns
    where today's did not (a torch outside its pin, torchvision pins paired with another torch)
    or is refused (its Python) is passed over. None: today's default stays."""
    if opts.torch is not None or opts.cuda is not None or project.variant is not None:
        return None
    if opts.flavor in ("ngc", "cpu"):
        return None
    for row in compat.host_builds(host, rows):
        cuda = row.cuda
        try:
            fitted = reconcile(
                project,
                rows,
                torch=row.torch,
                cuda=cuda,
                python=opts.python,
                default_python=_python_for(cuda),
            )
        except ConfigError:
            continue
        if set(fitted.warnings) <= set(today.warnings):
            return row, fitted
    return None


def _host_reason(host: HostGpus, row: MatrixRow, project: Project) -> str:
    """The one line saying why init chose this build on this machine."""
    pin = project.pin("torch")
    within = f" within torch{pin.specifier} ({pin.where})" if pin and pin.specifier else ""
    return (
        f"this machine: {host.describe()}: torch {row.torch}+{row.variant} is the newest stable "
        f"build{within} this driver can start and these GPUs run (--torch/--cuda choose another)"
    )


def _python_for(cuda: str | None) -> Callable[[str, str | None], str]:
    """The default Python of a torch on this CUDA build (reconcile asks with its own CUDA)."""
    return lambda torch, _cuda: _default_python(torch, cuda)


def _host_warning(
    resolved: ResolvedImage, host: HostGpus, project: Project, opts: InitOptions, flagged: bool
) -> list[str]:
    """A warning when this machine cannot run the image written (a pin or a flag chose it,
    or no catalog build fits): `gpulaunch run` here would refuse it."""
    try:
        compat.check(resolved, host)
    except ConfigError as err:
        pin = project.pin("torch")
        if flagged:
            why = " (--torch/--cuda chose it)"
        elif opts.flavor == "ngc":
            why = " (an NGC release)"
        elif pin is not None and pin.specifier:
            why = f" (the project pins torch{pin.specifier} in {pin.where})"
        elif project.variant is not None:
            why = f" (the project names {project.variant} in {project.variant_where})"
        else:
            why = " (no stable build in the catalog fits this driver and these GPUs)"
        return [
            f"warning: this machine ({host.describe()}) cannot run this image{why}: {err.message}"
        ]
    return []
