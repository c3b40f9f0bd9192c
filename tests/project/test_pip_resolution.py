"""The rendered install commands really resolve: for a dozen corpus shapes, the Dockerfile's
torch, constraints and requirements steps run (in order, as rendered) in a fresh venv against
a local index of small fake wheels with the real names and versions. The project's pins and
gpulaunch's torch constraints must never conflict unless `init` said so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from gpulaunch.catalog.compat import matrix
from gpulaunch.config import load_config
from gpulaunch.project.discover import read_project
from project.test_corpus import SHAPES, _init

pytestmark = pytest.mark.slow

CHECKED = [
    "nanogpt-unpinned",
    "yolov5-opencv",
    "poetry-cu118-source",
    "uv-cu128-index",
    "includes-only-root",
    "local-version-cu118-find-links",
    "companion-pin-kept",
    "direct-wheel-url",
    "kohya-editable-subfolder",
    "conda-env-with-pip",
    "pipfile-index",
    "constraints-file",
]
TORCH_INDEX = re.compile(
    r"(?:--(?:extra-)?index-url|-i|--find-links)[ =](https://download\.pytorch\.org/whl/(\S+))"
)
# versions offered on the fake PyPI for each name (the highest fitting one is built)
CANDIDATES = ["2.0.0", "1.26.4", "1.0.0", "0.25.0", "0.7.0", "4.8.0.74", "10.3.0", "3.8.0"]


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    if path.exists():
        return
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{dist}_fake/__init__.py", "")
        whl.writestr(f"{info}/METADATA", meta)
        whl.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(f"{info}/RECORD", "")


def _fake_pypi(folder: Path, project_dir: Path) -> None:
    """One wheel per third-party name the project asks for, at a version it accepts; numpy
    also at 2.0.0 and 1.26.4, torch at the newest release (what a careless install takes)."""
    model = read_project(
        project_dir, load_config(project_dir / "gpulaunch.yaml").image.requirements
    )
    for dep in model.deps:
        if dep.name in ("torch", "torchvision", "torchaudio"):
            continue
        spec = SpecifierSet(dep.specifier.split("+")[0]) if dep.specifier else SpecifierSet()
        exact = (
            dep.specifier[2:]
            if dep.specifier.startswith("==") and "," not in dep.specifier
            else None
        )
        fitting = [v for v in CANDIDATES if Version(v) in spec]
        _wheel(folder, dep.name, exact.rstrip(".*") if exact else max(fitting, key=Version))
    for version in ("2.0.0", "1.26.4"):
        _wheel(folder, "numpy", version)
    newest = max({r.torch for r in matrix()}, key=Version)
    _wheel(folder, "torch", newest)


def _fake_pytorch(root: Path, variant: str, pins: list[str]) -> Path:
    """The PyTorch index folder of one variant with the wheels the torch step names."""
    folder = root / variant
    versions = dict(p.split("==", 1) for p in pins)
    torch = versions["torch"]
    for name, version in versions.items():
        requires = () if name == "torch" else (f"torch=={torch}",)
        _wheel(folder, name, f"{version}+{variant}", requires)
    return folder


def _steps(dockerfile: str) -> list[str]:
    """The pip-related instructions before the project copy, continuation lines joined: the
    torch step, the constraints step, requirement copies and the requirements step. Nothing
    else (apt, users) ever runs on the test machine, and neither does the step that upgrades
    an old venv pip (it needs pip itself from an index; tests/e2e/test_pip_upgrade.py)."""
    joined = dockerfile.replace("\\\n", " ")
    steps = []
    for line in joined.splitlines():
        if line.startswith("COPY --chown"):
            break
        pip_step = line.startswith("RUN ") and (
            re.search(r"(^| )pip install ", line) or "> /opt/gpulaunch/constraints.txt" in line
        )
        if pip_step and "--upgrade 'pip" in line:
            continue
        if pip_step or line.startswith(("COPY [", "ENV PIP_CONSTRAINT")):
            assert "apt-get" not in line and "useradd" not in line, line
            steps.append(line)
    return steps


def _run(project: Path, work: Path) -> dict[str, str]:
    text = (work / "Dockerfile").read_text()
    opt = work / "opt"
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shim = work / "bin"
    shim.mkdir()
    (shim / "pip").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m pip --python {venv}/bin/python "$@"\n'
    )
    (shim / "pip").chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{shim}:{venv}/bin:{env['PATH']}",
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(work / "pypi"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_CACHE_DIR="1",
    )
    env.pop("PIP_CONSTRAINT", None)
    for step in _steps(text):
        step = step.replace("/opt/gpulaunch", str(opt))
        if step.startswith("COPY ["):
            source, target = re.findall(r'"([^"]+)"', step)
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            content = (project / source.removeprefix("workspace/")).read_text(encoding="utf-8-sig")
            Path(target).write_text(_local_indexes(content, work))
            continue
        if step.startswith("ENV PIP_CONSTRAINT="):
            env["PIP_CONSTRAINT"] = step.split("=", 1)[1]
            continue
        command = step.removeprefix("RUN ")
        if "mkdir -p" in command:
            opt.mkdir(parents=True, exist_ok=True)
        command = _local_indexes(command, work)
        done = subprocess.run(["sh", "-e", "-c", command], env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    listing = subprocess.run(
        [
            f"{venv}/bin/python",
            "-c",
            "import importlib.metadata as m\n"
            "for d in m.distributions(): print(d.metadata['Name'].lower(), d.version)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split(" ", 1) for line in listing.stdout.splitlines())


def _local_indexes(text: str, work: Path) -> str:
    """PyTorch index URLs -> the fake variant folders (find-links, no network)."""

    def swap(match: re.Match[str]) -> str:
        variant = match.group(2).split("/")[0]
        if variant == "torch_stable.html":
            return f"--find-links {work / 'pytorch' / 'all'}"
        return f"--find-links {work / 'pytorch' / variant}"

    return TORCH_INDEX.sub(swap, text)


@pytest.mark.parametrize("name", CHECKED)
def test_rendered_installs_resolve(name: str, tmp_path: Path) -> None:
    shape = next(s for s in SHAPES if s.name == name)
    project = tmp_path / "project"
    project.mkdir()
    notes, image, _ = _init(project, shape.files)
    from gpulaunch.image.render import plan_image, render_dockerfile

    config = load_config(project / "gpulaunch.yaml")
    plan = plan_image(config, project, "classic")
    work = tmp_path / "work"
    work.mkdir()
    (work / "Dockerfile").write_text(render_dockerfile(plan))
    _fake_pypi(work / "pypi", project)
    pins = plan.context["torch_install"]
    variant = plan.resolved.torch_variant or "cpu"
    folder = _fake_pytorch(work / "pytorch", variant, pins)
    shutil.copytree(folder, work / "pytorch" / "all", dirs_exist_ok=True)

    installed = _run(project, work)

    assert installed["torch"] == f"{image['torch']}+{variant}", notes
    for companion in ("torchvision", "torchaudio"):
        if image.get(companion):  # the project's own pin, kept over the pairing
            assert installed[companion] == f"{image[companion]}+{variant}"
    if name == "constraints-file":
        assert installed["numpy"] == "1.26.4"  # the project's -c constraints.txt held
