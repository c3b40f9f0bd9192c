"""The build context is what the project would publish (issue 29 §3).

- In a git checkout a file git ignores (and does not track) never reaches the context, on top
  of .dockerignore; a tracked file is kept even where an ignore rule matches it; the files the
  config names (ca_cert, requirements, find_links) are kept whatever git says. Outside git,
  .dockerignore alone decides.
- Every file that enters is scanned (detect-secrets, plus gpulaunch.secretshape): a secret is
  refused before any build with `file:line`, never printed; the library's own allow mechanisms
  (`pragma: allowlist secret`, `.secrets.baseline`) let a known false positive through.
- Secret *values* are refused by shape in image.env and in dependency-file indexes and sources,
  whatever the variable or table is called.
- BuildKit secrets never touch a disk, so a killed build leaves no credential copy.
- Masking never mangles an error message; `version: true` is not version 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpulaunch.engine.buildspec import secret_links
from gpulaunch.image.build import context_entries
from gpulaunch.masking import mask
from gpulaunch.outside.git import published
from gpulaunch.secretshape import secret_kind
from hostile.conftest import MINIMAL_CONFIG, Hostile

# Real-looking token shapes, made at run time so this file holds none.
GITHUB = "ghp_" + "A1b2C3d4E5" * 4
HF = "hf_" + "Zq9Wx8Yv7U" * 4
AWS = "AKIA" + "QWERTYUIOP123456"
BUILD = ("build", "--dry-run", "--builder", "classic")


def _git(project: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(project), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _rels(project: Path, required: tuple[str, ...] = ()) -> set[str]:
    return {e.rel for e in context_entries(project, "", required) if e.kind == "file"}


# -- git: what the project would publish -------------------------------------------------------
@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    _write(
        project,
        {
            ".gitignore": "*.log\nwandb/\nsecrets.env\nforced.txt\ncerts/\n",
            "train.py": "print(1)\n",
            "run.log": "ignored\n",
            "wandb/run-1/files/config.yaml": "ignored\n",
            "secrets.env": f"HF_TOKEN={HF}\n",
            "forced.txt": "tracked though ignored\n",
            "notes/new.md": "untracked, not ignored\n",
            "certs/corp.crt": "-----BEGIN CERTIFICATE-----\n",
        },
    )
    _git(project, "init", "-q")
    _git(project, "add", ".gitignore", "train.py")
    _git(project, "add", "-f", "forced.txt")
    _git(project, "commit", "-qm", "init")
    return project


def test_git_ignored_files_never_reach_the_context(checkout: Path) -> None:
    rels = _rels(checkout)
    assert "run.log" not in rels and "secrets.env" not in rels
    assert not any(rel.startswith("wandb/") for rel in rels)
    assert {"train.py", "forced.txt", "notes/new.md", ".gitignore"} <= rels
    assert not any(rel.startswith(".git/") for rel in rels)


def test_a_file_the_config_names_is_kept_though_git_ignores_it(checkout: Path) -> None:
    assert "certs/corp.crt" in _rels(checkout, ("certs/corp.crt",))
    assert "certs/corp.crt" not in _rels(checkout)


def test_a_project_folder_inside_a_checkout_sees_its_own_part(checkout: Path) -> None:
    _write(checkout, {"sub/keep.py": "1\n", "sub/x.log": "no\n", "sub/.gitignore": "drop/\n"})
    _write(checkout, {"sub/drop/big.bin": "no\n"})
    assert _rels(checkout / "sub") == {"keep.py", ".gitignore"}


def test_outside_git_the_rules_of_today_apply(tmp_path: Path) -> None:
    _write(tmp_path, {".gitignore": "*.log\n", "a.log": "kept\n", "train.py": "1\n"})
    assert published(tmp_path) is None
    assert {"a.log", "train.py"} <= _rels(tmp_path)


def test_a_checkout_that_ignores_the_project_folder_is_not_its_repository(tmp_path: Path) -> None:
    _write(tmp_path, {".gitignore": "*\n", "proj/train.py": "1\n", "proj/a.log": "1\n"})
    _git(tmp_path, "init", "-q")
    assert published(tmp_path / "proj") is None
    assert _rels(tmp_path / "proj") == {"train.py", "a.log"}


def test_an_ignored_file_with_a_secret_is_no_refusal_it_is_simply_not_sent(
    hostile: Hostile,
) -> None:
    _write(hostile.project, {".gitignore": ".env\n", ".env": f"HF_TOKEN={HF}\n"})
    _git(hostile.project, "init", "-q")
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr


# -- the secret scan of every file that enters -------------------------------------------------
SCAN_CASES = [
    ("github-token-in-code", "src/settings.py", f"import os\n\nTOKEN = '{GITHUB}'\n", 3),
    ("aws-key-in-ini", "conf/app.ini", f"[aws]\nregion = x\nkey_id = {AWS}\n", 3),
    ("url-credential-in-yaml", "conf/db.yaml", "db:\n  url: postgres://app:s3cretPw@db/x\n", 2),
    ("bearer-in-json", "client.json", '{"h": "Authorization: Bearer abcdef0123456789xyz"}\n', 1),
    ("query-token", "fetch.sh", "curl 'https://api.example/v1?access_token=abcd1234efgh'\n", 1),
    ("private-key-in-txt", "deploy/key.txt", "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n", 1),
    ("hf-in-pip-conf", "pip.conf", f"[global]\nextra-index-url = https://u:{HF}@pkgs/simple\n", 2),
    ("uv-toml", "uv.toml", f"[[index]]\nurl = 'https://u:{HF}@pkgs/simple'\n", 2),
]


@pytest.mark.parametrize(
    ("rel", "text", "line"), [pytest.param(r, t, n, id=i) for i, r, t, n in SCAN_CASES]
)
def test_a_secret_in_a_context_file_is_refused_before_any_build(
    hostile: Hostile, rel: str, text: str, line: int
) -> None:
    _write(hostile.project, {rel: text})
    outcome = hostile.invoke_unchanged(*BUILD)
    error = outcome.assert_clean_error(2, f"{rel}:{line}", "build context")
    for secret in (GITHUB, HF, AWS, "s3cretPw", "abcdef0123456789xyz", "Tr0ub4dor"):
        assert secret not in outcome.stdout + outcome.stderr
    assert "pragma: allowlist secret" in outcome.stderr  # how to allow a false positive
    assert "copied into the image" in error


def test_the_scan_counts_the_other_lines(hostile: Hostile) -> None:
    _write(hostile.project, {"a.py": f"A = '{GITHUB}'\n", "b.py": f"\n\nB = '{HF}'\n"})
    outcome = hostile.invoke_unchanged(*BUILD)
    outcome.assert_clean_error(2, "a.py:1", "and 1 more line")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("weights.bin", b"\0\x01" + GITHUB.encode()),  # a binary: data, not config
        ("huge.txt", b"x" * (2 * 1024 * 1024) + GITHUB.encode()),  # over 2 MiB
    ],
)
def test_binaries_and_large_files_are_not_scanned(hostile: Hostile, name: str, data: bytes) -> None:
    (hostile.project / name).write_bytes(data)
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr


def test_a_false_positive_is_allowed_by_the_pragma(hostile: Hostile) -> None:
    _write(
        hostile.project,
        {
            "fixtures.py": (
                f"EXAMPLE = '{GITHUB}'  # pragma: allowlist secret\n"
                "# pragma: allowlist nextline secret\n"
                f"OTHER = 'https://u:{HF}@example/simple'\n"
            )
        },
    )
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr


def _baseline(project: Path, audited_as_real: bool = False) -> None:
    """`.secrets.baseline` as detect-secrets' own CLI writes it, in the project folder."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "detect_secrets",
            "scan",
            "--all-files",
            "--exclude-files",
            "\\.git/",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(made.stdout)
    assert data["results"], made.stdout  # it found what gpulaunch refuses
    for items in data["results"].values():
        for item in items:
            item["is_secret"] = audited_as_real or None
    (project / ".secrets.baseline").write_text(json.dumps(data))


