"""GpuRequest (gpulaunch/gpurequest.py): one meaning of `--gpus` / `launch.gpus` for the plan,
NUMA, the run spec, each engine's device request and the exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.engine.podman import cdi_names
from gpulaunch.errors import ConfigError
from gpulaunch.gpurequest import GpuRequest

PACKAGE = Path(__file__).resolve().parent.parent / "gpulaunch"

# value -> (none, count on an 8-GPU host, count unknown host, indices on 8, docker --gpus)
CASES: list[tuple[int | str, bool, int | None, int | None, list[int] | None, str]] = [
    (0, True, 0, 0, [], "0"),
    (3, False, 3, 3, [0, 1, 2], "3"),
    ("all", False, 8, None, list(range(8)), "all"),
    ("0,2", False, 2, 2, [0, 2], '"device=0,2"'),
    ("5", False, 1, 1, [5], '"device=5"'),  # a string is a list of one index, not a count
    ("GPU-ab12,1", False, 2, 2, None, '"device=GPU-ab12,1"'),  # a UUID: indices unknown
]


@pytest.mark.parametrize(("value", "none", "on8", "unknown", "indices", "flag"), CASES)
def test_what_a_request_means(
    value: int | str,
    none: bool,
    on8: int | None,
    unknown: int | None,
    indices: list[int] | None,
    flag: str,
) -> None:
    request = GpuRequest(value)
    assert request.none is none
    assert (request.count(8), request.count(None)) == (on8, unknown)
    assert request.indices(8) == indices
    assert request.docker_flag() == flag


def test_all_without_the_host_count_names_no_indices() -> None:
    assert GpuRequest("all").indices(None) is None


@pytest.mark.parametrize(
    ("value", "count", "ids", "cdi"),
    [
        (2, 2, [], ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]),
        ("all", -1, [], ["nvidia.com/gpu=all"]),
        ("0,2", 0, ["0", "2"], ["nvidia.com/gpu=0", "nvidia.com/gpu=2"]),
        ("GPU-ab12", 0, ["GPU-ab12"], ["nvidia.com/gpu=GPU-ab12"]),
    ],
)
def test_the_device_request_of_each_engine(
    value: int | str, count: int, ids: list[str], cdi: list[str]
) -> None:
    """Docker's DeviceRequests entry (as the SDK sends it), and Podman's CDI names read from it."""
    request = GpuRequest(value).device_request()
    assert request == {
        "Driver": "",
        "Count": count,
        "DeviceIDs": ids,
        "Capabilities": [["gpu"]],
        "Options": {},
    }
    assert cdi_names(request) == cdi


@pytest.mark.parametrize(
    ("text", "value"), [(" 2 ", 2), ("0", 0), ("all", "all"), ("0, 2", "0,2"), (4, 4)]
)
def test_parse_normalises(text: Any, value: int | str) -> None:
    assert GpuRequest.parse(text, "--gpus") == GpuRequest(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,0", "--gpus: '0,0' names GPU 0 twice"),
        ("02", "--gpus: '02': a count has no leading zero (a list is '0,2')"),
        (True, "--gpus: must be a count, 'all' or a list like '0,2'"),
        ("1\n2", "--gpus: "),
    ],
)
def test_parse_refuses_in_one_line_naming_where(text: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        GpuRequest.parse(text, "--gpus")
    assert err.value.message.startswith(message)
    assert "\n" not in err.value.message


def test_no_module_reinterprets_a_gpu_request() -> None:
    """The request's meaning lives in GpuRequest only: no other module compares a request
    against 0 / "0" or "all", nor splits its list."""
    pattern = re.compile(r"""in \(0, "0"\)|gpus == "all"|gpus != "all"|gpus\.split\(""")
    found = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "gpurequest.py" and pattern.search(path.read_text())
    )
    assert found == []
