"""The build loop without an engine (issue 32): what the code layer holds, which folders jobs
write stay out of the context and the tag, and how a build shows its steps. The same on the
real engine: tests/e2e/test_build_loop.py."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hostile.conftest import Hostile

from gpulaunch.config import validate_data
from gpulaunch.engine.context import mirror, write_tar
from gpulaunch.image.build import BuildOptions, Progress, prepare_build
from gpulaunch.project.layout import OUTPUT_FOLDERS, output_notes


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    """A project with a minimal config, and the hostile corpus' runner and snapshots."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "proj" / "train.py").write_text("print('ok')\n")
    h = Hostile(tmp_path / "proj", tmp_path / "outside", monkeypatch)
    h.write_config()
    return h


OFFLINE = {
    "name": "loop",
    "image": {
        "base": "local/base:bookworm",
        "python": "3.11",
        "torch": "2.4.1",
        "cuda": "cpu",
        "ca_cert": "certs/corp.pem",
        "pip": {"no_index": True, "find_links": ["wheels"]},
    },
}


def _offline(project: Path) -> None:
    (project / "wheels").mkdir()
    (project / "wheels" / "torch-2.4.1-cp311-none-any.whl").write_bytes(b"PK" * 1000)
    (project / "certs").mkdir()
    (project / "certs" / "corp.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (project / "train.py").write_text("print('train')\n")
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")


def _prepare(project: Path, builder: str = "buildkit", config: dict | None = None) -> object:
    cfg = validate_data(config or OFFLINE)
    return prepare_build(cfg, project, builder, BuildOptions())  # type: ignore[arg-type]


# -- §1 the code layer holds code ---------------------------------------------------------


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
def test_the_code_folder_holds_no_wheelhouse_or_ca_bundle(tmp_path: Path, builder: str) -> None:
    _offline(tmp_path)
    prepared = _prepare(tmp_path, builder)
    placed = {e.rel: e.sent_as for e in prepared.request.entries}  # type: ignore[attr-defined]

    assert placed["train.py"] == "workspace/train.py"
    assert placed["pkg/__init__.py"] == "workspace/pkg/__init__.py"
    assert placed["wheels/torch-2.4.1-cp311-none-any.whl"].startswith("inputs/wheels/")
    assert placed["certs/corp.pem"] == "inputs/certs/corp.pem"
    # the final COPY reads the code folder only; the steps read the inputs where they are
    text = prepared.dockerfile  # type: ignore[attr-defined]
    assert "COPY --chown=${GL_UID}:${GL_GID} workspace /workspace\n" in text
    assert " . /workspace" not in text
    assert '"inputs/certs/corp.pem"' in text and "inputs/wheels" in text

    # what the engine receives, for each builder's way of sending it
    entries = list(prepared.request.entries)  # type: ignore[attr-defined]
    buf = io.BytesIO()
    write_tar(buf, tmp_path, entries, {})
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = set(tar.getnames())
    (tmp_path.parent / f"mirror-{builder}").mkdir()
    mirror(tmp_path, entries, tmp_path.parent / f"mirror-{builder}")
    copied = {
        p.relative_to(tmp_path.parent / f"mirror-{builder}").as_posix()
        for p in (tmp_path.parent / f"mirror-{builder}").rglob("*")
    }
    for sent in (names, copied):
        code = {n for n in sent if n.startswith("workspace/")}
        # (the folder that held the CA bundle stays, empty)
        assert code == {
            "workspace/train.py",
            "workspace/pkg",
            "workspace/pkg/__init__.py",
            "workspace/certs",
        }
        assert "inputs/wheels/torch-2.4.1-cp311-none-any.whl" in sent
        assert "workspace" in sent


def test_an_empty_project_still_sends_the_code_folder(tmp_path: Path) -> None:
    buf = io.BytesIO()
    write_tar(buf, tmp_path, [], {})
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert tar.getnames() == ["workspace"]
    (tmp_path / "m").mkdir()
    mirror(tmp_path, [], tmp_path / "m")
    assert (tmp_path / "m" / "workspace").is_dir()


def test_a_wheelhouse_behind_a_link_is_mounted_from_its_real_folder(tmp_path: Path) -> None:
    _offline(tmp_path)
    (tmp_path / "vendor").mkdir()
    (tmp_path / "wheels").rename(tmp_path / "vendor" / "wh")
    (tmp_path / "wheels").symlink_to("vendor/wh")
    prepared = _prepare(tmp_path)
    placed = {e.rel: e.sent_as for e in prepared.request.entries}  # type: ignore[attr-defined]
    assert placed["wheels"] == "inputs/wheels"  # the link itself, with what it points at
    assert placed["vendor/wh/torch-2.4.1-cp311-none-any.whl"].startswith("inputs/vendor/wh/")
    assert "source=inputs/vendor/wh," in prepared.dockerfile  # type: ignore[attr-defined]


# -- §2 outputs never rebuild ---------------------------------------------------------------


def _write_outputs(project: Path) -> None:
    """What jobs and trainers write into the project."""
    for rel in (
        "checkpoints/step-100.bin",
        "logs/nccl/nccl.host.12.log",
        "lightning_logs/version_0/hparams.yaml",
        "outputs/2026-01-01/10-00-00/.hydra/config.yaml",
        "multirun/2026-01-01/0/main.log",
        "runs/Jan01_10-00-00_host/events.out.tfevents.1",
        "trainer_output/checkpoint-500/trainer_state.json",
        "wandb/run-20260101_100000-abc/files/config.yaml",
        "mlruns/0/meta.yaml",
    ):
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("written by a job\n")


@pytest.mark.parametrize("ignore", [None, "", ".git\n"])
def test_what_jobs_write_changes_neither_the_context_nor_the_tag(
    tmp_path: Path, ignore: str | None
) -> None:
    """With gpulaunch's default rules, an empty .dockerignore, or one of the project's own."""
    (tmp_path / "train.py").write_text("print('train')\n")
    if ignore is not None:
        (tmp_path / ".dockerignore").write_text(ignore)
    config = {**OFFLINE, "image": {"torch": "none"}, "launch": {"checkpoint_dir": "checkpoints"}}
    before = _prepare(tmp_path, config=config)
    _write_outputs(tmp_path)
    after = _prepare(tmp_path, config=config)

    assert after.tag == before.tag  # type: ignore[attr-defined]
    sent = [e.rel for e in after.request.entries]  # type: ignore[attr-defined]
    assert sent == ["train.py"], sent


def test_an_output_folder_holding_the_projects_code_stays(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("from outputs import heads\n")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "heads.py").write_text("X = 1\n")
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "__init__.py").write_text("")
    (tmp_path / ".dockerignore").write_text("")
    prepared = _prepare(tmp_path, config={**OFFLINE, "image": {"torch": "none"}})
    sent = {e.rel for e in prepared.request.entries}  # type: ignore[attr-defined]
    assert {"outputs/heads.py", "wandb/__init__.py"} <= sent
    notes = output_notes(tmp_path)
    assert "outputs/ stays in the build context: Python modules the project imports" in (
        "\n".join(notes)
    )