def test_a_false_positive_is_allowed_by_the_detect_secrets_baseline(hostile: Hostile) -> None:
    _write(hostile.project, {"fixtures.py": f"EXAMPLE = '{GITHUB}'\nKEY = '{AWS}'\n"})
    _baseline(hostile.project)
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr


@pytest.mark.parametrize("case", ["audited-as-real", "a-new-line"])
def test_the_baseline_allows_only_what_it_names(hostile: Hostile, case: str) -> None:
    _write(hostile.project, {"fixtures.py": f"EXAMPLE = '{GITHUB}'\n"})
    _baseline(hostile.project, audited_as_real=case == "audited-as-real")
    if case == "a-new-line":
        _write(hostile.project, {"fixtures.py": f"EXAMPLE = '{GITHUB}'\nOTHER = '{HF}'\n"})
    outcome = hostile.invoke_unchanged(*BUILD)
    outcome.assert_clean_error(2, "fixtures.py:2" if case == "a-new-line" else "fixtures.py:1")


def test_a_broken_baseline_is_a_usage_error(hostile: Hostile) -> None:
    (hostile.project / ".secrets.baseline").write_text("[1, 2]")
    outcome = hostile.invoke_unchanged(*BUILD)
    outcome.assert_clean_error(2, ".secrets.baseline")


