"""`init --torch` overriding the project's torch pin, in every place an image installs from:
the torch step installs the flag's torch (and the constraint pins it), and no later pip step
is handed the project's old pin, whatever file it stands in. The Dockerfile is read as pip
would be: each copied requirements file with the lines its `sed -i` step deletes taken out,
plus the texts on the pip command line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpulaunch.config import load_config
from gpulaunch.image.init import InitOptions, run_init
from gpulaunch.image.render import plan_image, render_dockerfile

OLD, NEW = "2.1.2", "2.4.1"
SETUP = "from setuptools import setup\nsetup(name='p', version='0', packages=['p'], "
BUILD = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'

# every install path an image takes from a project file, each pinning torch==OLD
PATHS = {
    "requirements": {"requirements.txt": f"numpy\ntorch=={OLD}\n"},
    "requirements-include": {
        "requirements.txt": "-r requirements/base.txt\nnumpy\n",
        "requirements/base.txt": f"torch=={OLD}\ntorchvision==0.16.2\n",
    },
    "constraints-file": {
        "requirements.txt": "-c constraints.txt\nnumpy\ntorch\n",
        "constraints.txt": f"torch=={OLD}\n",
    },
    "hashes": {"requirements.txt": f"torch=={OLD} \\\n    --hash=sha256:aaaa\nnumpy==1.26.4\n"},
    "pep621": {
        "pyproject.toml": f'[project]\nname = "p"\nversion = "0"\n'
        f'dependencies = ["torch=={OLD}", "numpy"]\n' + BUILD
    },
    "setup-py": {"setup.py": SETUP + f"install_requires=['torch=={OLD}', 'numpy'])\n"},
    "setup-cfg": {
        "setup.cfg": f"[metadata]\nname = p\n[options]\ninstall_requires =\n    torch=={OLD}\n"
        "    numpy\n",
        "setup.py": "from setuptools import setup\nsetup()\n",
    },
    "conda": {"environment.yml": f"dependencies:\n  - pytorch={OLD}\n  - numpy\n"},
    "conda-pip": {
        "environment.yml": f"dependencies:\n  - pip\n  - pip:\n    - torch=={OLD}\n    - numpy\n"
    },
    "pipfile": {"Pipfile": f'[packages]\ntorch = "=={OLD}"\nnumpy = "*"\n'},
    "poetry": {
        "pyproject.toml": '[tool.poetry]\nname = "p"\nversion = "0"\n'
        f'[tool.poetry.dependencies]\npython = "^3.10"\ntorch = "{OLD}"\nnumpy = "*"\n'
        '[build-system]\nrequires = ["poetry-core"]\nbuild-backend = "poetry.core.masonry.api"\n'
    },
    "uv": {
        "pyproject.toml": f'[project]\nname = "p"\nversion = "0"\n'
        f'dependencies = ["torch=={OLD}", "numpy"]\n[tool.uv.sources]\n'
        'torch = { index = "pytorch" }\n[[tool.uv.index]]\nname = "pytorch"\n'
        'url = "https://download.pytorch.org/whl/cpu"\nexplicit = true\n' + BUILD
    },
    "pdm": {
        "pyproject.toml": f'[project]\nname = "p"\nversion = "0"\n'
        f'dependencies = ["torch=={OLD}", "numpy"]\n[[tool.pdm.source]]\nname = "torch"\n'
        'url = "https://download.pytorch.org/whl/cpu"\n' + BUILD
    },
    "local-package-deps": {
        "requirements.txt": "numpy\n-e ./lib\n",
        "lib/setup.py": SETUP + f"install_requires=['torch=={OLD}'])\n",
    },
}
VALUED = ("--index-url", "--extra-index-url", "--find-links")  # their value is no requirement
SED = re.compile(r"sed -i ((?:-e [\d,]+d )+)(\S+)")


def _asked(dockerfile: str, root: Path) -> list[str]:
    """Every requirement line or text a pip step after the torch step is handed."""
    after = dockerfile.split("ENV PIP_CONSTRAINT", 1)[1]
    asked: list[str] = []
    for line in after.splitlines():
        if "pip install" not in line:
            continue
        words = shlex.split(line.split("pip install", 1)[1].split("&&", 1)[0])
        dropped: dict[str, set[int]] = {}
        for ranges, target in SED.findall(line):
            for part in re.findall(r"([\d,]+)d", ranges):
                first, _, last = part.partition(",")
                dropped.setdefault(target, set()).update(range(int(first), int(last or first) + 1))
        for before, word in zip(["", *words], words, strict=False):
            if word.startswith("-") or before in VALUED:
                continue
            if before in ("-r", "-c"):
                asked += _file_lines(root, word, dropped)
            else:
                asked.append(word)
    return asked


def _file_lines(root: Path, target: str, dropped: dict[str, set[int]]) -> list[str]:
    rel = target.removeprefix("/opt/gpulaunch/req/")
    lines = (root / rel).read_text().splitlines()
    out = []
    for number, text in enumerate(lines, 1):
        if number in dropped.get(target, set()):
            continue
        include = re.fullmatch(r"-[rc] (\S+)", text)
        if include:  # the included file is copied beside it and edited by its own sed
            inner = f"/opt/gpulaunch/req/{Path(rel).parent / include[1]}".replace("/./", "/")
            out += _file_lines(root, inner, dropped)
        elif text.strip() and not text.startswith(("-", "#", " ")):  # a requirement
            out.append(text)
    return out


@pytest.mark.parametrize("files", PATHS.values(), ids=PATHS.keys())
def test_the_flag_reaches_every_install_path(files: dict[str, str], tmp_path: Path) -> None:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = run_init(InitOptions(directory=tmp_path, torch=NEW, cuda="cpu"))
    config = load_config(result.config_path)
    text = render_dockerfile(plan_image(config, tmp_path, "classic"))

    assert config.image.torch == NEW
    assert f"pip install --no-cache-dir torch=={NEW}" in text
    asked = _asked(text, tmp_path)
    assert asked, text  # the rest of the project is still installed
    assert not [a for a in asked if "torch" in a and OLD in a], (asked, text)
    assert not [a for a in asked if "torchvision==0.16" in a], asked  # tied to the old torch


def test_an_image_without_torch_of_its_own_keeps_the_projects_torch(tmp_path: Path) -> None:
    """torch: none installs no torch and pins none: the project's own line is then the only
    torch the image gets, and stays what pip is asked."""
    (tmp_path / "requirements.txt").write_text(f"numpy\ntorch=={OLD}\n")
    (tmp_path / "gpulaunch.yaml").write_text(
        "version: 1\nname: p\nimage:\n  torch: none\n  cuda: '12.4'\n"
        "  requirements: requirements.txt\n"
    )
    text = render_dockerfile(
        plan_image(load_config(tmp_path / "gpulaunch.yaml"), tmp_path, "classic")
    )
    assert "sed -i" not in text
    assert _asked(text, tmp_path) == ["numpy", f"torch=={OLD}"]


def test_the_cuda_flag_reaches_a_pinned_build_of_the_project(tmp_path: Path) -> None:
    """`--cuda` over the project's `torch==X+cu118`: the image's torch step installs the
    cu121 build, and pip is never asked for the cu118 one beside its constraint."""
    (tmp_path / "requirements.txt").write_text(
        "--extra-index-url https://download.pytorch.org/whl/cu118\ntorch==2.1.2+cu118\nnumpy\n"
    )
    result = run_init(InitOptions(directory=tmp_path, cuda="12.1"))
    config = load_config(result.config_path)
    text = render_dockerfile(plan_image(config, tmp_path, "classic"))
    assert "torch==2.1.2 --index-url https://download.pytorch.org/whl/cu121" in text
    assert _asked(text, tmp_path) == ["numpy"]
