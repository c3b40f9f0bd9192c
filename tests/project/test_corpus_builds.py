"""Corpus shapes for the classes `init` got wrong on real entry points (issue 24): builds
that import torch, compiled sdists, one path named twice, conda/uv/extras/PEP 723 forms,
the project's own package, refusals that help, and the .dockerignore init writes. Each is
a small file shape modelled on a real project (no third-party code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulaunch.errors import ConfigError
from gpulaunch.image.init import InitOptions, run_init
from project.test_corpus import NEWEST, Shape, _init

CUDA_SETUP = (
    "import os\nfrom setuptools import setup, find_packages\n"
    "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n\n"
    "setup(\n    name='ext',\n    packages=find_packages(),\n"
    "    ext_modules=[CUDAExtension('ext._C', ['csrc/vision.cpp', 'csrc/nms.cu'])],\n"
    "    cmdclass={'build_ext': BuildExtension},\n)\n"
)
CPP_SETUP = (
    "from setuptools import setup\nimport torch\n"
    "from torch.utils import cpp_extension\n\n"
    "setup(name='lltm', ext_modules=[cpp_extension.CppExtension('lltm', ['lltm.cpp'])],\n"
    "      cmdclass={'build_ext': cpp_extension.BuildExtension})\n"
)

SHAPES = [
    # 1. build isolation (detectron2 / DiT-style `-e .` with a CUDA extension)
    Shape(
        "detectron2-cuda-extension",
        {
            "requirements.txt": "torch==2.4.1\nnumpy\n-e .\n",
            "setup.py": CUDA_SETUP,
            "ext/__init__.py": "",
        },
        torch="2.4.1",
        config={"flavor": "devel"},
        system=["g++", "python3-dev"],
        notes=[
            "the project (.): its build imports torch (setup.py:3 imports "
            "torch.utils.cpp_extension): installed with --no-build-isolation after torch",
            "flavor devel (nvcc and the CUDA headers): the project (.) builds a CUDA extension",
            "system packages python3-dev: the headers of the image's Python",
        ],
        render=[
            "'setuptools>=70.1'",
            "FORCE_CUDA=1 pip install --no-cache-dir --no-deps --no-build-isolation --use-pep517 "
            "-e /workspace",
            "TORCH_CUDA_ARCH_LIST=",
            "-devel-ubuntu",
        ],
        order=["pip install --no-cache-dir torch==2.4.1", "COPY --chown", "--no-build-isolation"],
    ),
    Shape(
        "pyproject-build-requires-torch",
        {
            "requirements.txt": "torch==2.5.1\n-e ./kernels\n",
            "kernels/pyproject.toml": '[build-system]\nrequires = ["setuptools>=61", "wheel", '
            '"torch"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "kernels"\nversion = "0.1"\n',
        },
        torch="2.5.1",
        notes=["kernels: its build imports torch (kernels/pyproject.toml [build-system] requires"],
        render=[
            "'setuptools>=61,>=70.1' wheel",
            "--no-deps --no-build-isolation --use-pep517 -e /workspace/kernels",
        ],
        absent=["FORCE_CUDA"],
    ),
    Shape(
        "cpp-extension-cpu",
        {"requirements.txt": "torch==2.4.1+cpu\n.\n", "setup.py": CPP_SETUP},
        torch="2.4.1",
        cuda="cpu",
        # python:*-slim ships the headers; the compiler is what it lacks
        system=["g++"],
        render=["--no-deps --no-build-isolation --use-pep517 /workspace", "g++"],
        absent=["python3-dev", "FORCE_CUDA"],
    ),
    # 2. compiled sdists: the compiler brings the image Python's headers
    Shape(
        "insightface-headers",
        {"requirements.txt": "torch==2.4.1\ninsightface==0.7.3\nonnxruntime-gpu\n"},
        torch="2.4.1",
        system=["libgl1", "libglib2.0-0", "g++", "python3-dev"],
        notes=["system packages python3-dev: the headers of the image's Python (distro 3."],
        render=["g++ python3-dev"],
    ),
    # 3. one path installed once (kohya_ss: requirements.txt and requirements_linux.txt)
    Shape(
        "same-editable-twice",
        {
            "requirements.txt": "-r requirements_linux.txt\ntorch==2.1.2\n-e ./sd-scripts\n",
            "requirements_linux.txt": "accelerate==0.25.0\n-e ./sd-scripts\n",
            "sd-scripts/setup.py": "from setuptools import setup\nsetup(name='library')\n",
        },
        torch="2.1.2",
        render=["--no-deps -e /workspace/sd-scripts\n"],
        absent=["-e /workspace/sd-scripts -e"],
    ),
    # 5. forms of conda / requirements
    Shape(
        "conda-spaced-specs",
        {
            "environment.yaml": "name: dino\ndependencies:\n  - python >= 3.11, <3.12\n"
            "  - pytorch::pytorch=2.3.1=py3.10_cuda12.1_cudnn8.9.2_0\n  - pytorch-cuda 12.1\n"
            "  - numpy 1.26 py310_0\n",
        },
        torch="2.3.1",
        cuda="12.1",
        python="3.11",
        notes=["torch pin found in environment.yaml:4 (conda): torch==2.3.1"],
        render=["numpy==1.26.*"],
    ),
    Shape(
        "uv-override-dependencies",
        {
            "pyproject.toml": '[project]\nname = "o"\nversion = "0"\n'
            'dependencies = ["torch==2.6.0", "zetascale"]\n'
            '[tool.uv]\noverride-dependencies = ["numpy<2", "torch==2.2.0"]\n',
        },
        torch="2.6.0",
        notes=[
            "uv overrides applied as pip constraints: numpy<2",
            "'torch==2.2.0' not applied: gpulaunch pins torch*",
        ],
        render=["printf '%s\\n' 'numpy<2' >> /opt/gpulaunch/constraints.txt && "],
    ),
    Shape(
        "gpu-extra-over-cpu",
        {
            "pyproject.toml": '[project]\nname = "e"\nversion = "0"\ndependencies = ["numpy"]\n'
            '[project.optional-dependencies]\ncpu = ["onnxruntime"]\n'
            'gpu = ["onnxruntime-gpu", "torch>=2.4,<2.6"]\ndev = ["pytest"]\n',
        },
        torch="2.5.1",
        notes=[
            "installing the optional group [gpu] (a CUDA image)",
            "optional dependency groups not installed: cpu, dev",
        ],
        render=["onnxruntime-gpu"],
        absent=["onnxruntime "],
    ),
    Shape(
        "setup-py-cuda-extra",
        {
            "setup.py": "from setuptools import setup\nsetup(name='s', install_requires=["
            "'torch==2.4.1'],\n      extras_require={'cpu': ['faiss-cpu'], 'cuda': "
            "['faiss-gpu', 'cupy-cuda12x']})\n",
        },
        torch="2.4.1",
        notes=["setup.py: installing the extra [cuda] (a CUDA image)"],
        render=["faiss-gpu cupy-cuda12x"],
        absent=["faiss-cpu"],
    ),
    Shape(
        "pep723-beside-requirements",
        {
            "requirements.txt": "torch==2.5.1\n",
            "sample.py": '# /// script\n# dependencies = ["rich", "torch"]\n# ///\nimport rich\n',
        },
        torch="2.5.1",
        notes=["sample.py: its PEP 723 dependencies are installed too (an entry point): rich"],
        render=["-r /opt/gpulaunch/req/requirements.txt rich"],
    ),
    # 4. what else binds torch: a lock file, a constraints file
    Shape(
        "uv-lock-binds-torch",
        {
            "pyproject.toml": '[project]\nname = "l"\nversion = "0"\n'
            'dependencies = ["torch>=2.1", "numpy"]\n',
            "uv.lock": 'version = 1\n\n[[package]]\nname = "numpy"\nversion = "1.26.4"\n\n'
            '[[package]]\nname = "torch"\nversion = "2.4.1"\n',
        },
        torch="2.4.1",
        notes=["torch==2.4.1: uv.lock:8 (locks torch 2.4.1)"],
    ),
    Shape(
        "constraints-file-binds-torch",
        {
            "requirements.txt": "-c constraints.txt\ntorch\nnumpy\n",
            "constraints.txt": "numpy<2\ntorch==2.3.1\n",
        },
        torch="2.3.1",
        notes=["torch==2.3.1: constraints.txt:2 (constraint torch==2.3.1)"],
    ),
    # 6. the project itself importable
    Shape(
        "lightning-src-layout",
        {
            "requirements.txt": "torch>=2.1,<2.5\nPyYAML\n",
            "setup.py": "from setuptools import setup, find_packages\n"
            "setup(name='lightning', package_dir={'': 'src'}, packages=find_packages('src'))\n",
            "src/lightning/__init__.py": "",
            "src/lightning_fabric/__init__.py": "",
        },
        torch="2.4.1",
        notes=[
            "the project itself is not installed: /workspace/src goes on PYTHONPATH "
            "(setup.py package_dir: lightning, lightning_fabric)"
        ],
        render=["ENV PYTHONPATH=/workspace:/workspace/src${PYTHONPATH:+:$PYTHONPATH}"],
    ),
    Shape(
        "setup-py-beside-requirements",
        {
            "requirements.txt": "torch==2.5.1\n",
            "setup.py": "from setuptools import setup\nsetup(name='vae', packages=['vae'])\n",
            "vae/__init__.py": "",
        },
        torch="2.5.1",
        notes=[
            "the project itself is not installed (setup.py is not what requirements.txt "
            "installs): its packages (vae) import from /workspace on PYTHONPATH"
        ],
        absent=["-e /workspace"],
    ),
    Shape(
        "setup-py-entry-installed",
        {
            "setup.py": "from setuptools import setup\nsetup(name='m', packages=['m'], "
            "install_requires=['torch'])\n",
            "src/m/__init__.py": "",
        },
        torch=NEWEST,
        notes=["the project itself is installed (pip install --no-deps -e /workspace)"],
        render=["ENV PYTHONPATH=/workspace${PYTHONPATH"],
    ),
]


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
        assert note in said, note
    for part in shape.render:
        assert part in text, part
    for part in shape.absent:
        assert part not in text, part
    positions = [text.index(part) for part in shape.order]
    assert positions == sorted(positions)
    if shape.system:
        assert image["system_packages"] == shape.system
    for key, value in shape.config.items():
        assert image[key] == value, key


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


REFUSED = [
    (
        "pin-older-than-catalog",
        {"requirements.txt": "numpy\ntorch==1.7.1\n"},
        {},
        "requirements.txt:2: no torch release in the catalog matches torch==1.7.1: it is older "
        "than every build the catalog has; the oldest is torch 1.13.0 (cpu, cu116, cu117)",
    ),
    (
        "pyproject-pin-line",
        {
            "pyproject.toml": '[project]\nname = "x"\nversion = "0"\ndependencies = [\n'
            '  "numpy",\n  "torch==1.7.1",\n]\n'
        },
        {},
        "pyproject.toml:6: no torch release in the catalog matches torch==1.7.1",
    ),
    (
        "nearest-keeps-python",
        {
            "requirements.txt": "torch==2.1.2+cu117\n",
            "pyproject.toml": '[project]\nname = "x"\nversion = "0"\nrequires-python = ">=3.11"\n',
        },
        {},
        "the catalog has no cu117 build of torch 2.1.2 (builds: cu118, cu121, cpu); nearest: "
        "torch 2.1.2+cu118 (pass --cuda 11.8 to choose it)",
    ),
    (
        "torch-flag-on-cuda-pin",
        {"requirements.txt": "torch==2.1.2+cu118\n"},
        {"torch": "2.8"},
        "--torch 2.8 (the project's cu118: requirements.txt:1 (torch==2.1.2+cu118)): the catalog "
        "has no cu118 build of torch 2.8.0 (builds: cu126, cu128, cu129, cpu); nearest: torch "
        "2.8.0+cu126 (pass --cuda 12.6 to choose it)",
    ),
    (
        "cuda-extension-runtime-flavor",
        {"requirements.txt": "torch==2.4.1\n-e .\n", "setup.py": CUDA_SETUP},
        {"flavor": "runtime"},
        "--flavor: runtime images have no nvcc, and the project (.) builds a CUDA extension",
    ),
    (
        "build-imports-torch-without-torch",
        {"requirements.txt": "-e .\n", "setup.py": CPP_SETUP},
        {"torch": "none"},
        "--torch: none, but the build of the project (.) imports torch (setup.py:2 imports torch)",
    ),
    (
        "constraint-conflicts-with-pin",
        {
            "requirements.txt": "-c constraints.txt\ntorch>=2.4\n",
            "constraints.txt": "torch==2.2.0\n",
        },
        {},
        "constraints.txt:1 (constraint torch==2.2.0): needs torch==2.2.0, which no torch in the "
        "catalog matching torch>=2.4 (requirements.txt:2) meets",
    ),
    (
        "uv-override-with-extras",
        {
            "pyproject.toml": '[project]\nname = "o"\nversion = "0"\ndependencies = ["torch"]\n'
            '[tool.uv]\noverride-dependencies = ["uvicorn[standard]==0.30"]\n',
        },
        {},
        "init: the config would not render: image.requirements: pyproject.toml [tool.uv] "
        "override-dependencies: 'uvicorn[standard]==0.30' cannot be applied as a pip constraint",
    ),
]


@pytest.mark.parametrize(
    ("name", "files", "flags", "message"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_refused_with_the_reason(
    name: str, files: dict[str, str], flags: dict[str, str], message: str, tmp_path: Path
) -> None:
    _write(tmp_path, files)
    with pytest.raises(ConfigError) as info:
        run_init(InitOptions(directory=tmp_path, **flags))  # type: ignore[arg-type]
    assert message in info.value.message
    assert "\n" not in info.value.message
    assert not (tmp_path / "gpulaunch.yaml").exists()


def test_dockerignore_keeps_code_folders_and_says_what_it_ignores(tmp_path: Path) -> None:
    """nanoGPT's data/ holds prepare scripts, a detectron2-like runs/ is a package: ignoring
    either makes the import fail in the image. checkpoints/ with weights stays ignored."""
    _write(
        tmp_path,
        {
            "requirements.txt": "torch==2.4.1\n",
            "data/__init__.py": "",
            "data/loader.py": "X = 1\n",
            "outputs/helpers.py": "Y = 2\n",
            "runs/registry/__init__.py": "",  # a namespace folder: imported, no __init__.py
            "train.py": "from data.loader import X\nimport outputs.helpers\n"
            "from runs.registry import *\n",
            "checkpoints/model.pt": "",
            "wandb/log.txt": "",
        },
    )
    notes = run_init(InitOptions(directory=tmp_path)).notes
    lines = (tmp_path / ".dockerignore").read_text().splitlines()
    assert "data" not in lines and "outputs" not in lines and "runs" not in lines
    assert "# data  (kept: a Python package (data/__init__.py))" in lines
    assert "# runs  (kept: Python modules the project imports (import runs))" in lines
    assert "checkpoints" in lines and "wandb" in lines
    said = "\n".join(notes)
    assert ".dockerignore keeps data/ in the build context: a Python package" in said
    assert ".dockerignore keeps outputs/ in the build context: Python modules the project " in said
    assert ".dockerignore leaves out of the build context: checkpoints/, wandb/" in said


def test_build_context_keeps_the_package_without_a_dockerignore(tmp_path: Path) -> None:
    """The rules a build uses when the project has no .dockerignore are init's, kept too."""
    from gpulaunch.image.build import read_dockerignore

    _write(tmp_path, {"data/__init__.py": "", "runs/x.txt": ""})
    lines = read_dockerignore(tmp_path).splitlines()
    assert "data" not in lines and "runs" in lines


