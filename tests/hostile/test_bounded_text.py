"""Bounded work on untrusted text (issue 29 §5).

A job's output, a catalog server's answer and a path a user or CI names are not trusted:
- `explain` reads regular files only, and its matcher's work on any 64 KiB of output is
  linear in its size (lines cut to a bound, patterns checked at load time);
- `catalog update` reads a bounded number of releases, writes a bounded overlay, and what it
  writes reads back as written and merges into a catalog `render` accepts;
- output paths (`--junit`, `$GITHUB_STEP_SUMMARY`, `render -o`) are judged by where they
  resolve, not how they are spelled.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulaunch.engine.supervise import OutputTail
from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.records import explain as ex
from hostile.conftest import Hostile

REAL_CAUSE = "ModuleNotFoundError: No module named 'nosuchmod'"
TAIL = 64 * 1024
SLASHES = ("/" * 999 + "\n") * 64

# (id, 64 KiB of output a job can print): each aims at the backtracking of a packaged pattern
# or of the escape stripper (the first two cost the old matcher 17 s, the OSC one 1 s)
ADVERSARIAL: list[tuple[str, str]] = [
    # `(?P<path>/[^ :']+): Permission denied`: the class crossed lines, each `/` rescanned all
    ("slashes-across-lines", ("/" * 999 + "\n") * 66),
    ("one-long-line-of-slashes", "/" * TAIL),
    # an OSC escape with no end: each `ESC ]` used to scan to the end of the text
    ("unterminated-osc", "\x1b]" * (TAIL // 2)),
    ("no-space-prefixes", ("No space left on device" * 44 + "\n") * 64),
    ("dist-store-no-timeout", ("DistStoreError: " + "t" * 1000 + "\n") * 64),
    ("permission-no-quote", ("Permission denied: '/" + "x" * 1000 + "\n") * 64),
    ("exitcode-spaces", ("exitcode" + " " * 200 + ":" + " " * 200 + "\n") * 150),
    ("tiny-lines", "a\n" * (TAIL // 2)),
    ("ansi-runs", "\x1b[" + "0" * (TAIL - 2)),
]


class Hung(Exception):
    pass


@pytest.fixture
def deadline() -> Iterator[None]:
    """A hang (a blocking read of a FIFO) becomes a failure instead of a stuck test run."""

    def alarm(signum: int, frame: Any) -> None:
        raise Hung("still reading after 10 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- explain: a matcher whose work is bounded by construction -------------------------------
@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a+)+$", "unbounded repeat of a variable part"),
        (r"(a|ab)*c", "unbounded repeat of a variable part"),
        (r"(?:x|y+)*z", "unbounded repeat of a variable part"),
        (r".*Error.*timeout", "too many ways"),
        (r"rank \d+ and rank \d+", "too many ways"),
        (r"x{0,1000}y{0,1000}", "too many ways"),
        (r"a?" * 20, "too many ways"),
        (r"(?=Error)E", "assert"),
        (r"(?<!x)Error", "assert_not"),
        (r"(E)rror \1", "groupref"),
    ],
)
def test_a_signature_pattern_with_unbounded_backtracking_is_refused_at_load(
    pattern: str, reason: str
) -> None:
    entry = {"id": "planted", "match": [pattern], "cause": "c", "fix": "f"}
    with pytest.raises(CatalogError) as err:
        ex._signature(entry, 0)
    assert "planted" in err.value.message and reason in err.value.message


@pytest.mark.parametrize(
    "pattern",
    [r".*[Tt]imed? ?out", r"cuInit\b.*\b80[34]\b", r"(?:\d{1,3}\.){3}\d{1,3}", r"\s{0,8}:\s*x"],
)
def test_bounded_patterns_are_accepted(pattern: str) -> None:
    assert ex.check_pattern(pattern).pattern == pattern  # compiled, not refused


def test_every_packaged_signature_passes_the_load_time_check() -> None:
    assert len(ex.signatures()) >= 10  # the data file loads: every pattern is bounded


@pytest.mark.parametrize(("case", "noise"), ADVERSARIAL, ids=[c for c, _ in ADVERSARIAL])
def test_adversarial_output_is_explained_quickly(case: str, noise: str) -> None:
    """Alone (every signature is tried on all of it), then with the real cause after it."""
    for text in (noise[-TAIL:], noise[-(TAIL - 100) :] + "\n" + REAL_CAUSE + "\n"):
        started = time.perf_counter()
        found = ex.explain(ex.Evidence(text, exit_code=1, host=False))
        elapsed = time.perf_counter() - started
        assert elapsed < 2.0, (case, elapsed)  # about 0.3 s at worst; the old matcher took 17 s
    assert found is not None and found.id == "module-missing", case


def test_a_line_longer_than_the_bound_is_read_up_to_it() -> None:
    early = "x" * 100 + " No space left on device" + "y" * 5000
    late = "y" * ex.MAX_LINE + " No space left on device"
    assert ex.explain(ex.Evidence(early, exit_code=1, host=False)) is not None
    assert ex.explain(ex.Evidence(late, exit_code=1, host=False)) is None


def test_after_a_failed_run_the_tail_it_kept_is_explained_quickly() -> None:
    """What `run` does when a job fails: its output passes through OutputTail (the last
    64 KiB), then the explainer reads that tail."""
    from gpulaunch.jobs.execute import _explain

    tail = OutputTail()
    for _, noise in ADVERSARIAL:
        tail.add(noise.encode())
    tail.add(SLASHES.encode())  # the last 64 KiB: every signature before `killed` reads it all
    tail.add(b"Killed\n")
    job: Any = type("J", (), {"build": None, "spec": type("S", (), {"project": None})()})()
    started = time.perf_counter()
    found = _explain(job, tail.text(), 137)
    assert time.perf_counter() - started < 2.0
    assert found is not None and found.id == "killed"
    assert found.line == "Killed"


def _succeeded(hostile: Hostile) -> str:
    assert hostile.invoke("run", "--no-container", "train.py").code == 0
    (record,) = (hostile.project / ".gpulaunch" / "runs").glob("*.json")
    run_id: str = record.stem
    return run_id


def _smoke_log(hostile: Hostile, run_id: str) -> Path:
    logs = hostile.project / ".gpulaunch" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"smoke-20261205-{run_id[-6:]}.log"


def test_explain_run_id_reads_a_recorded_log_of_adversarial_lines_quickly(
    hostile: Hostile,
) -> None:
    """`explain RUN_ID` of a run whose record holds no explanation reads its smoke log: 64 KiB
    of adversarial lines, then the real cause."""
    run_id = _succeeded(hostile)
    _smoke_log(hostile, run_id).write_text(SLASHES + "Killed\n")
    started = time.perf_counter()
    out = hostile.invoke_unchanged("explain", run_id)
    assert time.perf_counter() - started < 5.0  # the old matcher took about 15 s
    assert out.code == 0, out.stderr
    assert out.stdout.startswith("cause: the job was killed with SIGKILL")


@pytest.mark.parametrize("kind", ["fifo", "link-out", "folder"])
def test_explain_reads_a_run_s_smoke_log_only_as_a_regular_file(
    hostile: Hostile, deadline: None, kind: str
) -> None:
    """The smoke log lies in the job-writable project: a FIFO there used to block `explain`
    for ever, a link made it read (and print a line of) a file outside."""
    run_id = _succeeded(hostile)
    log = _smoke_log(hostile, run_id)
    if kind == "fifo":
        os.mkfifo(log)
    elif kind == "link-out":
        secret = hostile.outside / "secret.log"
        secret.write_text("No space left on device: secret-token-in-a-private-file\n")
        log.symlink_to(secret)
    else:
        log.mkdir()
    out = hostile.invoke_unchanged("explain", run_id)
    line = out.assert_clean_error(2, "RUN_ID|LOGFILE", run_id)
    assert "secret" not in out.stdout + out.stderr
    assert ("symbolic link" if kind == "link-out" else "not a regular file") in line


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_explain_logfile_must_be_a_regular_file(
    hostile: Hostile, deadline: None, kind: str
) -> None:
    if kind == "fifo":
        os.mkfifo(hostile.project / "job.log")
        target = "job.log"
    elif kind == "folder":
        (hostile.project / "job.log").mkdir()
        target = "job.log"
    else:
        target = "/dev/zero"
    out = hostile.invoke_unchanged("explain", target)
    line = out.assert_clean_error(2, "RUN_ID|LOGFILE", target)
    assert "not a regular file" in line


# -- output paths: judged by where they resolve ------------------------------------------
def _alias_and_planted_link(hostile: Hostile) -> Path:
    """An alias of the project outside it (a link the user made: followed), and a link a job
    planted inside the project pointing at a folder outside it (never followed)."""
    (hostile.outside / "alias").symlink_to(hostile.project)
    victim = hostile.outside / "victim"
    victim.mkdir()
    (hostile.project / ".gpulaunch").mkdir(exist_ok=True)
    (hostile.project / ".gpulaunch" / "evil").symlink_to(victim)
    return victim


def test_render_output_through_an_alias_meets_the_planted_link(hostile: Hostile) -> None:
    """Spelled outside the project, resolved inside it: the planted link is refused (it used
    to be followed, writing the Dockerfile into the folder it points at)."""
    _alias_and_planted_link(hostile)
    target = str(hostile.outside / "alias" / ".gpulaunch" / "evil" / "Dockerfile")
    out = hostile.invoke_unchanged("render", "-o", target)
    out.assert_clean_error(2, "--output", "symbolic link", "evil")


def test_render_output_spelled_with_dot_dot_is_written_where_it_resolves(
    hostile: Hostile,
) -> None:
    (hostile.project / "sub").mkdir()
    out = hostile.invoke("render", "-o", "sub/../Dockerfile.out")
    assert out.code == 0, out.stderr
    assert (hostile.project / "Dockerfile.out").read_text().startswith("# Generated by gpulaunch")


@pytest.mark.parametrize(
    "spelling",
    ["alias/.gpulaunch/evil/junit.xml", "alias/sub/../.gpulaunch/evil/junit.xml"],
)
def test_junit_through_an_alias_meets_the_planted_link(hostile: Hostile, spelling: str) -> None:
    from gpulaunch.ci.report import check_junit_file

    _alias_and_planted_link(hostile)
    (hostile.project / "sub").mkdir()
    path = hostile.outside / spelling
    with pytest.raises(ConfigError, match=r"^--junit: .*evil is a symbolic link"):
        check_junit_file(path, hostile.project, False)
    out = hostile.invoke_unchanged("smoke", "--dry-run", "--junit", str(path), "train.py")
    out.assert_clean_error(2, "--junit", "symbolic link")


def test_junit_inside_the_project_is_written_by_a_walk_from_it(hostile: Hostile) -> None:
    from gpulaunch.ci.report import check_junit_file

    (hostile.outside / "alias").symlink_to(hostile.project)
    target = check_junit_file(hostile.outside / "alias" / "junit.xml", hostile.project, False)
    real = Path(os.path.realpath(hostile.project))
    assert target == (real / "junit.xml", real)


@pytest.mark.parametrize(
    "where",
    ["project/gpulaunch.yaml", "project/train.py", "alias/train.py", "project/new.md"],
)
def test_step_summary_is_never_appended_inside_the_project(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    (hostile.outside / "alias").symlink_to(hostile.project)
    base, name = where.split("/")
    folder = hostile.project if base == "project" else hostile.outside / "alias"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder / name))
    out = hostile.invoke_unchanged("smoke", "--dry-run", "train.py")
    out.assert_clean_error(2, "$GITHUB_STEP_SUMMARY", "inside the project")


def test_step_summary_outside_the_project_is_accepted(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.ci.report import check_summary_file

    summary = hostile.outside / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert hostile.invoke_unchanged("smoke", "--dry-run", "train.py").code == 0
    resolved = check_summary_file(summary, hostile.project)
    assert resolved == Path(os.path.realpath(summary))


# -- catalog update: bounded reads, a bounded file that reads back and merges --------------
PY = ["3.11", "3.12"]


def _serve_pypi(
    monkeypatch: pytest.MonkeyPatch, torch_releases: dict[str, list[dict[str, Any]]]
) -> Iterator[Any]:
    from catalog.fake_pypi import FakeIndex, project, serve, torch_files, wheel

    with serve(FakeIndex()) as index:
        releases = {"2.15.0": torch_files("2.15.0", PY, ">=3.11", "2026-10-28"), **torch_releases}
        index.pages["/pypi/torch/json"] = project("torch", releases, "2.15.0", [])
        vision = {
            "0.30.0": [wheel("torchvision", "0.30.0", "py3-none-any", ">=3.10", "2026-10-28")]
        }
        index.pages["/pypi/torchvision/json"] = project(
            "torchvision", vision, "0.30.0", ["torch>=2.15.0"]
        )
        index.pages["/pypi/torchaudio/json"] = project("torchaudio", {}, "2.15.0", [])
        monkeypatch.setenv("GPULAUNCH_PYPI_URL", f"{index.url}/pypi")
        monkeypatch.setenv("GPULAUNCH_TORCH_INDEX_URL", "http://127.0.0.1:1/whl")
        monkeypatch.setenv("GPULAUNCH_DOCKER_HUB_URL", "http://127.0.0.1:1")
        yield index


@pytest.fixture
def pypi_many(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """PyPI with 300 new torch 2.15 patches (a hostile or broken mirror)."""
    from catalog.fake_pypi import torch_files

    many = {
        f"2.15.{n}": torch_files(f"2.15.{n}", PY, ">=3.11", "2026-11-20") for n in range(1, 301)
    }
    yield from _serve_pypi(monkeypatch, many)


def _overlay_file(tmp_path: Path) -> Path:
    return tmp_path / "_config" / "gpulaunch" / "catalog.d" / "pypi.yaml"


def test_catalog_update_reads_and_writes_a_bounded_number_of_releases(
    hostile: Hostile, pypi_many: Any, tmp_path: Path
) -> None:
    from gpulaunch.catalog.update import MAX_NEW_RELEASES, READS_PER_COMPANION

    out = hostile.invoke_unchanged("catalog", "update")
    assert out.code == 0, out.stderr
    assert "older releases not read" in out.stdout
    import yaml

    doc = yaml.safe_load(_overlay_file(tmp_path).read_text())
    (row,) = doc["torch"]["releases"]
    patches = [p["torch"] for p in row["patches"]]
    assert patches == [f"2.15.{n}" for n in range(301 - MAX_NEW_RELEASES, 301)]  # the newest
    per_release = [hit for hit in pypi_many.hits if hit.count("/") > 3]
    assert len(per_release) <= MAX_NEW_RELEASES * 2 * READS_PER_COMPANION


@pytest.mark.parametrize("odd", ["\x7f", "\x85", "\u2028", "\x1b[2J", "\ud800", "\U0001f600"])
def test_a_catalog_server_s_odd_date_never_breaks_render(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, odd: str
) -> None:
    """A server's upload date lands in a note only when it is a date; the file reads back and
    `render` still loads the catalog."""
    from catalog.fake_pypi import torch_files

    files = torch_files("2.15.99", PY, ">=3.11", "2026-11-20")
    for item in files:
        item["upload_time"] = f"2026-1{odd}-01"
    for _ in _serve_pypi(monkeypatch, {"2.15.99": files}):
        out = hostile.invoke_unchanged("catalog", "update")
        assert out.code == 0, out.stderr
    import yaml

    doc = yaml.safe_load(_overlay_file(tmp_path).read_bytes().decode("utf-8"))
    (patch,) = doc["torch"]["releases"][0]["patches"]
    assert patch["note"].startswith("PyPI release; ")
    render = hostile.invoke_unchanged("render")
    assert render.code == 0, render.stderr
    assert "FROM local/base:bookworm" in render.stdout


@pytest.mark.parametrize("odd", ["\x7f", "\x85", "\u2028", "\x1b[2J", "\U0001f600", "\\\"'#: "])
def test_the_overlay_writer_s_text_reads_back_as_written(odd: str) -> None:
    """Any text the update puts in the file comes back the same through the overlay reader
    (the old writer put DEL, NEL and U+2028 in raw: a reader error, or a changed note)."""
    from datetime import date

    from gpulaunch.catalog.overlay import parse_overlay
    from gpulaunch.catalog.update import render_overlay

    doc = {"overlay_version": "1", "research_date": "2026-12-01", "note": f"a{odd}b"}
    text = render_overlay(doc, date(2026, 12, 1))
    assert parse_overlay(text.encode("utf-8"), Path("pypi.yaml")).data == doc


def test_an_overlay_that_would_not_read_back_is_not_written(
    hostile: Hostile, pypi_many: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate has no YAML spelling the reader takes: refused, nothing written."""
    from gpulaunch.catalog import update

    real = update.build_update

    def odd(*args: Any) -> Any:
        report = real(*args)
        report.overlay["note"] = "bad \ud800 text"
        return report

    monkeypatch.setattr(update, "build_update", odd)
    out = hostile.invoke_unchanged("catalog", "update")
    out.assert_clean_error(2, "catalog update", "would not read back")
    assert not _overlay_file(tmp_path).exists()


