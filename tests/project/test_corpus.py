"""A corpus of dependency-file shapes modelled on real PyTorch projects (small files written
here, no third-party code): for each, what `init` detects (torch, CUDA build, Python), what
it says, and what the rendered Dockerfile then does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpulaunch.catalog.compat import matrix
from gpulaunch.config import load_config
from gpulaunch.errors import ConfigError
from gpulaunch.image.init import InitOptions, run_init
from gpulaunch.image.render import plan_image, render_dockerfile

# the newest torch a default picks: one with a CUDA build whose image's driver rule is NVIDIA's
NEWEST = max(
    {r.torch for r in matrix() if r.cuda and r.driver_verified and r.verified},
    key=lambda v: tuple(int(x) for x in v.split(".")),
)
PYPROJECT_PKG = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)
WHEEL = "torch-2.1.0%2Bcu118-cp310-cp310-linux_x86_64.whl"


@dataclass
class Shape:
    name: str
    files: dict[str, str]
    torch: str | None = None  # expected image.torch (None: not checked)
    cuda: str | None = None
    python: str | None = None
    notes: list[str] = field(default_factory=list)  # substrings of init's messages
    render: list[str] = field(default_factory=list)  # substrings of the Dockerfile
    absent: list[str] = field(default_factory=list)  # must not be in the Dockerfile
    order: list[str] = field(default_factory=list)  # substrings in this order
    system: list[str] = field(default_factory=list)  # image.system_packages
    config: dict[str, object] = field(default_factory=dict)  # other image.* values


SHAPES = [
    Shape(
        "nanogpt-unpinned",
        {"requirements.txt": "torch\nnumpy\ntransformers\ndatasets\ntiktoken\nwandb\ntqdm\n"},
        torch=NEWEST,
        notes=["found: requirements.txt (pip requirements)", "the project names no CUDA build"],
        render=["-r /opt/gpulaunch/req/requirements.txt", "ENV PYTHONPATH=/workspace"],
        absent=["--no-deps"],
    ),
    Shape(
        "mingpt-setup-py",
        {
            "setup.py": "from setuptools import setup\nsetup(name='mingpt', version='0.0.1',"
            " packages=['mingpt'], install_requires=['torch'])\n",
            "mingpt/__init__.py": "",
            "projects/chargpt/chargpt.py": "import mingpt\n",
        },
        torch=NEWEST,
        notes=["found: setup.py (setuptools setup())", "installing the dependencies of setup.py"],
        render=["pip install --no-cache-dir torch", "--no-deps -e /workspace"],
        order=["COPY --chown", "--no-deps -e /workspace", "USER ${GL_UID}"],
    ),
    Shape(
        "yolov5-opencv",
        {
            "requirements.txt": "# YOLOv5 requirements\n# Usage: pip install -r requirements.txt\n"
            "matplotlib>=3.3\nnumpy>=1.23.5\nopencv-python>=4.1.1\npillow>=10.3.0\n"
            "torch>=1.8.0  # see https://pytorch.org/get-started/locally\n"
            "torchvision>=0.9.0\nultralytics>=8.2.34\n",
        },
        torch=NEWEST,
        system=["libgl1", "libglib2.0-0"],
        notes=["system packages libgl1 libglib2.0-0 for opencv-python (requirements.txt:5)"],
        render=["libgl1 libglib2.0-0"],
        config={"torch_extras": ["torchvision"]},
    ),
    Shape(
        "whisper-user-ffmpeg",
        {"requirements.txt": "openai-whisper\ntorch==2.4.1\n"},
        torch="2.4.1",
        system=["ffmpeg"],
        render=["ffmpeg"],
    ),
    Shape(
        "whisper-setup-py-computed",
        {
            "setup.py": "from setuptools import setup\nreqs = open('requirements.txt').read()\n"
            "setup(name='w', install_requires=reqs.splitlines(), python_requires='>=3.8')\n",
            "requirements.txt": "numba\nnumpy\ntorch==2.5.1\ntqdm\nmore-itertools\ntiktoken\n",
        },
        torch="2.5.1",
        notes=["not understood: setup.py: install_requires is computed", "found: setup.py"],
    ),
    Shape(
        "detectron2-git",
        {
            "requirements.txt": "torch==2.3.1\ntorchvision==0.18.1\n"
            "detectron2 @ git+https://github.com/facebookresearch/detectron2.git\n",
        },
        torch="2.3.1",
        system=["git"],
        notes=["system packages git for detectron2 (requirements.txt:3): a git URL"],
        config={"torch_extras": ["torchvision"]},
    ),
    Shape(
        "poetry-cu118-source",
        {
            "pyproject.toml": '[tool.poetry]\nname = "p"\nversion = "0.1.0"\n'
            '[tool.poetry.dependencies]\npython = "^3.10"\n'
            'torch = {version = "2.1.0+cu118", source = "pytorch"}\nnumpy = "^1.24"\n'
            'einops = "~0.7"\n[[tool.poetry.source]]\nname = "pytorch"\n'
            'url = "https://download.pytorch.org/whl/cu118"\npriority = "explicit"\n'
            '[tool.poetry.group.dev.dependencies]\npytest = "*"\n'
            '[build-system]\nrequires = ["poetry-core"]\n'
            'build-backend = "poetry.core.masonry.api"\n',
        },
        torch="2.1.0",
        cuda="11.8",
        python="3.10",
        notes=["PyTorch build found in pyproject.toml", "poetry groups not installed: dev"],
        render=["'numpy>=1.24,<2'", "'einops>=0.7,<0.8'", "--no-deps -e /workspace"],
    ),
    Shape(
        "uv-cu128-index",
        {
            "pyproject.toml": '[project]\nname = "u"\nversion = "0.1"\nrequires-python = ">=3.12"\n'
            'dependencies = ["torch>=2.7", "numpy"]\n[[tool.uv.index]]\nname = "pytorch-cu128"\n'
            'url = "https://download.pytorch.org/whl/cu128"\nexplicit = true\n'
            '[tool.uv.sources]\ntorch = { index = "pytorch-cu128" }\n',
        },
        torch="2.11.0",
        cuda="12.8",
        python="3.12",
        notes=["[tool.uv.sources] torch", "found: pyproject.toml (PEP 621, uv)"],
        # torch is the image's torch step's (its pin weighed by init), never asked again
        render=["whl/cu128", "pip install --no-cache-dir numpy"],
        absent=["'torch>=2.7'"],
    ),
    Shape(
        "nanochat-uv-markers",
        {
            "pyproject.toml": '[project]\nname = "n"\nversion = "0.1"\nrequires-python = ">=3.10"\n'
            'dependencies = ["torch>=2.8.0"]\n'
            '[[tool.uv.index]]\nname = "pytorch-cpu"\nurl = "https://download.pytorch.org/whl/cpu"\n'
            '[[tool.uv.index]]\nname = "pytorch-cu126"\n'
            'url = "https://download.pytorch.org/whl/cu126"\n[tool.uv.sources]\ntorch = [\n'
            '  { index = "pytorch-cpu", marker = "sys_platform != \'linux\'" },\n'
            '  { index = "pytorch-cu126", marker = "sys_platform == \'linux\'" },\n]\n',
        },
        cuda="12.6",
        torch=NEWEST,
    ),
    Shape(
        "includes-only-root",
        {
            "requirements.txt": "-r requirements/base.txt\n-r requirements/train.txt\n",
            "requirements/base.txt": "torch>=2.1,<2.5\nnumpy\n",
            "requirements/train.txt": "-r base.txt\ntqdm\n",
        },
        torch="2.4.1",
        notes=["includes requirements/base.txt, requirements/train.txt"],
        render=[
            'COPY ["workspace/requirements/base.txt", "/opt/gpulaunch/req/requirements/base.txt',
            'COPY ["workspace/requirements/train.txt", "/opt/gpulaunch/req/requirements/train.tx',
        ],
    ),
    Shape(
        "local-version-cu118-find-links",
        {
            "requirements.txt": "--find-links https://download.pytorch.org/whl/torch_stable.html\n"
            "torch==2.1.2+cu118\ntorchvision==0.16.2+cu118\n",
        },
        torch="2.1.2",
        cuda="11.8",
        notes=["PyTorch build found in requirements.txt:2 (torch==2.1.2+cu118): cu118"],
        render=[
            "torch==2.1.2 torchvision==0.16.2 --index-url https://download.pytorch.org/whl/cu118"
        ],
    ),
    Shape(
        "local-version-cpu",
        {"requirements.txt": "torch==2.3.1+cpu\n"},
        torch="2.3.1",
        cuda="cpu",
        config={"flavor": "cpu"},
        absent=["nvidia/cuda"],
    ),
    Shape(
        "companion-pin-kept",
        {"requirements.txt": "torch==2.0.0\ntorchvision==0.15.0\n"},
        torch="2.0.0",
        config={"torchvision": "0.15.0"},
        notes=[
            "torchvision 0.15.0 (the project's pin, requirements.txt:2) is installed with "
            "torch 2.0.0 instead of the catalog's pairing 0.15.1"
        ],
        render=["torch==2.0.0 torchvision==0.15.0"],
    ),
    Shape(
        "requires-python-312",
        {
            "requirements.txt": "torch==2.4.1\n",
            "pyproject.toml": '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.12"\n',
        },
        torch="2.4.1",
        python="3.12",
        notes=["found: pyproject.toml (PEP 621)"],
    ),
    Shape(
        "bom-first-line",
        {"requirements.txt": "\ufefftorch==2.3.1\nnumpy\n"},
        torch="2.3.1",
    ),
    Shape(
        "pip-compile-hashes",
        {
            "requirements.txt": "#\n# pip-compile --generate-hashes\n#\nnumpy==1.26.4 \\\n"
            "    --hash=sha256:aaaa \\\n    --hash=sha256:bbbb\n    # via torch\n"
            "torch==2.2.2 \\\n    --hash=sha256:cccc\n    # via -r requirements.in\n",
            "requirements.in": "torch==2.2.2\n",
        },
        torch="2.2.2",
        render=["sed -i -e 8,9d /opt/gpulaunch/req/requirements.txt && ", "-r /opt/gpulaunch/req"],
    ),
    Shape(
        "direct-wheel-url",
        {
            "requirements.txt": f"numpy\ntorch @ https://download.pytorch.org/whl/cu118/{WHEEL}\n",
        },
        torch="2.1.0",
        cuda="11.8",
        python="3.10",
        render=["sed -i -e 2d /opt/gpulaunch/req/requirements.txt && "],
    ),
    Shape(
        "inline-index-url",
        {"requirements.txt": "torch==2.4.1 --index-url https://download.pytorch.org/whl/cu124\n"},
        torch="2.4.1",
        cuda="12.4",
    ),
    Shape(
        "kohya-editable-subfolder",
        {
            "requirements.txt": "accelerate==0.25.0\ntorch==2.1.2\n-e ./sd-scripts\n",
            "sd-scripts/setup.py": "from setuptools import setup\n"
            "setup(name='library', install_requires=['safetensors'])\n",
        },
        torch="2.1.2",
        notes=["requirements.txt:3: sd-scripts is installed after the project is copied"],
        render=["sed -i -e 2d -e 3d", "--no-deps -e /workspace/sd-scripts", " safetensors"],
        order=["-r /opt/gpulaunch/req/requirements.txt", "COPY --chown", "--no-deps -e"],
    ),
    Shape(
        "conda-env-with-pip",
        {
            "environment.yml": "name: ldm\nchannels:\n  - pytorch\n  - nvidia\ndependencies:\n"
            "  - python=3.10\n  - pip\n  - pytorch=2.1.0\n  - pytorch-cuda=12.1\n"
            "  - torchvision=0.16.0\n  - pip:\n    - opencv-python==4.8.0.74\n    - einops\n",
        },
        torch="2.1.0",
        cuda="12.1",
        python="3.10",
        system=["libgl1", "libglib2.0-0"],
        notes=["found: environment.yml (conda environment)"],
        render=["opencv-python==4.8.0.74", "einops"],
        config={"torch_extras": ["torchvision"]},
    ),
    Shape(
        "setup-cfg",
        {
            "setup.cfg": "[metadata]\nname = s\n[options]\npython_requires = >=3.8\n"
            "install_requires =\n    torch>=2.0,<2.1\n    numpy\n",
        },
        torch="2.0.1",
        notes=["found: setup.cfg (setuptools [options])"],
        render=["pip install --no-cache-dir numpy", "--no-deps -e /workspace"],
    ),
    Shape(
        "pipfile-index",
        {
            "Pipfile": '[[source]]\nname = "pypi"\nurl = "https://pypi.org/simple"\n'
            '[[source]]\nname = "pytorch"\nurl = "https://download.pytorch.org/whl/cu121"\n'
            '[packages]\ntorch = {version = "==2.2.1", index = "pytorch"}\nrequests = "*"\n'
            '[dev-packages]\npytest = "*"\n[requires]\npython_version = "3.11"\n',
        },
        torch="2.2.1",
        cuda="12.1",
        python="3.11",
        notes=["found: Pipfile (pipenv)", "[dev-packages] not installed"],
    ),
    Shape(
        "requirements-folder-only",
        {
            "requirements/base.txt": "torch==2.5.0\n",
            "requirements/dev.txt": "-r base.txt\npytest\n",
        },
        torch="2.5.0",
        notes=["requirements/dev.txt (pip requirements, not installed)"],
        config={"requirements": "requirements/base.txt"},
    ),
    Shape(
        "pep723-script",
        {
            "train.py": '# /// script\n# requires-python = ">=3.11"\n# dependencies = [\n'
            '#   "torch==2.5.1",\n#   "numpy",\n# ]\n# ///\nimport torch\n',
        },
        torch="2.5.1",
        python="3.11",
        notes=["found: train.py (PEP 723 script block)"],
    ),
    Shape(
        "constraints-file",
        {
            "requirements.txt": "-c constraints.txt\ntorch==2.4.0\nnumpy\n",
            "constraints.txt": "numpy<2\n",
        },
        torch="2.4.0",
        render=['COPY ["workspace/constraints.txt", "/opt/gpulaunch/req/constraints.txt"]'],
    ),
    Shape(
        "not-understood-named",
        {"requirements.txt": "-r https://example.com/base.txt\n--frobnicate\ntorch==2.4.1\n"},
        torch="2.4.1",
        notes=[
            "not understood: requirements.txt:1: remote include https://example.com/base.txt",
            "not understood: requirements.txt:2: option --frobnicate ignored",
        ],
    ),
    Shape(
        "audio-libsndfile",
        {"requirements.txt": "torch==2.4.1\ntorchaudio==2.4.1\nsoundfile\nlibrosa\n"},
        torch="2.4.1",
        system=["libsndfile1", "ffmpeg"],
        config={"torch_extras": ["torchaudio"]},
    ),
    Shape(
        "pep621-optional-groups",
        {
            "pyproject.toml": '[project]\nname = "l"\nversion = "0"\nrequires-python = ">=3.10"\n'
            'dependencies = ["torch>=2.2.1,<2.8.0", "datasets"]\n'
            '[project.optional-dependencies]\ndev = ["pytest"]\naloha = ["gym-aloha"]\n'
            + PYPROJECT_PKG,
        },
        torch="2.7.1",
        notes=["optional dependency groups not installed: aloha, dev"],
        render=["pip install --no-cache-dir datasets", "--no-deps -e /workspace"],
    ),
    Shape(
        "src-layout-editable",
        {
            "requirements.txt": "-r requirements/base.txt\n-e .\n",
            "requirements/base.txt": "torch==2.6.0\n",
            "pyproject.toml": '[project]\nname = "pkg"\nversion = "0"\ndependencies = ["tqdm"]\n'
            + PYPROJECT_PKG,
            "src/pkg/__init__.py": "",
        },
        torch="2.6.0",
        render=["sed -i -e 2d", "-r /opt/gpulaunch/req/requirements.txt tqdm", "-e /workspace"],
    ),
    # issue 31 §5: the classes that are gpulaunch's own
    Shape(
        "setup-cfg-tool-settings-only",
        {
            "setup.cfg": "[flake8]\nmax-line-length = 120\n\n[tool:pytest]\naddopts = -q\n",
            "setup.py": "from setuptools import setup\nsetup(name='t', version='0', packages=['t'],"
            " install_requires=['torch==2.4.1', 'numpy', 'einops'])\n",
            "t/__init__.py": "",
        },
        torch="2.4.1",
        notes=["found: setup.py (setuptools setup())", "installing the dependencies of setup.py"],
        render=["pip install --no-cache-dir numpy einops", "--no-deps -e /workspace"],
        absent=["setup.cfg"],
    ),
    Shape(
        "namespace-package-under-src",
        {
            "requirements.txt": "torch\nnumpy\n",
            "src/nspkg/data/loader.py": "import numpy\n",
            "train.py": "from nspkg.data import loader\n\nif __name__ == '__main__':\n    loader\n",
        },
        notes=[
            "/workspace/src goes on PYTHONPATH (a src/ layout: nspkg)",
            "imports: every third-party import of train.py is provided",
        ],
        render=["ENV PYTHONPATH=/workspace:/workspace/src"],
    ),
    Shape(
        "environment-yml-beside-setup-py",
        {
            "environment.yml": "name: e\ndependencies:\n  - python=3.10\n  - pip\n"
            "  - pytorch=2.1.2\n  - pip:\n    - einops==0.7.0\n    - lpips\n",
            "setup.py": "from setuptools import setup\nsetup(name='e', packages=['e'])\n",
            "e/__init__.py": "",
        },
        torch="2.1.2",
        python="3.10",
        notes=["found: environment.yml (conda environment)", "its packages (e) import from"],
        render=["pip install --no-cache-dir einops==0.7.0 lpips"],
    ),
    Shape(
        "environment-yml-installing-its-setup-py",
        {
            "environment.yml": "dependencies:\n  - python=3.10\n  - pytorch=2.1.2\n  - pip:\n"
            "    - einops\n    - -e .\n",
            "setup.py": "from setuptools import setup\nsetup(name='e', packages=['e'], "
            "install_requires=['lpips'])\n",
            "e/__init__.py": "",
        },
        torch="2.1.2",
        notes=["the project itself is installed (pip install --no-deps -e /workspace)"],
        render=["pip install --no-cache-dir einops lpips", "--no-deps -e /workspace"],
    ),
    Shape(
        "uv-overrides-of-a-pyproject-not-installed",
        {
            "requirements.txt": "torch\nnumpy\n",
            "pyproject.toml": '[project]\nname = "o"\nversion = "0"\n'
            '[tool.uv]\noverride-dependencies = ["numpy<2"]\n',
        },
        notes=[
            "pyproject.toml [tool.uv] override-dependencies not applied: the image installs "
            "requirements.txt, not pyproject.toml (set image.requirements: pyproject.toml to "
            "apply them)"
        ],
        absent=["numpy<2"],
    ),
    Shape(
        "nested-example-requirements",
        {
            "requirements.txt": "torch\n",
            "examples/foo/requirements.txt": "einops\n",
            "examples/foo/run.py": "import einops\n",
            "examples/bar/requirements-dev.txt": "pytest\n",
            "node_modules/x/requirements.txt": "never-read\n",
        },
        notes=[
            "examples/bar/requirements-dev.txt: pip requirements the image does not install; "
            "to install them, add `-r examples/bar/requirements-dev.txt` to requirements.txt",
            "examples/foo/requirements.txt: pip requirements the image does not install; "
            "to install them, add `-r examples/foo/requirements.txt` to requirements.txt",
        ],
    ),
]


def _init(tmp_path: Path, files: dict[str, str]) -> tuple[list[str], dict[str, object], str]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    result = run_init(InitOptions(directory=tmp_path))
    config = load_config(result.config_path)
    text = render_dockerfile(plan_image(config, tmp_path, "classic"))
    return result.notes, config.image.model_dump(), text


def test_corpus_is_large_enough() -> None:
    assert len(SHAPES) >= 25
    assert len({s.name for s in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_shape(shape: Shape, tmp_path: Path) -> None:
    notes, image, text = _init(tmp_path, shape.files)
    said = "\n".join(notes)
    if shape.torch is not None:
        assert image["torch"] == shape.torch, said
    if shape.cuda is not None:
        assert image["cuda"] == shape.cuda, said
    if shape.python is not None:
        assert image["python"] == shape.python, said
    for note in shape.notes:
        assert note in said
    for part in shape.render:
        assert part in text, part
    for part in shape.absent:
        assert part not in text, part
    positions = [text.index(part) for part in shape.order]
    assert positions == sorted(positions)
    for package in shape.system:
        assert package in image["system_packages"]  # type: ignore[operator]
    for key, value in shape.config.items():
        assert image[key] == value, key


REFUSED = [
    (
        "variant-not-in-catalog",
        {"requirements.txt": "torch==2.1.2+cu117\n"},
        "requirements.txt:1 (torch==2.1.2+cu117): the catalog has no cu117 build of torch 2.1.2 "
        "(builds: cu118, cu121, cpu); nearest: torch 2.1.2+cu118 (pass --cuda 11.8 to choose it)",
    ),
    (
        "python-outside-torch-range",
        {
            "requirements.txt": "torch==2.1.2\n",
            "pyproject.toml": '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.13"\n',
        },
        "pyproject.toml requires-python: Python >=3.13 is outside what torch 2.1.2 supports "
        "(Python 3.8-3.11)",
    ),
    (
        "rocm-index",
        {"requirements.txt": "--index-url https://download.pytorch.org/whl/rocm6.1\ntorch\n"},
        "ROCm builds (rocm6.1) are not supported",
    ),
    (
        "no-such-torch",
        {"requirements.txt": "torch==1.4.0\n"},
        "requirements.txt:1: no torch release in the catalog matches torch==1.4.0",
    ),
    (
        "torchvision-range-impossible",
        {"requirements.txt": "torch==2.1.2\ntorchvision<0.10\n"},
        "requirements.txt:2: torchvision<0.10 matches no torchvision paired with torch 2.1.2",
    ),
]


@pytest.mark.parametrize(("name", "files", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_the_reason(
    name: str, files: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        _init(tmp_path, files)
    assert message in info.value.message
    assert "\n" not in info.value.message
    assert not (tmp_path / "gpulaunch.yaml").exists()


def test_a_nested_requirements_name_with_control_characters_is_never_shown(
    tmp_path: Path,
) -> None:
    """init prints each nested requirements file's path: one whose name holds an escape
    sequence or a line separator is left out, never printed."""
    files = {
        "requirements.txt": "torch\n",
        "examples/a/requirements\x1b[2J.txt": "x\n",
        "examples/b/requirements\u2028.txt": "x\n",
        "examples/c/requirements.txt": "einops\n",
    }
    notes, _, _ = _init(tmp_path, files)
    shown = [n for n in notes if "the image does not install" in n]
    assert shown == [
        "examples/c/requirements.txt: pip requirements the image does not install; to install "
        "them, add `-r examples/c/requirements.txt` to requirements.txt"
    ]
