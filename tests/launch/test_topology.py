"""Topology discovery from fixture sysfs trees and a fake NVML, GPU selection, NUMA plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from fake_nvml import FakeGpu, FakeNvml, install

from gpulaunch.cpulist import current_allowed_cpus, format_cpulist, parse_cpulist
from gpulaunch.errors import ConfigError, TopologyError
from gpulaunch.gpurequest import GpuRequest
from gpulaunch.launch import numa, topology
from gpulaunch.launch.numa import NumaPlan, plan_numa
from gpulaunch.launch.topology import Gpu, Topology, discover
from gpulaunch.textcheck import normalize_bus_id

FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
DGX_NODE0 = parse_cpulist("0-7,16-23")
DGX_NODE1 = parse_cpulist("8-15,24-31")


def fixture_topo(name: str) -> Topology:
    return discover({"GPULAUNCH_SYSFS_ROOT": str(FIXTURES / name)})


def select_gpus(topo: Topology, value: int | str) -> tuple[Gpu, ...]:
    """The selection as `run` makes it: the text parsed as --gpus is, then matched."""
    return numa.select_gpus(topo, GpuRequest.parse(value, "--gpus"))


def cpus_by_rank(plan: NumaPlan) -> dict[int, str]:
    return {r.rank: format_cpulist(r.cpus) for r in plan.ranks}


# --------------------------------------------------------------------------- cpulists


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3,8-11,16", {0, 1, 2, 3, 8, 9, 10, 11, 16}),
        ("5\n", {5}),
        ("", set()),
        ("\n", set()),
        (" 0 , 2-3 ", {0, 2, 3}),
    ],
)
def test_parse_cpulist(text: str, expected: set[int]) -> None:
    assert parse_cpulist(text) == frozenset(expected)


@pytest.mark.parametrize("text", ["a", "3-1", "1-", "-1", "0-3,x"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="invalid CPU list"):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [([0, 1, 2, 3, 8], "0-3,8"), ([], ""), ([5], "5"), ([4, 5], "4-5"), ([3, 1, 2, 2], "1-3")],
)
def test_format_cpulist(cpus: list[int], expected: str) -> None:
    assert format_cpulist(cpus) == expected
    assert parse_cpulist(expected) == frozenset(cpus)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("00000009:01:00.0", "0009:01:00.0"),
        ("10000:01:00.0", "10000:01:00.0"),  # Intel VMD domains are wider than 4 digits
    ],
)
def test_normalize_bus_id(raw: str, expected: str) -> None:
    assert normalize_bus_id(raw) == expected


def test_current_allowed_cpus_is_the_affinity_mask() -> None:
    assert current_allowed_cpus() == frozenset(os.sched_getaffinity(0))


# --------------------------------------------------------------------------- sysfs discovery


def test_dgx8_discovery() -> None:
    topo = fixture_topo("dgx8")
    assert topo.source == "sysfs"
    assert [g.bus_id for g in topo.gpus] == [
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
        "0000:ba:00.0",
        "0000:db:00.0",
    ]
    assert [g.index for g in topo.gpus] == list(range(8))
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.local_cpus for g in topo.gpus] == [DGX_NODE0] * 4 + [DGX_NODE1] * 4
    assert all(g.uuid is None and g.name is None for g in topo.gpus)
    assert topo.nodes == {0: DGX_NODE0, 1: DGX_NODE1}
    assert topo.sockets == {0: DGX_NODE0, 1: DGX_NODE1}


@pytest.mark.parametrize(
    ("name", "bus_ids"),
    [
        # ASPEED VGA, IB NIC, NVIDIA audio function, NVSwitch and host bridge are left out
        ("dgx8", ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]),
        # NVIDIA audio, Intel NIC and AMD VGA are left out
        ("box4", ["01", "21", "41", "61"]),
        ("tiny2", ["3b", "af"]),
        ("nps2", ["01", "41", "81", "c1"]),
    ],
)
def test_only_nvidia_display_and_3d_controllers_are_gpus(name: str, bus_ids: list[str]) -> None:
    topo = fixture_topo(name)
    assert [g.bus_id for g in topo.gpus] == [f"0000:{b}:00.0" for b in bus_ids]


def test_gpumem_discovery_keeps_cpu_less_nodes_and_pci_domains() -> None:
    topo = fixture_topo("gpumem")
    assert [g.bus_id for g in topo.gpus] == ["0009:01:00.0", "0019:01:00.0"]
    assert [g.numa_node for g in topo.gpus] == [2, 3]
    assert topo.nodes == {
        0: frozenset({0, 1, 2, 3}),
        1: frozenset({4, 5, 6, 7}),
        2: frozenset(),
        3: frozenset(),
    }


def test_box4_unknown_numa_node_is_none() -> None:
    topo = fixture_topo("box4")
    assert [g.numa_node for g in topo.gpus] == [None] * 4
    assert all(g.local_cpus == frozenset(range(8)) for g in topo.gpus)
    assert topo.sockets == {0: frozenset(range(8))}


def test_local_cpus_hex_mask_is_read_when_local_cpulist_is_missing() -> None:
    topo = fixture_topo("nps2")
    assert [format_cpulist(g.local_cpus) for g in topo.gpus] == ["0-3", "4-7", "8-11", "12-15"]


def test_empty_root_is_no_topology(tmp_path: Path) -> None:
    topo = discover({"GPULAUNCH_SYSFS_ROOT": str(tmp_path)})
    assert topo == Topology(gpus=(), nodes={}, sockets={}, source="none")


def test_machine_without_gpus_is_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    node = tmp_path / "devices" / "system" / "node" / "node0"
    node.mkdir(parents=True)
    (node / "cpulist").write_text("0-3\n")
    topo = discover({"GPULAUNCH_SYSFS_ROOT": str(tmp_path)})
    assert topo.gpus == ()
    assert topo.nodes == {0: frozenset(range(4))}
    assert topo.source == "sysfs"


def test_import_is_cheap() -> None:
    code = (
        "import sys, gpulaunch.launch.topology, gpulaunch.launch.numa;"
        "print(sorted(m for m in ('pynvml', 'pydantic', 'docker', 'jinja2', 'yaml', 'typer')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- NVML


def test_nvml_discovery(fake_nvml: FakeNvml) -> None:
    topo = discover({})
    assert topo.source == "nvml"
    assert [(g.index, g.bus_id, g.uuid) for g in topo.gpus] == [
        (0, "ab01:3b:00.0", "GPU-aaaaaaaa-0000-0000-0000-000000000000"),
        (1, "ab01:af:00.0", "GPU-bbbbbbbb-1111-1111-1111-111111111111"),
    ]
    assert topo.gpus[0].name == "NVIDIA H100 80GB HBM3"
    # these bus ids are not in this host's sysfs, so NVML's own NUMA answers are used
    assert [g.numa_node for g in topo.gpus] == [0, 1]
    assert [g.local_cpus for g in topo.gpus] == [frozenset({0, 1}), frozenset({2, 3})]
    assert fake_nvml.calls == ["init", "shutdown"]


def test_nvml_bytes_strings_from_old_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(as_bytes=True))
    topo = discover({})
    assert topo.gpus[1].uuid == "GPU-bbbbbbbb-1111-1111-1111-111111111111"
    assert topo.gpus[1].bus_id == "ab01:af:00.0"


def test_select_by_uuid_from_nvml(fake_nvml: FakeNvml) -> None:
    topo = discover({})
    picked = select_gpus(topo, "GPU-bbbbbbbb-1111-1111-1111-111111111111")
    assert [g.index for g in picked] == [1]
    picked = select_gpus(topo, "GPU-BBBBBBBB-1111-1111-1111-111111111111, 0")
    assert [g.index for g in picked] == [1, 0]
    with pytest.raises(TopologyError, match="no GPU with UUID GPU-cccc") as err:
        select_gpus(topo, "GPU-cccc")
    assert "1=ab01:af:00.0 GPU-bbbbbbbb" in str(err.value)


def test_nvml_init_failure_falls_back_to_sysfs(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeNvml(fail_init=True))
    topo = discover({})
    assert topo.source in ("sysfs", "none")
    assert fake.calls == ["init"]


def test_sysfs_root_skips_nvml(fake_nvml: FakeNvml) -> None:
    topo = fixture_topo("tiny2")
    assert topo.source == "sysfs"
    assert fake_nvml.calls == []


def test_nvml_numa_facts_come_from_sysfs_by_bus_id() -> None:
    fake = FakeNvml()
    fake.devices = [
        FakeGpu("GPU-0", "00000000:AF:00.0", 7, 0b1111),  # NVML's answers differ from sysfs'
        FakeGpu("GPU-1", "00000000:3B:00.0", 7, 0b1111),
    ]
    topo = topology._discover_nvml(fake, FIXTURES / "tiny2")
    assert [(g.index, g.bus_id, g.numa_node, g.local_cpus) for g in topo.gpus] == [
        (0, "0000:af:00.0", 1, frozenset({1})),
        (1, "0000:3b:00.0", 0, frozenset({0})),
    ]
    assert topo.nodes == {0: frozenset({0}), 1: frozenset({1})}
    plan = plan_numa(topo, select_gpus(topo, "GPU-1,GPU-0"), "node")
    assert [(r.gpu, r.cpus) for r in plan.ranks] == [("0000:3b:00.0", (0,)), ("0000:af:00.0", (1,))]


# --------------------------------------------------------------------------- selection


def test_select_forms() -> None:
    topo = fixture_topo("dgx8")
    assert select_gpus(topo, "all") == topo.gpus
    assert select_gpus(topo, 3) == topo.gpus[:3]
    assert select_gpus(topo, 0) == ()
    assert select_gpus(topo, 8) == topo.gpus
    assert [g.index for g in select_gpus(topo, "0,2")] == [0, 2]
    assert [g.index for g in select_gpus(topo, " 5 , 1 ")] == [5, 1]
    assert select_gpus(topo, "3") == topo.gpus[:3]  # `--gpus 3` counts, as `gpus: 3` does


@pytest.mark.parametrize("bus", ["0000:9A:00.0", "00000000:9a:00.0", "9a:00.0"])
def test_select_by_bus_id(bus: str) -> None:
    topo = fixture_topo("dgx8")
    assert [g.index for g in select_gpus(topo, f"{bus},0")] == [4, 0]


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ("0,8", "GPU selection '0,8': no GPU with index 8; available GPUs: 0=0000:18:00.0, "),
        (9, "GPU selection 9: asked for 9 GPUs, available GPUs: 0=0000:18:00.0, "),
        ("0,0000:18:00.0", "GPU selection '0,0000:18:00.0': '0000:18:00.0' names a GPU twice"),
        ("0000:99:00.0", "GPU selection '0000:99:00.0': no GPU at bus id 0000:99:00.0"),
        ("GPU-1234", "no GPU with UUID GPU-1234 (UUIDs need NVML: install nvidia-ml-py)"),
    ],
)
def test_bad_selection(selection: Any, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        select_gpus(fixture_topo("dgx8"), selection)
    assert message in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("selection", [-1, "0,0", "0,,1", "", "fast", True])
def test_a_malformed_selection_never_reaches_the_topology(selection: Any) -> None:
    with pytest.raises(ConfigError, match=r"^--gpus: "):
        select_gpus(fixture_topo("dgx8"), selection)


def test_bad_selection_lists_every_gpu() -> None:
    with pytest.raises(TopologyError) as err:
        select_gpus(fixture_topo("tiny2"), "1,2")
    assert str(err.value) == (
        "GPU selection '1,2': no GPU with index 2; available GPUs: 0=0000:3b:00.0, 1=0000:af:00.0"
    )


def test_selection_without_gpus() -> None:
    empty = Topology(gpus=(), nodes={}, sockets={}, source="sysfs")
    assert select_gpus(empty, 0) == ()
    assert select_gpus(empty, "all") == ()
    with pytest.raises(TopologyError, match=r"asked for 1 GPUs, no GPUs found \(source: sysfs\)"):
        select_gpus(empty, 1)


# --------------------------------------------------------------------------- planning


def test_node_mode_dgx8_all() -> None:
    topo = fixture_topo("dgx8")
    plan = plan_numa(topo, topo.gpus, "node")
    assert plan.mode == "node"
    assert plan.notes == ()
    assert cpus_by_rank(plan) == {i: "0-7,16-23" if i < 4 else "8-15,24-31" for i in range(8)}
    assert [r.mems for r in plan.ranks] == [(0,)] * 4 + [(1,)] * 4
    assert [r.numa_node for r in plan.ranks] == [0] * 4 + [1] * 4
    assert [r.gpu for r in plan.ranks] == [g.bus_id for g in topo.gpus]


def test_rank_order_follows_selection_order() -> None:
    topo = fixture_topo("dgx8")
    plan = plan_numa(topo, select_gpus(topo, "5,1"), "node")
    assert [(r.rank, r.gpu, r.numa_node) for r in plan.ranks] == [
        (0, "0000:ab:00.0", 1),
        (1, "0000:2a:00.0", 0),
    ]
    assert cpus_by_rank(plan) == {0: "8-15,24-31", 1: "0-7,16-23"}


def test_selection_0_2_plans_two_ranks() -> None:
    topo = fixture_topo("nps2")
    plan = plan_numa(topo, select_gpus(topo, "0,2"), "node")
    assert cpus_by_rank(plan) == {0: "0-3", 1: "8-11"}
    assert [r.mems for r in plan.ranks] == [(0,), (2,)]


def test_socket_mode_spans_every_node_of_the_package() -> None:
    topo = fixture_topo("nps2")
    plan = plan_numa(topo, topo.gpus, "socket")
    assert cpus_by_rank(plan) == {0: "0-7", 1: "0-7", 2: "8-15", 3: "8-15"}
    assert [r.mems for r in plan.ranks] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert [r.numa_node for r in plan.ranks] == [0, 1, 2, 3]
    assert plan.notes == ()


def test_socket_mode_dgx8_equals_node_mode() -> None:
    topo = fixture_topo("dgx8")
    socket = plan_numa(topo, topo.gpus, "socket")
    assert socket.ranks == plan_numa(topo, topo.gpus, "node").ranks


def test_socket_mode_without_socket_layout_uses_the_node() -> None:
    topo = replace(fixture_topo("nps2"), sockets={})
    plan = plan_numa(topo, topo.gpus[:1], "socket")
    assert cpus_by_rank(plan) == {0: "0-3"}
    assert plan.notes == (
        "rank 0 (GPU 0000:01:00.0): socket layout unknown; binding to its NUMA node CPUs",
    )


def test_auto_on_a_single_node_box_with_unknown_gpu_nodes() -> None:
    topo = fixture_topo("box4")
    plan = plan_numa(topo, select_gpus(topo, 2), "auto")
    assert plan.mode == "auto"
    assert cpus_by_rank(plan) == {0: "0-7", 1: "0-7"}
    assert [(r.numa_node, r.mems) for r in plan.ranks] == [(0, (0,)), (0, (0,))]
    assert plan.notes == ()


def test_memory_only_nodes_fall_back_to_pci_local_cpus() -> None:
    topo = fixture_topo("gpumem")
    for mode in ("auto", "node"):
        plan = plan_numa(topo, topo.gpus, mode)
        assert cpus_by_rank(plan) == {0: "0-3", 1: "4-7"}
        assert [(r.numa_node, r.mems) for r in plan.ranks] == [(2, (0,)), (3, (1,))]
        assert plan.notes == (
            "rank 0 (GPU 0009:01:00.0) is on NUMA node 2, which has no CPUs (memory-only); "
            "using its PCI local CPUs 0-3",
            "rank 1 (GPU 0019:01:00.0) is on NUMA node 3, which has no CPUs (memory-only); "
            "using its PCI local CPUs 4-7",
        )


def test_memory_only_node_in_socket_mode_uses_the_socket_of_local_cpus() -> None:
    topo = fixture_topo("gpumem")
    plan = plan_numa(topo, topo.gpus, "socket")
    assert cpus_by_rank(plan) == {0: "0-3", 1: "4-7"}
    assert "NUMA node 2 has no CPUs; using the socket of its PCI local CPUs" in plan.notes[0]


def test_memory_only_node_without_local_cpus() -> None:
    topo = fixture_topo("gpumem")
    bare = tuple(replace(g, local_cpus=frozenset()) for g in topo.gpus)
    plan = plan_numa(replace(topo, gpus=bare), bare, "auto")
    assert plan.ranks == ()
    assert plan.notes[0] == (
        "rank 0 (GPU 0009:01:00.0) is on NUMA node 2, which has no CPUs (memory-only) and no "
        "local CPUs; this rank runs unbound"
    )
    one_socket = replace(topo, gpus=bare, sockets={0: frozenset(range(8))})
    plan = plan_numa(one_socket, bare, "auto")
    assert cpus_by_rank(plan) == {0: "0-7", 1: "0-7"}
    assert plan.notes[1].endswith("using the only socket's CPUs 0-7")


def test_gpu_on_an_unlisted_node() -> None:
    topo = fixture_topo("tiny2")
    gpu = replace(topo.gpus[0], numa_node=5)
    plan = plan_numa(topo, [gpu], "node")
    assert cpus_by_rank(plan) == {0: "0"}
    assert "which sysfs does not list; using its PCI local CPUs 0" in plan.notes[0]


def test_allowed_cpus_are_intersected() -> None:
    topo = fixture_topo("dgx8")
    allowed = parse_cpulist("0-3,8-11")
    plan = plan_numa(topo, select_gpus(topo, "0,4"), "node", allowed_cpus=allowed)
    assert cpus_by_rank(plan) == {0: "0-3", 1: "8-11"}
    assert plan.notes == ()


def test_rank_outside_the_cpuset_gets_all_allowed_cpus() -> None:
    topo = fixture_topo("dgx8")
    plan = plan_numa(topo, select_gpus(topo, "0,4"), "node", allowed_cpus=frozenset({0, 1}))
    assert cpus_by_rank(plan) == {0: "0-1", 1: "0-1"}
    assert [r.mems for r in plan.ranks] == [(0,), (0,)]
    assert plan.notes == (
        "rank 1 (GPU 0000:9a:00.0): CPUs 8-15,24-31 are outside the allowed CPUs 0-1; "
        "using all allowed CPUs",
    )


def test_off_mode_and_no_gpus_give_empty_plans() -> None:
    topo = fixture_topo("dgx8")
    assert plan_numa(topo, topo.gpus, "off") == NumaPlan(mode="off", ranks=(), notes=())
    assert plan_numa(topo, (), "node").ranks == ()
    assert plan_numa(topo, topo.gpus, "off").to_env() == {}


def test_unknown_topology() -> None:
    gpu = Gpu(0, "0000:01:00.0", None, None, None, frozenset())
    topo = Topology(gpus=(gpu,), nodes={}, sockets={}, source="none")
    plan = plan_numa(topo, [gpu], "auto")
    assert plan == NumaPlan(
        mode="off", ranks=(), notes=("no NUMA topology found (source: none); CPU binding off",)
    )
    with pytest.raises(TopologyError, match="NUMA mode 'node': no NUMA topology found") as err:
        plan_numa(topo, [gpu], "node")
    assert err.value.hint == "use --numa auto or --numa off"


def test_bad_mode() -> None:
    topo = fixture_topo("tiny2")
    with pytest.raises(TopologyError, match="NUMA mode 'exclusive': expected one of off, node"):
        plan_numa(topo, topo.gpus, "exclusive")


def test_plan_env_and_json() -> None:
    topo = fixture_topo("tiny2")
    plan = plan_numa(topo, topo.gpus, "node")
    assert plan.to_json() == [
        {"rank": 0, "gpu": "0000:3b:00.0", "numa_node": 0, "cpus": [0], "mems": [0]},
        {"rank": 1, "gpu": "0000:af:00.0", "numa_node": 1, "cpus": [1], "mems": [1]},
    ]
    env = plan.to_env()
    assert list(env) == ["GPULAUNCH_NUMA_PLAN"]
    assert " " not in env["GPULAUNCH_NUMA_PLAN"]
    assert json.loads(env["GPULAUNCH_NUMA_PLAN"]) == {
        "version": 1,
        "mode": "node",
        "ranks": plan.to_json(),
    }
    assert plan.describe() == [
        "rank 0: GPU 0000:3b:00.0 (NUMA node 0) -> CPUs 0, memory nodes 0",
        "rank 1: GPU 0000:af:00.0 (NUMA node 1) -> CPUs 1, memory nodes 1",
    ]


def test_numa_bind_script_ships_next_to_the_module() -> None:
    assert numa.numa_bind_script().is_file()
    assert numa.numa_bind_script().name == "numa_bind.py"


def test_nvml_refusing_a_query_is_an_nvml_error(fake_nvml: FakeNvml) -> None:
    """The driver refusing a required query is NvmlError (advisory for `run`), not a crash."""
    from gpulaunch.engine.nvml import NvmlError

    fake_nvml.failing = {"nvmlDeviceGetPciInfo"}
    with pytest.raises(NvmlError, match="Not Supported"):
        discover({})
    assert fake_nvml.calls == ["init", "shutdown"]


def test_nvml_bindings_without_a_function_are_an_outdated_nvml_error(fake_nvml: FakeNvml) -> None:
    """Bindings lacking a required function are the seam's NvmlError (marked outdated, so
    `run` can refuse), never an AttributeError, and never a silent fallback to sysfs."""
    from gpulaunch.engine.nvml import NvmlError

    fake_nvml.missing = {"nvmlDeviceGetPciInfo"}
    with pytest.raises(NvmlError, match="nvidia-ml-py lacks nvmlDeviceGetPciInfo") as err:
        discover({})
    assert err.value.outdated is True
    assert fake_nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize(
    "optional", ["nvmlDeviceGetNumaNodeId", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetUUID"]
)
def test_nvml_optional_queries_may_fail(fake_nvml: FakeNvml, optional: str) -> None:
    fake_nvml.failing = {optional}
    topo = discover({})
    assert topo.source == "nvml"
    assert len(topo.gpus) == 2
