"""The pure helpers of bench/benchlib.py: statistics, rows, tables, BENCHMARKS.md, build logs.

No timing is asserted here (benchmarks report timings; tests check the arithmetic and text).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from benchlib import (
    README_END,
    README_START,
    Machine,
    Row,
    benchmarks_md,
    build_steps,
    cumtime,
    file_bytes,
    format_value,
    interleaved,
    markdown_table,
    median,
    ratio,
    reexecuted_dependency_steps,
    replace_marked,
    text_table,
)

MACHINE = Machine("2026-12-03 09:00 UTC", 2, "20.10.24", "3.11.7", "Linux x86_64")


def test_median_odd_even_and_empty() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_ratio_refuses_a_zero_baseline() -> None:
    assert ratio(3.0, 2.0) == 1.5
    with pytest.raises(ValueError, match="positive"):
        ratio(1.0, 0.0)


@pytest.mark.parametrize(
    ("value", "limit", "extra_ok", "met"),
    [
        (1.0, 1.25, True, True),
        (1.25, 1.25, True, True),  # the goal is inclusive
        (1.26, 1.25, True, False),
        (1.0, 1.3, False, False),  # fast, but a dependency layer ran again
        (9.0, None, True, None),  # informational row
    ],
)
def test_row_met(value: float, limit: float | None, extra_ok: bool, met: bool | None) -> None:
    assert Row("r", value, "x", limit, extra_ok=extra_ok).met is met


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.0123, "s", "12.3 ms"),
        (1.5, "x", "1.50x"),
        (0.00123, "x", "0.0012x"),  # a share of a core: 2 decimals would say 0.00x
        (0.1, "x", "0.10x"),
        (512, "B", "512 B"),
        (2660, "B", "2.6 KiB"),
        (3 << 20, "B", "3.00 MiB"),
    ],
)
def test_format_value(value: float, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_markdown_table_marks_goals_and_escapes_pipes() -> None:
    table = markdown_table(
        [
            Row("a|b", 1.5, "x", 2.0, "base 10 ms"),
            Row("slow", 3.0, "x", 2.0),
            Row("info", 0.5, "s", detail="baseline"),
        ]
    )
    lines = table.splitlines()
    assert lines[0] == "| measurement | value | baseline | goal | result |"
    assert lines[2] == "| a\\|b | 1.50x | base 10 ms | <= 2.00x | met |"
    assert lines[3] == "| slow | 3.00x | - | <= 2.00x | **not met** |"
    assert lines[4] == "| info (baseline) | 500.0 ms | - | - | - |"


def test_text_table_one_line_per_row() -> None:
    text = text_table([Row("a", 1.0, "x", 2.0), Row("b", 3.0, "x", 2.0)])
    assert text.count("\n") == 2
    assert "**not met**" in text.splitlines()[1]


def test_benchmarks_md_has_machine_table_and_only_failed_analyses() -> None:
    rows = [Row("fast", 1.0, "x", 2.0), Row("slow", 3.0, "x", 2.0)]
    text = benchmarks_md(MACHINE, rows, {"fast": "FAST-NOTE", "slow": "SLOW-NOTE"}, ["n1"])
    assert "- date: 2026-12-03 09:00 UTC" in text
    assert "- machine: 2 cores, Linux x86_64" in text
    assert "- engine: Docker 20.10.24" in text
    assert "- Python: 3.11.7" in text
    assert "python bench/run_all.py" in text
    assert "| slow | 3.00x | - | <= 2.00x | **not met** |" in text
    assert "### slow\n\nSLOW-NOTE" in text
    assert "FAST-NOTE" not in text
    assert "- n1" in text


def test_benchmarks_md_all_met_says_so() -> None:
    text = benchmarks_md(MACHINE, [Row("fast", 1.0, "x", 2.0)], {})
    assert "Every goal is met." in text


def test_benchmarks_md_failed_without_analysis_is_visible() -> None:
    text = benchmarks_md(MACHINE, [Row("slow", 3.0, "x", 2.0)], {})
    assert "### slow\n\nNo analysis recorded." in text


def test_interleaved_runs_round_robin_after_warmup() -> None:
    calls: list[str] = []
    times = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 2)
    assert calls == ["a", "b", "a", "b", "a", "b"]  # one warm-up round, then two timed
    assert {k: len(v) for k, v in times.items()} == {"a": 2, "b": 2}


CACHED_LOG = """#1 [internal] load build definition from Dockerfile
#1 DONE 0.0s

#4 [stage-0 1/6] FROM docker.io/local/base:bookworm
#4 DONE 0.0s

