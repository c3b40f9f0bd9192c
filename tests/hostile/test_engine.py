"""The engine edge: whose containers, what is a command, what is a secret, argument checks.

Real-engine counterparts are in tests/e2e/test_engine_safety.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from gpulaunch.engine.buildspec import BuildRequest, DockerCli
from gpulaunch.engine.cliprobe import client_version
from gpulaunch.engine.docker_api import RUN_ID_LABEL, Engine
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.masking import MASK, mask, mask_data, mask_env
from hostile.conftest import MINIMAL_CONFIG, Hostile

TOKEN = "s3cr3t-T0ken-value"

# -- masking --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--index-url https://user:pw@host/simple", f"--index-url https://{MASK}@host/simple"),
        ("https://tokenonly@host/s", f"https://{MASK}@host/s"),
        ("git+ssh://git:x@github.com/a/b", f"git+ssh://{MASK}@github.com/a/b"),
        ("WANDB_API_KEY=abc123", f"WANDB_API_KEY={MASK}"),
        ("--env HF_TOKEN=hf_1", f"--env HF_TOKEN={MASK}"),
        ("'DB_PASSWORD=two words' next", f"'DB_PASSWORD={MASK}' next"),
        ('AWS_SECRET_ACCESS_KEY="a b" z', f'AWS_SECRET_ACCESS_KEY="{MASK}" z'),
        ("GITHUB_TOKEN: ghp_x", f"GITHUB_TOKEN: {MASK}"),
        ("index_url: https://u:t@h/s", f"index_url: https://{MASK}@h/s"),
        ("MY_CLIENT_SECRET=x", f"MY_CLIENT_SECRET={MASK}"),
        # not secrets: left exactly as they are
        ("KEYBOARD=us MONKEY=1 keys=3", "KEYBOARD=us MONKEY=1 keys=3"),
        ("mail me at a@b.com", "mail me at a@b.com"),
        ("https://host/path@v1", "https://host/path@v1"),
        ("NCCL_DEBUG=WARN", "NCCL_DEBUG=WARN"),
        ("", ""),
    ],
)
def test_mask_table(text: str, expected: str) -> None:
    assert mask(text) == expected
    assert mask(mask(text)) == expected  # idempotent: masking shown text again is harmless


def test_mask_env_and_data() -> None:
    env = {"WANDB_API_KEY": TOKEN, "URL": f"https://u:{TOKEN}@h/", "N": "1", "EMPTY_TOKEN": ""}
    assert mask_env(env) == {
        "WANDB_API_KEY": MASK,
        "URL": f"https://{MASK}@h/",
        "N": "1",
        "EMPTY_TOKEN": "",
    }
    data = {"env": env, "argv": ["--env", f"HF_TOKEN={TOKEN}"], "n": 3}
    assert TOKEN not in json.dumps(mask_data(data))
    assert mask_data(data)["n"] == 3  # type: ignore[index]


# -- which containers are ours ------------------------------------------------------------


class FakeApi:
    """The engine's HTTP API as the stdlib client sees it: containers and images by name."""

    host = "unix:///fake.sock"
    timeout = 60.0
    version = None  # a transport that kept no /version answer

    def __init__(self, containers: list[dict[str, Any]], images: dict[str, dict[str, str]]):
        self.containers = {c["Name"].lstrip("/"): c for c in containers}
        self.images = images
        self.filters: list[Any] = []

    def call(self, method: str, path: str, query: Any = None, *_args: Any, **_kw: Any) -> Any:
        from gpulaunch.engine.api.http import ApiError

        parts = path.strip("/").split("/")
        if path == "/containers/json":
            self.filters.append(json.loads(query["filters"]))
            key = json.loads(query["filters"])["label"][0]
            found = self.containers.values()
            return [{"Id": c["Name"].lstrip("/")} for c in found if key in c["Config"]["Labels"]]
        if parts[0] == "containers" and parts[1] in self.containers:
            return self.containers[parts[1]]
        if parts[0] == "images" and parts[1] in self.images:
            return {"Id": parts[1], "Config": {"Labels": self.images[parts[1]]}}
        raise ApiError(404, f"No such object: {parts[1]}")