def test_a_users_exception_rule_brings_an_output_folder_back(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "baseline.json").write_text("{}")
    (tmp_path / ".dockerignore").write_text("!runs\n")
    prepared = _prepare(tmp_path, config={**OFFLINE, "image": {"torch": "none"}})
    assert "runs/baseline.json" in {e.rel for e in prepared.request.entries}  # type: ignore[attr-defined]


def test_init_says_which_output_folders_it_leaves_out_and_why(cli: Hostile) -> None:
    (cli.project / "gpulaunch.yaml").unlink()
    _write_outputs(cli.project)
    result = cli.invoke("init", "--yes", "--torch", "none")
    assert result.code == 0, result.stderr
    for name in ("wandb", "lightning_logs", "mlruns", "multirun", "logs/nccl"):
        line = f"{name}/ is left out of the build context and the image tag: {OUTPUT_FOLDERS[name]}"
        assert line in result.stderr, result.stderr


# -- §3 progress ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "step", "total", "current"),
    [
        ("#12 [stage-0  7/10] RUN pip install -r r.txt", 7, 10, "RUN pip install -r r.txt"),
        ("#4 [ 2/12] RUN python3 -m venv /opt/venv", 2, 12, "RUN python3 -m venv /opt/venv"),
        ("#15 [stage-0 11/12] COPY workspace /workspace", 11, 12, "COPY workspace /workspace"),
        ("#9 [builder   3/120] RUN make", 3, 120, "RUN make"),
        ("Step 10/12 : ENV A=1", 10, 12, "ENV A=1"),
    ],
)
def test_progress_reads_the_step_for_any_step_count(
    line: str, step: int, total: int, current: str
) -> None:
    progress = Progress()
    assert progress.feed("#1 [internal] load build definition from Dockerfile") is False
    assert progress.feed(line) is True
    assert (progress.step, progress.total, progress.current) == (step, total, current)


