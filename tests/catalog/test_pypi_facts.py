"""Parsing PyPI's JSON into catalog facts (offline, over hand-made JSON)."""

from __future__ import annotations

import pytest

from catalog.fake_pypi import project, wheel
from gpulaunch.catalog import pypi_facts


@pytest.mark.parametrize(
    ("spec", "floor"),
    [
        (">=3.11", "3.11"),
        ("!=3.14.1,>=3.10", "3.10"),
        (">=3.9.0", "3.9"),
        (">= 3.8", "3.8"),
        ("<4", None),
        ("", None),
        (None, None),
    ],
)
def test_python_floor(spec: str | None, floor: str | None) -> None:
    assert pypi_facts.python_floor(spec) == floor


def test_exact_pins_skip_extras_and_ranges() -> None:
    pins = pypi_facts.exact_pins(
        [
            "torch==2.12.0",
            "Typing_Extensions>=4",
            'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"',
            'optree==0.13.0; extra == "optree"',
            "numpy",
        ]
    )
    assert pins == {"torch": "2.12.0", "cuda-toolkit": "13.2.2"}


@pytest.mark.parametrize(
    ("pins", "cuda"),
    [
        ({"cuda-toolkit": "13.2.2", "nvidia-cudnn-cu13": "9.26.0.51"}, ("13.2", "9.26.0.51")),
        ({"nvidia-cuda-runtime-cu12": "12.8.90"}, ("12.8", None)),
        ({"nvidia-nccl-cu13": "2.30.7"}, None),
    ],
)
def test_wheel_cuda(pins: dict[str, str], cuda: tuple[str, str | None] | None) -> None:
    assert pypi_facts.wheel_cuda(pins) == (pypi_facts.WheelCuda(*cuda) if cuda else None)


def test_releases_read_linux_wheels_only() -> None:
    files = [
        wheel("torch", "2.15.0", "cp311-cp311-manylinux_2_28_x86_64", ">=3.11", "2026-10-28"),
        wheel("torch", "2.15.0", "cp315-cp315-manylinux_2_28_x86_64", ">=3.11", "2026-10-29"),
        wheel("torch", "2.15.0", "cp316-cp316t-manylinux_2_28_x86_64", ">=3.11", "2026-10-28"),
        wheel("torch", "2.15.0", "cp316-cp316-win_amd64", ">=3.11", "2026-10-28"),
        wheel("torch", "2.15.0", "cp316-cp316-manylinux_2_28_aarch64", ">=3.11", "2026-10-28"),
    ]
    old = [wheel("torch", "1.13.1", "cp310-cp310-manylinux1_x86_64", ">=3.7.0", "2022-12-15")]
    mac_only = [wheel("torch", "2.2.2", "cp311-none-macosx_11_0_arm64", ">=3.8", "2024-03-27")]
    yanked = [{**old[0], "filename": "torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl",
               "yanked": True}]  # fmt: skip
    data = project(
        "torch",
        {"2.15.0": files, "1.13.1": old, "2.2.2": mac_only, "2.16.0": yanked, "2.16.0rc1": files},
        "2.15.0",
        [],
    )
    facts = pypi_facts.releases(data)
    assert sorted(facts) == ["1.13.1", "2.15.0"]
    new = facts["2.15.0"]
    assert (new.python_min, new.python_max, new.glibc, new.date) == (
        "3.11",
        "3.15",
        "2.28",
        "2026-10-28",
    )
    # manylinux1 is what torch's wheels claim, not what they need: unknown
    assert (facts["1.13.1"].python_min, facts["1.13.1"].glibc) == ("3.10", None)


def test_pure_python_wheels_count() -> None:
    data = project(
        "torchaudio",
        {"2.11.1": [wheel("torchaudio", "2.11.1", "py3-none-any", ">=3.10", "2026-06-01")]},
        "2.11.1",
        ["torch>=2.11"],
    )
    facts = pypi_facts.releases(data)["2.11.1"]
    assert facts.pure and facts.pythons == ()
    assert pypi_facts.latest(data) == ("2.11.1", ["torch>=2.11"])


def test_malformed_json_gives_nothing() -> None:
    assert pypi_facts.releases({"releases": []}) == {}
    assert pypi_facts.releases({"releases": {"2.0.0": "x", "2.1.0": [None, {"filename": 3}]}}) == {}
    assert pypi_facts.latest({"info": None}) == (None, [])


def test_one_wheel_for_every_python_counts_as_linux() -> None:
    """torchvision 0.29.2 ships py3-none-manylinux_2_28_x86_64 wheels (no cp3XX): a release."""
    files = [
        wheel("torchvision", "0.29.2", f"py3-none-{plat}", ">=3.10,!=3.14.1", "2026-10-28")
        for plat in ("manylinux_2_28_x86_64", "macosx_14_0_arm64", "win_amd64")
    ]
    only_mac = [files[1]]
    data = project("torchvision", {"0.29.2": files, "0.29.9": only_mac}, "0.29.2", [])
    facts = pypi_facts.releases(data)
    assert sorted(facts) == ["0.29.2"]  # a macOS-only release does not count
    assert (facts["0.29.2"].pure, facts["0.29.2"].glibc) == (True, "2.28")


@pytest.mark.parametrize(
    ("requires", "spec", "admits_215"),
    [
        (["numpy", "torch>=2.14.0", "pillow"], ">=2.14.0", True),  # torchvision 0.29.2
        (["torch>=2.11"], ">=2.11", True),  # torchaudio 2.11.1
        (["torch==2.14.1"], "==2.14.1", False),
        (["torch (==2.1.0)"], "==2.1.0", False),
        (["torch"], "", True),
        (["torchdata>=0.7", 'torch>=2; extra == "x"'], None, False),
    ],
)
def test_the_torch_a_companion_declares(
    requires: list[str], spec: str | None, admits_215: bool
) -> None:
    assert pypi_facts.torch_requirement(requires) == spec
    assert (spec is not None and pypi_facts.admits(spec, "2.15.0")) is admits_215
