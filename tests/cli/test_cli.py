"""CLI through the real typer app: exact exit codes and messages, nothing written on errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from gpulaunch import __version__
from gpulaunch.cli.app import app


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_version(runner: CliRunner) -> None:
    assert invoke(runner, "--version") == (0, f"gpulaunch {__version__}\n", "")


def test_init_then_render(runner: CliRunner, in_tmp: Path) -> None:
    code, out, err = invoke(runner, "init", "--yes", "--torch", "2.4.1")
    assert code == 0, err
    assert "wrote gpulaunch.yaml" in out
    text = (in_tmp / "gpulaunch.yaml").read_text()
    assert 'torch: "2.4.1"' in text and 'cuda: "11.8"' in text  # broadest driver reach
    assert (in_tmp / ".dockerignore").exists()
    code, out, err = invoke(runner, "render")
    assert code == 0, err
    assert "FROM nvidia/cuda:11.8.0-runtime-ubuntu22.04" in out
    assert "https://download.pytorch.org/whl/cu118" in out


def test_init_refuses_impossible_combination(runner: CliRunner, in_tmp: Path) -> None:
    code, out, err = invoke(runner, "init", "--yes", "--torch", "2.0.1", "--cuda", "12.4")
    assert code == 2
    assert err == (
        "gpulaunch: error: image.cuda: torch 2.0.1 has no CUDA 12.4 build; "
        "available: cu117, cu118\n"
    )
    assert "Traceback" not in out + err
    assert list(in_tmp.iterdir()) == []


def test_render_refuses_impossible_config(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text('name: x\nimage: {torch: "2.0.1", cuda: "12.4"}\n')
    before = snapshot(in_tmp)
    code, _, err = invoke(runner, "render", "-o", "Dockerfile")
    assert code == 2
    assert "image.cuda: torch 2.0.1 has no CUDA 12.4 build; available: cu117, cu118" in err
    assert err.count("\n") == 1
    assert snapshot(in_tmp) == before


def test_init_never_overwrites_without_force(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text("name: mine\n")
    (in_tmp / ".dockerignore").write_text("custom\n")
    before = snapshot(in_tmp)
    code, _, err = invoke(runner, "init", "--yes", "--torch", "2.4.1")
    assert code == 2
    assert "gpulaunch.yaml: already exists; use --force to overwrite" in err
    assert snapshot(in_tmp) == before
    code, _, err = invoke(runner, "init", "--yes", "--torch", "2.4.1", "--force")
    assert code == 0, err
    assert (in_tmp / ".dockerignore").read_text() == "custom\n"  # an existing one is kept


def test_init_detects_requirements(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "requirements.txt").write_text(
        "--extra-index-url https://download.pytorch.org/whl/cu118\n"
        "torch>=2.1,<2.3  # pinned\ntorchvision\nnumpy\n"
    )
    code, _, err = invoke(runner, "init", "--yes")
    assert code == 0, err
    text = (in_tmp / "gpulaunch.yaml").read_text()
    assert 'torch: "2.2.2"' in text  # newest release matching >=2.1,<2.3
    assert 'cuda: "11.8"' in text
    assert "requirements: requirements.txt" in text
    assert "- torchvision" in text
    code, out, _ = invoke(runner, "render")
    assert (
        "torch==2.2.2 torchvision==0.17.2 --index-url https://download.pytorch.org/whl/cu118" in out
    )


def test_init_without_tty_needs_yes(runner: CliRunner, in_tmp: Path) -> None:
    code, _, err = invoke(runner, "init")
    assert code == 2
    assert "stdin is not a terminal; pass --yes" in err
    assert list(in_tmp.iterdir()) == []


def test_bad_yaml_no_traceback(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_bytes(b"name: x\nimage: {torch: \xff}\n")
    code, out, err = invoke(runner, "render")
    assert code == 2
    assert "not UTF-8 text" in err and "Traceback" not in err + out


def test_debug_shows_traceback(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text("- not a mapping\n")
    code, _, err = invoke(runner, "--debug", "render")
    assert code == 2
    assert "Traceback" in err and "top level must be a mapping" in err


def test_render_to_file_atomic_and_force(runner: CliRunner, in_tmp: Path) -> None:
    invoke(runner, "init", "--yes", "--torch", "2.4.1")
    assert invoke(runner, "render", "-o", "Dockerfile")[0] == 0
    first = (in_tmp / "Dockerfile").read_text()
    code, _, err = invoke(runner, "render", "-o", "Dockerfile")
    assert code == 2 and "already exists; use --force" in err
    assert invoke(runner, "render", "-o", "Dockerfile", "--force", "--builder", "classic")[0] == 0
    assert (in_tmp / "Dockerfile").read_text() != first


def test_versions_json_and_refusal(runner: CliRunner) -> None:
    code, out, _ = invoke(runner, "versions", "--torch", "2.4.1", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {r["variant"] for r in rows} >= {"cu118", "cu121", "cu124"}
    assert all(r["torch"] == "2.4.1" for r in rows)
    cu124 = next(r for r in rows if r["variant"] == "cu124")
    assert cu124["min_driver"] == "550.54.14"  # the image's cuda>=12.4, not the 12.x floor
    assert cu124["driver_requirement"].startswith("cuda>=12.4 brand=tesla,driver>=470,")
    assert cu124["driver_branches"] == ["470", "525", "535"]
    cpu = next(r for r in rows if r["variant"] == "cpu")
    assert (cpu["min_driver"], cpu["driver_requirement"], cpu["driver_branches"]) == (
        None,
        None,
        [],
    )
    code, _, err = invoke(runner, "versions", "--torch", "2.0.1", "--cuda", "12.4")
    assert code == 2 and "available: cu117, cu118" in err


def test_schema_is_json_schema(runner: CliRunner) -> None:
    code, out, _ = invoke(runner, "schema")
    schema = json.loads(out)
    assert code == 0
    assert schema["additionalProperties"] is False
    assert {"version", "name", "image", "launch", "profiles"} <= set(schema["properties"])


def test_unknown_option_is_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["render", "--nope"])
    assert result.exit_code == 2


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from gpulaunch.cli import app; "
        "mods = ('docker', 'jinja2', 'pydantic', 'pynvml', 'yaml'); "
        "heavy = [m for m in mods if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    help_run = subprocess.run(
        [sys.executable, "-m", "gpulaunch", "--help"], capture_output=True, text=True
    )
    assert help_run.returncode == 0 and "init" in help_run.stdout


@pytest.mark.parametrize("example", ["single-gpu", "cpu", "ngc"])
def test_run_dry_run_needs_no_daemon(
    runner: CliRunner, example: str, monkeypatch: pytest.MonkeyPatch, example_copy: Any
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    folder = example_copy(example)
    monkeypatch.chdir(folder)
    script = next(p.name for p in folder.glob("*.py"))
    code, out, err = invoke(runner, "run", "--dry-run", "--json", script)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["image"]["tag"].startswith(f"example-{example}:gl-")
    assert plan["run"]["docker_run"][:2] == ["docker", "run"]


def test_profiles_list_and_show(runner: CliRunner, in_tmp: Path) -> None:
    (in_tmp / "gpulaunch.yaml").write_text(
        "version: 1\nname: p\n"
        "launch: {env: {OMP_NUM_THREADS: '4'}}\n"
        "profiles:\n  fast:\n    extends: bf16\n    description: mine\n    nccl: nvlink\n"
        "    env: {NCCL_ASYNC_ERROR_HANDLING: '1'}\n"
    )
    code, out, _ = invoke(runner, "profiles")
    assert code == 0
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.strip()}
    assert rows["fast"] == "gpulaunch.yaml" and rows["debug"] == "built-in"
    code, out, err = invoke(runner, "profiles", "show", "fast", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["nccl"] == {
        "value": "nvlink",
        "source": "profile fast (gpulaunch.yaml)",
    }
    assert data["settings"]["precision"]["value"] == "bf16"
    assert data["env"]["OMP_NUM_THREADS"]["value"] == "4"
    assert data["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"]["value"] == "1"
    assert any("NCCL_ASYNC_ERROR_HANDLING" in w for w in data["warnings"])
    code, _, err = invoke(runner, "profiles", "show", "nope")
    assert code == 2 and "unknown profile 'nope'" in err and err.count("\n") == 1


def test_interactive_init_asks_and_validates(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.prompt import Prompt

    from gpulaunch.cli.image import _ask
    from gpulaunch.image.init import InitOptions, run_init

    answers = iter(["2.5.1", "12.4", "auto", "devel"])
    asked: list[str] = []

    def fake_ask(prompt: str, **kwargs: object) -> str:
        asked.append(prompt)
        return next(answers)

    monkeypatch.setattr(Prompt, "ask", staticmethod(fake_ask))
    result = run_init(InitOptions(directory=in_tmp, ask=_ask))
    assert len(asked) == 4
    assert "12.4.1" in result.summary
    text = (in_tmp / "gpulaunch.yaml").read_text()
    assert 'torch: "2.5.1"' in text and "flavor: devel" in text


def test_missing_config_flag_points_at_the_double_dash(runner: CliRunner, in_tmp: Path) -> None:
    result = runner.invoke(app, ["run", "train.py", "-c", "exp.yaml", "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr == (
        "gpulaunch: error: --config: 'exp.yaml' not found; if that option was meant for your "
        "script, put it after `--` (gpulaunch run train.py -- -c ...)\n"
    )


@pytest.mark.parametrize("command", ["run", "smoke"])
def test_nothing_after_dashdash_is_one_line(runner: CliRunner, in_tmp: Path, command: str) -> None:
    """`run --` / `smoke --` with no SCRIPT: no command to run (one reading of the words
    after `--` for both, app.job_words)."""
    (in_tmp / "gpulaunch.yaml").write_text("version: 1\nname: x\nimage: {torch: none}\n")
    before = snapshot(in_tmp)
    code, out, err = invoke(runner, command, "--")
    assert (code, out) == (2, "")
    assert err == (
        f"gpulaunch: error: {command}: nothing after --; give a command "
        f"({command} -- python -m x)\n"
    )
    assert snapshot(in_tmp) == before
