"""The catalog resolver: known answers, refusals with their messages, drivers and archs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from importlib import resources
from typing import Any

import pytest
import yaml

from gpulaunch.catalog import data as cat_mod
from gpulaunch.catalog import resolver as resolver_mod
from gpulaunch.catalog.compat import gpu_compute_capability, matrix, supports_arch
from gpulaunch.catalog.data import load_catalog
from gpulaunch.catalog.request import ImageRequest, ResolvedImage
from gpulaunch.catalog.resolver import min_driver_for, resolve, verified_image
from gpulaunch.errors import CatalogError, ConfigError, ExitCode

CAT = load_catalog()
PAIRS = [
    pytest.param(patch.torch, variant.variant, variant.cuda, id=f"{patch.torch}-{variant.variant}")
    for rel in CAT.releases
    for patch in rel.patches
    for variant in rel.variants
]


def _existing_tags() -> set[str]:
    tags = set()
    for img in CAT.cuda_images:
        for kind in ("runtime", "devel"):
            tags |= {f"{CAT.cuda_image}:{img.cuda}-{kind}-{os}" for os in img.os}
            tags |= {
                f"{CAT.cuda_image}:{img.cuda}-{img.cudnn_token}-{kind}-{os}" for os in img.cudnn_os
            }
    return tags


def _resolve(**kwargs: str) -> ResolvedImage:
    return resolve(ImageRequest(**kwargs))


# --- every catalog row resolves, and the image CUDA matches the wheel CUDA -----------------


@pytest.mark.parametrize(("torch", "variant", "cuda"), PAIRS)
@pytest.mark.parametrize("flavor", ["runtime", "devel"])
def test_every_torch_variant_resolves_to_a_matching_image(
    torch: str, variant: str, cuda: str, flavor: str
) -> None:
    res = _resolve(torch=torch, cuda=cuda, flavor=flavor)
    assert res.base_image in _existing_tags()
    assert res.torch == torch
    assert res.torch_variant == variant
    assert res.cuda is not None and res.cuda.rsplit(".", 1)[0] == cuda
    assert res.base_image.startswith(f"nvidia/cuda:{res.cuda}-{flavor}-")
    assert res.torch_index_url == f"https://download.pytorch.org/whl/{variant}"
    assert res.cuda_archs and res.min_driver


@pytest.mark.parametrize("torch", [p.torch for rel in CAT.releases for p in rel.patches], ids=str)
def test_every_torch_patch_has_a_cpu_image(torch: str) -> None:
    res = _resolve(torch=torch, flavor="cpu")
    assert res.base_image.startswith("python:") and res.base_image.endswith("-slim-bookworm")
    assert (res.torch_variant, res.cuda, res.cuda_archs) == ("cpu", None, ())


def test_default_torch_resolves_with_default_variant() -> None:
    res = _resolve()
    # the newest release with a verified build whose image's driver rule is read from NVIDIA
    # (2.15's verified build, cu132, needs a 13.2 image whose rule is reported, not read; its
    # cu126/cu130 builds are unverified: never the default)
    ready = [
        r
        for r in CAT.releases
        if any(v.confidence != "low" and verified_image(CAT, v) for v in r.variants)
    ]
    newest = max(ready, key=lambda r: tuple(int(x) for x in r.minor.split(".")))
    assert newest.minor == "2.14" and CAT.releases[-1].minor == "2.15"
    assert res.torch is not None and res.torch.startswith(newest.minor + ".")
    assert res.torch_variant == "cu" + newest.pypi_default.replace(".", "")


# --- specific known answers -------------------------------------------------------------


def test_torch_241_defaults() -> None:
    """No CUDA asked: the stable build most drivers can start (cu118: R520, vs cu121: R530),
    not PyPI's default."""
    res = _resolve(torch="2.4.1")
    assert res.torch_variant == "cu118"
    assert res.base_image == "nvidia/cuda:11.8.0-runtime-ubuntu22.04"
    assert res.torch_index_url == "https://download.pytorch.org/whl/cu118"
    assert (res.torchvision, res.torchaudio) == ("0.19.1", "2.4.1")
    assert (res.os, res.python, res.python_source) == ("ubuntu22.04", "3.10", "distro")
    assert res.cuda == "11.8.0"
    assert res.cudnn is None
    assert res.min_driver == "520.61.05"  # the image's cuda>=11.8, not the 11.x floor
    assert res.recommended_driver == "520.61.05"
    assert res.cuda_archs == ("3.7", "5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")
    cu121 = _resolve(torch="2.4.1", cuda="12.1")
    assert (cu121.base_image, cu121.min_driver) == (
        "nvidia/cuda:12.1.1-runtime-ubuntu22.04",
        "530.30.02",
    )
    assert res.ngc_tag is None
    assert res.warnings == ()