def test_the_scan_stays_fast_on_thousands_of_files(hostile: Hostile) -> None:
    import time

    for i in range(2000):
        _write(hostile.project, {f"pkg/m{i // 100}/f{i}.py": f"def f{i}(x):\n    return x + {i}\n"})
    started = time.monotonic()
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr
    assert time.monotonic() - started < 30  # 2,000 files scanned (about 3 s on a slow CPU)


class _Engine:
    """Just enough of engine.docker_api.Engine for run_build; records any build request."""

    def __init__(self) -> None:
        self.built: list[object] = []

    def builder_key(self) -> tuple[object, ...]:
        return ("stub",)

    def builder_kind(self) -> str:
        return "classic"

    def image_exists(self, _tag: str) -> bool:
        return False

    def image_id(self, _tag: str) -> None:
        return None

    def build(self, req: object, _on_line: object, _builder: object) -> None:
        self.built.append(req)

    def api(self) -> object:  # the image's size after a build: this engine does not say
        from gpulaunch.errors import EngineError

        raise EngineError("no engine API here")


@pytest.mark.parametrize(
    ("rel", "text"),
    [
        ("cfg.py", 'password = "Tr0ub4dor&3horse"\n'),  # detect-secrets' keyword plugin only
        ("src/settings.py", f"TOKEN = '{GITHUB}'\n"),
    ],
)
def test_the_build_scans_with_detect_secrets_before_the_engine_sees_anything(
    hostile: Hostile, rel: str, text: str
) -> None:
    from gpulaunch.config import load_config
    from gpulaunch.errors import ConfigError
    from gpulaunch.image.build import BuildOptions, run_build

    _write(hostile.project, {rel: text})
    config = load_config(hostile.project / "gpulaunch.yaml")
    engine = _Engine()
    before = hostile.state()[0]
    with pytest.raises(ConfigError, match=f"build context: {rel}:1: holds a secret"):
        run_build(config, hostile.project, engine, BuildOptions())  # type: ignore[arg-type]
    assert engine.built == []
    assert hostile.state()[0] == before  # no log, no context folder, nothing written


def test_a_dry_run_scans_by_shape_only_and_stays_quick(hostile: Hostile) -> None:
    _write(hostile.project, {"cfg.py": 'password = "Tr0ub4dor&3horse"\n'})
    outcome = hostile.invoke_unchanged(*BUILD)
    assert outcome.code == 0, outcome.stderr
    assert "detect-secrets when it builds" in outcome.stdout


