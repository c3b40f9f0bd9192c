from __future__ import annotations

from pathlib import Path

import pytest

from gpulaunch.config import dump_config, load_config, parse_gpus, sanitize_name, validate_data
from gpulaunch.errors import ConfigError, ExitCode
from gpulaunch.yamlio import atomic_write, parse_yaml_text


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "gpulaunch.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _error(tmp_path: Path, text: str | bytes) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    assert info.value.exit_code == ExitCode.USAGE
    assert "\n" not in info.value.message
    return info.value.message


def test_full_example_loads(tmp_path: Path) -> None:
    cfg = load_config(
        _write(
            tmp_path,
            """
version: 1
name: my-project
image:
  python: 3.10
  torch: 2.10.0
  cuda: "12.8"
  cudnn: 9
  flavor: devel
  system_packages: [git, libgl1]
  pip: {index_url: null, extra_index_urls: [], find_links: [wheels]}
  env: {HF_HOME: /cache}
  run: ["echo hi"]
launch:
  gpus: "0,2"
  mounts: ["/data:/data:ro"]
""",
        )
    )
    # Unquoted versions stay exact strings: 3.10 is not 3.1, 2.10.0 stays.
    assert cfg.image.python == "3.10"
    assert cfg.image.torch == "2.10.0"
    assert cfg.image.cudnn == "9"
    assert cfg.launch.gpus == "0,2"
    assert cfg.image.pip.find_links == ["wheels"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\nimage: {torhc: '2.4.1'}\n", "image.torhc: unknown field (valid: python, torch,"),
        ("name: x\nimage: {flavor: gpu}\n", "image.flavor: 'gpu' is not allowed"),
        ("name: x\nlaunch: {gpus: -1}\n", "launch.gpus: must not be negative"),
        ("name: x\nlaunch: {gpus: many}\n", "launch.gpus: 'many' is not a count"),
        ("name: x\nlaunch: {mounts: ['data']}\n", "launch.mounts: 'data' is not host:/container"),
        ("name: x\nimage: {env: {'1BAD': v}}\n", "image.env: '1BAD' is not a valid environment"),
        ("name: x\nimage: {system_packages: ['git; rm -rf /']}\n", "image.system_packages:"),
        (
            "name: x\nimage: {requirements: ../secrets.txt}\n",
            "image.requirements: '../secrets.txt'",
        ),
        ("name: My Project\n", "name: 'My Project' is not a valid image name"),
        ("image: {}\n", "name: required field is missing"),
        ("version: 2\nname: x\n", "version: 2 is not supported"),
        ("name: x\nprofiles: {fast: {nccl: warp}}\n", "profiles.fast.nccl: 'warp' is not allowed"),
        # image references and sizes are read by the same parsers as --image and the exports
        (
            "name: x\nlaunch: {image: reg.io/Team/x}\n",
            "launch.image: 'reg.io/Team/x' is not an image reference (REGISTRY/NAME[:TAG])",
        ),
        (
            "name: x\nimage: {base: 'reg.io/x:t\u00e4g'}\n",
            "image.base: 't\u00e4g' is not a valid tag",
        ),
        ("name: x\nimage: {base: 'x@sha256:12'}\n", "image.base: 'x@sha256:12' has an invalid"),
        ("name: x\nprofiles: {p: {docker: {shm_size: 1.5g}}}\n", "'1.5g' is not a size like 16g"),
    ],
)
def test_field_errors_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _error(tmp_path, text)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("- a\n- b\n", "top level must be a mapping of settings, got list"),
        ("", "top level must be a mapping of settings, got empty"),
        ("name: x\nimage:\n\ttorch: '2.4.1'\n", "tabs are not allowed"),
        (b"\x00\x01\x02binary", "looks like a binary file"),
        (b"name: \xff\xfe\n", "not UTF-8 text"),
        ("name: [unclosed\n", "invalid YAML (line"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nesting"),
    ],
)
def test_hostile_yaml_is_a_config_error(
    tmp_path: Path, content: str | bytes, expected: str
) -> None:
    assert expected in _error(tmp_path, content)


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    prev = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    assert "alias bomb" in _error(tmp_path, "\n".join(lines) + "\nname: x\n")


def test_huge_file_is_refused(tmp_path: Path) -> None:
    assert "larger than 1024 KiB" in _error(tmp_path, "name: x\n" + "#" * (1024 * 1024 + 10))


def test_missing_file_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def test_floats_never_appear() -> None:
    data = parse_yaml_text("a: 2.10\nb: 1e3\nc: 3\n", "t")
    assert data == {"a": "2.10", "b": "1e3", "c": 3}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (4, 4), ("2", 2), ("all", "all"), ("0, 2", "0,2"), ("GPU-1a2b-3c", "GPU-1a2b-3c")],
)
def test_parse_gpus(value: object, expected: object) -> None:
    assert parse_gpus(value) == expected


def test_dump_roundtrip_keeps_version_strings() -> None:
    cfg = validate_data(
        {"name": "p", "image": {"torch": "2.10.0", "python": "3.10", "cuda": "12.8"}}
    )
    text = dump_config(cfg)
    assert 'python: "3.10"' in text
    assert validate_data(parse_yaml_text(text, "t")) == cfg


def test_sanitize_name() -> None:
    assert sanitize_name("My Cool_Project!!") == "my-cool_project"
    assert sanitize_name("---") == "project"


def test_atomic_write_refuses_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("original")
    with pytest.raises(ConfigError, match="already exists; use --force"):
        atomic_write(target, "new")
    assert target.read_text() == "original"
    atomic_write(target, "new", force=True)
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