def test_minor_means_newest_patch() -> None:
    assert _resolve(torch="2.4").torch == "2.4.1"
    assert _resolve(torch="2.1").torch == "2.1.2"


def test_cudnn9_with_cuda_124() -> None:
    res = _resolve(torch="2.4.1", cuda="12.4", cudnn="9")
    assert res.base_image == "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"
    assert res.cudnn == "9"
    assert any("bundle their own cuDNN" in w for w in res.warnings)
    assert any("experimental" in w for w in res.warnings)


def test_cudnn8_with_cuda_118() -> None:
    res = _resolve(torch="2.3.1", cuda="11.8", cudnn="8", flavor="devel")
    assert res.base_image == "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04"
    assert res.min_driver == "520.61.05"  # cuda>=11.8


def test_cudnn9_token_for_1232() -> None:
    res = _resolve(torch="none", cuda="12.3", cudnn="9")
    assert res.base_image == "nvidia/cuda:12.3.2-cudnn9-runtime-ubuntu22.04"
    assert res.torch is None and res.torch_variant is None and res.torch_index_url is None


def test_no_cudnn_unless_asked() -> None:
    assert "cudnn" not in _resolve(torch="2.5.1").base_image


def test_newest_patch_of_cuda_minor_with_full_version_override() -> None:
    assert _resolve(torch="2.5.1", cuda="12.4").base_image.startswith("nvidia/cuda:12.4.1-")
    res = _resolve(torch="2.5.1", cuda="12.4.0")
    assert res.base_image == "nvidia/cuda:12.4.0-runtime-ubuntu22.04"
    assert any("not the newest CUDA 12.4 patch" in w and "may disappear" in w for w in res.warnings)


def test_os_fallback_and_distro_python() -> None:
    res = _resolve(torch="2.8.0", cuda="12.8", os="ubuntu24.04")
    assert res.base_image == "nvidia/cuda:12.8.1-runtime-ubuntu24.04"
    assert (res.python, res.python_source) == ("3.12", "distro")
    res = _resolve(torch="2.8.0", cuda="12.8", os="ubuntu24.04", python="3.11")
    assert (res.python, res.python_source) == ("3.11", "deadsnakes")


def test_default_python_when_distro_python_out_of_range() -> None:
    res = _resolve(torch="2.9.1", os="ubuntu22.04", cuda="12.8")
    assert (res.python, res.python_source) == ("3.10", "distro")
    res = _resolve(torch="2.9.1", os="ubuntu24.04", cuda="12.8", python="3.11")
    assert (res.python, res.python_source) == ("3.11", "deadsnakes")
    res = _resolve(torch="2.0.1", os="ubuntu20.04")
    assert (res.python, res.python_source) == ("3.8", "distro")
    # focal's distro Python 3.8 is too old for 2.9.1, and deadsnakes deleted focal (EOL):
    # refused, naming what can install (tests/catalog/test_python_sources.py has the table)
    with pytest.raises(CatalogError, match=r"deadsnakes removed ubuntu20\.04 after its end"):
        _resolve(torch="2.9.1", os="ubuntu20.04")


def test_default_variant_falls_back_when_os_lacks_it() -> None:
    res = _resolve(torch="2.6.0", os="ubuntu24.04")
    assert res.torch_variant == "cu126"
    assert res.base_image == "nvidia/cuda:12.6.3-runtime-ubuntu24.04"
    assert any("default cu118 has no matching image" in w for w in res.warnings)


def test_cpu_flavor() -> None:
    res = _resolve(torch="2.4.1", flavor="cpu")
    assert res.base_image == "python:3.11-slim-bookworm"
    assert (res.os, res.python_source) == ("debian-bookworm", "image")
    assert res.torch_index_url == "https://download.pytorch.org/whl/cpu"
    assert (res.min_driver, res.recommended_driver, res.cuda_archs) == (None, None, ())
    assert _resolve(torch="2.4.1", cuda="cpu").base_image == "python:3.11-slim-bookworm"
    # 1.13 does not support 3.11: default moves to the newest supported Python.
    assert _resolve(torch="1.13.1", flavor="cpu").python == "3.10"