def fake_engine(containers: list[dict[str, Any]], images: dict[str, dict[str, str]]) -> Engine:
    engine = Engine(env={})
    engine._api = FakeApi(containers, images)  # type: ignore[assignment]
    return engine


def container(name: str, labels: dict[str, str], image: str = "img") -> dict[str, Any]:
    """A container's inspect answer."""
    return {"Id": name, "Name": "/" + name, "Config": {"Labels": labels}, "Image": image}


def names(found: list[Any]) -> list[str]:
    return [c.name for c in found]


MANAGED_IMAGE = {"io.gpulaunch.managed": "true", "io.gpulaunch.project": "p"}
R1, R2 = "20261204-101500-a1b2c3", "20261204-101501-d4e5f6"  # run ids of `new_run_id`'s format


@pytest.mark.parametrize(
    ("labels", "image_labels", "ours"),
    [
        # started by `gpulaunch run`: its own run id, the image has none
        ({**MANAGED_IMAGE, RUN_ID_LABEL: R1}, MANAGED_IMAGE, True),
        # `docker run` of a gpulaunch-built image: only inherited labels
        (dict(MANAGED_IMAGE), MANAGED_IMAGE, False),
        # an image that itself carries a run-id label passes it on: inherited, not ours
        ({RUN_ID_LABEL: R1}, {RUN_ID_LABEL: R1}, False),
        # `gpulaunch run` of such an image sets its own, different value
        ({**MANAGED_IMAGE, RUN_ID_LABEL: R2}, {RUN_ID_LABEL: R1}, True),
        ({}, {}, False),
        ({RUN_ID_LABEL: ""}, {}, False),
        # a label of another format is someone else's (`docker run -l io.gpulaunch.run-id=x`)
        ({RUN_ID_LABEL: "x"}, {}, False),
        ({RUN_ID_LABEL: R1 + "\n"}, {}, False),
        ({RUN_ID_LABEL: "2026120-101500-a1b2c3"}, {}, False),
        ({RUN_ID_LABEL: "20261204-101500-A1B2C3"}, {}, False),
        ({RUN_ID_LABEL: "\x1b]0;pwned\x07"}, {}, False),
    ],
)
def test_ours_only_by_own_run_id(
    labels: dict[str, str], image_labels: dict[str, str], ours: bool
) -> None:
    c = f"gl-p-{labels[RUN_ID_LABEL]}" if labels.get(RUN_ID_LABEL) in (R1, R2) else "c"
    engine = fake_engine([container(c, labels)], {"img": image_labels})
    assert (names(engine.list_managed(True)) == [c]) is ours
    leftover = engine.find_leftover(c, labels.get(RUN_ID_LABEL, "x"))
    assert (leftover is not None and leftover.name == c) is ours
    if ours:
        assert engine.get_managed(c).name == c
    else:
        with pytest.raises(EngineError, match="not started by `gpulaunch run`"):
            engine.get_managed(c)


def test_lookups_filter_on_run_id_not_the_inheritable_managed_label() -> None:
    engine = fake_engine([container("plain", dict(MANAGED_IMAGE))], {"img": MANAGED_IMAGE})
    assert engine.list_managed(True) == []
    assert engine._api.filters == [{"label": [RUN_ID_LABEL]}]  # type: ignore[union-attr]


def test_leftover_of_another_run_is_not_touched() -> None:
    engine = fake_engine([container("gl-p-1", {RUN_ID_LABEL: R2})], {"img": {}})
    assert engine.find_leftover("gl-p-1", R1) is None
    assert engine.find_leftover("gl-p-1", R2).name == "gl-p-1"


def test_image_gone_counts_as_nothing_inherited() -> None:
    job = container(f"gl-p-{R1}", {**MANAGED_IMAGE, RUN_ID_LABEL: R1}, image="deleted")
    engine = fake_engine([job], {})
    assert engine.run_id_of(engine.get_managed(f"gl-p-{R1}")) == R1


# -- run: SCRIPT vs -- COMMAND ------------------------------------------------------------