def test_a_step_named_again_is_not_fresh() -> None:
    """BuildKit names a step again when its output resumes: one plain line per step."""
    progress = Progress()
    fresh = []
    for line in (
        "#5 [2/3] RUN a",
        "#6 [3/3] RUN b",
        "#5 [2/3] RUN a",
        "#5 0.3 out",
        "#6 [3/3] RUN b",
    ):
        if progress.feed(line):
            fresh.append(progress.fresh)
    assert fresh == [True, True, False, False]


@pytest.mark.parametrize("command", [("build",), ("run", "train.py")])
def test_an_unknown_progress_mode_is_a_usage_error(cli: Hostile, command: tuple[str, ...]) -> None:
    outcome = cli.invoke_unchanged(*command, "--progress", "loud")
    outcome.assert_clean_error(2, "--progress", "'loud'")


class _StepEngine:
    """Just enough of the Docker seam for a build: it reports BuildKit plain lines."""

    LINES = (
        "#1 [internal] load build definition from Dockerfile",
        "#5 [stage-0  1/2] RUN make a",
        "#5 0.101 building a",
        "#6 [stage-0  2/2] RUN make b",
        "#5 [stage-0  1/2] RUN make a",  # BuildKit names a step again when its output resumes
        "#5 DONE 0.2s",
        "#6 DONE 0.3s",
    )

    def builder_key(self) -> tuple[object, ...]:
        return ("stub",)

    def builder_kind(self) -> str:
        return "buildkit"

    def image_exists(self, _tag: str) -> bool:
        return False

    def image_id(self, _tag: str) -> None:
        return None

    def build(self, _req: object, on_line: Any, _builder: object) -> None:
        for line in self.LINES:
            on_line(line)

    def api(self) -> object:
        from gpulaunch.errors import EngineError

        raise EngineError("no engine API here")


@pytest.mark.parametrize("mode", ["plain", "auto", "quiet"])
def test_off_a_terminal_each_step_is_one_line_and_quiet_shows_none(
    cli: Hostile, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    from gpulaunch.cli.image import build_with_progress
    from gpulaunch.config import load_config

    cli.monkeypatch.chdir(cli.project)
    cfg = load_config(cli.project / "gpulaunch.yaml")
    opts = BuildOptions(builder="buildkit", rebuild=True)
    outcome = build_with_progress(cfg, cli.project, opts, _StepEngine(), progress=mode)
    err = capsys.readouterr().err.splitlines()
    if mode == "quiet":
        assert err == []
        return
    assert [line.rsplit(" (", 1)[0] for line in err[:-1]] == [
        "step 1/2: RUN make a",
        "step 2/2: RUN make b",
    ]
    assert err[-1].startswith(f"built {outcome.tag} with buildkit in ")
    assert err[-1].endswith(f"; log: {outcome.log_path}")


# -- the wheelhouse is read once, not at every build ------------------------------------------


def test_a_big_file_is_read_again_only_when_its_stat_changes(
    cli: Hostile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpulaunch.engine import context
    from gpulaunch.image.build import run_build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(context, "_RACY_NS", 0)  # ctime cannot be moved back in a test
    _offline(cli.project)
    wheel = cli.project / "wheels" / "torch-2.4.1-cp311-none-any.whl"
    wheel.write_bytes(b"A" * (2 << 20))
    cfg = validate_data(OFFLINE)
    first = run_build(cfg, cli.project, _StepEngine(), BuildOptions(rebuild=True))
    digested: list[int] = []  # the sizes of the files whose content was read to hash it
    file_digest = context.hashlib.file_digest

    def counted(fh: Any, name: str) -> Any:
        digested.append(os.fstat(fh.fileno()).st_size)
        return file_digest(fh, name)

    monkeypatch.setattr(context.hashlib, "file_digest", counted)
    prepared = _prepare(cli.project)
    assert prepared.tag == first.tag  # type: ignore[attr-defined]
    assert (2 << 20) not in digested  # its digest came from the build's cache

    stat = wheel.stat()
    wheel.write_bytes(b"B" * (2 << 20))  # same size, same times: only ctime tells
    os.utime(wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = _prepare(cli.project)
    assert changed.tag != first.tag  # type: ignore[attr-defined]
    assert digested.count(2 << 20) == 1  # read again: its stat changed
