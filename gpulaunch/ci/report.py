"""A smoke result in the formats CI systems read: JUnit XML, a GitHub step summary, JSON.

JUnit: one <testsuite> with one <testcase> named after the project and command; a failed or
timed-out job is a <failure> (type "exit" or "timeout") whose text is the last lines of
output, a build or engine problem an <error>; <system-out> holds the output, capped. The
file is written whole through the one writer (temp file + rename), so a CI job that reads it
never sees half a file. Text is stripped of what XML 1.0 cannot carry (ANSI escapes, NUL).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from xml.etree import ElementTree as ET

from gpulaunch.ci.smoke import SmokeResult
from gpulaunch.errors import ConfigError
from gpulaunch.fsio import open_stream, write_file
from gpulaunch.masking import mask

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
SUMMARY_TAIL = 30
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ICONS = {"passed": "✅", "failed": "❌", "timeout": "⏱️", "error": "❌"}


def check_output_file(value: str, flag: str) -> Path:
    """A report file must go into an existing folder and may not be a folder itself: checked
    before the run, so bad input is exit 2 with nothing built or written."""
    path = Path(value)
    if not value.strip():
        raise ConfigError(f"{flag}: must not be empty")
    if path.is_dir():
        raise ConfigError(f"{flag}: {value} is a folder; give a file name")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"{flag}: folder {parent} does not exist")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError(f"{flag}: {value} is not a regular file; refusing to replace it")
    return path


def check_junit_file(path: Path, project: Path, force: bool) -> Path | None:
    """The JUnit target, checked as `render -o` checks its own: inside the project no folder
    on the way may be a link (returns the project: the writer walks from it without following
    links), and an existing file that is not a JUnit report is kept unless --force."""
    target = Path(os.path.abspath(path))
    root = project if target.is_relative_to(project) and target != project else None
    if root is not None:
        walked = root
        for name in target.relative_to(root).parts[:-1]:
            walked = walked / name
            if walked.is_symlink():
                raise ConfigError(f"--junit: {walked} is a link; refusing to write through it")
    if target.exists() and not force and not _is_junit(target):
        raise ConfigError(
            f"--junit: {path} exists and is not a JUnit report; refusing to overwrite it "
            "(--force replaces it)"
        )
    return root


def _is_junit(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"<?xml"):
        text = text[text.find(b"?>") + 2 :].lstrip()
    return text.startswith((b"<testsuite", b"<testsuites"))


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", _ANSI.sub("", mask(text)))


def junit_xml(result: SmokeResult) -> str:
    failures = 1 if result.outcome in ("failed", "timeout") else 0
    errors = 1 if result.outcome == "error" else 0
    seconds = f"{result.duration:.3f}"
    suite = ET.Element(
        "testsuite",
        {
            "name": "gpulaunch smoke",
            "tests": "1",
            "failures": str(failures),
            "errors": str(errors),
            "skipped": "0",
            "time": seconds,
            "timestamp": result.started_at.removesuffix("Z"),
            "hostname": _xml_text(socket.gethostname()),
        },
    )
    props = ET.SubElement(suite, "properties")
    for key, value in {
        "image": result.image or "",
        "gpus": result.gpus,
        "profile": result.profile,
        "steps": str(result.steps),
        **{f"version.{k}": v for k, v in result.versions.items()},
    }.items():
        ET.SubElement(props, "property", {"name": key, "value": _xml_text(value)})
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": f"gpulaunch.smoke.{_xml_text(result.project)}",
            "name": _xml_text(result.name),
            "time": seconds,
        },
    )
    if result.outcome != "passed":
        tag = "error" if result.outcome == "error" else "failure"
        kind = {"timeout": "timeout", "failed": "exit"}.get(result.outcome, "error")
        node = ET.SubElement(case, tag, {"message": _xml_text(result.message), "type": kind})
        node.text = _xml_text("\n".join(result.tail))
    out = ET.SubElement(case, "system-out")
    out.text = _xml_text(result.output)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def write_junit(result: SmokeResult, path: Path, root: Path | None = None) -> None:
    """Replace the report (checked by `check_junit_file`); `root`: walk from there without
    following a link."""
    write_file(path, junit_xml(result), force=True, root=root)


def summary_markdown(result: SmokeResult) -> str:
    icon = _ICONS.get(result.outcome, "")
    rows = [
        ("result", f"{icon} **{result.outcome}** (exit {result.exit_code})"),
        ("command", f"`{result.command}`"),
        ("duration", f"{result.duration:.1f} s (timeout {result.timeout:g} s)"),
        ("image", f"`{result.image}`" if result.image else "not built"),
        *((name, f"`{value}`") for name, value in result.versions.items()),
        ("GPUs", "CPU fallback: " + result.gpu_notice if result.gpu_notice else result.gpus),
        ("profile", result.profile),
        ("steps", str(result.steps)),
        ("log", f"`{result.log_path}`" if result.log_path else "-"),
    ]
    lines = [f"### gpulaunch smoke: {result.project}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    if result.outcome != "passed":
        lines += ["", f"**{_cell(result.message)}**", "", "<details><summary>last lines</summary>"]
        tail = result.tail[-SUMMARY_TAIL:]
        # a fence longer than any run of backticks in the job's lines: they cannot close it
        fence = "`" * max([3, *(len(run) + 1 for line in tail for run in _TICKS.findall(line))])
        lines += ["", f"{fence}text", *tail, fence, "", "</details>"]
    return mask("\n".join(lines) + "\n\n")


_TICKS = re.compile(r"`+")


def _cell(text: str) -> str:
    return _ANSI.sub("", text).replace("|", "\\|").replace("\n", " ")


def append_summary(result: SmokeResult, path: Path) -> None:
    """Append to $GITHUB_STEP_SUMMARY (GitHub creates the file; other steps append too)."""
    with open_stream(path, root=path.absolute().parent, append=True) as out:
        out.write(_ANSI.sub("", summary_markdown(result)))
