"""`gpulaunch prune` (gpulaunch/image/prune.py, gpulaunch/cli/prune.py) against a fake engine:
which images are gpulaunch's, why each kept one stays, that removal is by id and never forced,
that --dry-run only lists; the notice `build` prints; the engine seam's parsing of the SDK's
answers (gpulaunch/engine/docker_api.py). tests/e2e/test_prune.py shows it on the real engine."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from gpulaunch.cli import app
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.image import prune as core
from gpulaunch.records.history import recorded_images
from gpulaunch.records.store import RunRecord

MANAGED = {"io.gpulaunch.managed": "true", "io.gpulaunch.project": "proj"}
NOW = 1_800_000_000


def image(
    ident: str, *tags: str, age: int = 0, size: int = 100, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "id": f"sha256:{ident}",
        "tags": list(tags),
        "created": NOW - age,
        "size": size,
        "labels": dict(MANAGED if labels is None else labels),
    }


class FakeEngine:
    """The three calls prune makes; `refuse` maps a ref to the engine's 409 message."""

    def __init__(self, images: list[dict[str, Any]], users: Sequence[dict[str, str]] = ()) -> None:
        self.images = images
        self.users = list(users)
        self.removed: list[str] = []
        self.refuse: dict[str, str] = {}
        self.untag_only: set[str] = set()

    def managed_images(self) -> list[dict[str, Any]]:
        return [dict(i) for i in self.images]

    def image_users(self) -> list[dict[str, str]]:
        return list(self.users)

    def remove_image(self, ref: str) -> dict[str, str]:
        if ref in self.refuse:
            return {"outcome": "refused", "reason": self.refuse[ref]}
        self.removed.append(ref)
        return {"outcome": "untagged" if ref in self.untag_only else "deleted", "reason": ""}


def record(run_id: str, tag: str = "", image_id: str = "") -> RunRecord:
    return RunRecord.from_json({"id": run_id, "image": {"tag": tag, "id": image_id}})


def by_tag(report: core.Report) -> dict[str, list[str]]:
    """First tag -> reasons (kept) or [outcome] (removed)."""
    found = {d.image.tags[0]: list(d.reasons) for d in report.kept}
    found.update({d.image.tags[0]: [d.outcome] for d in report.removed})
    return found


# -- which images are gpulaunch's -----------------------------------------------------------
def test_only_images_with_the_managed_label_and_a_build_tag_of_their_project_are_owned() -> None:
    rows = [
        image("a1", "proj:gl-0123456789ab"),
        image("b2", "proj:gl-111111111111", labels={"io.gpulaunch.project": "proj"}),  # no label
        image("c3", "proj:gl-222222222222", labels={**MANAGED, "io.gpulaunch.managed": "yes"}),
        image("d4", "proj-copy:v1"),  # built FROM one of ours: labels inherited, not our tag
        image("e5", "proj:gl-33333333333"),  # 11 hex: not a tag build.py makes
        image("f6"),  # dangling
        image("g7", "proj:latest"),  # latest alone proves nothing
        image("h8", "other:gl-444444444444", labels={**MANAGED, "io.gpulaunch.project": "other"}),
        image("i9", "other:gl-555555555555"),  # project label proj, tag of another repository
    ]
    assert [i.id for i in core.owned(rows, "proj")] == ["sha256:a1"]
    assert [i.id for i in core.owned(rows, None)] == ["sha256:a1", "sha256:h8"]


def test_a_look_alike_without_the_label_is_never_touched_even_with_keep_zero() -> None:
    engine = FakeEngine(
        [
            image("a1", "proj:gl-0123456789ab", age=10),
            image("b2", "proj:gl-111111111111", age=20, labels={"io.gpulaunch.project": "proj"}),
        ]
    )
    report = core.prune(engine, project="proj", keep=0)
    assert engine.removed == ["sha256:a1"]
    assert [d.image.id for d in report.removed] == ["sha256:a1"]
    assert report.kept == []


