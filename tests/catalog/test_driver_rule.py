"""The driver rule each image enforces (NVIDIA_REQUIRE_CUDA), as gpulaunch evaluates it.

Table: GPU brand x host driver x image, both directions (refused where the container runtime
would refuse, admitted where a forward-compatibility branch admits it)."""

from __future__ import annotations

import pytest

from gpulaunch.catalog import compat, driver_rule
from gpulaunch.catalog.data import load_catalog
from gpulaunch.catalog.request import ImageRequest
from gpulaunch.catalog.resolver import resolve
from gpulaunch.config import load_config
from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.image.render import image_request

# Verbatim from NVIDIA's container-images Dockerfiles (base image, ubuntu22.04).
REQ_1281 = (
    "cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 "
    "brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 "
    "brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551"
)  # shortened: the packaged string lists every datacenter brand on 470/535/550/560/565
REQ_1130 = "cuda>=11.3 brand=tesla,driver>=418,driver<419 driver>=450"


@pytest.mark.parametrize(
    ("brand", "driver", "image", "ok"),
    [
        # the cases named in issue 9
        ("geforce", "550.54.15", "12.8.1", False),  # RTX 4090 on 550, cu128 image
        ("tesla", "545.23.08", "12.8.1", False),  # A100 on 545: 545 is not a listed branch
        ("geforce", "525.147.05", "12.6.3", False),  # RTX 3090 on 525, cu126 image
        ("nvidia", "550.127.08", "13.0.2", True),  # H100 on R550, cu130: forward compat
        ("tesla", "550.127.08", "13.0.2", True),
        # the cuda>=X.Y alternative, every brand
        ("geforce", "570.86.10", "12.8.1", True),
        ("geforce", "569.99", "12.8.1", False),
        ("geforce", "580.65.06", "13.1.0", False),  # 13.1 needs R590 or a listed branch
        ("nvidia", "560.35.03", "13.1.0", False),
        ("nvidia", "575.57.08", "13.1.0", True),  # branch 575 is listed for 13.1.0
        # no GeForce/Titan on branches from 12.5 on; listed before
        ("geforce", "535.183.01", "12.9.1", False),
        ("tesla", "535.183.01", "12.9.1", True),
        # images before 12.5 list GeForce/Titan on forward-compat branches (the container
        # starts), but cuda-compat refuses them at cuInit: not runnable
        ("geforce", "470.82.01", "12.1.1", False),
        ("geforcertx", "525.60.13", "12.4.1", False),
        ("tesla", "525.60.13", "12.4.1", True),
        ("geforce", "550.54.15", "12.4.1", True),  # natively: cuda>=12.4
        ("titan", "535.104.05", "12.6.3", False),
        ("quadro", "535.104.05", "12.6.3", True),
        # old images: tesla-only branches and a bare driver>= alternative
        ("tesla", "418.226.00", "11.0.3", True),
        ("geforce", "418.226.00", "11.0.3", False),
        ("geforce", "450.80.02", "11.3.1", True),
        ("tesla", "545.23.08", "13.0.2", False),
        ("unknown", "470.256.02", "12.8.1", True),
    ],
)
def test_driver_rule_table(brand: str, driver: str, image: str, ok: bool) -> None:
    req = driver_rule.cuda_image_requirement(image)
    verdict = driver_rule.host_can_run(req, driver, brand)
    assert verdict.ok is ok, verdict.reason
    if not ok:
        assert verdict.reason.startswith(f"driver >= {req.needed()} (cuda>=")


def test_parse_verbatim_strings() -> None:
    req = driver_rule.parse_requirement(REQ_1281, "12.8.1")
    assert req.cuda_floor == "12.8"
    assert req.needed() == "570.26"
    assert req.branches() == {
        "470": ("unknown", "grid", "tesla", "nvidia"),
        "550": ("tesla", "nvidia"),
    }
    assert driver_rule.host_can_run(req, "550.54.15", "nvidia").ok
    assert not driver_rule.host_can_run(req, "550.54.15", "geforce").ok
    old = driver_rule.parse_requirement(REQ_1130, "11.3.0")
    assert old.needed() == "450"  # the bare driver>=450 beats cuda>=11.3 (465.19.01)
    assert driver_rule.host_can_run(old, "418.40.04", "tesla").ok


