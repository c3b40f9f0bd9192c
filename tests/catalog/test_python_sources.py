"""Where the venv's Python comes from (gpulaunch/data/python_install.yaml): deadsnakes per
Ubuntu series with the date it deletes the series, the distro's own Python, a standalone
CPython, the image's own; refusals name what can install; explicit bases get Python too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.catalog.compat import matrix
from gpulaunch.catalog.data import load_catalog
from gpulaunch.catalog.python_install import deadsnakes, deadsnakes_gap, standalone
from gpulaunch.catalog.request import ImageRequest
from gpulaunch.catalog.resolver import resolve
from gpulaunch.cli import app
from gpulaunch.config import validate_data
from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.image.render import plan_image, render_dockerfile

TODAY = date.today()


@pytest.mark.parametrize(
    ("os_name", "python", "on", "gap"),
    [
        ("ubuntu20.04", "3.10", date(2025, 1, 15), None),  # before focal's EOL
        ("ubuntu20.04", "3.10", date(2025, 10, 1), "removed ubuntu20.04 after its end of life"),
        ("ubuntu18.04", "3.11", date(2023, 1, 1), None),
        ("ubuntu18.04", "3.12", date(2023, 1, 1), "no Python 3.12 for ubuntu18.04"),
        ("ubuntu18.04", "3.9", date(2026, 12, 3), "removed ubuntu18.04"),
        ("ubuntu22.04", "3.12", date(2026, 12, 3), None),
        ("ubuntu22.04", "3.12", date(2027, 5, 1), "removed ubuntu22.04"),  # jammy goes in 2027
        ("ubuntu22.04", "3.10", date(2026, 12, 3), "no Python 3.10 for ubuntu22.04"),  # distro's
        ("debian-bookworm", "3.12", date(2026, 12, 3), "no debian-bookworm series"),
    ],
)
def test_deadsnakes_availability(os_name: str, python: str, on: date, gap: str | None) -> None:
    found = deadsnakes_gap(os_name, python, on)
    assert (found is None) == (gap is None)
    if gap:
        assert found is not None and gap in found


def test_data_covers_every_ubuntu_of_the_catalog() -> None:
    ubuntus = {name for name in load_catalog().os if name.startswith("ubuntu")}
    assert set(deadsnakes()) == ubuntus
    assert all(row.until > date(2023, 1, 1) for row in deadsnakes().values())
    assert "3.12" in standalone().pythons


def _source_exists(os_name: str | None, python: str, source: str) -> bool:
    cat = load_catalog()
    if source == "image":
        return True
    if os_name is None:
        return False
    if source == "distro":
        return cat.os[os_name].python == python
    if source == "deadsnakes":
        return deadsnakes_gap(os_name, python, TODAY) is None
    return source == "standalone" and python in standalone().pythons


def test_every_default_render_installs_python_from_a_source_that_exists_today() -> None:
    """Over the data: every torch patch x wheel variant (CPU included) with defaults, and every
    CUDA x.y without torch, resolves to a Python source that can install it on today's date."""
    checked = 0
    for row in matrix():
        cuda = row.cuda or "cpu"
        res = resolve(ImageRequest(torch=row.torch, cuda=cuda))
        assert _source_exists(res.os, res.python, res.python_source), (row, res)
        checked += 1
    for xy in sorted({img.xy for img in load_catalog().cuda_images}):
        res = resolve(ImageRequest(torch="none", cuda=xy))
        assert _source_exists(res.os, res.python, res.python_source), (xy, res)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    ("request_", "alternatives"),
    [
        # the case: 11.6.2-runtime-ubuntu20.04 + deadsnakes, which deleted focal
        (
            {"torch": "1.13.1", "cuda": "11.6", "python": "3.10"},
            "use image.python_source: standalone (Python 3.10, no PPA) or python 3.8 "
            "(ubuntu20.04's own)",
        ),
        # os: ubuntu18.04 with Python 3.12: bionic is gone from the PPA
        (
            {"torch": "2.1.2", "cuda": "12.1", "os": "ubuntu18.04", "python": "3.11"},
            "use image.python_source: standalone (Python 3.11, no PPA) or os ubuntu22.04",
        ),
    ],
)
def test_what_cannot_install_is_refused_naming_what_can(
    request_: dict[str, str], alternatives: str
) -> None:
    with pytest.raises(CatalogError) as err:
        resolve(ImageRequest(**request_))
    message = err.value.message
    assert message.startswith(f"image.python: Python {request_['python']} cannot be installed")
    assert "after its end of life" in message
    assert message.endswith(alternatives)
    # and the first alternative really resolves
    fixed = resolve(ImageRequest(**request_, python_source="standalone"))
    assert fixed.python_source == "standalone"