#5 [stage-0 2/6] RUN python3 -m venv /opt/venv
#5 sha256:be49
#5 CACHED

#8 [stage-0 3/6] COPY [requirements.txt, /opt/gpulaunch/requirements.txt]
#8 CACHED

#9 [stage-0 4/6] RUN --mount=type=cache,target=/root/.cache/pip     pip install -r r.txt
#9 CACHED

#11 [stage-0 5/6] WORKDIR /workspace
#11 CACHED

#12 [stage-0 6/6] COPY --chown=0:0 . /workspace
#12 DONE 0.1s
"""


def test_build_steps_reads_instruction_and_status() -> None:
    steps = build_steps(CACHED_LOG)
    assert steps["5"] == ("RUN python3 -m venv /opt/venv", "CACHED")
    assert steps["12"] == ("COPY --chown=0:0 . /workspace", "DONE")
    assert "1" not in steps  # [internal] steps are not image layers


def test_source_only_rebuild_has_no_reexecuted_dependency_step() -> None:
    assert reexecuted_dependency_steps(CACHED_LOG) == []


def test_a_rerun_requirements_layer_is_reported() -> None:
    log = CACHED_LOG.replace("#9 CACHED", "#9 DONE 12.3s")
    assert reexecuted_dependency_steps(log) == [
        "RUN --mount=type=cache,target=/root/.cache/pip     pip install -r r.txt"
    ]


def test_a_step_without_end_line_counts_as_reexecuted() -> None:
    log = CACHED_LOG.replace("#8 CACHED\n", "")
    assert reexecuted_dependency_steps(log) == [
        "COPY [requirements.txt, /opt/gpulaunch/requirements.txt]"
    ]


def test_a_log_without_steps_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="no BuildKit steps"):
        reexecuted_dependency_steps("# gpulaunch build\n")


def test_file_bytes_counts_files_not_folders(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 10)
    (tmp_path / "b").write_bytes(b"y" * 5)
    assert file_bytes(tmp_path, ["d", "d/a", "b"]) == 15


def test_cumtime_sums_gpulaunch_functions_by_name() -> None:
    sep = os.sep
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = {
        (f"{sep}x{sep}gpulaunch{sep}context.py", 10, "scan"): (1, 1, 0.1, 0.002, {}),
        (f"{sep}x{sep}gpulaunch{sep}image{sep}context.py", 20, "hash_entries"): (
            1,
            1,
            0.1,
            0.003,
            {},
        ),
        (f"{sep}x{sep}other{sep}mod.py", 1, "scan"): (1, 1, 0.1, 9.0, {}),
    }
    assert cumtime(stats, {"scan", "hash_entries"}) == pytest.approx(0.005)
    with pytest.raises(LookupError, match="no gpulaunch function"):
        cumtime(stats, {"renamed"})


def test_replace_marked_rewrites_only_between_markers() -> None:
    text = f"# T\n\nbefore\n{README_START}\nold table\n{README_END}\nafter\n"
    new = replace_marked(text, "| new |\n")
    assert new == f"# T\n\nbefore\n{README_START}\n| new |\n{README_END}\nafter\n"
    assert replace_marked(new, "| new |\n") == new  # idempotent


@pytest.mark.parametrize(
    "text", ["no markers", f"{README_END}\n{README_START}\n", f"{README_START} only"]
)
def test_replace_marked_refuses_missing_markers(text: str) -> None:
    with pytest.raises(ValueError, match="markers"):
        replace_marked(text, "| t |")


def test_the_code_copy_of_issue_32_is_the_step_a_source_edit_reruns() -> None:
    log = CACHED_LOG.replace(
        "COPY --chown=0:0 . /workspace", "COPY --chown=0:0 workspace /workspace"
    )
    assert reexecuted_dependency_steps(log) == []


def test_the_build_loop_section_replaces_only_itself(tmp_path: Path) -> None:
    from build_loop_bench import SECTION_END, SECTION_START, section, write_section

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\nother rows\n")
    rows = [Row("gpulaunch image size", 2_000_000, "B"), Row("ratio", 1.01, "x", 1.05)]
    write_section(path, section(rows, "today", 3))
    write_section(path, section([Row("ratio", 1.5, "x", 1.05)], "later", 3))
    text = path.read_text()
    assert text.startswith("# Benchmarks\n\nother rows\n")
    assert text.count(SECTION_START) == text.count(SECTION_END) == 1
    assert "later" in text and "today" not in text
    assert "| ratio | 1.50x | - | <= 1.05x | **not met** |" in text