def test_packaged_strings_match_the_dockerfiles() -> None:
    assert driver_rule.cuda_image_requirement("11.3.0").text == REQ_1130
    full = driver_rule.cuda_image_requirement("12.8.1")
    assert full.text.startswith("cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,")
    assert set(full.branches()) == {"470", "535", "550", "560", "565"}
    assert "geforce" not in {b for bs in full.branches().values() for b in bs}


@pytest.mark.parametrize("bad", ["cuda>>12", "brand=tesla,driver>=x", "", "gpu=1"])
def test_bad_requirement_text_is_refused(bad: str) -> None:
    with pytest.raises(CatalogError):
        driver_rule.parse_requirement(bad)


def test_images_newer_than_the_snapshot_are_unverified() -> None:
    """Issue 24 item 9: a rule NVIDIA's Dockerfiles do not state is marked unverified, and the
    13.x model admits a datacenter GPU on R580 (forward compatibility) where `cuda>=13.2` alone
    refused it; a GeForce on R580 still needs the native driver."""
    read = driver_rule.cuda_image_requirement("13.0.2")
    assert read.verified and driver_rule.verified_rule("13.0.2")
    derived = driver_rule.cuda_image_requirement("13.0.3")  # uses 13.0.2's rule
    assert not derived.verified and not driver_rule.verified_rule("13.0.3")
    assert derived.source == "nvidia/cuda 13.0.3 (unverified: rule of 13.0.2)"
    assert derived.text == read.text
    new = driver_rule.cuda_image_requirement("13.2.1")  # 13.2.0's rule is reported, not read
    assert not new.verified and new.cuda_floor == "13.2" and new.needed() == "595.45.04"
    h100 = driver_rule.host_can_run(new, "580.95.05", "nvidia")
    assert h100.ok and h100.forward and "driver<581" in h100.reason
    rtx = driver_rule.host_can_run(new, "580.95.05", "geforce")
    assert not rtx.ok and rtx.reason.endswith(
        "(unverified: reported for 13.2.0, medium confidence)"
    )
    with pytest.raises(CatalogError, match="no driver data"):
        driver_rule.cuda_image_requirement("10.2.89")


def _branches(rule: str) -> set[str]:
    return set(driver_rule.parse_requirement(rule).branches())


def test_13_2_follows_its_reported_rule_not_a_copy_of_13_1() -> None:
    """Issue 31 §4: a 13.2.0 image lists branches 535, 570, 580 and 590 (reported, medium);
    the old model copied 13.1.0's (535, 550, 570, 575, 580), refusing a datacenter GPU on R590
    and admitting R550/R575, which the image no longer lists."""
    for patch in ("13.2.0", "13.2.1", "13.2.2"):
        rule = driver_rule.cuda_image_requirement(patch)
        assert tuple(rule.branches()) == ("535", "570", "580", "590"), patch
        assert not rule.verified and "reported for 13.2.0, medium confidence" in rule.source
        assert driver_rule.host_can_run(rule, "590.48.01", "nvidia").ok
        assert not driver_rule.host_can_run(rule, "550.54.15", "nvidia").ok
    reported = driver_rule.reported_rules()["13.2.0"]
    assert reported.confidence == "medium" and "docker inspect" in reported.source


