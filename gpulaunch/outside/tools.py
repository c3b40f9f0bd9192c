"""Running cluster tools (kubectl, sbatch, sacct, scontrol): one function, always a timeout.

Tests fake `run_tool`; e2e tests use the real tools.
"""

from __future__ import annotations

import shutil
import subprocess

from gpulaunch.errors import EngineError

TOOL_TIMEOUT_S = 60


def find_tool(name: str, fix: str) -> str:
    """The tool's path, or exit 3 naming the fix."""
    path = shutil.which(name)
    if path is None:
        raise EngineError(f"{name} not found on PATH", hint=fix)
    return path


def run_tool(
    argv: list[str], stdin: str | None = None, timeout: float = TOOL_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
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


def _submit(what: str, argv: list[str], text: str, timeout: float) -> str:
    """Run a tool with `text` on stdin: its output, or exit 3 with its reason."""
    result = run_tool(argv, text, timeout)
    if result.returncode != 0:
        reason = " ".join(result.stderr.split())[-300:] or f"exit {result.returncode}"
        raise EngineError(f"{what} failed: {reason}")
    return result.stdout


def kubectl_apply(manifest: str, context: str | None, timeout: float = TOOL_TIMEOUT_S) -> str:
    """`kubectl apply -f -` with the manifest on stdin; its output, or exit 3 with its reason."""
    kubectl = find_tool("kubectl", "install kubectl and point it at your cluster (KUBECONFIG)")
    argv = [kubectl, *(["--context", context] if context else []), "apply", "-f", "-"]
    return _submit("kubectl apply", argv, manifest, timeout)


def sbatch(script: str, timeout: float = TOOL_TIMEOUT_S) -> str:
    """Submit a batch script (on stdin) and return the job id (`sbatch --parsable`)."""
    tool = find_tool("sbatch", "run this on a Slurm login node (slurm-client installed)")
    answer = _submit("sbatch", [tool, "--parsable"], script, timeout).strip()
    job_id = answer.split(";")[0]
    if not job_id.isdigit():
        raise EngineError(f"sbatch answered {answer!r}, not a job id")
    return job_id
