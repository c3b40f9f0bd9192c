"""Image references for clusters and `build --push`: parsing, refusals, the registry probe."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.errors import ConfigError, EngineError
from gpulaunch.export.images import ImageRef, parse_ref, push_target
from gpulaunch.outside.registry import _scheme, ping

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:5000/train", ImageRef("127.0.0.1:5000", "train")),
        ("localhost/ns/train:v1", ImageRef("localhost", "ns/train", "v1")),
        ("nvcr.io/nvidia/pytorch:24.05-py3", ImageRef("nvcr.io", "nvidia/pytorch", "24.05-py3")),
        (f"reg.example.com/a/b@{DIGEST}", ImageRef("reg.example.com", "a/b", "", DIGEST)),
        ("train:gl-abc", ImageRef("", "train", "gl-abc")),
        ("team/train", ImageRef("", "team/train")),
    ],
)
def test_parse(text: str, expected: ImageRef) -> None:
    assert parse_ref(text, "--image") == expected
    assert str(expected) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train", "--push: 'train' names no registry"),
        (f"reg.io/x@{DIGEST}", "--push: give REGISTRY/NAME[:TAG]"),
        ("reg.io/Upper", "--push: 'reg.io/Upper' is not an image reference"),
        ("reg.io/x:bad tag", "--push: 'bad tag' is not a valid tag"),
        ("reg.io/x@sha256:zz", "--push: 'reg.io/x@sha256:zz' has an invalid digest"),
    ],
)
def test_push_target_refusals(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        push_target(text)
    assert err.value.message.startswith(message)


def test_scheme_is_http_only_for_loopback() -> None:
    assert _scheme("127.0.0.1:5000") == "http"
    assert _scheme("localhost:5000") == "http"
    assert _scheme("[::1]:5000") == "http"
    assert _scheme("registry.example.com") == "https"


def test_ping_a_closed_port_fails_fast() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        ping(f"127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - started < 5
    assert err.value.message.startswith(f"registry 127.0.0.1:{port} does not answer at http://")


def test_build_push_bad_reference_is_exit_2_before_anything(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpulaunch.yaml").write_text(
        yaml.safe_dump({"version": 1, "name": "t", "image": {"torch": "2.4.1"}})
    )
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["build", "--dry-run", "--push", "t"], catch_exceptions=False)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("gpulaunch: error: --push: 't' names no registry")


def test_run_image_bad_reference(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gpulaunch.yaml").write_text(
        yaml.safe_dump({"version": 1, "name": "t", "image": {"torch": "2.4.1"}})
    )
    (tmp_path / "x.py").write_text("")
    monkeypatch.chdir(tmp_path)
    args = ["run", "x.py", "--dry-run", "--image", "reg.io/x@sha256:1"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("gpulaunch: error: --image: 'reg.io/x@sha256:1' has an")