ZETA = {"info": {"name": "zetascale", "version": "2.1.6", "requires_dist": [
    "torch==2.2.0", "numpy", "pytest; extra == 'dev'", "torch==1.0; sys_platform == 'win32'"
]}}  # fmt: skip


def test_check_pins_replays_a_dependency_torch_requirement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zetascale==2.1.6 requires torch==2.2.0: with --check-pins init chooses that torch
    (PyPI's JSON answers from a local fake), and refuses when the project's own pin excludes
    it, naming both."""
    from catalog.fake_pypi import FakeIndex, serve

    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip's replay reads only these fake wheels
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    _fake_wheel(tmp_path / "wheels", "torch", "2.2.0")
    _fake_wheel(tmp_path / "wheels", "numpy", "1.26.4")
    _fake_wheel(tmp_path / "wheels", "zetascale", "2.1.6", ("torch==2.2.0", "numpy"))
    with serve(FakeIndex()) as fake:
        fake.pages["/pypi/zetascale/2.1.6/json"] = ZETA
        monkeypatch.setenv("GPULAUNCH_PYPI_URL", f"{fake.url}/pypi")
        _write(tmp_path / "ok", {"requirements.txt": "zetascale==2.1.6\ntorch\nnumpy==1.26.4\n"})
        result = run_init(InitOptions(directory=tmp_path / "ok", check_pins=True))
        said = "\n".join(result.notes)
        assert "torch==2.2.0: zetascale==2.1.6 (requirements.txt:1) requires torch==2.2.0" in said
        assert 'torch: "2.2.0"' in (tmp_path / "ok" / "gpulaunch.yaml").read_text()
        assert fake.hits == ["/pypi/zetascale/2.1.6/json", "/pypi/numpy/1.26.4/json"]
        assert "pip resolves torch 2.2.0 with the 2 requirements of requirements.txt" in said
        assert "pins not checked" not in said

        _write(tmp_path / "no", {"requirements.txt": "zetascale==2.1.6\ntorch>=2.4\n"})
        with pytest.raises(ConfigError) as info:
            run_init(InitOptions(directory=tmp_path / "no", check_pins=True))
        assert info.value.message.startswith(
            "zetascale==2.1.6 (requirements.txt:1) requires torch==2.2.0: needs torch==2.2.0, "
            "which no torch in the catalog matching torch>=2.4 (requirements.txt:2) meets"
        )
    assert not (tmp_path / "no" / "gpulaunch.yaml").exists()


def test_check_pins_with_no_index_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("GPULAUNCH_PYPI_URL", f"http://127.0.0.1:{port}/pypi")
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    _write(tmp_path / "p", {"requirements.txt": "zetascale==2.1.6\ntorch==2.5.1\n"})
    result = run_init(InitOptions(directory=tmp_path / "p", check_pins=True))
    assert any(n.startswith("warning: pins not checked against the index: ") for n in result.notes)
    assert any(
        n.startswith("warning: the resolution was not replayed: pip could not resolve: ")
        for n in result.notes
    ), result.notes
    assert 'torch: "2.5.1"' in (tmp_path / "p" / "gpulaunch.yaml").read_text()


def test_cpu_image_takes_the_cpu_extra(tmp_path: Path) -> None:
    """The same project as gpu-extra-over-cpu, with --cuda cpu: init and render both take
    [cpu] (render decides from the resolved image, so the two agree)."""
    from gpulaunch.config import load_config
    from gpulaunch.image.render import plan_image, render_dockerfile

    shape = next(s for s in SHAPES if s.name == "gpu-extra-over-cpu")
    _write(tmp_path, shape.files)
    result = run_init(InitOptions(directory=tmp_path, cuda="cpu", torch="2.5.1"))
    assert "pyproject.toml: installing the optional group [cpu] (a CPU image)" in result.notes
    text = render_dockerfile(plan_image(load_config(result.config_path), tmp_path, "classic"))
    assert " onnxruntime" in text and "onnxruntime-gpu" not in text


def _fake_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{dist}_fake/__init__.py", "")
        whl.writestr(f"{info}/METADATA", meta)
        wheel = "Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        whl.writestr(f"{info}/WHEEL", wheel)
        whl.writestr(f"{info}/RECORD", "")


def test_check_pins_replays_pip_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --check-pins, pip's own dry run (against a folder of fake wheels here) replays the
    resolution with the torch chosen: a pin pip cannot satisfy is refused with pip's reason;
    one it can is said."""
    import socket

    wheels = tmp_path / "wheels"
    for version in ("2.2.0", "2.5.1"):
        _fake_wheel(wheels, "torch", version)
    _fake_wheel(wheels, "zetascale", "2.1.6", ("torch==2.2.0",))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    with socket.socket() as sock:  # no JSON index: only pip's replay speaks
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("GPULAUNCH_PYPI_URL", f"http://127.0.0.1:{sock.getsockname()[1]}")

    _write(tmp_path / "no", {"requirements.txt": "zetascale==2.1.6\ntorch==2.5.1\n"})
    with pytest.raises(ConfigError) as info:
        run_init(InitOptions(directory=tmp_path / "no", check_pins=True))
    message = info.value.message
    assert message.startswith(
        "--check-pins: pip cannot install torch 2.5.1 with the requirements of requirements.txt: "
    )
    assert "zetascale 2.1.6 depends on torch==2.2.0" in message and "\n" not in message
    assert not (tmp_path / "no" / "gpulaunch.yaml").exists()

    _write(tmp_path / "ok", {"requirements.txt": "zetascale==2.1.6\ntorch==2.2.0\n"})
    notes = run_init(InitOptions(directory=tmp_path / "ok", check_pins=True)).notes
    assert any(
        n.startswith("pip resolves torch 2.2.0 with the 1 requirements of requirements.txt")
        for n in notes
    ), notes
