"""Hostile gpulaunch.yaml (and files it names): every bad input is exit 2, one line naming the
field, no traceback, nothing written anywhere.

Two tables: the defects of issue 7 (duplicate keys, line separators, unchecked counts and
mounts, profile chains) and the classes that were already handled (kept here so a regression
shows up in the corpus).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hostile.conftest import MINIMAL_CONFIG, Hostile

BASE = MINIMAL_CONFIG  # version, name, image (base, python, torch: none), launch.gpus: 0
IMAGE_HEAD = 'version: 1\nname: hostile\nimage:\n  base: local/base:bookworm\n  python: "3.11"\n'
RENDER = ("render",)
RUN = ("run", "train.py", "--dry-run")


def _with_profile(body: str) -> str:
    """BASE with `launch.profile: p` and a profile p made of `body` (indented 4)."""
    text = BASE.replace("launch:\n  gpus: 0\n", "launch:\n  gpus: 0\n  profile: p\n")
    return text + "profiles:\n  p:\n" + body


# (id, config text, command, names the error line must contain)
NEW_DEFECTS: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    # 6. duplicate keys, at every level, with both line numbers
    (
        "dup-top-launch",
        BASE + "launch:\n  nproc: 2\n",
        RENDER,
        ("duplicate key 'launch'", "line 7", "line 9"),
    ),
    ("dup-name", BASE + "name: other\n", RENDER, ("duplicate key 'name'", "line 2", "line 9")),
    (
        "dup-nested",
        BASE.replace("  torch: none\n", "  torch: none\n  torch: 2.4.1\n"),
        RENDER,
        ("duplicate key 'torch'", "line 6", "line 7"),
    ),
    (
        "dup-profile-env",
        _with_profile("    env:\n      A: '1'\n      A: '2'\n"),
        RUN,
        ("duplicate key 'A'",),
    ),
    # 7. line separators / control characters in single-line fields
    (
        "env-value-u2028",
        IMAGE_HEAD + '  torch: none\n  env:\n    A: "x\\u2028RUN id"\n',
        RENDER,
        ("image.env", "U+2028"),
    ),
    (
        "env-value-u2029",
        IMAGE_HEAD + '  torch: none\n  env:\n    A: "x\\u2029RUN id"\n',
        RENDER,
        ("image.env", "U+2029"),
    ),
    (
        "env-value-nel",
        IMAGE_HEAD + '  torch: none\n  env:\n    A: "x\\x85RUN id"\n',
        RENDER,
        ("image.env", "U+0085"),
    ),
    (
        "env-value-vt",
        IMAGE_HEAD + '  torch: none\n  env:\n    A: "x\\vy"\n',
        RENDER,
        ("image.env",),
    ),
    (
        "env-key-newline",
        IMAGE_HEAD + '  torch: none\n  env:\n    "A\\n": x\n',
        RENDER,
        ("image.env",),
    ),
    (
        "name-trailing-newline",
        BASE.replace("name: hostile", 'name: "hostile\\n"'),
        RENDER,
        ("name",),
    ),
    (
        "base-trailing-newline",
        BASE.replace("base: local/base:bookworm", 'base: "local/base:bookworm\\n"'),
        RENDER,
        ("image.base",),
    ),
    (
        "apt-trailing-newline",
        IMAGE_HEAD + '  torch: none\n  system_packages: ["curl\\n"]\n',
        RENDER,
        ("image.system_packages",),
    ),
    ("launch-env-u2028", BASE + '  env:\n    A: "a\\u2028b"\n', RUN, ("launch.env",)),
    (
        "profile-description-u2028",
        _with_profile('    description: "a\\u2028b"\n'),
        RUN,
        ("profiles.p.description",),
    ),
    (
        "profile-name-newline",
        BASE + 'profiles:\n  "p\\nq":\n    numa: off\n',
        RENDER,
        ("profiles",),
    ),
    (
        "index-url-newline",
        IMAGE_HEAD + '  torch: none\n  pip:\n    index_url: "https://x/\\nRUN id"\n',
        RENDER,
        ("image.pip.index_url",),
    ),
    # 10. docker.cpuset_cpus: not a list, or more CPUs than the host can have
    (
        "cpuset-abc",
        _with_profile("    docker:\n      cpuset_cpus: abc\n"),
        RUN,
        ("profiles.p.docker.cpuset_cpus", "abc"),
    ),
    (
        "cpuset-huge",
        _with_profile("    docker:\n      cpuset_cpus: 0-999999999\n"),
        RUN,
        ("profiles.p.docker.cpuset_cpus", "does not exist"),
    ),
    (
        "cpuset-arabic-digit",
        _with_profile("    docker:\n      cpuset_cpus: '٣'\n"),
        RUN,
        ("profiles.p.docker.cpuset_cpus",),
    ),
    (
        "cap-add-injection",
        _with_profile('    docker:\n      cap_add: ["SYS_ADMIN --privileged"]\n'),
        RUN,
        ("profiles.p.docker.cap_add",),
    ),
    # 11. mounts in the config
    (
        "mount-empty-host",
        BASE + "  mounts: [':/x']\n",
        RUN,
        ("launch.mounts", "host path is empty"),
    ),
    (
        "mount-comma",
        BASE + "  mounts: ['data:/data,source=/etc']\n",
        RUN,
        ("launch.mounts", "commas"),
    ),
    ("mount-dotdot", BASE + "  mounts: ['.:/a/../b']\n", RUN, ("launch.mounts", "..")),
    ("mount-relative-target", BASE + "  mounts: ['.:data']\n", RUN, ("launch.mounts", "absolute")),
    # 12. GPU and process counts without a topology
    ("gpus-duplicate", BASE.replace("gpus: 0", "gpus: '0,0'"), RUN, ("launch.gpus", "twice")),
    ("gpus-arabic-indic", BASE.replace("gpus: 0", "gpus: '٣'"), RUN, ("launch.gpus",)),
    ("gpus-huge", BASE.replace("gpus: 0", "gpus: 99999999999999999999"), RUN, ("launch.gpus",)),
    (
        "gpus-huge-index",
        BASE.replace("gpus: 0", "gpus: '0,99999999999999999999'"),
        RUN,
        ("launch.gpus", "out of range"),
    ),
    ("gpus-negative", BASE.replace("gpus: 0", "gpus: -1"), RUN, ("launch.gpus",)),
    ("nproc-too-many", BASE + "  nproc: 5000\n", RUN, ("launch.nproc",)),
    # 16. profiles
    (
        "extends-itself",
        _with_profile("    extends: p\n"),
        RUN,
        ("profiles.p.extends", "extends itself"),
    ),
    (
        "extends-cycle",
        BASE + "profiles:\n  a: {extends: b}\n  b: {extends: a}\n",
        RUN,
        ("extends", "cycle", "a -> b -> a"),
    ),
    (
        "torch-extras-twice",
        IMAGE_HEAD + "  torch: 2.4.1\n  cuda: cpu\n  torch_extras: [torchvision, torchvision]\n",
        RENDER,
        ("image.torch_extras", "twice"),
    ),
]

ALREADY_HANDLED: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    (
        "alias-bomb",
        "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        ),
        RENDER,
        ("alias bomb",),
    ),
    ("tab-indent", "version: 1\nname: x\nimage:\n\ttorch: none\n", RENDER, ("tabs",)),
    (
        "deep-nesting",
        "version: 1\nname: x\nimage: " + "[" * 300 + "]" * 300 + "\n",
        RENDER,
        ("nesting",),
    ),
    ("unknown-key", BASE + "  gpuss: 2\n", RENDER, ("launch.gpuss", "unknown field")),
    ("wrong-type-nproc", BASE + "  nproc: many\n", RUN, ("launch.nproc",)),
    ("wrong-type-env", IMAGE_HEAD + "  torch: none\n  env: [A, B]\n", RENDER, ("image.env",)),
    ("impossible-torch", IMAGE_HEAD + "  torch: 0.0.1\n  cuda: cpu\n", RENDER, ("torch", "0.0.1")),
    (
        "requirements-traversal",
        IMAGE_HEAD + "  torch: none\n  requirements: ../outside/req.txt\n",
        RENDER,
        ("image.requirements",),
    ),
    (
        "ca-cert-absolute",
        IMAGE_HEAD + "  torch: none\n  ca_cert: /etc/passwd\n",
        RENDER,
        ("image.ca_cert",),
    ),
    ("version-2", BASE.replace("version: 1", "version: 2"), RENDER, ("version",)),
    ("top-level-list", "- a\n- b\n", RENDER, ("top level",)),
    ("bad-numa", BASE + "  numa: sideways\n", RUN, ("launch.numa",)),
    (
        "privileged-refused",
        _with_profile("    docker:\n      privileged: true\n"),
        RUN,
        ("profiles.p.docker.privileged",),
    ),
    ("bool-as-gpus", BASE.replace("gpus: 0", "gpus: true"), RUN, ("launch.gpus",)),
]


def _params(table: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]) -> list[object]:
    return [pytest.param(text, cmd, names, id=case) for case, text, cmd, names in table]


@pytest.mark.parametrize(("text", "command", "names"), _params(NEW_DEFECTS + ALREADY_HANDLED))
def test_bad_config_is_a_clean_error(
    hostile: Hostile, text: str, command: tuple[str, ...], names: tuple[str, ...]
) -> None:
    hostile.write_config(text)
    outcome = hostile.invoke_unchanged(*command)
    outcome.assert_clean_error(2, *names)


# Bad files next to the config: (id, how to make it, command, names)
FileMaker = Callable[[Path], None]


def _binary(project: Path) -> None:
    (project / "gpulaunch.yaml").write_bytes(b"version: 1\x00\nname: x\n")


def _latin1(project: Path) -> None:
    (project / "gpulaunch.yaml").write_bytes("version: 1\nname: caf\xe9\n".encode("latin-1"))


def _pyproject(dep: str) -> FileMaker:
    def make(project: Path) -> None:
        (project / "pyproject.toml").write_text(
            f'[project]\nname = "x"\ndependencies = ["{dep}"]\n', encoding="utf-8"
        )
        (project / "gpulaunch.yaml").write_text(
            IMAGE_HEAD + "  torch: none\n  requirements: pyproject.toml\n", encoding="utf-8"
        )

    return make


def _pyproject_table(project: Path) -> None:
    (project / "pyproject.toml").write_text('project = "not a table"\n', encoding="utf-8")
    (project / "gpulaunch.yaml").write_text(
        IMAGE_HEAD + "  torch: none\n  requirements: pyproject.toml\n", encoding="utf-8"
    )


FILES: list[tuple[str, FileMaker, tuple[str, ...]]] = [
    ("config-binary", _binary, ("binary",)),
    ("config-not-utf8", _latin1, ("UTF-8",)),
    ("pyproject-dep-u2028", _pyproject("numpy\\u2028RUN id"), ("image.requirements",)),
    ("pyproject-dep-nel", _pyproject("numpy\\u0085RUN id"), ("image.requirements",)),
    ("pyproject-dep-newline", _pyproject("numpy\\nRUN id"), ("image.requirements",)),
    ("pyproject-project-not-table", _pyproject_table, ("image.requirements",)),
]


@pytest.mark.parametrize(("make", "names"), [pytest.param(m, n, id=i) for i, m, n in FILES])
def test_bad_project_file_is_a_clean_error(
    hostile: Hostile, make: FileMaker, names: tuple[str, ...]
) -> None:
    make(hostile.project)
    hostile.invoke_unchanged("render").assert_clean_error(2, *names)


def test_duplicate_key_in_a_profile_file_is_refused() -> None:
    """Profile and catalog files go through the same loader as gpulaunch.yaml."""
    from gpulaunch.errors import ConfigError
    from gpulaunch.yamlio import parse_yaml_text

    with pytest.raises(
        ConfigError, match=r"profiles/x.yaml: duplicate key 'nccl' \(line 1 and line 3\)"
    ):
        parse_yaml_text("nccl: pcie\nnuma: auto\nnccl: tcp\n", "profiles/x.yaml")


def test_merge_keys_may_still_override() -> None:
    from gpulaunch.yamlio import parse_yaml_text

    data = parse_yaml_text("x: &a {k: 1}\ny:\n  <<: *a\n  k: 2\n", "f")
    assert data["y"] == {"k": 2}


def test_numa_off_unquoted_means_off(hostile: Hostile) -> None:
    """YAML 1.1 reads `off` as False; gpulaunch reads YAML 1.2 booleans (true/false only)."""
    import json

    hostile.write_config(_with_profile("    numa: off\n"))
    outcome = hostile.invoke("profiles", "show", "p", "--json")
    assert outcome.code == 0, outcome.stderr
    assert json.loads(outcome.stdout)["settings"]["numa"]["value"] == "off"


def test_yes_still_means_true_for_boolean_fields() -> None:
    from gpulaunch.config import validate_data
    from gpulaunch.yamlio import parse_yaml_text

    cfg = validate_data(parse_yaml_text("name: x\nimage:\n  pip:\n    no_index: yes\n", "f"))
    assert cfg.image.pip.no_index is True


@pytest.mark.parametrize(
    "text",
    [
        'tool = 1\n[project]\nname = "x"\nversion = "0"\n',
        "project = 1\ntool = 1\n",
        '[tool]\npoetry = 3\nuv = "x"\npdm = []\n[project]\nname = "x"\nversion = "0"\n',
        '[project]\nname = "x"\nversion = "0"\noptional-dependencies = 3\n',
        '[tool.uv]\noverride-dependencies = 3\nsources = 1\n[project]\nname = "x"\nversion = "0"\n',
    ],
)
def test_a_pyproject_table_that_is_not_a_table_is_read_as_empty(
    hostile: Hostile, text: str
) -> None:
    """TOML lets `tool = 1` parse; a scalar where a table belongs says nothing about poetry, uv
    or PDM: init reads it as empty and writes its config, never an internal error."""
    (hostile.project / "gpulaunch.yaml").unlink()
    (hostile.project / "pyproject.toml").write_text(text, encoding="utf-8")
    outcome = hostile.invoke("init", "--yes", "--cuda", "cpu")
    assert "internal error" not in outcome.stderr and outcome.code == 0, outcome.stderr
    assert (hostile.project / "gpulaunch.yaml").is_file()
