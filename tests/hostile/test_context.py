"""The build context: links out of the project, .dockerignore oddities, what is hashed.

The hash is over exactly the entries the engine receives (names, kinds, modes, contents,
links as links); the files the Dockerfile reads are always sent; the config never is.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulaunch.engine.context import Entry, excluded, hash_entries, parse_rules, scan
from gpulaunch.image.build import context_entries, image_hash
from gpulaunch.image.render import render_dockerignore
from hostile.conftest import MINIMAL_CONFIG, Hostile, Outcome


def _config(**image: str) -> str:
    extra = "".join(f"  {key}: {value}\n" for key, value in image.items())
    return MINIMAL_CONFIG.replace("launch:\n", extra + "launch:\n")


def _tag(h: Hostile) -> str:
    outcome = h.invoke_unchanged("build", "--dry-run", "--json", "--builder", "classic")
    assert outcome.code == 0, outcome.stderr
    return str(json.loads(outcome.stdout)["tag"])


# -- files the Dockerfile reads may not leave the project ----------------------------------
def _link_out(h: Hostile, rel: str, kind: str) -> None:
    if kind == "passwd":
        target = Path("/etc/passwd")
    elif kind == "root":
        target = Path("/")
    elif kind == "dir":
        target = h.outside / "wheels"
        target.mkdir()
        (target / "a-1.0-py3-none-any.whl").write_text("w")
    elif kind == "pyproject":
        target = h.outside / "pyproject.toml"
        target.write_text('[project]\nname = "x"\ndependencies = ["evil==1"]\n')
    else:
        target = h.outside / "corp.pem"
        target.write_text("-----BEGIN CERTIFICATE-----\n")
    link = h.project / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


OUTSIDE_LINKS = [
    ("requirements", "requirements.txt", "passwd", "image.requirements"),
    ("requirements", "sub/requirements.txt", "passwd", "image.requirements"),
    ("requirements", "pyproject.toml", "pyproject", "image.requirements"),
    ("pip", "wheels", "dir", "image.pip.find_links[0]"),
    ("pip", "wheels", "root", "image.pip.find_links[0]"),
    ("ca_cert", "corp.pem", "pem", "image.ca_cert"),
]


@pytest.mark.parametrize("command", ["render", "build --dry-run", "run --dry-run train.py"])
@pytest.mark.parametrize(("key", "rel", "kind", "field"), OUTSIDE_LINKS)
def test_links_out_of_the_project_are_refused(
    hostile: Hostile, command: str, key: str, rel: str, kind: str, field: str
) -> None:
    value = f"{{find_links: [{rel}]}}" if key == "pip" else rel
    hostile.write_config(_config(**{key: value}))
    _link_out(hostile, rel, kind)
    outcome = hostile.invoke_unchanged(*command.split())
    outcome.assert_clean_error(2, field, "outside the project")
    assert "evil" not in outcome.stdout


def test_link_inside_the_project_is_fine_and_its_target_is_sent(hostile: Hostile) -> None:
    (hostile.project / "reqs").mkdir()
    (hostile.project / "reqs" / "base.txt").write_text("six\n")
    (hostile.project / "requirements.txt").symlink_to("reqs/base.txt")
    (hostile.project / ".dockerignore").write_text("reqs\n")
    hostile.write_config(_config(requirements="requirements.txt"))
    assert _tag(hostile)
    rels = [e.rel for e in context_entries(hostile.project, "reqs\n", ("reqs/base.txt",))]
    assert "reqs/base.txt" in rels


def test_huge_file_behind_a_link_is_not_read(hostile: Hostile) -> None:
    """Docker sends a link as a link: the target's content is neither read nor hashed."""
    elsewhere = hostile.project.parent / "elsewhere"  # not snapshotted: 30 GiB of zeros
    elsewhere.mkdir()
    big = elsewhere / "sparse.bin"
    with big.open("wb") as fh:
        fh.truncate(30 * 1024**3)
    (hostile.project / "data.bin").symlink_to(big)
    first = _tag(hostile)
    with big.open("r+b") as fh:
        fh.write(b"changed")
    assert _tag(hostile) == first
    (hostile.project / "data.bin").unlink()
    (hostile.project / "data.bin").symlink_to(hostile.outside / "other")
    assert _tag(hostile) != first  # the link text is what is sent


