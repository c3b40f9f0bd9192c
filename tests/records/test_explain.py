"""The failure explainer: signatures from gpulaunch/data/failures.yaml against real log text.

GPU-only failures cannot happen on this machine, so their log excerpts were copied from
public issue threads into tests/records/failure_logs/ (each file's first line names its
thread, and the data file cites the same thread under `source:`). The ones the engine can
reproduce are tested for real in tests/e2e/test_explain.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.image.compat import HostGpus
from gpulaunch.records.explain import (
    Evidence,
    explain,
    explain_failure,
    explain_target,
    signatures,
)

LOGS = Path(__file__).parent / "failure_logs"
EXCERPTS = {
    "cuda_oom_torch2.log": "cuda-oom",
    "cuda_oom_torch_namespace.log": "cuda-oom",
    "no_kernel_image.log": "no-kernel-image",
    "driver_unsatisfied_condition.log": "driver-too-old",
    "driver_803.log": "driver-too-old",
    "driver_804.log": "driver-too-old",
    "nccl_unhandled_system_error.log": "nccl-failure",
    "nccl_watchdog_timeout.log": "nccl-failure",
    "nccl_unhandled_cuda_error.log": "nccl-failure",
}
FIX_WORDS = {
    "cuda-oom": ["batch size", "--expandable-segments"],
    "no-kernel-image": ["image.cuda", "archs"],
    "driver-too-old": ["image.cuda", "driver"],
    "nccl-failure": ["--nccl debug", "NCCL_P2P_DISABLE=1"],
}


def _by_id(ident: str) -> object:
    return next(s for s in signatures() if s.id == ident)


@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_public_log_excerpt_is_explained(name: str) -> None:
    text = (LOGS / name).read_text()
    source = re.match(r"# excerpt: (\S+)", text)
    assert source, f"{name}: first line must cite its issue thread"
    found = explain(Evidence(text, exit_code=1, host=False))
    assert found is not None and found.id == EXCERPTS[name]
    assert source[1] in _by_id(found.id).sources  # type: ignore[attr-defined]
    for word in FIX_WORDS[found.id]:
        assert word in found.fix
    assert found.line and found.line in text  # the matched line, nothing more


def test_every_gpu_only_signature_cites_a_thread_with_an_excerpt() -> None:
    heads = [re.match(r"# excerpt: (\S+)", p.read_text()) for p in LOGS.glob("*.log")]
    cited = {head[1] for head in heads if head}
    for sig in signatures():
        if sig.id in FIX_WORDS:
            assert sig.sources, sig.id
            assert set(sig.sources) & cited, f"{sig.id}: no excerpt from its sources in tests"
        for url in sig.sources:
            assert url.startswith("https://github.com/") and "/issues/" in url


def test_data_file_ids_are_unique_and_fixes_name_real_flags() -> None:
    ids = [s.id for s in signatures()]
    assert len(ids) == len(set(ids)) >= 12
    from typer.main import get_command

    from gpulaunch.cli import app

    run = get_command(app).commands["run"]  # type: ignore[attr-defined]
    flags = {opt for param in run.params for opt in [*param.opts, *param.secondary_opts]}
    for sig in signatures():
        for flag in re.findall(r"--[a-z][a-z-]+", sig.fix):
            assert flag in flags, f"{sig.id}: {flag} is not a `run` flag"


def test_gpu_arch_fix_names_a_build_that_has_the_arch() -> None:
    host = HostGpus("570.86.10", ("NVIDIA GeForce RTX 5090",), ("geforce",))
    text = (LOGS / "no_kernel_image.log").read_text()
    found = explain(Evidence(text, exit_code=1, host=host))
    assert found is not None
    assert "sm_120" in found.fix
    build = re.search(r"image\.torch: (\S+), image\.cuda: ([0-9.]+)", found.fix)
    assert build, found.fix
    from gpulaunch.image.compat import matrix

    rows = [r for r in matrix(build[1], build[2]) if r.archs]
    assert any("12.0" in " ".join(r.archs) for r in rows)


def test_driver_fix_names_a_build_this_driver_runs() -> None:
    host = HostGpus("535.129.03", ("NVIDIA H100 80GB HBM3",), ("tesla",))
    text = (LOGS / "driver_804.log").read_text()
    found = explain(Evidence(text, exit_code=1, host=host))
    assert found is not None and "driver 535.129.03" in found.fix
    build = re.search(r"image\.cuda: ([0-9.]+)", found.fix)
    assert build is not None
    assert float(build[1]) < 12.8  # a 535 driver runs no CUDA 12.8 image natively


def test_without_gpu_facts_the_generic_fix_stands() -> None:
    text = (LOGS / "driver_803.log").read_text()
    found = explain(Evidence(text, exit_code=1, host=False))
    assert found is not None and found.fix == _by_id("driver-too-old").fix  # type: ignore[attr-defined]


def test_container_state_oom_killed_wins_over_output() -> None:
    found = explain(Evidence("Killed\n", exit_code=137, oom_killed=True))
    assert found is not None and found.id == "container-oom-killed"
    assert "docker.memory" in found.fix
    plain = explain(Evidence("", exit_code=137))
    assert plain is not None and plain.id == "killed"


def test_module_missing_names_the_module_and_tells_own_package_apart(tmp_path: Path) -> None:
    text = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'wandb'\n"
    found = explain(Evidence(text, exit_code=1, project=tmp_path))
    assert found is not None and found.id == "module-missing"
    assert "wandb" in found.cause and found.fix.startswith("add wandb to the project's")
    cv2 = explain(Evidence("ModuleNotFoundError: No module named 'cv2'", 1, project=tmp_path))
    assert cv2 is not None and cv2.fix.startswith("add opencv-python-headless to")
    (tmp_path / "src" / "mypkg").mkdir(parents=True)
    own = explain(
        Evidence("ModuleNotFoundError: No module named 'mypkg.models'", 1, project=tmp_path)
    )
    assert own is not None and "own package" in own.fix and "mypkg.models" in own.fix


def test_the_last_occurrence_is_the_matched_line_and_it_is_masked() -> None:
    text = (
        "ModuleNotFoundError: No module named 'first'\n"
        "export HF_TOKEN=hf_abcdef123 ModuleNotFoundError: No module named 'second'\n"
    )
    found = explain(Evidence(text, exit_code=1))
    assert found is not None and "second" in found.cause
    assert found.line is not None and "hf_abcdef123" not in found.line and "***" in found.line
    assert "hf_abcdef123" not in json.dumps(found.to_json())


def test_success_and_requested_stops_are_not_explained() -> None:
    oom = (LOGS / "cuda_oom_torch2.log").read_text()
    for code in (0, 130, 143):
        assert explain_failure(Evidence(oom, exit_code=code)) is None
    assert explain_failure(Evidence(oom, exit_code=1)) is not None
    assert explain_failure(Evidence("all fine\n", exit_code=1)) is None


def test_ansi_colour_does_not_hide_a_match() -> None:
    text = "CUDA error: no kernel image is \x1b[1mavailable\x1b[0m for execution on the device"
    found = explain(Evidence(text, exit_code=1, host=False))
    assert found is not None and found.id == "no-kernel-image"


def test_explain_target_reads_a_log_file_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"noise\n" * 50_000 + (LOGS / "nccl_watchdog_timeout.log").read_bytes())
    found, label = explain_target("job.log", tmp_path, lambda: tmp_path)
    assert found is not None and found["id"] == "nccl-failure" and label == str(log)
    (tmp_path / "old.log").write_bytes((LOGS / "driver_803.log").read_bytes() + b"x" * 70_000)
    found, _ = explain_target("old.log", tmp_path, lambda: tmp_path)
    assert found is None  # beyond the last 64 KiB: not read


def test_a_build_or_start_failure_of_a_known_kind_gets_its_cause_as_the_hint(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from gpulaunch.errors import BuildError, EngineError
    from gpulaunch.jobs.execute import explain_error

    job: Any = SimpleNamespace(spec=SimpleNamespace(project=tmp_path), build=None, explanation=None)
    full = BuildError(
        "the build failed at step 5/9: RUN pip install -r requirements.txt",
        log_tail="ERROR: Could not install packages due to an OSError: "
        "[Errno 28] No space left on device: '/root/.cache/pip/wheels'",
    )
    explain_error(job, full)
    assert full.hint is not None and full.hint.startswith("cause: a disk ran out of space")
    assert "docker builder prune" in full.hint and job.explanation.id == "disk-full"
    kept = EngineError("unsatisfied condition: cuda>=12.8", hint="the engine's own hint")
    explain_error(job, kept)
    assert kept.hint == "the engine's own hint"  # never replaced


def test_permission_denied_on_a_mounted_path_names_the_path_and_the_uid() -> None:
    text = "PermissionError: [Errno 13] Permission denied: '/data/checkpoints/step_100.pt'\n"
    found = explain(Evidence(text, exit_code=1))
    assert found is not None and found.id == "permission-denied"
    assert "/data/checkpoints/step_100.pt" in found.cause and "uid:gid" in found.cause
    assert "--mount" in found.fix


def test_torch_shm_allocation_failure_is_shm_not_a_full_disk() -> None:
    """Captured on the engine (torch 2.13 CPU, DataLoader workers, --shm-size 1m)."""
    text = (
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_8_153096274_0>: "
        "No space left on device (28)\n"
    )
    found = explain(Evidence(text, exit_code=1))
    assert found is not None and found.id == "shm-exhausted"


H200 = HostGpus("580.159.04", ("NVIDIA H200",), ("nvidia",), ("9.0",))  # as NVML reported it


def test_logs_captured_on_an_h200_are_explained_with_its_facts() -> None:
    """Real failures on one H200 (driver 580.159.04, torch 2.11.0+cu130), with the facts NVML
    gave there: the fix names the GPU and a build it runs."""
    oom = explain(Evidence((LOGS / "h200_cuda_oom.log").read_text(), exit_code=1, host=H200))
    assert oom is not None and oom.id == "cuda-oom" and "--expandable-segments" in oom.fix
    assert oom.line is not None and oom.line.startswith("torch.OutOfMemoryError: CUDA out of")
    arch = explain(
        Evidence((LOGS / "h200_no_kernel_image.log").read_text(), exit_code=1, host=H200)
    )
    assert arch is not None and arch.id == "no-kernel-image"
    assert "1x NVIDIA H200 (sm_90)" in arch.fix and "this host runs torch" in arch.fix


def test_two_ranks_on_one_gpu_captured_on_an_h200_is_not_a_generic_nccl_error() -> None:
    text = (LOGS / "h200_nccl_duplicate_gpu.log").read_text()
    found = explain(Evidence(text, exit_code=1, host=H200))
    assert found is not None and found.id == "duplicate-gpu"
    assert "LOCAL_RANK" in found.fix and "--nproc" in found.fix
    assert found.line is not None and found.line.startswith("[rank0]: Duplicate GPU detected")