def test_ngc_by_torch_minor() -> None:
    res = _resolve(flavor="ngc", torch="2.4")
    assert res.base_image == "nvcr.io/nvidia/pytorch:24.07-py3"
    assert res.ngc_tag == "24.07"
    assert res.torch is None and res.torchvision is None and res.torch_index_url is None
    assert (res.python, res.python_source, res.os) == ("3.10", "image", "ubuntu22.04")
    assert res.cuda == "12.5.1"
    labels = res.labels()
    assert labels["io.gpulaunch.torch"] == "2.4.0a0+3bcc3cddb5"
    assert labels["io.gpulaunch.cuda"] == "12.5.1"
    assert labels["io.gpulaunch.python"] == "3.10"
    assert labels["io.gpulaunch.ngc-tag"] == "24.07"


def test_ngc_by_cuda_and_default_skips_low_confidence() -> None:
    assert _resolve(flavor="ngc", cuda="12.4").ngc_tag == "24.05"
    default = _resolve(flavor="ngc")
    row = next(r for r in CAT.ngc if r.tag == default.ngc_tag)
    assert row.confidence != "low"
    assert not default.warnings
    # Only low-confidence tags ship torch 2.13 (26.06, 26.07): allowed, with a warning.
    low = _resolve(flavor="ngc", torch="2.13")
    assert low.ngc_tag == "26.07"
    assert any("are unverified catalog facts" in w for w in low.warnings)


def test_explicit_base() -> None:
    res = _resolve(base="ghcr.io/acme/base:1", torch="2.5.1", python="3.12")
    assert (res.base_image, res.os, res.python_source) == ("ghcr.io/acme/base:1", None, "image")
    assert res.torch_variant == "cu118" and res.cuda == "11.8"  # broadest driver reach
    assert res.torch_index_url == "https://download.pytorch.org/whl/cu118"
    res = _resolve(base="ghcr.io/acme/base:1", torch="2.5.1", cuda="cpu")
    assert res.torch_variant == "cpu" and res.cuda is None


def test_torch_none_defaults_to_newest_trusted_cuda_image() -> None:
    res = _resolve(torch="none")
    trusted = [i for i in CAT.cuda_images if i.confidence != "low"]
    newest = max(trusted, key=lambda i: tuple(int(x) for x in i.cuda.split(".")))
    assert res.cuda == newest.cuda
    assert res.torch is None and res.torch_variant is None


def test_torchaudio_211_1_serves_212_to_215() -> None:
    """No torchaudio 2.12+ exists (maintenance mode); 2.11.1's own metadata (torch>=2.11, pure
    Python) admits torch 2.12-2.15: paired with medium confidence, not left empty."""
    assert _resolve(torch="2.11.0").torchaudio == "2.11.0"
    for version in ("2.12.1", "2.13.0", "2.14.0", "2.15.0"):
        res = _resolve(torch=version)
        assert res.torchaudio == "2.11.1" and res.torchvision is not None


def test_low_confidence_row_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    # No packaged torch patch row is low any more (the audit confirmed them): mark one.
    def lower(rel: Any) -> Any:
        patches = tuple(
            p._replace(confidence="low") if p.torch == "2.12.1" else p for p in rel.patches
        )
        return rel._replace(patches=patches)

    low_cat = CAT._replace(releases=tuple(lower(r) for r in CAT.releases))
    monkeypatch.setattr(resolver_mod, "load_catalog", lambda: low_cat)
    res = _resolve(torch="2.12.1")
    assert any("companion versions is unverified" in w for w in res.warnings)
    assert _resolve(torch="2.12").torch == "2.12.0"  # the low row is not a default
    assert all("unverified" not in w for w in _resolve(torch="2.12.0").warnings)


def test_210_is_not_21() -> None:
    res = _resolve(torch="2.10")
    assert res.torch == "2.10.0"
    assert res.torchvision == "0.25.0"
    assert _resolve(torch="2.1").torch == "2.1.2"
    assert {r.torch for r in matrix(torch="2.10")} == {"2.10.0"}