def dry_command(hostile: Hostile, *args: str) -> list[str]:
    outcome = hostile.invoke("run", "--dry-run", "--json", "--gpus", "0", *args)
    assert outcome.code == 0, outcome.stderr
    return list(json.loads(outcome.stdout)["run"]["command"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--", "./job.sh", "a"), ["./job.sh", "a"]),
        (("--", "python", "-c", "print(1)"), ["python", "-c", "print(1)"]),  # a file `python`
        (("--", "train.py"), ["train.py"]),  # after --: never re-read as SCRIPT
        (("--", "bash", "-c", "echo -- x"), ["bash", "-c", "echo -- x"]),
        (("train.py", "--lr", "3"), ["python", "/workspace/train.py", "--lr", "3"]),
        (
            ("train.py", "a", "--", "--gpus", "4", "--"),
            ["python", "/workspace/train.py", "a", "--gpus", "4", "--"],
        ),
    ],
)
def test_dashdash_is_a_raw_command(
    hostile: Hostile, args: tuple[str, ...], expected: list[str]
) -> None:
    (hostile.project / "python").write_text("not a script\n")
    (hostile.project / "job.sh").write_text("#!/bin/sh\n")
    assert dry_command(hostile, *args) == expected


def test_nothing_after_dashdash_is_a_usage_error(hostile: Hostile) -> None:
    hostile.invoke_unchanged("run", "--dry-run", "--gpus", "0", "--").assert_clean_error(2, "--")


# -- secrets: index credentials and launch env --------------------------------------------

SECRET_CONFIG = (
    MINIMAL_CONFIG
    + f"""  env:
    WANDB_API_KEY: {TOKEN}
"""
).replace(
    'image:\n  base: local/base:bookworm\n  python: "3.11"\n  torch: none\n',
    'image:\n  base: local/base:bookworm\n  python: "3.11"\n  torch: none\n'
    "  requirements: requirements.txt\n"
    f"  pip:\n    index_url: https://user:{TOKEN}@pypi.example/simple\n"
    f"    extra_index_urls: [https://__token__:{TOKEN}@extra.example/simple]\n",
)


@pytest.fixture
def secret_project(hostile: Hostile) -> Hostile:
    (hostile.project / "requirements.txt").write_text("six\n")
    hostile.write_config(SECRET_CONFIG)
    return hostile


@pytest.mark.parametrize(
    "args",
    [
        ("render",),
        ("build", "--dry-run"),
        ("build", "--dry-run", "--json"),
        ("run", "--dry-run", "--", "true"),
        ("run", "--dry-run", "--json", "--", "true"),
        ("run", "--dry-run", "--no-container", "--", "true"),
    ],
)
def test_no_secret_in_any_output(secret_project: Hostile, args: tuple[str, ...]) -> None:
    outcome = secret_project.invoke(*args)  # dry-run purity is tested elsewhere
    assert outcome.code == 0, outcome.stderr
    assert TOKEN not in outcome.stdout + outcome.stderr
    assert "WANDB_API_KEY" in outcome.stdout or args[0] != "run"  # named, not shown


def test_buildkit_dockerfile_mounts_index_as_secret(secret_project: Hostile) -> None:
    text = secret_project.invoke("render").stdout
    assert "--mount=type=secret,id=gl_pip_index_url" in text
    assert "--mount=type=secret,id=gl_pip_extra_index_urls" in text
    assert 'PIP_INDEX_URL="$(cat /run/secrets/gl_pip_index_url)"' in text
    assert f"https://{MASK}@pypi.example/simple" in text  # the index is named, masked
    assert "--index-url" not in text.split("# 4. Project requirements")[1]


@pytest.mark.parametrize(
    "args", [("render", "--builder", "classic"), ("build", "--dry-run", "--builder", "classic")]
)
def test_classic_builder_refuses_index_credentials(
    secret_project: Hostile, args: tuple[str, ...]
) -> None:
    line = secret_project.invoke_unchanged(*args).assert_clean_error(
        2, "image.pip.index_url", "BuildKit"
    )
    assert TOKEN not in line


def test_secrets_go_to_files_not_argv(tmp_path: Any) -> None:
    req = BuildRequest("FROM x\n", tmp_path, ("t:1",), secrets={"gl_pip_index_url": TOKEN})
    argv = DockerCli("docker", "env").build_argv(req, tmp_path / "Dockerfile")
    assert TOKEN not in " ".join(argv)
    assert f"id=gl_pip_index_url,src={tmp_path / 'gl_pip_index_url'}" in argv


