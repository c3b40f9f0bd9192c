"""Host mode (`gpulaunch run --no-container`): the same launch plan, started on this machine.

For clusters without Docker, runs already inside a container (a Kubernetes pod, an NGC
shell), and GPU machines without a container engine. Signals behave as in a container:
the first SIGINT/SIGTERM/SIGHUP is forwarded as SIGTERM, a second one kills.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from gpulaunch.engine.runspec import RunPlan
from gpulaunch.errors import ExitCode, RunError

_SIGNAL_EXIT = {  # SIGHUP (a closed terminal or ssh session) stops the job as SIGTERM does
    signal.SIGHUP: ExitCode.HANGUP,
    signal.SIGINT: ExitCode.INTERRUPTED,
    signal.SIGTERM: ExitCode.TERMINATED,
}


def run_on_host(plan: RunPlan, cwd: Path) -> int:
    env = {**os.environ, **plan.env}
    received: list[int] = []
    try:
        proc = subprocess.Popen(plan.command, env=env, cwd=cwd, start_new_session=True)
    except OSError as err:
        raise RunError(f"cannot start {plan.command[0]}: {err.strerror}") from None

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL if len(received) > 1 else signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in _SIGNAL_EXIT}
    try:
        try:
            code = proc.wait(timeout=None)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        if received:
            # graceful shutdown may still be running in the group: wait for it
            return int(_SIGNAL_EXIT[signal.Signals(received[0])])
        return code if code >= 0 else 128 - code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