def test_labels() -> None:
    labels = _resolve(torch="2.4.1", cuda="12.1").labels()
    assert labels["io.gpulaunch.torch"] == "2.4.1"
    assert labels["io.gpulaunch.torch-variant"] == "cu121"
    assert labels["io.gpulaunch.cuda"] == "12.1.1"
    assert labels["io.gpulaunch.min-driver"] == "530.30.02"
    assert labels["org.opencontainers.image.base.name"] == "nvidia/cuda:12.1.1-runtime-ubuntu22.04"
    assert "io.gpulaunch.cudnn" not in labels
    assert all(isinstance(v, str) and v for v in labels.values())


# --- refusals -----------------------------------------------------------------------------


INVALID = [
    (
        {"torch": "2.0.1", "cuda": "12.4"},
        "image.cuda: torch 2.0.1 has no CUDA 12.4 build; available: cu117, cu118",
    ),
    (
        {"torch": "2.1", "python": "3.13"},
        "image.python: torch 2.1.2 supports Python 3.8\u20133.11; got 3.13",
    ),
    (
        {"torch": "2.0.1", "python": "3.12"},
        "image.python: torch 2.0.1 supports Python 3.8\u20133.11; got 3.12",
    ),
    (
        {"torch": "2.4.1", "cuda": "11.8", "cudnn": "9"},
        "image.cudnn: CUDA 11.8 images ship cuDNN 8, not cuDNN 9",
    ),
    (
        {"torch": "2.5.1", "cuda": "12.4", "cudnn": "8"},
        "image.cudnn: CUDA 12.4 images ship cuDNN 9, not cuDNN 8; "
        "cuDNN 8 images exist for CUDA 11.0\u201312.2",
    ),
    (
        {"torch": "2.6", "os": "ubuntu18.04"},
        "image.os: torch 2.6.0 wheels need glibc >= 2.28 (manylinux_2_28); ubuntu18.04 has 2.27",
    ),
    (
        {"torch": "2.99"},
        "image.torch: unknown torch version 2.99; nearest known: 2.15.0, 2.14.1, 2.14.0",
    ),
    ({"torch": "2.4.3"}, "image.torch: unknown torch version 2.4.3; nearest known: 2.4.1, 2.5.0"),
    ({"flavor": "gpu"}, "image.flavor: unknown flavor 'gpu'; valid: runtime, devel, ngc, cpu"),
    ({"cuda": "12.7"}, "image.cuda: unknown CUDA 12.7; nearest known: 12.6, 12.8"),
    ({"torch": "2.5.1", "cuda": "12.4.3"}, "image.cuda: no nvidia/cuda image for CUDA 12.4.3"),
    ({"os": "ubuntu25.10"}, "image.os: unknown OS 'ubuntu25.10'; valid: ubuntu18.04"),
    (
        {"torch": "none", "cuda": "12.5", "cudnn": "9", "os": "ubuntu24.04"},
        "image.os: no nvidia/cuda 12.5 cudnn-runtime image for ubuntu24.04; "
        "available: ubuntu20.04, ubuntu22.04",
    ),
    (
        {"torch": "none", "cuda": "12.2.0", "cudnn": "8"},
        "image.cudnn: NVIDIA publishes no cuDNN flavor for CUDA 12.2.0; use 12.2.2",
    ),
    (
        {"torch": "2.8.0", "os": "ubuntu18.04", "cuda": "12.8"},
        "image.os: torch 2.8.0 wheels need glibc >= 2.28",
    ),
    (
        {"flavor": "ngc", "torch": "2.4", "python": "3.12"},
        "image.python: NGC 24.07 ships Python 3.10; got 3.12",
    ),
    ({"flavor": "ngc", "torch": "2.0"}, "image.torch: no NGC PyTorch container ships torch 2.0"),
    ({"flavor": "ngc", "torch": "none"}, "image.torch: flavor ngc ships NVIDIA's torch"),
    ({"flavor": "cpu", "cudnn": "9"}, "image.cudnn: flavor cpu has no cuDNN"),
    ({"flavor": "cpu", "cuda": "12.4"}, "image.cuda: flavor cpu has no CUDA; got 12.4"),
    ({"flavor": "cpu", "os": "ubuntu22.04"}, "image.os: flavor cpu uses python:X.Y-slim-bookworm"),
    ({"flavor": "devel", "cuda": "cpu"}, 'image.cuda: "cpu" needs flavor cpu; got flavor devel'),
    ({"cudnn": "7"}, 'image.cudnn: expected "8" or "9"'),
    ({"python": "3.11.4"}, 'image.python: expected major.minor like "3.11"'),
    ({"torch": "2.4.1+cu121"}, 'image.torch: expected a version like "2.4.1", "2.4" or "none"'),
    ({"cuda": "twelve"}, "image.cuda: expected a CUDA version"),
    ({"base": "x:1", "flavor": "ngc"}, "image.base: an explicit base image cannot be combined"),
]


