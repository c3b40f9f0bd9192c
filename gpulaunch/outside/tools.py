"""Running cluster tools (kubectl, sbatch, sacct, scontrol): one function, always a timeout.

Tests fake `run_tool`; e2e tests use the real tools.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from gpulaunch.errors import EngineError

TOOL_TIMEOUT_S = 60


@dataclass(frozen=True)
class ToolResult:
    argv: list[str]
    code: int
    stdout: str
    stderr: str


def find_tool(name: str, fix: str) -> str:
    """The tool's path, or exit 3 naming the fix."""
    path = shutil.which(name)
    if path is None:
        raise EngineError(f"{name} not found on PATH", hint=fix)
    return path


def run_tool(
    argv: list[str], stdin: str | None = None, timeout: float = TOOL_TIMEOUT_S
) -> ToolResult:
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EngineError(f"{argv[0]}: no answer within {timeout:.0f} s") from None
    except OSError as err:
        raise EngineError(f"{argv[0]}: cannot run: {err.strerror}") from None
    return ToolResult(argv, proc.returncode, proc.stdout, proc.stderr)


def kubectl_apply(manifest: str, context: str | None, timeout: float = TOOL_TIMEOUT_S) -> str:
    """`kubectl apply -f -` with the manifest on stdin; its output, or exit 3 with its reason."""
    kubectl = find_tool("kubectl", "install kubectl and point it at your cluster (KUBECONFIG)")
    argv = [kubectl, *(["--context", context] if context else []), "apply", "-f", "-"]
    result = run_tool(argv, manifest, timeout)
    if result.code != 0:
        reason = " ".join(result.stderr.split())[-300:] or f"exit {result.code}"
        raise EngineError(f"kubectl apply failed: {reason}")
    return result.stdout


def sbatch(script: str, timeout: float = TOOL_TIMEOUT_S) -> str:
    """Submit a batch script (on stdin) and return the job id (`sbatch --parsable`)."""
    tool = find_tool("sbatch", "run this on a Slurm login node (slurm-client installed)")
    result = run_tool([tool, "--parsable"], script, timeout)
    if result.code != 0:
        reason = " ".join(result.stderr.split())[-300:] or f"exit {result.code}"
        raise EngineError(f"sbatch failed: {reason}")
    job_id = result.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise EngineError(f"sbatch answered {result.stdout.strip()!r}, not a job id")
    return job_id