def test_the_pattern_predicts_every_branch_nvidia_listed() -> None:
    """NVIDIA's pattern, checked on every known rule from 12.9 on: modelled from the rules of
    the X.Y before it, a rule lists every branch the real one lists (the previous toolkit's
    driver branch included); copying the previous release alone misses that branch."""
    known = driver_rule.stored_rules()
    newest = {}
    for version in sorted(known, key=lambda v: tuple(map(int, v.split(".")))):
        newest[".".join(version.split(".")[:2])] = version
    for xy in ("12.9", "13.0", "13.1", "13.2"):
        below = {
            v: r
            for v, r in known.items()
            if tuple(map(int, v.split(".")[:2])) < tuple(map(int, xy.split(".")))
        }
        text, how = driver_rule._pattern_model(xy, below)
        real = _branches(known[newest[xy]])
        assert real <= _branches(text), (xy, how, sorted(real - _branches(text)))
        previous = below[max(below, key=lambda v: tuple(map(int, v.split("."))))]
        assert not real <= _branches(previous), xy  # a copy misses the added branch


def test_newer_rules_are_modelled_from_the_pattern() -> None:
    rule = driver_rule.cuda_image_requirement("13.3.0")
    assert not rule.verified and rule.cuda_floor == "13.3" and rule.needed() == "610.43.02"
    assert tuple(rule.branches()) == ("535", "570", "580", "590", "595")
    assert rule.source == (
        "nvidia/cuda 13.3.0 (unverified: NVIDIA's pattern: branches of 13.2.0 + branch 595)"
    )
    assert driver_rule.host_can_run(rule, "595.45.04", "tesla").forward
    assert not driver_rule.host_can_run(rule, "595.45.04", "geforce").ok


def test_defaults_never_pick_an_unverified_image() -> None:
    """The default torch, build and image all carry a rule read from NVIDIA's Dockerfiles;
    asking for CUDA 13.2 explicitly still works, with a warning naming the assumption."""
    default = resolve(ImageRequest())
    assert default.cuda and driver_rule.verified_rule(default.cuda)
    for torch in ("2.12", "2.13", "2.14"):
        picked = resolve(ImageRequest(torch=torch))
        assert picked.cuda and driver_rule.verified_rule(picked.cuda), picked.base_image
        asked = resolve(ImageRequest(torch=torch, cuda="13.2"))
        assert asked.cuda and not driver_rule.verified_rule(asked.cuda)
        assert any("driver rule not read from NVIDIA" in w for w in asked.warnings)
    newest = resolve(ImageRequest(torch="2.13", cuda="13.0"))
    assert newest.cuda == "13.0.2"  # 13.0.3 (rule unverified) is not picked by default


@pytest.mark.parametrize(
    ("tag", "brand", "driver", "ok"),
    [
        ("24.05", "tesla", "535.86.10", True),  # datacenter branch 535.86+
        ("24.05", "tesla", "535.54.03", False),  # below 535.86 on that branch
        ("24.05", "geforce", "535.86.10", False),
        ("24.05", "geforce", "545.23.06", True),
        ("25.01", "nvidia", "565.57.01", False),
        ("25.01", "geforce", "570.86.10", True),
        ("25.12", "nvidia", "575.57.08", False),
    ],
)
def test_ngc_floors_per_tag(tag: str, brand: str, driver: str, ok: bool) -> None:
    req = driver_rule.requirement_for(f"nvcr.io/nvidia/pytorch:{tag}-py3", "12.4.1")
    assert req is not None and req.source == f"NGC {tag} release notes"
    assert driver_rule.host_can_run(req, driver, brand).ok is ok


def test_every_catalog_image_and_ngc_tag_has_a_rule() -> None:
    cat = load_catalog()
    for img in cat.cuda_images:
        assert driver_rule.cuda_image_requirement(img.cuda).needed()
    for row in cat.ngc:
        assert driver_rule.ngc_requirement(row.tag).needed()


