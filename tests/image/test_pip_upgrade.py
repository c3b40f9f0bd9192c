"""pip is upgraded in the venv before torch is installed (pip 23.0/23.1 fail on the PyTorch
index), air-gapped builds keep working, and the step skips itself when pip is new enough."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from gpulaunch.catalog.python_install import pip_floor, wheelhouse_pip
from gpulaunch.config import validate_data
from gpulaunch.image.render import plan_image, render_dockerfile

STEP = "is upgraded first"


def _render(tmp_path: Path, image: dict[str, object], builder: str = "buildkit") -> str:
    cfg = validate_data({"name": "q", "image": {"torch": "2.4.1", **image}})
    return render_dockerfile(plan_image(cfg, tmp_path, builder))  # type: ignore[arg-type]


def _wheelhouse(tmp_path: Path, *names: str) -> None:
    (tmp_path / "wheels").mkdir()
    for name in names:
        (tmp_path / "wheels" / name).write_bytes(b"")


def test_upgrade_comes_after_the_venv_and_before_torch(tmp_path: Path) -> None:
    text = _render(tmp_path, {"cuda": "12.4"}, "classic")
    lines = text.splitlines()
    step = next(i for i, line in enumerate(lines) if line.startswith("RUN if python -c "))
    venv = next(i for i, line in enumerate(lines) if "-m venv /opt/venv" in line)
    torch = next(i for i, line in enumerate(lines) if "pip install --no-cache-dir torch==" in line)
    assert venv < step < torch
    assert lines[step - 1] == (
        "# pip older than 23.2 is upgraded first: pip 23.0/23.1 cannot install from the "
        "PyTorch index (typing-extensions metadata name)"
    )
    assert lines[step].endswith("python -m pip install --no-cache-dir --upgrade 'pip>=23.2'; fi")


def test_the_upgrade_uses_the_projects_index_and_wheelhouse(tmp_path: Path) -> None:
    _wheelhouse(tmp_path, "numpy-2.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    text = _render(
        tmp_path,
        {"pip": {"index_url": "https://mirror.example/simple", "find_links": ["wheels"]}},
        "classic",
    )
    step = next(line for line in text.splitlines() if line.startswith("RUN if python -c "))
    assert step.endswith(
        "--upgrade 'pip>=23.2' --index-url https://mirror.example/simple "
        "--find-links /opt/gpulaunch/find-links/0; fi"
    )


def test_air_gapped_with_a_pip_wheel_upgrades_from_the_wheelhouse(tmp_path: Path) -> None:
    _wheelhouse(tmp_path, "pip-23.0.1-py3-none-any.whl", "pip-25.0.1-py3-none-any.whl")
    text = _render(tmp_path, {"pip": {"no_index": True, "find_links": ["wheels"]}})
    step = next(line for line in text.splitlines() if "then echo" in line)
    assert step.endswith(
        "--upgrade pip==25.0.1 --no-index --find-links /opt/gpulaunch/find-links/0; fi"
    )


def test_air_gapped_without_a_pip_wheel_says_why_it_keeps_pip(tmp_path: Path) -> None:
    _wheelhouse(tmp_path, "pip-23.1.2-py3-none-any.whl")  # too old to be worth it
    text = _render(tmp_path, {"pip": {"no_index": True, "find_links": ["wheels"]}})
    assert STEP not in text and "--upgrade" not in text
    assert (
        "# pip is not upgraded: pip.no_index and no pip>=23.2 wheel in the wheelhouse "
        "(old pip fails only on the PyTorch index, which is not used)"
    ) in text


@pytest.mark.parametrize(
    "image",
    [
        {"flavor": "ngc", "torch": "2.4"},  # NVIDIA's Python and pip
        {"torch": "none", "cuda": "12.4"},  # nothing to install
    ],
)
def test_no_upgrade_where_nothing_is_pip_installed_into_a_venv(
    tmp_path: Path, image: dict[str, object]
) -> None:
    assert "--upgrade" not in _render(tmp_path, image)


def test_requirements_from_pypi_alone_need_no_upgrade(tmp_path: Path) -> None:
    """Old pip fails only on the PyTorch index; PyPI or a private index (which may not even
    serve pip) is left alone."""
    (tmp_path / "requirements.txt").write_text("numpy\n")
    text = _render(tmp_path, {"torch": "none", "cuda": "12.4", "requirements": "requirements.txt"})
    assert "--upgrade" not in text


@pytest.mark.parametrize("where", ["file", "config"])
def test_requirements_that_read_the_pytorch_index_get_the_upgrade(
    tmp_path: Path, where: str
) -> None:
    index = "https://download.pytorch.org/whl/cu124"
    lines = "numpy\n" + (f"--extra-index-url {index}\n" if where == "file" else "")
    (tmp_path / "requirements.txt").write_text(lines)
    image: dict[str, object] = {"torch": "none", "cuda": "12.4", "requirements": "requirements.txt"}
    if where == "config":
        image["pip"] = {"extra_index_urls": [index]}
    text = _render(tmp_path, image)
    assert text.index(STEP) < text.index("-r /opt/gpulaunch/req/requirements.txt")


@pytest.mark.parametrize(
    ("version", "ok"),
    [("23.0.1", False), ("23.1.2", False), ("23.2", True), ("24.0", True), ("9.0.1", False)],
)
def test_check_script_compares_versions(version: str, ok: bool, tmp_path: Path) -> None:
    """The step's own check, run with a fake `pip` distribution of the given version."""
    dist = tmp_path / f"pip-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: pip\nVersion: {version}\n")
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); " + pip_floor().check_script()
    done = subprocess.run([sys.executable, "-I", "-c", script], timeout=30)
    assert (done.returncode == 0) == ok
    assert importlib.metadata.version("pip")  # the real one is untouched


def test_wheelhouse_pip_picks_the_newest_new_enough(tmp_path: Path) -> None:
    _wheelhouse(
        tmp_path,
        "pip-23.2.1-py3-none-any.whl",
        "pip-24.0-py3-none-any.whl",
        "pipx-1.0-py3-none-any.whl",
    )
    assert wheelhouse_pip([tmp_path / "wheels", tmp_path / "gone"], "23.2") == "24.0"
    assert wheelhouse_pip([tmp_path / "wheels"], "25.0") is None