def test_a_version_too_long_to_be_one_is_not_read(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from catalog.fake_pypi import torch_files

    huge = "2.15." + "9" * 5000  # int() of it is refused by Python itself (4300 digits)
    for _ in _serve_pypi(monkeypatch, {huge: torch_files(huge, PY, ">=3.11", "2026-11-20")}):
        out = hostile.invoke_unchanged("catalog", "update")
    assert out.code == 0, out.stderr
    assert "9" * 40 not in _overlay_file(tmp_path).read_text()


def test_an_overlay_over_the_size_cap_is_not_written(
    hostile: Hostile, pypi_many: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.catalog import update

    monkeypatch.setattr(update, "MAX_OVERLAY_BYTES", 2048)
    out = hostile.invoke_unchanged("catalog", "update")
    out.assert_clean_error(2, "catalog update", "KiB", "nothing written")
    assert not _overlay_file(tmp_path).exists()


def test_render_output_in_new_folders_inside_the_project_is_written(hostile: Hostile) -> None:
    (hostile.outside / "alias").symlink_to(hostile.project)
    out = hostile.invoke("render", "-o", str(hostile.outside / "alias" / "new" / "sub" / "Df"))
    assert out.code == 0, out.stderr
    assert (hostile.project / "new" / "sub" / "Df").read_text().startswith("# Generated")
    missing = hostile.invoke_unchanged("render", "-o", str(hostile.outside / "nope" / "Df"))
    missing.assert_clean_error(2, "--output", "does not exist")