# -- why an image stays ---------------------------------------------------------------------
def test_each_kept_image_says_why_and_the_rest_is_removed_by_id() -> None:
    engine = FakeEngine(
        [
            image("n1", "proj:gl-aaaaaaaaaaa1", "proj:latest", age=1),
            image("n2", "proj:gl-aaaaaaaaaaa2", age=2),
            image("run", "proj:gl-aaaaaaaaaaa3", age=3),
            image("stop", "proj:gl-aaaaaaaaaaa4", age=4),
            image("rec", "proj:gl-aaaaaaaaaaa5", age=5),
            image("recid", "proj:gl-aaaaaaaaaaa6", age=6),
            image("mine", "proj:gl-aaaaaaaaaaa7", "proj:mine", age=7),
            image("old", "proj:gl-aaaaaaaaaaa8", age=8, size=300),
            image("older", "proj:gl-aaaaaaaaaaa9", age=9, size=400),
        ],
        users=[
            {"name": "job-a", "state": "running", "image_id": "sha256:run"},
            {"name": "job-b", "state": "exited", "image_id": "sha256:stop"},
        ],
    )
    records = [
        record("20261201-000000-aaaaaa", tag="proj:gl-aaaaaaaaaaa5"),
        record("20261130-000000-bbbbbb", image_id="sha256:recid"),
    ]
    report = core.prune(engine, project="proj", keep=2, recorded=recorded_images(records))
    assert by_tag(report) == {
        "proj:gl-aaaaaaaaaaa1": ["among the newest 2", "tagged proj:latest"],
        "proj:gl-aaaaaaaaaaa2": ["among the newest 2"],
        "proj:gl-aaaaaaaaaaa3": ["used by container job-a (running)"],
        "proj:gl-aaaaaaaaaaa4": ["used by container job-b (exited)"],
        "proj:gl-aaaaaaaaaaa5": ["named by run record 20261201-000000-aaaaaa"],
        "proj:gl-aaaaaaaaaaa6": ["named by run record 20261130-000000-bbbbbb"],
        "proj:gl-aaaaaaaaaaa7": ["also tagged proj:mine (not a gpulaunch tag)"],
        "proj:gl-aaaaaaaaaaa8": ["removed"],
        "proj:gl-aaaaaaaaaaa9": ["removed"],
    }
    assert engine.removed == ["sha256:old", "sha256:older"]
    assert report.removed_bytes == 700


def test_newest_is_by_creation_time_per_project_whatever_the_engines_order() -> None:
    other = {**MANAGED, "io.gpulaunch.project": "other"}
    engine = FakeEngine(
        [
            image("p-old", "proj:gl-000000000001", age=50),
            image("o-new", "other:gl-000000000002", age=1, labels=other),
            image("p-new", "proj:gl-000000000003", age=5),
            image("o-old", "other:gl-000000000004", age=60, labels=other),
        ]
    )
    report = core.prune(engine, project=None, keep=1)
    assert sorted(engine.removed) == ["sha256:o-old", "sha256:p-old"]
    assert report.projects == ["other", "proj"]


def test_dry_run_lists_but_removes_nothing() -> None:
    engine = FakeEngine(
        [image("a", "proj:gl-000000000001", age=9), image("b", "proj:gl-000000000002")]
    )
    report = core.prune(engine, project="proj", keep=1, dry_run=True)
    assert engine.removed == []
    assert [(d.image.id, d.outcome) for d in report.removed] == [("sha256:a", "would remove")]


def test_an_engine_refusal_keeps_the_image_with_the_engines_reason() -> None:
    """A container started between the listing and the removal: the engine refuses (never
    forced) and the image is reported as kept, not as an error."""
    engine = FakeEngine([image("a", "proj:gl-000000000001")])
    engine.refuse["sha256:a"] = "conflict: image is being used by stopped container 1234"
    report = core.prune(engine, project="proj", keep=0)
    assert report.removed == []
    assert report.kept[0].reasons == [
        "the engine refused: conflict: image is being used by stopped container 1234"
    ]
    assert report.removed_bytes == 0


def test_an_image_under_two_build_tags_loses_the_extra_tag_then_goes_by_id() -> None:
    engine = FakeEngine([image("a", "proj:gl-000000000001", "proj:gl-000000000002")])
    report = core.prune(engine, project="proj", keep=0)
    assert engine.removed == ["proj:gl-000000000002", "sha256:a"]
    assert report.removed[0].outcome == "removed"


