"""bench/gpu_check.sh's Python parts (gpu_steps.py helpers, gpu_table.py) without a GPU, and the
script's --no-gpu dry mode: every GPU step is reported "skipped: no GPU" and the exit is non-zero.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gpu_table
import pytest
from gpu_steps import allocator_has_expandable, main, parse_lines, result_line, tflops
from gpu_table import Check, checks, evaluate_ranks, evaluate_train, exit_code, markdown

REPO = Path(__file__).resolve().parents[2]


def test_result_lines_round_trip_and_other_lines_are_ignored() -> None:
    text = "\n".join(
        ["noise", result_line("rank", local_rank=1, affinity=[0, 1]), "GLCHECKnot-a-record"]
    )
    assert parse_lines(text) == [{"step": "rank", "local_rank": 1, "affinity": [0, 1]}]


def test_tflops_counts_forward_and_backward() -> None:
    # 1 layer of n=1000, 1 step in 1 s: 3 matmuls of 2e9 flops = 6e9 = 0.006 TFLOPS
    assert tflops(1000, 1, 1, 1.0) == pytest.approx(0.006)
    with pytest.raises(ValueError):
        tflops(1000, 1, 1, 0.0)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ("expandable_segments:True", True),
        ("max_split_size_mb:128,expandable_segments:True", True),
        ("expandable_segments:False", False),
        ("", False),
        ("garbage_collection_threshold:0.6", False),
    ],
)
def test_allocator_has_expandable(settings: str, expected: bool) -> None:
    assert allocator_has_expandable(settings) is expected


def test_gpu_step_without_cuda_fails_loudly() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test checks the no-GPU path")
    with pytest.raises(SystemExit, match=r"cuda\.is_available"):
        main(["rank"])


PLAN: dict[str, Any] = {
    "run": {"nproc": 2},
    "numa_plan": [{"rank": 0, "cpus": [0, 1]}, {"rank": 1, "cpus": [2, 3]}],
}


def rank(local: int, bus: str, affinity: list[int]) -> dict[str, Any]:
    return {
        "step": "rank",
        "local_rank": local,
        "device": local,
        "name": "NVIDIA H200",
        "pci_bus_id": bus,
        "cuda_visible_devices": "0,1",
        "affinity": affinity,
    }


def test_ranks_as_planned_pass() -> None:
    check = evaluate_ranks("r", PLAN, [rank(0, "0:18", [0, 1]), rank(1, "0:2a", [2])])
    assert check.status == "ok", check.detail


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ([rank(0, "0:18", [0, 1])], "1 rank(s) reported, plan has 2"),
        ([rank(0, "0:18", [0]), rank(0, "0:2a", [2])], "local ranks"),
        ([rank(0, "0:18", [0]), rank(1, "0:18", [2])], "share a GPU"),
        ([rank(0, "0:18", [0, 1]), rank(1, "0:2a", [0, 2])], "not planned"),
    ],
)
def test_ranks_not_as_planned_fail(records: list[dict[str, Any]], why: str) -> None:
    check = evaluate_ranks("r", PLAN, records)
    assert check.status == "FAIL"
    assert why in check.detail


def tf(fp32: float, bf16: float, fp32_gl: float, bf16_gl: float) -> dict[str, float]:
    return {
        "train-fp32-bare": fp32,
        "train-bf16-bare": bf16,
        "train-fp32-gl": fp32_gl,
        "train-bf16-gl": bf16_gl,
    }


@pytest.mark.parametrize(
    ("numbers", "status"),
    [
        (tf(50, 600, 50, 598), "ok"),
        (tf(50, 90, 50, 90), "FAIL"),  # bf16 not 2x fp32
        (tf(50, 600, 40, 600), "FAIL"),  # the launcher costs 20% of fp32 throughput
    ],
)
def test_train_goals(numbers: dict[str, float], status: str) -> None:
    assert evaluate_train("t", numbers).status == status


def write_step(work: Path, step: str, rc: int, text: str) -> None:
    (work / f"{step}.out").write_text(text)
    (work / f"{step}.rc").write_text(f"{rc}\n")


def good_workdir(work: Path) -> None:
    plan = {
        "run": {"nproc": 1},
        "numa_plan": [{"rank": 0, "gpu": "0000:18:00.0", "numa_node": 0, "cpus": [0, 1]}],
        "gpu_check": {"validated": True, "detail": "validated against this host's 1 GPU(s) (nvml)"},
        "warnings": [],
    }
    write_step(work, "dryrun", 0, json.dumps(plan, indent=2))
    write_step(work, "smi", 0, "NVIDIA H200, 570.124.06, 9.0, 00000000:18:00.0\n")
    write_step(work, "ranks", 0, "running\n" + result_line(**rank(0, "0:18", [0, 1])))
    for step, value in tf(50, 600, 50, 599).items():
        precision = step.split("-")[1]
        write_step(work, step, 0, result_line("train", precision=precision, tflops=value))
    write_step(work, "autocast", 0, result_line("autocast", dtype="bfloat16"))
    write_step(
        work, "memory", 0, result_line("memory", ok=True, settings="expandable_segments:True")
    )


def test_all_steps_good_exits_zero_with_doctor_pending(tmp_path: Path) -> None:
    good_workdir(tmp_path)
    rows = checks(tmp_path)
    assert [r.status for r in rows] == ["ok", "ok", "pending", "ok", "ok", "ok", "ok"], rows
    assert exit_code(rows) == 0


def test_discovery_without_nvml_fails(tmp_path: Path) -> None:
    good_workdir(tmp_path)
    doc = {"gpu_check": {"validated": False, "detail": "not validated: no NVML"}}
    write_step(tmp_path, "dryrun", 0, json.dumps(doc))
    rows = checks(tmp_path)
    assert rows[0].status == "FAIL"
    assert exit_code(rows) == 1


@pytest.mark.parametrize(
    ("step", "rc", "text", "row"),
    [
        ("autocast", 1, result_line("autocast", dtype="float32"), 5),
        ("memory", 0, result_line("memory", ok=False), 6),
        ("ranks", 1, "Traceback: CUDA error", 3),
        ("train-bf16-gl", 0, "no record at all", 4),
    ],
)
def test_a_failed_step_fails_its_row(
    tmp_path: Path, step: str, rc: int, text: str, row: int
) -> None:
    good_workdir(tmp_path)
    write_step(tmp_path, step, rc, text)
    rows = checks(tmp_path)
    assert rows[row].status == "FAIL", rows[row]
    assert exit_code(rows) == 1


def test_a_step_that_never_ran_is_a_failure_not_a_pass(tmp_path: Path) -> None:
    good_workdir(tmp_path)
    (tmp_path / "memory.rc").unlink()
    rows = checks(tmp_path)
    assert rows[6] == Check(rows[6].name, "FAIL", "step memory did not run")


def test_markdown_shows_skips(tmp_path: Path) -> None:
    text = markdown([Check("a", "skipped", "no GPU"), Check("b", "ok", "x|y")], "# H")
    assert "| a | skipped: no GPU | no GPU |" in text
    assert "| b | ok | x\\|y |" in text


def test_table_main_writes_file_and_usage(tmp_path: Path) -> None:
    good_workdir(tmp_path)
    out = tmp_path / "res" / "gpu.md"
    assert gpu_table.main(["gpu_table.py", str(tmp_path), str(out)]) == 0
    assert out.read_text().startswith("# GPU check")
    assert gpu_table.main(["gpu_table.py"]) == 2


def test_gpu_check_no_gpu_skips_every_gpu_step_and_fails(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_RESULTS": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), "--no-gpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    steps = [line for line in lines if line.startswith("==> ")]
    assert steps and all(line.endswith(": skipped: no GPU") for line in steps)
    rows = [line for line in lines if line.endswith(": skipped: no GPU") and "==>" not in line]
    assert len(rows) == 6  # every table row except the pending doctor line
    assert "| gpulaunch doctor | pending |" in proc.stdout
    written = list(tmp_path.glob("gpu-*-no-gpu.md"))
    assert len(written) == 1
    assert "skipped: no GPU" in written[0].read_text()


def test_gpu_check_refuses_unknown_arguments() -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), "--bogus"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "usage:" in proc.stderr


def test_bus_id_from_pci_parts_else_uuid() -> None:
    from types import SimpleNamespace

    from gpu_steps import _bus_id

    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x18, pci_device_id=0)
    assert _bus_id(props, 0) == "00000000:18:00.0"
    assert _bus_id(SimpleNamespace(uuid="GPU-abc"), 1) == "GPU-abc"
    assert _bus_id(SimpleNamespace(), 2) == "local-2"