@pytest.mark.parametrize(("kwargs", "message"), INVALID, ids=lambda v: str(v)[:60])
def test_invalid_combinations(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(CatalogError) as info:
        _resolve(**kwargs)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith("image.")
    assert isinstance(info.value, ConfigError) and info.value.exit_code == ExitCode.USAGE


def test_experimental_python_allowed_with_warning() -> None:
    res = _resolve(torch="2.2.2", python="3.12")
    assert res.python == "3.12"
    assert any("experimental" in w for w in res.warnings)


# --- matrix -------------------------------------------------------------------------------


def test_matrix_covers_every_pair_plus_cpu() -> None:
    rows = matrix()
    n_patches = sum(len(rel.patches) for rel in CAT.releases)
    assert len(rows) == len(PAIRS) + n_patches
    assert rows[0].torch == CAT.releases[-1].patches[-1].torch  # newest first
    tags = _existing_tags()
    for row in rows:
        if row.variant == "cpu":
            assert row.image.startswith("python:")
        else:
            assert row.image in tags
            assert row.image.split(":")[1].startswith(f"{row.cuda}.")


def test_matrix_filters() -> None:
    rows = matrix(torch="2.4.1")
    assert [r.variant for r in rows] == ["cu118", "cu121", "cu124", "cpu"]
    row = next(r for r in rows if r.variant == "cu124")
    assert (row.status, row.python_range, row.torchvision) == (
        "experimental",
        "3.8\u20133.12",
        "0.19.1",
    )
    cu121 = matrix(cuda="12.1")
    assert cu121 and all(r.variant == "cu121" for r in cu121)
    assert {r.torch for r in cu121} >= {"2.1.0", "2.5.1"}
    assert all(r.variant == "cpu" for r in matrix(torch="2.6", cuda="cpu"))
    with pytest.raises(CatalogError, match=r"image\.torch: unknown torch version 3\.0"):
        matrix(torch="3.0")


# --- drivers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "floor"),
    [("11.8", "520.61.05"), ("12.4", "550.54.14"), ("12.4.1", "550.54.14"), ("13.0", "580.65.06")],
)
def test_min_driver_for(cuda: str, floor: str) -> None:
    """The nvidia/cuda image's cuda>=X.Y: the first driver of that CUDA version."""
    assert min_driver_for(cuda) == floor


@pytest.mark.parametrize(
    ("cuda", "base", "floor"),
    [
        ("12.8", "python:3.12-slim", "525.60.13"),  # wheel only: minor-version compatibility
        ("13.0", "python:3.12-slim", "580.65.06"),
        ("12.8", "nvidia/cuda:12.8.1-runtime-ubuntu22.04", "570.26"),
        ("12.4.1", "nvcr.io/nvidia/pytorch:24.05-py3", "545"),
    ],
)
def test_min_driver_for_base(cuda: str, base: str, floor: str) -> None:
    assert min_driver_for(cuda, base) == floor


def test_min_driver_unknown_major() -> None:
    with pytest.raises(CatalogError, match="no driver data for CUDA"):
        min_driver_for("10.2")