def test_an_image_a_child_still_needs_is_reported_as_untagged_and_not_counted() -> None:
    engine = FakeEngine([image("a", "proj:gl-000000000001", size=500)])
    engine.untag_only.add("sha256:a")
    report = core.prune(engine, project="proj", keep=0)
    assert report.removed[0].outcome == "untagged"
    assert report.removed_bytes == 0


def test_records_name_images_by_id_or_tag_newest_record_first() -> None:
    named = recorded_images(
        [
            record("20261202-000000-aaaaaa", tag="proj:gl-1", image_id="sha256:x"),
            record("20261201-000000-bbbbbb", tag="proj:gl-1"),
            RunRecord.from_json({"id": "20261129-000000-dddddd"}),  # host mode: no image
        ]
    )
    assert named == {"proj:gl-1": "20261202-000000-aaaaaa", "sha256:x": "20261202-000000-aaaaaa"}


def test_negative_keep_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--keep"):
        core.prune(FakeEngine([]), project="proj", keep=-1)


# -- the notice after build -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "limit"),
    [
        (None, 10 * 1024**3),
        ("10G", 10 * 1024**3),
        ("500m", 500 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("3kb", 3 * 1024),
        ("123456", 123456),
        ("123456b", 123456),
        (" 1T ", 1024**4),
        ("off", None),
        ("OFF", None),
        ("0", None),
    ],
)
def test_notice_limit_reads_sizes(text: str | None, limit: int | None) -> None:
    env = {} if text is None else {"GPULAUNCH_PRUNE_NOTICE": text}
    assert core.notice_limit(env) == limit


@pytest.mark.parametrize("text", ["", "ten", "10 G", "1.5G", "-1", "10\u2028G", "10X", "9" * 16])
def test_a_bad_notice_limit_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^GPULAUNCH_PRUNE_NOTICE: .* is not a size"):
        core.notice_limit({"GPULAUNCH_PRUNE_NOTICE": text})


def test_notice_counts_the_older_images_only_and_names_prune() -> None:
    engine = FakeEngine(
        [
            image("cur", "proj:gl-000000000001", "proj:latest", size=5 * 1024**3),
            image("a", "proj:gl-000000000002", size=3 * 1024**3),
            image("b", "proj:gl-000000000003", size=3 * 1024**3),
            image("x", "x:gl-000000000004", size=50 * 1024**3),  # not this project's label
        ]
    )
    env = {"GPULAUNCH_PRUNE_NOTICE": "5G"}
    line = core.older_images_notice(engine, "proj", "proj:gl-000000000001", env)
    assert line == (
        "note: 2 older image(s) of proj take 6.0 GiB (over GPULAUNCH_PRUNE_NOTICE=5.0 GiB); "
        "`gpulaunch prune` removes those no container or recent run uses"
    )
    assert core.older_images_notice(engine, "proj", "proj:gl-000000000001", {}) is None
    off = {"GPULAUNCH_PRUNE_NOTICE": "off"}
    assert core.older_images_notice(engine, "proj", "proj:gl-000000000001", off) is None
    assert engine.removed == []


def test_human_size() -> None:
    assert [core.human_size(n) for n in (0, 1023, 1024, 1536 * 1024**2, 3 * 1024**4)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 GiB",
        "3.0 TiB",
    ]