def test_a_rebuild_scans_only_what_changed(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    import detect_secrets.core.scan

    from gpulaunch.errors import ConfigError
    from gpulaunch.image.build import scan_context

    _write(hostile.project, {f"pkg/m{i}.py": f"def f(x):\n    return x + {i}\n" for i in range(50)})
    entries = tuple(context_entries(hostile.project, ""))
    scan_context(hostile.project, entries)  # scans all, remembers them clean (the user's cache)

    def scanned(name: str) -> list[object]:
        raise AssertionError(f"{name} was scanned again")

    monkeypatch.setattr(detect_secrets.core.scan, "scan_file", scanned)
    scan_context(hostile.project, entries)  # nothing changed: detect-secrets is not asked
    monkeypatch.undo()
    _write(hostile.project, {"pkg/m7.py": 'password = "Tr0ub4dor&3horse"\n'})
    with pytest.raises(ConfigError, match=r"pkg/m7\.py:1: holds a secret"):
        scan_context(hostile.project, entries)  # a changed file is scanned: its bytes, its key


def test_the_scan_runs_offline_and_leaves_requests_alone(tmp_path: Path) -> None:
    """detect-secrets' plugins import requests only to verify findings with their providers:
    during gpulaunch's scan that module is a stand-in whose calls raise, so no scan reaches
    the network, and afterwards `import requests` is the real one again."""
    (tmp_path / "cfg.py").write_text('password = "Tr0ub4dor&3horse"\n')
    program = f"""
import sys
from gpulaunch.engine.context import Entry, OfflineRequest, refuse_detected_secrets
from gpulaunch.errors import ConfigError
try:
    refuse_detected_secrets(pathlib.Path({str(tmp_path)!r}), [Entry("cfg.py", "file", 0o644)])
except ConfigError as err:
    print("refused:", err)
import detect_secrets.plugins.base as base
print("stand-in:", base.requests.__name__, "urllib3" in sys.modules, "requests" in sys.modules)
try:
    base.requests.get("https://api.example/verify")
except OfflineRequest as err:
    print("verify:", err)
import requests
print("real:", hasattr(requests, "Session"))
"""
    out = subprocess.run(
        [sys.executable, "-c", "import pathlib\n" + program],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "refused: build context: cfg.py:1: holds a secret (Secret Keyword)" in out
    assert "stand-in: requests False False" in out  # nothing of the real one was imported
    assert "verify: gpulaunch's secret scan sends no request" in out
    assert "real: True" in out


# -- secret values by shape: image.env and dependency indexes ----------------------------------
SHAPED = [
    ("hf-token", HF),
    ("github-token", GITHUB),
    ("query-token", "https://mirror.example/simple?token=abcd1234"),
    ("bearer", "Bearer abcdefghijklmnop0123"),
]


@pytest.mark.parametrize(("value"), [pytest.param(v, id=i) for i, v in SHAPED])
def test_image_env_refuses_a_secret_by_its_shape_whatever_its_name(
    hostile: Hostile, value: str
) -> None:
    config = MINIMAL_CONFIG.replace(
        "launch:\n", f"  env:\n    MIRROR: {json.dumps(value)}\n" + "launch:\n"
    )
    hostile.write_config(config)
    outcome = hostile.invoke_unchanged("render")
    outcome.assert_clean_error(2, "image.env.MIRROR", "launch.env")
    assert value not in outcome.stdout + outcome.stderr


INDEX_CASES = [
    ("requirements.txt", "--extra-index-url https://pkgs.example/simple?token=abcd1234\nsix\n"),
    ("requirements.txt", f"six @ https://files.example/six.whl?X-Amz-Signature={'ab' * 16}\n"),
    (
        "pyproject.toml",
        '[project]\nname = "p"\nversion = "1"\ndependencies = ["six"]\n'
        f'[[tool.uv.index]]\nname = "corp"\nurl = "https://u:{HF}@pkgs.example/simple"\n',
    ),
    (
        "pyproject.toml",
        '[project]\nname = "p"\nversion = "1"\ndependencies = ["six"]\n'
        f'[[tool.pdm.source]]\nname = "corp"\nurl = "https://pkgs.example/simple?token={HF}"\n',
    ),
    (
        "pyproject.toml",
        '[tool.poetry]\nname = "p"\nversion = "1"\n[tool.poetry.dependencies]\nsix = "*"\n'
        f'[[tool.poetry.source]]\nname = "corp"\nurl = "https://{GITHUB}@pkgs.example/simple"\n',
    ),
    (
        "pyproject.toml",
        '[project]\nname = "p"\nversion = "1"\ndependencies = ["six"]\n'
        f'[tool.uv.sources]\nsix = {{ git = "https://{GITHUB}@github.com/o/six" }}\n',
    ),
]


@pytest.mark.parametrize(
    ("rel", "text"),
    [pytest.param(r, t, id=f"{r}-{i}") for i, (r, t) in enumerate(INDEX_CASES)],
)
def test_a_secret_in_a_dependency_index_or_source_is_refused(
    hostile: Hostile, rel: str, text: str
) -> None:
    _write(hostile.project, {rel: text})
    hostile.write_config(MINIMAL_CONFIG.replace("launch:\n", f"  requirements: {rel}\nlaunch:\n"))
    outcome = hostile.invoke_unchanged("render")
    outcome.assert_clean_error(2, rel)
    for secret in (HF, GITHUB, "abcd1234", "ab" * 16):
        assert secret not in outcome.stdout + outcome.stderr


# -- no credential copy on a disk -------------------------------------------------------------
def test_build_secrets_never_touch_a_disk(tmp_path: Path) -> None:
    value = f"https://u:{HF}@pkgs.example/simple"
    with secret_links(tmp_path, {"gl_pip_index_url": value}):
        link = tmp_path / "gl_pip_index_url"
        assert link.is_symlink()
        assert os.readlink(link).startswith(f"/proc/{os.getpid()}/fd/")
        read = subprocess.run(["cat", str(link)], capture_output=True, text=True, check=True)
        assert read.stdout == value  # the docker CLI, a child, reads it through the link
    assert not link.exists()  # closed: the link now points at nothing


def test_a_killed_build_leaves_no_credential_copy(tmp_path: Path) -> None:
    """SIGKILL right after the secrets are in place (the docker CLI would be running): what is
    left in the temp folder holds no byte of the value."""
    value = f"https://u:{HF}@pkgs.example/simple"
    folder = tmp_path / "gpulaunch-build-x"
    folder.mkdir()
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from gpulaunch.engine.buildspec import _write_secrets\n"
        f"_write_secrets(Path({str(folder)!r}), {{'gl_pip_index_url': {value!r}}})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = list(folder.iterdir())
    assert [p.name for p in left] == ["gl_pip_index_url"]
    assert not left[0].exists()  # a dangling link into a dead process
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert HF.encode() not in path.read_bytes()
    assert HF not in os.readlink(left[0])


# -- masking keeps messages whole, values still masked ---------------------------------------
@pytest.mark.parametrize(
    "message",
    [
        "launch.env.HF_TOKEN: must be a single line",
        "launch.HF_TOKEN: unknown field (valid: gpus, nproc)",
        "image.env.DB_PASSWORD: holds a token in a URL query, which would be baked",
        "gpulaunch: error: HF_TOKEN: unknown field (valid: version, name)",
        "image.env: key HF_TOKEN: value is empty",
        "ssh://deploy@gpu-box: cannot connect",
        "git+ssh://git@github.com/o/r.git: not found",
    ],
)
def test_masking_never_mangles_an_error_message(message: str) -> None:
    assert mask(message) == message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"pip: token {HF} refused", "pip: token *** refused"),
        ("HF_TOKEN: two words", "HF_TOKEN: ***"),
        ("[rank0] HF_TOKEN: hunter2", "[rank0] HF_TOKEN: ***"),  # a log line: by its name
        ("got HF_TOKEN: 'a b' from env", "got HF_TOKEN: '***' from env"),
        ("  - DB_PASSWORD: 'a b'", "  - DB_PASSWORD: '***'"),
        ("https://h/x?token=abcd1234&page=2", "https://h/x?token=***&page=2"),
        (
            'curl -H "Authorization: Bearer abcdef0123456789xyz"',
            'curl -H "Authorization: Bearer ***"',
        ),
    ],
)
def test_secret_values_are_still_masked_by_shape(text: str, expected: str) -> None:
    assert mask(text) == expected
    assert mask(expected) == expected


def test_an_unknown_secret_named_field_is_named_whole(hostile: Hostile) -> None:
    hostile.write_config(MINIMAL_CONFIG.replace("launch:\n", "launch:\n  HF_TOKEN: x\n"))
    outcome = hostile.invoke_unchanged("render")
    error = outcome.assert_clean_error(2, "launch.HF_TOKEN: unknown field (valid:")
    assert "***" not in error


def test_one_list_of_shapes_serves_masking_and_refusals() -> None:
    for _id, value in SHAPED:
        assert secret_kind(value) is not None
        assert value not in mask(f"x {value} y")
    assert secret_kind("ssh://git@github.com/o/r") is None
    assert secret_kind("https://${USER}:${PASS}@pkgs.example/simple") is None


# -- version: true is not version 1 ----------------------------------------------------------
@pytest.mark.parametrize(("value", "shown"), [("true", "true"), ("True", "true"), ("'1'", "'1'")])
def test_a_version_that_only_equals_one_is_refused(
    hostile: Hostile, value: str, shown: str
) -> None:
    hostile.write_config(MINIMAL_CONFIG.replace("version: 1", f"version: {value}"))
    outcome = hostile.invoke_unchanged("render")
    outcome.assert_clean_error(2, f"version: {shown}")