# -- .dockerignore oddities -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("dir", (".dockerignore", "not a regular file")),
        ("range", (".dockerignore", "[z-a]")),
        ("bang", (".dockerignore", "line 2")),
        ("binary", (".dockerignore", "UTF-8")),
        ("link", (".dockerignore", "symbolic link")),
    ],
)
@pytest.mark.parametrize("command", ["build --dry-run", "run --dry-run train.py"])
def test_bad_dockerignore_is_one_line(
    hostile: Hostile, setup: str, words: tuple[str, ...], command: str
) -> None:
    path = hostile.project / ".dockerignore"
    if setup == "dir":
        path.mkdir()
    elif setup == "range":
        path.write_text("data\n[z-a]\n")
    elif setup == "bang":
        path.write_text("data\n!\n")
    elif setup == "binary":
        path.write_bytes(b"\xff\xfe\x00")
    else:
        (hostile.outside / "ignore").write_text("data\n")
        path.symlink_to(hostile.outside / "ignore")
    outcome = hostile.invoke_unchanged(*command.split())
    outcome.assert_clean_error(2, *words)


def test_unreadable_folder_names_the_folder(hostile: Hostile) -> None:
    """As root (CI), gpulaunch runs as a process without the capabilities that read anyway."""
    (hostile.project / "secret").mkdir(mode=0)
    try:
        if os.geteuid() == 0:
            before = hostile.state()
            proc = subprocess.run(
                [
                    "setpriv",
                    "--inh-caps=-all",
                    "--bounding-set=-dac_override,-dac_read_search",
                    sys.executable,
                    "-m",
                    "gpulaunch",
                    "build",
                    "--dry-run",
                ],
                cwd=hostile.project,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert hostile.state() == before
            outcome = Outcome(proc.returncode, proc.stdout, proc.stderr)
        else:
            outcome = hostile.invoke_unchanged("build", "--dry-run")
    finally:
        (hostile.project / "secret").chmod(0o755)
    outcome.assert_clean_error(2, "secret")


# -- ca_cert and the files the Dockerfile reads are always sent ---------------------------
def _cert(body: str) -> str:
    return f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"


def test_ca_cert_is_sent_and_hashed_despite_default_ignore(hostile: Hostile) -> None:
    assert "*.pem" in render_dockerignore()
    (hostile.project / "corp-ca.pem").write_text(_cert("one"))
    hostile.write_config(_config(ca_cert="corp-ca.pem"))
    first = _tag(hostile)
    (hostile.project / "corp-ca.pem").write_text(_cert("two"))
    assert _tag(hostile) != first
    (hostile.project / "other.pem").write_text("ignored\n")
    second = _tag(hostile)
    (hostile.project / "other.pem").write_text("still ignored\n")
    assert _tag(hostile) == second


def test_required_file_under_an_ignored_folder_is_sent(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_text("c")
    (tmp_path / "certs" / "key.pem").write_text("k")
    rels = [e.rel for e in context_entries(tmp_path, "certs\n", ("certs/ca.pem",))]
    assert rels == ["certs/ca.pem"]


def test_config_and_state_folder_are_never_sent(tmp_path: Path) -> None:
    (tmp_path / "gpulaunch.yaml").write_text("launch: {env: {TOKEN: x}}")
    (tmp_path / ".gpulaunch" / "logs").mkdir(parents=True)
    (tmp_path / ".gpulaunch" / "logs" / "b.log").write_text("x")
    (tmp_path / ".dockerignore").write_text("!gpulaunch.yaml\n")
    (tmp_path / "train.py").write_text("")
    rels = [e.rel for e in context_entries(tmp_path, "!gpulaunch.yaml\n!.gpulaunch\n")]
    assert rels == ["train.py"]
    assert [e.rel for e in context_entries(tmp_path, "", ("gpulaunch.yaml",))] == ["train.py"]


def test_required_file_that_cannot_be_sent_is_a_usage_error(hostile: Hostile) -> None:
    (hostile.project / ".gpulaunch").mkdir()
    (hostile.project / ".gpulaunch" / "ca.pem").write_text(_cert("c"))
    hostile.write_config(_config(ca_cert=".gpulaunch/ca.pem"))
    outcome = hostile.invoke_unchanged("build", "--dry-run")
    outcome.assert_clean_error(2, ".gpulaunch/ca.pem", "build context")


def test_config_edits_do_not_change_the_tag(hostile: Hostile) -> None:
    first = _tag(hostile)
    hostile.write_config(MINIMAL_CONFIG + "# a comment\n")
    assert _tag(hostile) == first


# -- what changes the tag -------------------------------------------------------------------
def _edit(project: Path, change: str) -> None:
    if change == "rename":
        (project / "train.py").rename(project / "main.py")
    elif change == "new empty file":
        (project / "empty.py").write_text("")
    elif change == "new empty folder":
        (project / "empty").mkdir()
    elif change == "delete":
        (project / "util.py").unlink()
    elif change == "chmod +x":
        (project / "train.py").chmod(0o755)
    elif change == "content":
        (project / "util.py").write_text("X = 2\n")
    elif change == "dockerignore edit":
        (project / ".dockerignore").write_text("data\n# comment\n")
    elif change == "dockerignore lets data in":
        (project / ".dockerignore").write_text("")
    elif change == "new link":
        (project / "link.py").symlink_to("train.py")


@pytest.mark.parametrize(
    "change",
    [
        "rename",
        "new empty file",
        "new empty folder",
        "delete",
        "chmod +x",
        "content",
        "dockerignore edit",
        "dockerignore lets data in",
        "new link",
    ],
)
def test_each_change_to_what_is_sent_changes_the_tag(hostile: Hostile, change: str) -> None:
    (hostile.project / "train.py").chmod(0o644)
    (hostile.project / "util.py").write_text("X = 1\n")
    (hostile.project / "data").mkdir()
    (hostile.project / "data" / "x.bin").write_text("1")
    (hostile.project / ".dockerignore").write_text("data\n")
    first = _tag(hostile)
    _edit(hostile.project, change)
    assert _tag(hostile) != first


@pytest.mark.parametrize("change", ["edit ignored", "new ignored", "chmod ignored"])
def test_ignored_changes_keep_the_tag(hostile: Hostile, change: str) -> None:
    (hostile.project / "data").mkdir()
    (hostile.project / "data" / "x.bin").write_text("1")
    (hostile.project / ".dockerignore").write_text("data\n*.log\n")
    first = _tag(hostile)
    if change == "edit ignored":
        (hostile.project / "data" / "x.bin").write_text("2")
    elif change == "new ignored":
        (hostile.project / "run.log").write_text("2")
    else:
        (hostile.project / "data" / "x.bin").chmod(0o700)
    assert _tag(hostile) == first


def test_hash_covers_names_not_only_contents(tmp_path: Path) -> None:
    """A hash that dropped file names (or kinds, or modes) would make these collide."""
    (tmp_path / "a").write_text("same")
    (tmp_path / "b").write_text("same")
    base = [Entry("a", "file", 0o644)]
    variants = [
        [Entry("b", "file", 0o644)],
        [Entry("a", "file", 0o755)],
        [Entry("a", "link", 0o777, "same")],
        [Entry("a", "dir", 0o644)],
    ]

    def digest(entries: list[Entry]) -> str:
        h = hashlib.sha256()
        hash_entries(h, tmp_path, entries)
        return h.hexdigest()

    seen = {digest(base)}
    for entries in variants:
        value = digest(entries)
        assert value not in seen, entries
        seen.add(value)
    # framing: one file "ab" vs. two files "a" + "b" with the same bytes in sequence
    assert image_hash("F", {}, tmp_path, base) != image_hash("F", {}, tmp_path, variants[0])


# -- the matcher follows Docker's rules -----------------------------------------------------
MATCHES = [
    ("data", "data/x/y.bin", True),
    ("data", "mydata", False),
    ("*.pem", "corp.pem", True),
    ("*.pem", "certs/corp.pem", False),
    ("**/*.pem", "certs/corp.pem", True),
    ("**/*.pem", "corp.pem", True),
    ("/data", "data/a", True),
    ("./data/", "data/a", True),
    ("data/**", "data/a/b", True),
    ("**", "anything/at/all", True),
    ("a?c", "abc", True),
    ("a?c", "a/c", False),
    ("[a-c]x", "bx", True),
    ("[!a]x", "!x", True),
    ("file.txt", "fileXtxt", False),
    ("a+b", "a+b", True),
    ("\\*.txt", "*.txt", True),
    ("\\*.txt", "a.txt", False),
    ("*\n!keep.pem", "keep.pem", False),
    ("*.pem\n!keep.pem", "keep.pem", False),
    ("*.pem\n!keep.pem\nkeep.pem", "keep.pem", True),
    ("data\n!data/keep", "data/keep/f", False),
    ("data\n!data/keep", "data/other", True),
    ("# comment\n", "# comment", False),
    ("  spaced  ", "spaced", True),
]


@pytest.mark.parametrize(("rules", "path", "expected"), MATCHES)
def test_matcher_table(rules: str, path: str, expected: bool) -> None:
    assert excluded(path, parse_rules(rules)) is expected


# -- dry runs and render never load the docker SDK ------------------------------------------
@pytest.mark.parametrize(
    "args",
    [("render",), ("build", "--dry-run"), ("run", "--dry-run", "train.py")],
    ids=" ".join,
)
def test_dry_runs_do_not_import_the_docker_sdk(hostile: Hostile, args: tuple[str, ...]) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gpulaunch.cli import app\n"
        "try:\n"
        f"    app({list(args)!r})\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('docker loaded' if 'docker' in sys.modules else 'docker not loaded')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=hostile.project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("docker not loaded"), proc.stdout[-500:]


def test_ignored_folder_is_not_listed(tmp_path: Path) -> None:
    """An excluded folder is entered only when a `!` rule names a path below it (Docker's
    walk): an unreadable or huge ignored folder costs nothing."""
    (tmp_path / "data" / "deep").mkdir(parents=True)
    (tmp_path / "data" / "deep" / "keep.txt").write_text("k")
    (tmp_path / "data" / "other.txt").write_text("o")
    assert [e.rel for e in context_entries(tmp_path, "data\n!**/keep.txt\n")] == []
    assert [e.rel for e in context_entries(tmp_path, "data\n!data/deep/keep.txt\n")] == [
        "data/deep/keep.txt"
    ]


def test_config_under_another_name_is_never_sent(hostile: Hostile) -> None:
    (hostile.project / "gpulaunch.yaml").rename(hostile.project / "exp.yaml")
    (hostile.project / ".dockerignore").write_text("")

    def tag() -> str:
        outcome = hostile.invoke_unchanged(
            "build", "--config", "exp.yaml", "--dry-run", "--json", "--builder", "classic"
        )
        assert outcome.code == 0, outcome.stderr
        return str(json.loads(outcome.stdout)["tag"])

    first = tag()
    (hostile.project / "exp.yaml").write_text(MINIMAL_CONFIG + "# launch.env secrets here\n")
    assert tag() == first


DIFFERENTIAL_RULES = [
    "data\n*.log\n!keep.log\n",
    "**/*.pyc\n**/__pycache__\n",
    "*\n!src\n!src/**\n",
    "src/*/tmp\n/top.txt\n",
    "**/keep*\n!src/a/keep.log\n",
    "src\n!src/a/x.py\n",
    "a?c.txt\n[t]op.txt\n",
    "",
]


@pytest.mark.parametrize("rules", DIFFERENTIAL_RULES)
def test_matcher_agrees_with_docker_py(tmp_path: Path, rules: str) -> None:
    """Our matcher against the docker SDK's implementation of Docker's rules (files only:
    docker-py lists no folders)."""
    from docker.utils.build import exclude_paths

    for rel in [
        "top.txt",
        "abc.txt",
        "keep.log",
        "drop.log",
        "data/big.bin",
        "src/a/x.py",
        "src/a/x.pyc",
        "src/a/keep.log",
        "src/a/tmp/t.txt",
        "src/b/__pycache__/m.pyc",
        "src/b/keep1",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    patterns = [line for line in rules.splitlines() if line]
    theirs = {p for p in exclude_paths(str(tmp_path), patterns) if (tmp_path / p).is_file()}
    ours = {e.rel for e in scan(tmp_path, parse_rules(rules)) if e.kind == "file"}
    assert ours == theirs
