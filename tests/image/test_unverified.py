"""Issue 31 §4: the catalog knows what it does not know. An unverified fact (confidence low:
inferred, or a build nobody has seen) is never a default, is offered with a warning when asked
for, is marked in `versions`, and a refusal names only an absence the catalog has evidence for.
"""

from __future__ import annotations

import json
from datetime import date

import pytest
from typer.testing import CliRunner

from gpulaunch.catalog import compat, python_install
from gpulaunch.catalog.data import load_catalog
from gpulaunch.catalog.request import ImageRequest
from gpulaunch.catalog.resolver import resolve
from gpulaunch.cli.app import app
from gpulaunch.errors import CatalogError, ConfigError

RTX_5090 = compat.HostGpus("580.95.05", ("NVIDIA GeForce RTX 5090",), ("geforce",), ("12.0",))


def test_an_unknown_build_is_offered_unverified_not_refused() -> None:
    """torch 2.15's catalog holds only PyPI's cu132; the PyTorch index was not read, so a
    CUDA 13.0 build is unknown, not absent (PyTorch's release plan keeps it)."""
    res = resolve(ImageRequest(torch="2.15", cuda="13.0"))
    assert (res.torch, res.torch_variant) == ("2.15.0", "cu130")
    assert res.base_image == "nvidia/cuda:13.0.2-runtime-ubuntu22.04"  # a verified image
    assert res.torch_index_url == "https://download.pytorch.org/whl/cu130"
    assert res.warnings == (
        "torch 2.15.0 cu130 build is unverified (PyTorch's release plan keeps CUDA 13.0; the "
        "index was not read): the torch install fails at build time if PyTorch does not "
        "publish it",
    )


def test_a_build_missing_from_a_partial_list_proceeds_with_a_warning() -> None:
    """No row at all (cu128): the release's build list is partial, so the absence is unknown:
    offered with the arch list of the newest earlier cu128 build and a warning."""
    res = resolve(ImageRequest(torch="2.15.0", cuda="12.8"))
    assert res.torch_variant == "cu128" and res.cuda == "12.8.1"
    assert res.cuda_archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")  # 2.11's cu128
    assert any(
        w.startswith("torch 2.15.0 cu128 build is unverified (not in the catalog's partial list")
        for w in res.warnings
    )


def test_a_complete_list_still_refuses_a_verified_absence() -> None:
    assert load_catalog().releases[-2].builds == "complete"
    with pytest.raises(CatalogError) as err:
        resolve(ImageRequest(torch="2.14.1", cuda="12.8"))
    assert err.value.message == (
        "image.cuda: torch 2.14.1 has no CUDA 12.8 build; available: cu126, cu130, cu132"
    )


def test_unverified_builds_are_never_a_default() -> None:
    default = resolve(ImageRequest(torch="2.15"))
    assert default.torch_variant == "cu132"  # the build PyPI's wheel pins, not cu126/cu130
    assert not any("build is unverified" in w for w in default.warnings)
    newest = resolve(ImageRequest())
    assert newest.torch is not None and not newest.torch.startswith("2.15.")
    assert not any("unverified" in w for w in newest.warnings)
    # the host's best builds leave unverified rows out even where they would fit
    assert all(row.verified for row in compat.host_builds(RTX_5090))
    assert not any(row.torch == "2.15.0" for row in compat.host_builds(RTX_5090))


def test_rtx_50xx_on_r580_is_shown_the_path_to_torch_215() -> None:
    """The issue's case: a GeForce RTX 5090 on the R580 production driver cannot start the
    CUDA 13.2 image torch 2.15's PyPI build needs; the refusal names the CUDA 13.0 build as
    unverified instead of saying none exists, and asking for it works (with a warning)."""
    with pytest.raises(ConfigError) as err:
        compat.check(resolve(ImageRequest(torch="2.15")), RTX_5090)
    message = err.value.message
    assert message.startswith("image.cuda: nvidia/cuda:13.2.1-runtime-ubuntu22.04 needs driver")
    assert message.endswith(
        "with this driver use: cuda 12.6 (cu126, unverified), cuda 13.0 (cu130, unverified)"
    )
    chosen = resolve(ImageRequest(torch="2.15", cuda="13.0"))
    compat.check(chosen, RTX_5090)  # starts natively on R580, kernels for sm_120 (PTX)


def test_versions_marks_unverified_rows(runner: CliRunner) -> None:
    data = json.loads(runner.invoke(app, ["versions", "--torch", "2.15", "--json"]).output)
    marks = {row["variant"]: row["verified"] for row in data}
    assert marks == {"cu126": False, "cu130": False, "cu132": True, "cpu": True}
    text = runner.invoke(app, ["versions", "--torch", "2.15"]).output
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("2.15.0")}
    assert rows["cu130"].endswith("stable (unverified)")
    assert rows["cu132"].endswith("stable (medium)")
    assert "(unverified): a build, image or pairing no source showed" in text


def test_an_unverified_image_and_os_are_offered_with_warnings_never_by_default() -> None:
    low = resolve(ImageRequest(torch="none", cuda="13.4.0"))
    assert low.base_image == "nvidia/cuda:13.4.0-runtime-ubuntu22.04"
    assert any("13.4.0-runtime-ubuntu22.04 is unverified" in w for w in low.warnings)
    assert resolve(ImageRequest(torch="none", cuda="13.4")).cuda == "13.4.2"  # not 13.4.0
    on_2604 = resolve(ImageRequest(torch="none", cuda="13.3.0", os="ubuntu26.04"))
    assert on_2604.base_image == "nvidia/cuda:13.3.0-runtime-ubuntu26.04"
    assert on_2604.python_source == "distro"
    assert any(
        "ubuntu26.04's Python 3.14 and glibc 2.42 are unverified" in w for w in on_2604.warnings
    )
    for xy in ("13.3", "13.4"):  # never the default OS
        assert resolve(ImageRequest(torch="none", cuda=xy)).os == "ubuntu22.04"


def test_python_314_from_deadsnakes_on_noble_is_unverified_not_absent() -> None:
    """No source read here shows the PPA's python3.14 for noble: offered with a warning."""
    assert python_install.deadsnakes_gap("ubuntu24.04", "3.14", date(2026, 12, 5)) is None
    res = resolve(ImageRequest(torch="2.14", cuda="13.0", os="ubuntu24.04", python="3.14"))
    assert res.python_source == "deadsnakes"
    assert any(
        w.startswith("image.python_source: deadsnakes' Python 3.14 for ubuntu24.04 is unverified")
        for w in res.warnings
    )
    assert python_install.deadsnakes_gap("ubuntu24.04", "3.12", date(2026, 12, 5)) is not None