# -- the command ----------------------------------------------------------------------------
@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "gpulaunch.yaml").write_text(
        "version: 1\nname: proj\nimage:\n  torch: none\n  cuda: cpu\n  python: '3.11'\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _use(monkeypatch: pytest.MonkeyPatch, engine: Any) -> None:
    import gpulaunch.cli.prune as cli

    monkeypatch.setattr(cli, "make_engine", lambda: engine)


def _seal_record(project: Path, run_id: str, tag: str, started: str) -> None:
    from gpulaunch.records.seal import seal

    runs = project / ".gpulaunch" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    data = {
        "schema_version": 1,
        "id": run_id,
        "started_at": started,
        "image": {"tag": tag, "id": None},
    }
    (runs / f"{run_id}.json").write_text(json.dumps(seal(data)))


def _recent(days: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(days=days)).isoformat().replace("+00:00", "Z")


def test_cli_json_reports_removed_and_kept_with_reasons(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(
        [
            image("new", "proj:gl-000000000001", "proj:latest", age=1),
            image("rec", "proj:gl-000000000002", age=2),
            image("old", "proj:gl-000000000003", age=3),
            image("stale", "proj:gl-000000000004", age=4),
        ]
    )
    _use(monkeypatch, engine)
    _seal_record(project, "20261201-000000-aaaaaa", "proj:gl-000000000002", _recent(2))
    _seal_record(project, "20261001-000000-bbbbbb", "proj:gl-000000000004", _recent(60))
    result = CliRunner().invoke(app, ["prune", "--keep", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [(d["tags"][0], d["outcome"]) for d in data["removed"]] == [
        ("proj:gl-000000000003", "removed"),
        ("proj:gl-000000000004", "removed"),  # its record is 60 days old
    ]
    assert [(d["tags"][0], d["reasons"]) for d in data["kept"]] == [
        ("proj:gl-000000000001", ["among the newest 1", "tagged proj:latest"]),
        ("proj:gl-000000000002", ["named by run record 20261201-000000-aaaaaa"]),
    ]
    assert data["removed_bytes"] == 200 and data["projects"] == ["proj"]
    assert data["dry_run"] is False and data["keep"] == 1
    assert engine.removed == ["sha256:old", "sha256:stale"]


def test_cli_include_recorded_drops_the_records_protection(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine([image("rec", "proj:gl-000000000002", age=2)])
    _use(monkeypatch, engine)
    _seal_record(project, "20261201-000000-aaaaaa", "proj:gl-000000000002", _recent(1))
    assert CliRunner().invoke(app, ["prune", "--keep", "0"]).exit_code == 0
    assert engine.removed == []
    result = CliRunner().invoke(app, ["prune", "--keep", "0", "--include-recorded"])
    assert result.exit_code == 0, result.output
    assert engine.removed == ["sha256:rec"]


def test_cli_a_forged_record_protects_nothing(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records are data: one without this user's seal (a job wrote it) is skipped."""
    engine = FakeEngine([image("rec", "proj:gl-000000000002", age=2)])
    _use(monkeypatch, engine)
    runs = project / ".gpulaunch" / "runs"
    runs.mkdir(parents=True)
    forged = {
        "schema_version": 1,
        "id": "20261201-000000-aaaaaa",
        "started_at": _recent(1),
        "image": {"tag": "proj:gl-000000000002"},
    }
    (runs / "20261201-000000-aaaaaa.json").write_text(json.dumps(forged))
    result = CliRunner().invoke(app, ["prune", "--keep", "0"])
    assert result.exit_code == 0, result.output
    assert engine.removed == ["sha256:rec"]
    assert "warning: skipped" in result.stderr


def test_cli_text_output(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine(
        [
            image("new", "proj:gl-000000000001", "proj:latest", age=1, size=2 * 1024**3),
            image("old", "proj:gl-000000000003", age=3, size=1024**3),
        ],
        users=[{"name": "gl-proj-x", "state": "exited", "image_id": "sha256:new"}],
    )
    _use(monkeypatch, engine)
    result = CliRunner().invoke(app, ["prune", "--keep", "0", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "would remove proj:gl-000000000003 (1.0 GiB)",
        "kept proj:gl-000000000001, proj:latest (2.0 GiB): used by container gl-proj-x "
        "(exited); tagged proj:latest",
        "would remove 1 image(s), up to 1.0 GiB (layers shared with a kept image stay); kept 1",
    ]
    assert engine.removed == []


def test_cli_dry_run_writes_nothing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine([image("old", "proj:gl-000000000003", age=3)])
    _use(monkeypatch, engine)
    home = Path(os.environ["XDG_CACHE_HOME"]).parent
    before = _files(project), _files(home)
    result = CliRunner().invoke(app, ["prune", "--keep", "0", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["removed"][0]["outcome"] == "would remove"
    assert (_files(project), _files(home)) == before
    assert engine.removed == []


def test_cli_nothing_to_prune(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, FakeEngine([]))
    result = CliRunner().invoke(app, ["prune"])
    assert (result.exit_code, result.stdout) == (0, "no gpulaunch images of proj\n")


def test_cli_all_projects_without_a_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = {**MANAGED, "io.gpulaunch.project": "other"}
    engine = FakeEngine(
        [
            image("p", "proj:gl-000000000001", age=5),
            image("o", "other:gl-000000000002", labels=other),
        ]
    )
    _use(monkeypatch, engine)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["prune", "--all-projects", "--keep", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["projects"] == ["other", "proj"]
    assert sorted(engine.removed) == ["sha256:o", "sha256:p"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prune", "--keep", "-1"], "--keep"),
        (["prune", "--keep", "x"], "--keep"),
        (["prune", "--nope"], "--nope"),
    ],
)
def test_cli_bad_flags_exit_2_in_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    engine = FakeEngine([image("old", "proj:gl-000000000003", age=3)])
    _use(monkeypatch, engine)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith("gpulaunch: error:") and message in first
    assert "Traceback" not in result.output
    assert engine.removed == []


def test_cli_without_a_config_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _use(monkeypatch, FakeEngine([image("old", "proj:gl-000000000003", age=3)]))
    result = CliRunner().invoke(app, ["prune"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "gpulaunch: error: gpulaunch.yaml: none here; prune needs the project's name",
        "hint: run it in the project folder, pass --config, or use --all-projects",
    ]


def test_cli_engine_error_exits_3(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Down(FakeEngine):
        def managed_images(self) -> list[dict[str, Any]]:
            raise EngineError("cannot list images: connection refused")

    _use(monkeypatch, Down([]))
    result = CliRunner().invoke(app, ["prune"])
    assert result.exit_code == 3
    assert result.stderr == "gpulaunch: error: cannot list images: connection refused\n"


def test_prune_notice_prints_one_line_and_never_fails_the_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpulaunch.cli.prune import prune_notice

    engine = FakeEngine(
        [image("cur", "proj:gl-000000000001"), image("a", "proj:gl-000000000002", size=2048)]
    )
    monkeypatch.setenv("GPULAUNCH_PRUNE_NOTICE", "1k")
    prune_notice("proj", "proj:gl-000000000001", engine)
    err = capsys.readouterr().err
    assert err.startswith("note: 1 older image(s) of proj take 2.0 KiB") and err.count("\n") == 1
    monkeypatch.setenv("GPULAUNCH_PRUNE_NOTICE", "lots")
    prune_notice("proj", "proj:gl-000000000001", engine)
    assert capsys.readouterr().err == (
        "warning: GPULAUNCH_PRUNE_NOTICE: 'lots' is not a size like 10G, 500M, 2GiB or off; "
        "no prune notice\n"
    )

    class Down(FakeEngine):
        def managed_images(self) -> list[dict[str, Any]]:
            raise EngineError("cannot list images: gone")

    monkeypatch.setenv("GPULAUNCH_PRUNE_NOTICE", "1k")
    prune_notice("proj", "proj:gl-000000000001", Down([]))
    assert capsys.readouterr().err == ""


# -- the engine seam ------------------------------------------------------------------------
class FakeApi:
    """The docker SDK's low-level client, as far as the prune calls use it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.remove_error: Exception | None = None
        self.remove_answer: list[dict[str, str]] = [{"Deleted": "sha256:a"}]

    def images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        self.calls.append(("images", filters))
        return [
            {
                "Id": "sha256:a",
                "RepoTags": ["proj:gl-000000000001", "<none>:<none>"],
                "Created": 5,
                "Size": 7,
                "Labels": {"io.gpulaunch.managed": "true"},
            },
            {"Id": "sha256:b", "RepoTags": None, "Created": "x", "Size": True, "Labels": None},
            "junk",
        ]

    def call(self, method: str, path: str, query: dict[str, Any]) -> list[Any]:
        """The stdlib client's GET /images/json and /containers/json, as the engine takes them."""
        if (method, path, query) == ("GET", "/containers/json", {"all": 1}):
            return self.containers(all=True)
        assert (method, path) == ("GET", "/images/json")
        (label,) = json.loads(query["filters"])["label"]
        return self.images({"label": label})

    def containers(self, all: bool) -> list[Any]:
        self.calls.append(("containers", all))
        return [
            {"Id": "c" * 64, "Names": ["/job"], "State": "exited", "ImageID": "sha256:a"},
            {"Id": "d" * 64, "Names": [], "State": "running", "ImageID": "sha256:b"},
        ]

    def remove_image(self, ref: str, force: bool, noprune: bool) -> list[dict[str, str]]:
        self.calls.append(("remove_image", (ref, force, noprune)))
        if self.remove_error is not None:
            raise self.remove_error
        return self.remove_answer


def _engine_with(api: FakeApi) -> Any:
    from gpulaunch.engine.docker_api import Engine

    engine = Engine(env={})
    engine._client = SimpleNamespace(api=api)
    engine._api = api  # type: ignore[assignment]
    return engine


def test_engine_lists_managed_images_by_label_and_every_container() -> None:
    api = FakeApi()
    engine = _engine_with(api)
    assert engine.managed_images() == [
        {
            "id": "sha256:a",
            "tags": ["proj:gl-000000000001"],
            "created": 5,
            "size": 7,
            "labels": {"io.gpulaunch.managed": "true"},
        },
        {"id": "sha256:b", "tags": [], "created": 0, "size": 0, "labels": {}},
    ]
    assert engine.image_users() == [
        {"name": "job", "state": "exited", "image_id": "sha256:a"},
        {"name": "d" * 12, "state": "running", "image_id": "sha256:b"},
    ]
    assert api.calls == [
        ("images", {"label": "io.gpulaunch.managed=true"}),
        ("containers", True),
    ]


def _api_error(status: int, text: str) -> Exception:
    import requests
    from docker.errors import APIError, NotFound

    response = requests.Response()
    response.status_code = status
    cls = NotFound if status == 404 else APIError
    return cls(text, response=response, explanation=text)


def test_engine_removes_never_forced_and_maps_the_answers() -> None:
    api = FakeApi()
    engine = _engine_with(api)
    assert engine.remove_image("sha256:a") == {"outcome": "deleted", "reason": ""}
    assert api.calls[-1] == ("remove_image", ("sha256:a", False, False))
    api.remove_answer = [{"Untagged": "proj:gl-000000000001"}]
    assert engine.remove_image("proj:gl-000000000001")["outcome"] == "untagged"
    api.remove_error = _api_error(409, "conflict: image is being used by stopped container c")
    assert engine.remove_image("sha256:a") == {
        "outcome": "refused",
        "reason": "conflict: image is being used by stopped container c",
    }
    api.remove_error = _api_error(404, "No such image")
    assert engine.remove_image("sha256:a")["outcome"] == "gone"
    api.remove_error = _api_error(500, "driver failed")
    with pytest.raises(EngineError, match=r"^cannot remove image sha256:a: driver failed$"):
        engine.remove_image("sha256:a")


def test_engine_list_errors_are_engine_errors() -> None:
    class Stalled(FakeApi):
        def images(self, filters: dict[str, str]) -> list[dict[str, Any]]:
            raise EngineError("read timed out")

    with pytest.raises(EngineError, match=r"^cannot list images: read timed out$"):
        _engine_with(Stalled()).managed_images()


def test_cli_touches_only_the_configs_project_unless_all_projects(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --all-projects another project's images are not even listed; with it, this
    project's records still keep their image."""
    other = {**MANAGED, "io.gpulaunch.project": "other"}
    engine = FakeEngine(
        [
            image("p", "proj:gl-000000000001", age=5),
            image("o", "other:gl-000000000002", labels=other),
        ]
    )
    _use(monkeypatch, engine)
    _seal_record(project, "20261201-000000-aaaaaa", "proj:gl-000000000001", _recent(1))
    result = CliRunner().invoke(app, ["prune", "--keep", "0", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["projects"] == ["proj"]
    assert engine.removed == []
    result = CliRunner().invoke(app, ["prune", "--keep", "0", "--all-projects", "--json"])
    assert result.exit_code == 0, result.output
    assert engine.removed == ["sha256:o"]
    kept = json.loads(result.stdout)["kept"]
    assert [(d["id"], d["reasons"]) for d in kept] == [
        ("sha256:p", ["named by run record 20261201-000000-aaaaaa"])
    ]
