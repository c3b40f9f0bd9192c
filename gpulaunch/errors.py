"""One exception hierarchy; the CLI maps each class to an exit code in one place.

Core code raises these and never prints or exits. Third-party errors (YAML,
pydantic, docker, jinja) are wrapped where they happen, so a user sees a
one-line reason instead of a traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2  # bad flags, bad config, impossible version combination
    ENGINE = 3  # Docker engine missing, unreachable or refusing a request
    BUILD = 4  # image build failed
    TIMEOUT = 124  # `smoke --timeout` expired (as GNU timeout(1) reports it)
    HANGUP = 129  # SIGHUP (128 + 1): the terminal or the ssh session went away
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15)


class GpulaunchError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(GpulaunchError):
    """gpulaunch.yaml, a flag or a version choice is invalid. Message names the field."""

    exit_code = ExitCode.USAGE


class CatalogError(ConfigError):
    """A CUDA / cuDNN / torch / Python / OS combination that does not exist."""


class FileExistsRefusal(ConfigError):
    """Refusing to overwrite an existing file without --force."""


class EngineError(GpulaunchError):
    """The Docker engine (or NVIDIA runtime) is missing or refused a request."""

    exit_code = ExitCode.ENGINE


class RlimitRefused(EngineError):
    """The engine may not raise a ulimit (e.g. memlock=-1 inside an unprivileged sandbox)."""

    def __init__(self, message: str, *, rlimit: str) -> None:
        super().__init__(message)
        self.rlimit = rlimit


class BuildError(GpulaunchError):
    """The image build failed; `log_tail` holds the failing step's last lines."""

    exit_code = ExitCode.BUILD

    def __init__(
        self, message: str, *, hint: str | None = None, log_tail: str = "", log_path: str = ""
    ) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail
        self.log_path = log_path


class RunError(GpulaunchError):
    """Starting or supervising the training job failed (not the job's own exit code)."""


class TopologyError(GpulaunchError):
    """GPU / NUMA discovery or binding could not be planned."""

    exit_code = ExitCode.USAGE