def test_python_315_with_torch_215_is_told_a_source(runner: CliRunner, in_tmp: Path) -> None:
    """Issue 24 item 10: no source in the data has Python 3.15 yet; the refusal names what
    does work (a base that brings it, or 3.14 standalone), and both really resolve."""
    result = runner.invoke(app, ["init", "--torch", "2.15.0", "--python", "3.15", "--yes"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert result.output.rstrip().endswith(
        "no source in gpulaunch's data has Python 3.15 (deadsnakes: no series; standalone "
        "builds: up to 3.14); use image.base with an image that has Python 3.15 and "
        "image.python_source: image, or python 3.14 with image.python_source: standalone"
    )
    own = resolve(
        ImageRequest(torch="2.15.0", python="3.15", base="ghcr.io/a/py315:1", python_source="image")
    )
    assert (own.python, own.python_source) == ("3.15", "image")
    nearest = resolve(ImageRequest(torch="2.15.0", python="3.14", python_source="standalone"))
    assert nearest.python_source == "standalone"


def test_init_refuses_the_focal_deadsnakes_case(runner: CliRunner, in_tmp: Path) -> None:
    result = runner.invoke(
        app, ["init", "--torch", "1.13.1", "--cuda", "11.6", "--python", "3.10", "--yes"]
    )
    assert result.exit_code == 2
    assert "deadsnakes removed ubuntu20.04" in result.output
    assert not (in_tmp / "gpulaunch.yaml").exists()


def _render(tmp_path: Path, image: dict[str, object], builder: str = "buildkit") -> str:
    cfg = validate_data({"name": "q", "image": image})
    return render_dockerfile(plan_image(cfg, tmp_path, builder))  # type: ignore[arg-type]


def test_standalone_render(tmp_path: Path) -> None:
    text = _render(
        tmp_path,
        {"torch": "1.13.1", "cuda": "11.6", "python": "3.10", "python_source": "standalone"},
    )
    assert "FROM nvidia/cuda:11.6.2-runtime-ubuntu20.04" in text
    assert f"COPY --from={standalone().uv_image} /uv /usr/local/bin/uv" in text
    assert "UV_PYTHON_INSTALL_DIR=/opt/python uv python install 3.10" in text
    assert "/opt/python/cpython-3.10.*/bin/python3.10 -m venv /opt/venv" in text
    assert "deadsnakes" not in text and "ca-certificates" in text
    assert 'io.gpulaunch.python-source="standalone"' in text
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    assert hadolint
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    done = subprocess.run(
        [hadolint, "--failure-threshold", "error", "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (
            {"torch": "2.4.1", "cuda": "12.4", "python": "3.11", "python_source": "distro"},
            "image.python_source: distro gives Python 3.10 on ubuntu22.04; got python 3.11",
        ),
        (
            {"torch": "2.4.1", "cuda": "12.4", "python_source": "image"},
            "image.python_source: nvidia/cuda images bring no Python; got image",
        ),
        (
            {"torch": "2.4.1", "cuda": "cpu", "python_source": "deadsnakes"},
            "image.python_source: flavor cpu's python:*-slim images bring their own Python",
        ),
        (
            {"torch": "1.13.1", "cuda": "11.6", "python": "3.7", "python_source": "standalone"},
            "image.python_source: standalone CPython builds exist for Python 3.8",
        ),
        (
            {"base": "myorg/train:1", "torch": "none", "python_source": "distro"},
            "image.os: gpulaunch cannot tell myorg/train:1's OS; set image.os",
        ),
    ],
)
def test_explicit_source_refusals(tmp_path: Path, image: dict[str, object], message: str) -> None:
    with pytest.raises(CatalogError) as err:
        _render(tmp_path, image)
    assert err.value.message.startswith(message)


# --- an explicit base gets Python like a catalog base (issue 9, item 6) ----------------------


def test_explicit_cuda_base_gets_python(tmp_path: Path) -> None:
    text = _render(
        tmp_path,
        {
            "base": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
            "torch": "none",
            "run": ["pip install numpy"],
        },
    )
    assert "python3 python3-venv" in text  # apt, like the catalog's own bases
    assert text.index("apt-get install") < text.index("python3 -m venv /opt/venv")
    assert 'io.gpulaunch.os="ubuntu22.04"' in text


def test_explicit_base_python_from_deadsnakes_and_digest(tmp_path: Path) -> None:
    base = "nvcr.io/nvidia/cuda:12.8.1-devel-ubuntu24.04@sha256:" + "a" * 64
    text = _render(tmp_path, {"base": base, "torch": "2.8.0", "cuda": "12.8", "python": "3.11"})
    assert "ppa:deadsnakes/ppa" in text and "python3.11 -m venv /opt/venv" in text


@pytest.mark.parametrize(
    "image",
    [
        {"base": "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "python_source": "image"},
        {"base": "myorg/train:1"},  # an OS gpulaunch cannot tell: the image's own Python
    ],
)
def test_a_base_that_brings_its_own_python(tmp_path: Path, image: dict[str, object]) -> None:
    text = _render(tmp_path, {**image, "torch": "none", "python": "3.11"})
    assert "apt-get" not in text and "python3 -m venv /opt/venv" in text


def test_unknown_base_with_os_is_provisioned(tmp_path: Path) -> None:
    text = _render(
        tmp_path,
        {
            "base": "myorg/ubuntu-cuda:1",
            "os": "ubuntu24.04",
            "torch": "none",
            "python_source": "distro",
        },
    )
    assert "python3 python3-venv" in text


def test_standalone_needs_the_network_at_build_time(tmp_path: Path) -> None:
    cfg = validate_data(
        {
            "name": "q",
            "image": {
                "torch": "2.4.1",
                "cuda": "12.4",
                "python": "3.12",
                "python_source": "standalone",
            },
            "build": {"network": "none"},
        }
    )
    with pytest.raises(ConfigError, match=r"build\.network none forbids it"):
        plan_image(cfg, tmp_path, "buildkit")