def test_sdk_builder_refuses_secrets(tmp_path: Any) -> None:
    req = BuildRequest("FROM x\n", tmp_path, ("t:1",), secrets={"gl_pip_index_url": TOKEN})
    with pytest.raises(ConfigError, match="BuildKit"):
        Engine(env={})._build_sdk(req, lambda _line: None)


def test_error_messages_are_masked(hostile: Hostile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"tcp://user:{TOKEN}@127.0.0.1:1")
    outcome = hostile.invoke("ps")
    outcome.assert_clean_error(3, "127.0.0.1")
    assert TOKEN not in outcome.stderr


# -- probing the docker CLI asks no daemon ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("Docker version 20.10.24+dfsg1, build 297e128", "20.10.24+dfsg1"),
        ("Docker version 28.2.2, build e6534b4", "28.2.2"),
        ("podman version 4.3.1", "4.3.1"),
        ("garbage", ""),
    ],
)
def test_client_version_from_dash_dash_version(text: str, version: str) -> None:
    assert client_version(text) == version


# -- ps: scripts read it ------------------------------------------------------------------


def test_ps_off_a_terminal_neither_truncates_nor_wraps(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpulaunch.cli.jobs as cli

    long = "gl-" + "x" * 150
    rows = [
        SimpleNamespace(
            name=f"{long}-{i}",
            short_id=f"abc{i}",
            labels={RUN_ID_LABEL: f"20261204-10150{i}-a1b2c3", "io.gpulaunch.project": "p"},
            status="running",
            image=SimpleNamespace(tags=["p:gl-123"]),
        )
        for i in (1, 2)
    ]
    monkeypatch.setattr(cli, "make_engine", lambda: SimpleNamespace(list_managed=lambda _all: rows))
    table = hostile.invoke("ps")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert len(lines) == 3  # header + one line per container: nothing wrapped
    assert lines[1].split()[0] == f"{long}-1" and lines[2].split()[0] == f"{long}-2"
    listing = json.loads(hostile.invoke("ps", "--json").stdout)
    assert [r["name"] for r in listing] == [f"{long}-1", f"{long}-2"]
    assert listing[0]["run_id"] == "20261204-101501-a1b2c3"


@pytest.mark.parametrize(
    "evil",
    ["\x1b]0;owned\x07", "\x1b[2J\x1b[H", "ok\rFAKE", "\u202eevil", "\x9b31m", "a\x1b[8mhid"],
)
def test_ps_and_errors_show_escape_sequences_from_labels_as_text(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch, evil: str
) -> None:
    """A label is anyone's text: it must not reach the terminal as a control sequence."""
    import gpulaunch.cli.jobs as cli

    row = SimpleNamespace(
        name="gl-p-1",
        short_id="abc",
        labels={RUN_ID_LABEL: R1, "io.gpulaunch.project": evil},
        status=evil,
        image=SimpleNamespace(tags=[evil]),
    )
    monkeypatch.setattr(
        cli, "make_engine", lambda: SimpleNamespace(list_managed=lambda _all: [row])
    )
    table = hostile.invoke_unchanged("ps")
    assert table.code == 0, table.stderr
    controls = [c for c in table.stdout if c not in "\n" and (ord(c) < 32 or 0x7F <= ord(c) < 0xA0)]
    assert not controls and "\u202e" not in table.stdout, repr(table.stdout)
    assert (
        "\\x1b" in table.stdout
        or "\\r" in table.stdout
        or "\\u202e" in table.stdout
        or ("\\x9b" in table.stdout)
    )
    boom = SimpleNamespace(list_managed=lambda _all: (_ for _ in ()).throw(EngineError(evil)))
    monkeypatch.setattr(cli, "make_engine", lambda: boom)
    err = hostile.invoke_unchanged("ps")
    assert err.code == 3
    assert not [c for c in err.stderr if c != "\n" and (ord(c) < 32 or 0x7F <= ord(c) < 0xA0)]
