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

from gpulaunch.catalog.compat import HostGpus
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
    # issue 31 §6: threads not used before; older PyTorch and NCCL spellings, relative paths,
    # lines prefixed by a rank, torchrun's own logging
    "cuda_oom_torch1_cached.log": "cuda-oom",
    "cuda_oom_reserved_by_pytorch.log": "cuda-oom",
    "cuda_oom_rank_prefixed.log": "cuda-oom",
    "nccl_error_2_old_spelling.log": "nccl-failure",
    "nccl_275_unhandled_system_error.log": "nccl-failure",
    "nccl_278_system_call_failed.log": "nccl-failure",
    "nccl_watchdog_old_spelling.log": "nccl-failure",
    "nccl_watchdog_thread_terminated.log": "nccl-failure",
    "nccl_watchdog_every_rank.log": "nccl-failure",
    "port_in_use_socket_cpp.log": "port-in-use",
    "port_in_use_distnetworkerror.log": "port-in-use",
    "shm_bus_error_worker.log": "shm-exhausted",
    "shm_dataloader_killed_by_bus_error.log": "shm-exhausted",
    "no_kernel_sm86_torch1.log": "no-kernel-image",
    "no_kernel_sm120_warning.log": "no-kernel-image",
    "driver_too_old_found_version.log": "driver-too-old",
    "driver_too_old_assertion_torch1.log": "driver-too-old",
    "driver_cuda_runtime_error_35.log": "driver-too-old",
    "driver_thcudacheck_35.log": "driver-too-old",
    "torchrun_killed_old_log_format.log": "killed",
    "torchrun_killed_summary.log": "killed",
    "permission_denied_relative_path.log": "permission-denied",
    "permission_denied_relative_folder.log": "permission-denied",
    "rendezvous_connect_timed_out_old.log": "rendezvous-timeout",
    "rendezvous_client_socket_timeout.log": "rendezvous-timeout",
    "rendezvous_timeout_error_json.log": "rendezvous-timeout",
}
# Bugs in the job's own code or data (issue 31 §6): no cause in its environment may be named.
# A torchrun summary that names no rank's error says nothing more (the rank alone is named).
USER_BUGS = {
    "user_shape_mat1_mat2.log": None,
    "user_shape_size_mismatch.log": None,
    "user_device_mismatch_wrapper_mm.log": None,
    "user_device_mismatch_weight_type.log": None,
    "user_dataset_keyerror_in_worker.log": None,
    "user_dataset_keyerror_index.log": None,
    "user_device_side_assert_labels.log": None,
    "user_device_side_assert_runtime_error_59.log": None,
    "user_labels_not_zero_based.log": None,
    "user_ddp_unused_parameters_rank1.log": None,
    "torchrun_summary_rank1_only.log": "rank-failed",
    "torchrun_summary_ranks_1_to_3.log": None,  # cut before its Root Cause block
}
FIX_WORDS = {
    "cuda-oom": ["batch size", "--expandable-segments"],
    "no-kernel-image": ["image.cuda", "archs"],
    "driver-too-old": ["image.cuda", "driver"],
    "nccl-failure": ["--nccl debug", "NCCL_P2P_DISABLE=1"],
    "port-in-use": ["--rdzv-endpoint", "MASTER_PORT"],
    "shm-exhausted": ["docker.ipc", "docker.shm_size"],
    "rendezvous-timeout": ["--rdzv-endpoint", "--node-rank"],
    "permission-denied": ["--mount", "chown"],
    "killed": ["dmesg", "docker.memory"],
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
    from gpulaunch.catalog.compat import matrix

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


def _log(name: str) -> str:
    """An excerpt as a job's output: without its first line (the citation)."""
    return (LOGS / name).read_text().split("\n", 1)[1]


@pytest.mark.parametrize("name", sorted(USER_BUGS))
def test_a_bug_in_the_jobs_own_code_gets_no_environment_cause(name: str) -> None:
    text = (LOGS / name).read_text()
    assert re.match(r"# excerpt: https://github\.com/\S+/issues/\d+", text), name
    found = explain_failure(Evidence(_log(name), exit_code=1, host=False))
    assert (found and found.id) == USER_BUGS[name], found


def test_the_corpus_hit_rate_and_false_cause_rate() -> None:
    """Issue 31 §6 grew the corpus by 26 environment failures and 12 job-own failures from
    public threads: every environment failure gets its signature (hit rate 100 %, 22 of the 26
    new ones before §6), no bug of the job's own gets an environment cause (0 of 12)."""
    env = {n: i for n, i in EXCERPTS.items() if not n.startswith(("h200_", "captured_"))}
    hits = [n for n, ident in env.items() if _found_id(n) == ident]
    false_causes = [n for n in USER_BUGS if _found_id(n) not in (None, "rank-failed")]
    cited = {n for n in [*env, *USER_BUGS] if (LOGS / n).read_text().startswith("# excerpt: ")}
    assert len(cited) - 9 >= 30 and len(USER_BUGS) - 2 >= 8  # new since §6; 9 were there
    assert (len(hits), len(false_causes)) == (len(env), 0), (set(env) - set(hits), false_causes)


def _found_id(name: str) -> str | None:
    found = explain(Evidence(_log(name), exit_code=1, host=False))
    return None if found is None else found.id


# -- torchrun's error summary (issue 31 §3) ------------------------------------------------
def test_torchrun_summary_gives_the_failed_ranks_own_exit_code() -> None:
    from gpulaunch.engine.supervise import job_exit_code, rank_failure

    killed = _log("captured_torchrun_rank1_sigkill.log")
    failure = rank_failure(killed.splitlines())
    assert failure is not None and (failure.rank, failure.local_rank) == (1, 1)
    assert (failure.exitcode, failure.code, failure.ended()) == (
        -9,
        137,
        "was killed by SIGKILL (exit 137)",
    )
    torchrun = ["torchrun", "--standalone", "--nproc-per-node", "2", "/workspace/t.py"]
    assert job_exit_code(torchrun, 1, killed) == 137
    host = ["/venv/bin/python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"]
    assert job_exit_code(host, 1, killed) == 137
    # torchrun's own 1 is replaced only for torchrun, and only by a root cause it printed
    assert job_exit_code(["python", "/workspace/t.py"], 1, killed) == 1
    assert job_exit_code(torchrun, 0, killed) == 0
    assert job_exit_code(torchrun, 1, _log("torchrun_summary_ranks_1_to_3.log")) == 1
    public = _log("torchrun_summary_rank1_only.log")
    assert job_exit_code(torchrun, 1, public) == 1  # that rank exited 1 itself
    assert job_exit_code(torchrun, 1, public.replace("exitcode  : 1 (", "exitcode  : 2 (")) == 2


def test_explain_reads_through_torchrun_to_the_failed_ranks_own_error() -> None:
    """Rank 1 raised KeyError; rank 0 then lost its peer in a barrier (a RuntimeError of its
    own, printed later) and torchrun ended with ChildFailedError: the rank's error is named."""
    text = _log("captured_torchrun_rank1_keyerror.log")
    assert "ChildFailedError" in text and "[rank0]: RuntimeError" in text
    found = explain_failure(Evidence(text, exit_code=1, host=False))
    assert found is not None and found.id == "rank-failed"
    assert found.cause == "rank 1 (local rank 1) failed first and exited with 1: KeyError: 'label'"
    assert found.line == "KeyError: 'label'"
    assert "rank 1's traceback" in found.fix
    as_file = explain(Evidence(text, exit_code=None, host=False))  # `explain LOGFILE`: no code
    assert as_file == found


def test_a_rank_killed_by_a_signal_is_one_consistent_explanation() -> None:
    text = _log("captured_torchrun_rank1_sigkill.log")
    for code in (137, None, 1):  # the run's (now the rank's) code, a log file, torchrun's own 1
        found = explain_failure(Evidence(text, exit_code=code, host=False))
        assert found is not None and found.id == "killed", code
        assert found.cause.startswith("rank 1: the job was killed with SIGKILL (exit 137)")
    segv = text.replace("-9 (pid", "-11 (pid").replace("(SIGKILL)", "(SIGSEGV)")
    found = explain_failure(Evidence(segv, exit_code=139, host=False))
    assert found is not None and found.id == "rank-failed"
    assert found.cause.startswith("rank 1 (local rank 1) failed first and was killed by SIGSEGV")


def test_a_known_cause_under_torchrun_names_the_rank_and_ignores_the_others() -> None:
    """The H200 capture's root cause is rank 0: its own duplicate-GPU line is the cause."""
    found = explain(Evidence(_log("h200_nccl_duplicate_gpu.log"), exit_code=1, host=H200))
    assert found is not None and found.id == "duplicate-gpu"
    assert found.cause.startswith("rank 0: two ranks use the same GPU")
    # another rank's environment error is what followed the root cause's own bug
    ours = "[rank1]: KeyError: 'label'\n"
    theirs = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    tail = _log("captured_torchrun_rank1_keyerror.log").split("E1205", 1)[1]
    found = explain(Evidence(ours + theirs + "E1205" + tail, exit_code=1, host=False))
    assert found is not None and found.id == "rank-failed" and "KeyError" in found.cause


def test_a_rank_traceback_recorded_in_torchruns_summary_is_read() -> None:
    """A worker with torch's @record writes its error file; torchrun's summary carries its
    traceback under `traceback :`."""
    text = "\n".join(
        [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            "train.py FAILED",
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 3 (local_rank: 1)",
            "  exitcode  : 1 (pid: 77)",
            "  error_file: /tmp/torchelastic_x/error.json",
            "  traceback : Traceback (most recent call last):",
            '    File "train.py", line 9, in main',
            "  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.",
            "=" * 60,
        ]
    )
    found = explain(Evidence(text, exit_code=1, host=False))
    assert found is not None and found.id == "cuda-oom"
    assert found.cause.startswith("rank 3: the GPU ran out of memory")


def test_a_job_that_prints_a_summary_of_its_own_changes_only_its_own_code() -> None:
    """The summary is job output: a job may print one, but its exit code is its own anyway.
    gpulaunch replaces only torchrun's 1, never a code the job chose, and a forged block with
    no rank or exit code, or a signal no system has, changes nothing."""
    from gpulaunch.engine.supervise import job_exit_code

    torchrun = ["torchrun", "--nproc-per-node", "2", "t.py"]
    block = "Root Cause (first observed failure):\n[0]:\n  rank : 0 (local_rank: 0)\n"
    assert job_exit_code(torchrun, 1, block + "  exitcode : 5 (pid: 1)\n") == 5
    assert job_exit_code(torchrun, 3, block + "  exitcode : 5 (pid: 1)\n") == 3
    assert job_exit_code(torchrun, 1, block) == 1
    assert job_exit_code(torchrun, 1, block + "  exitcode : -99999 (pid: 1)\n") == 1
    assert job_exit_code(torchrun, 1, block + "  exitcode : 0 (pid: 1)\n") == 1


def test_torchruns_own_log_lines_are_never_the_ranks_error() -> None:
    """torch 1.x logs through `logging` (WARNING:torch.distributed...), 2.x in glog style
    (E1205 ... torch/distributed/..., some with site-packages/ before it): neither is a line
    of the rank's, so a rank that printed nothing names no error of torchrun's."""
    summary = _log("torchrun_summary_rank1_only.log")
    for agent in (
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2410413 closing "
        "signal SIGTERM\nERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)"
        " local_rank: 1 (pid: 18572) of binary: /usr/bin/python",
        "E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/"
        "api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 18572) of binary: /usr/bin/python",
    ):
        found = explain(Evidence(f"step 10 loss 0.5\n{agent}\n{summary}", 1, host=False))
        assert found is not None and found.id == "rank-failed"
        assert found.cause == (
            "rank 1 (local rank 1) failed first and exited with 1; its last line: step 10 loss 0.5"
        )


@pytest.mark.parametrize("code", [-35, -40, -63])
def test_a_rank_ended_by_a_real_time_signal_is_explained_by_its_exit_code(code: int) -> None:
    """Linux's real-time signals (34-64) are valid signals that `signal.Signals` does not
    name: job output reporting one is explained by the exit code, never an internal error."""
    from gpulaunch.engine.supervise import rank_failure

    text = (
        "Root Cause (first observed failure):\n[1]:\n  time : x\n  host : h\n"
        f"  rank : 1 (local_rank: 1)\n  exitcode : {code} (pid: 7)\n" + "=" * 40 + "\n"
    )
    failure = rank_failure(text.splitlines())
    assert failure is not None
    assert failure.ended() == f"exited with {128 - code}"
    found = explain(Evidence(text, exit_code=1, host=False))
    assert found is not None
    assert f"failed first and exited with {128 - code}" in found.cause


@pytest.mark.parametrize(
    ("module", "package"),
    [("cv2", "opencv-python-headless"), ("google.protobuf.message", "protobuf"),
     ("git", "gitpython"), ("Foo_Bar.sub", "foo-bar")],
)  # fmt: skip
def test_a_missing_module_names_the_package_init_and_the_import_check_would(
    module: str, package: str
) -> None:
    """One import-name table (project/imports) answers for init, the build's import check and
    the failure explainer: an unknown name is suggested as pip normalizes it."""
    from gpulaunch.project.imports import load_table
    from gpulaunch.records.explain import package_of

    assert package_of(module) == load_table().candidates(module)[0] == package