# --- architectures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cc"),
    [
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("NVIDIA H200", "9.0"),
        ("NVIDIA GH200 480GB", "9.0"),
        ("NVIDIA H20", "9.0"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("NVIDIA A10G", "8.6"),
        ("NVIDIA A10", "8.6"),
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("Tesla T4", "7.5"),
        ("NVIDIA L4", "8.9"),
        ("NVIDIA L40S", "8.9"),
        ("NVIDIA GeForce RTX 4090", "8.9"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9"),
        ("Quadro RTX 6000", "7.5"),
        ("NVIDIA RTX A6000", "8.6"),
        ("NVIDIA GeForce RTX 3090", "8.6"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
        ("NVIDIA B200", "10.0"),
        ("NVIDIA GB200", "10.0"),
        ("NVIDIA B300 SXM6 AC", "10.3"),
        ("NVIDIA GB10", "12.1"),
        ("Tesla P100-PCIE-16GB", "6.0"),
        ("Tesla P4", "6.1"),
        ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
        ("Tesla K80", "3.7"),
        ("Matrox G200", None),
    ],
)
def test_gpu_compute_capability(name: str, cc: str | None) -> None:
    assert gpu_compute_capability(name) == cc


@pytest.mark.parametrize(
    ("request_kwargs", "cc", "ok"),
    [
        ({"torch": "2.4.1", "cuda": "11.8"}, "9.0", True),  # H100 with cu118
        ({"torch": "2.4.1", "cuda": "12.1"}, "10.0", False),  # B200 with cu121
        ({"torch": "2.9.1", "cuda": "13.0"}, "7.0", False),  # V100 with cu130
        ({"torch": "2.9.1", "cuda": "13.0"}, "10.3", True),  # B300 via sm_100 SASS
        ({"torch": "2.9.1", "cuda": "13.0"}, "12.1", True),  # GB10 via sm_120 SASS
        ({"torch": "2.7.1", "cuda": "12.8"}, "7.0", False),  # 2.7 cu128 dropped Volta
        ({"torch": "2.7.1", "cuda": "12.8"}, "10.0", True),
        ({"torch": "2.4.1", "cuda": "12.1"}, "8.9", True),  # Ada runs sm_86 SASS
        ({"torch": "2.4.1", "cuda": "12.1"}, "3.7", False),  # K80 left behind in 12.x
        ({"torch": "2.4.1", "cuda": "11.8"}, "3.7", True),
        ({"torch": "2.4.1", "cuda": "cpu"}, "9.0", False),
        ({"flavor": "ngc", "torch": "2.6"}, "10.0", True),  # 25.01 = CUDA 12.8 window
        ({"flavor": "ngc", "torch": "2.4"}, "10.0", False),
    ],
)
def test_supports_arch(request_kwargs: dict[str, str], cc: str, ok: bool) -> None:
    assert supports_arch(_resolve(**request_kwargs), cc) is ok


def test_ptx_runs_forward_but_sass_does_not() -> None:
    base = _resolve(torch="2.4.1", cuda="12.1")
    with_ptx = dataclasses.replace(base, cuda_archs=("8.0", "9.0+PTX"))
    without = dataclasses.replace(base, cuda_archs=("8.0", "9.0"))
    assert supports_arch(with_ptx, "10.0") and supports_arch(with_ptx, "12.0")
    assert not supports_arch(without, "10.0")
    assert not supports_arch(with_ptx, "7.5")  # neither SASS (major 8/9) nor PTX (9.0 > 7.5)


# --- data file hygiene --------------------------------------------------------------------


def _raw_catalog() -> dict[str, Any]:
    text = resources.files("gpulaunch").joinpath("data", "catalog.yaml").read_text("utf-8")
    raw: dict[str, Any] = yaml.safe_load(text)
    return raw


def test_packaged_yaml_parses_to_the_loaded_catalog() -> None:
    assert cat_mod._parse_catalog(_raw_catalog()) == CAT


def test_catalog_loader_rejects_unquoted_versions() -> None:
    raw = _raw_catalog()
    raw["torch"]["releases"][0]["patches"][0]["torchvision"] = 2.1
    with pytest.raises(CatalogError, match=r"expected a quoted string, got 2\.1"):
        cat_mod._parse_catalog(raw)


def test_catalog_loader_rejects_unknown_keys() -> None:
    raw = _raw_catalog()
    raw["os"]["ubuntu22.04"]["pyhton"] = "3.11"
    with pytest.raises(CatalogError, match=r"os\.ubuntu22\.04: unknown key\(s\) pyhton"):
        cat_mod._parse_catalog(raw)


def test_catalog_loader_rejects_mismatched_variant() -> None:
    raw = _raw_catalog()
    row = next(r for r in raw["torch"]["releases"] if r["minor"] == "2.14")
    row["variants"][0]["cuda"] = "12.8"
    with pytest.raises(CatalogError, match=r"variant cu126 != CUDA 12\.8"):
        cat_mod._parse_catalog(raw)


def test_import_is_cheap() -> None:
    code = (
        "import sys, gpulaunch.catalog.resolver, gpulaunch.catalog.compat; "
        "bad = [m for m in ('yaml', 'pydantic') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
