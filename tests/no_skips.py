"""pytest plugin: with GPULAUNCH_NO_SKIPS=1 a skipped test (or module) is a failure.

The suite has legitimate skip paths (no engine, fewer than two CPUs, no set_mempolicy, no
torch, not root). A developer's laptop may take them; CI must prove it took none, so
`dev/test` sets GPULAUNCH_NO_SKIPS=1 whenever GPULAUNCH_REQUIRE_DOCKER=1. Expected failures
(xfail) are not skips and are left alone. Loaded by tests/conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

ENV = "GPULAUNCH_NO_SKIPS"
# Read once at import: the per-test environment fixture removes GPULAUNCH_* variables.
ENABLED = os.environ.get(ENV) == "1"


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail(report: Any) -> None:
    if ENABLED and report.skipped and not hasattr(report, "wasxfail"):
        reason = _reason(report)
        report.outcome = "failed"
        report.longrepr = f"skipped, and {ENV}=1 allows no skips: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    _fail(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _fail(outcome.get_result())


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"{ENV}=1: any skipped test fails the run" if ENABLED else None