def test_wheel_floor_agrees_with_the_catalog() -> None:
    cat = load_catalog()
    for major, floor in cat.minor_version_floor.items():
        req = driver_rule.wheel_requirement(f"{major}.0")
        assert req.needed() == floor and not req.enforced
    assert driver_rule.requirement_for("python:3.12-slim", "12.8") == driver_rule.wheel_requirement(
        "12.8"
    )
    assert driver_rule.requirement_for("python:3.12-slim", None) is None


def test_brand_names_follow_nvml() -> None:
    assert [driver_rule.brand_name(n) for n in (2, 5, 14, 15, 99)] == [
        "tesla",
        "geforce",
        "nvidia",
        "geforcertx",
        "unknown",
    ]
    assert driver_rule.brand_name(None) is None


def _resolved(tmp_path, image: str):  # type: ignore[no-untyped-def]
    (tmp_path / "gpulaunch.yaml").write_text(f"version: 1\nname: p\nimage: {image}\n")
    return resolve(image_request(load_config(tmp_path / "gpulaunch.yaml")))


def test_host_check_uses_the_brand(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """compat.check: the GeForce box is refused, the datacenter box on the same driver is not."""
    resolved = _resolved(tmp_path, '{torch: "2.9.1", cuda: "12.8"}')
    assert resolved.base_image.startswith("nvidia/cuda:12.8.1-")
    rtx = compat.HostGpus("550.54.15", ("NVIDIA GeForce RTX 4090",), ("geforce",))
    with pytest.raises(ConfigError, match=r"needs driver >= 570\.26 \(cuda>=12\.8\)") as err:
        compat.check(resolved, rtx)
    # torch 2.9's other build (cu126 on 12.6.3) needs cuda>=12.6 too: nothing to offer
    assert str(err.value).endswith("this host has driver 550.54.15 (geforce GPU)")
    older = _resolved(tmp_path, '{torch: "2.6.0", cuda: "12.6"}')
    with pytest.raises(ConfigError) as err:
        compat.check(older, rtx)
    assert str(err.value).endswith("with this driver use: cuda 11.8 (cu118), cuda 12.4 (cu124)")
    h100 = compat.HostGpus("550.54.15", ("NVIDIA H100 80GB HBM3",), ("nvidia",))
    compat.check(resolved, h100)
    mixed = compat.HostGpus("550.54.15", ("NVIDIA H100", "RTX 4090"), ("nvidia", "geforce"))
    compat.check(resolved, mixed, [0])  # only the selected GPU's brand counts
    with pytest.raises(ConfigError):
        compat.check(resolved, mixed, [1])


@pytest.mark.parametrize(
    ("torch", "variant", "pypi_default"),
    [
        ("2.4.1", "cu118", "12.1"),  # R520 beats cu121's R530
        ("2.9.1", "cu126", "12.8"),
        ("2.11.0", "cu128", "13.0"),  # PyPI's CUDA 13.0 default needs R580
    ],
)
def test_default_build_prefers_driver_reach(torch: str, variant: str, pypi_default: str) -> None:
    from gpulaunch.catalog.request import ImageRequest

    resolved = resolve(ImageRequest(torch=torch))
    assert resolved.torch_variant == variant
    assert resolved.cuda and not resolved.cuda.startswith(pypi_default)
    assert resolve(ImageRequest(torch=torch, cuda=pypi_default)).cuda.startswith(pypi_default)
    assert resolve(ImageRequest(torch=torch, cuda="cpu")).cuda is None


def test_a_geforce_on_a_forward_compat_branch_is_told_the_native_driver_only() -> None:
    """The 12.4 image lists geforce on branch 470; the verdict must not send a GeForce there."""
    req = driver_rule.cuda_image_requirement("12.4.1")
    geforce = driver_rule.host_can_run(req, "470.239.06", "geforce")
    tesla = driver_rule.host_can_run(req, "470.239.06", "tesla")

    assert not geforce.ok and "branch" not in geforce.reason
    assert geforce.reason.startswith("driver >= 550.54.14 (cuda>=12.4)")
    assert tesla.ok and "driver<471" in tesla.reason
