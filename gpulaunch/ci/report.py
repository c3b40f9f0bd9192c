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
import stat
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from xml.etree import ElementTree as ET

from gpulaunch.errors import ConfigError
from gpulaunch.fsio import open_stream, write_file
from gpulaunch.masking import mask

if TYPE_CHECKING:  # `render -o` resolves its path here without loading the smoke use case
    from gpulaunch.ci.smoke import SmokeResult

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
    if _not_regular(path):
        raise ConfigError(f"{flag}: {value} is not a regular file; refusing to replace it")
    return path


class OutputTarget(NamedTuple):
    """Where an output file really goes: its resolved path, and the folder the writer walks
    from without following links (the project, when the file is inside it; else None)."""

    path: Path
    root: Path | None


MAX_LINKS = 40  # as the kernel's own limit on links in one path (ELOOP)


def resolve_output(value: Path, project: Path, flag: str) -> OutputTarget:
    """Resolve an output path the way the kernel will, one name at a time, and judge it by
    where it lands, not by how it is spelled: `../x`, an alias of the project or a link
    outside it that leads in are all seen for what they are. A link that lies inside the
    project (a job can plant one) is refused rather than followed; the final name is left to
    the writer, which never follows it. ConfigError names `flag`."""
    real_project = Path(os.path.realpath(project))
    spelled = Path.cwd() / value  # not normalized: `link/..` is the link target's parent
    *folders, name = spelled.parts[1:] or [""]
    if name in ("", ".", ".."):
        raise ConfigError(f"{flag}: {value} is a folder; give a file name")
    current, todo, links = Path("/"), list(folders), 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            if current.is_relative_to(real_project) and ".." not in todo:
                # inside the project the writer makes the missing folders, following no link
                return OutputTarget(Path(candidate, *todo, name), real_project)
            raise ConfigError(f"{flag}: folder {candidate} does not exist") from None
        except OSError as err:
            raise ConfigError(f"{flag}: {candidate}: {err.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            if current.is_relative_to(real_project):
                raise ConfigError(
                    f"{flag}: {candidate} is a symbolic link inside the project; gpulaunch "
                    "does not write through it"
                )
            links += 1
            if links > MAX_LINKS:
                raise ConfigError(f"{flag}: {value}: too many levels of links")
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
                todo[:0] = list(target.parts[1:])
            else:
                todo[:0] = list(target.parts)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{flag}: {candidate} is not a folder")
        current = candidate
    inside = current.is_relative_to(real_project)
    return OutputTarget(current / name, real_project if inside else None)


def check_junit_file(path: Path, project: Path, force: bool) -> OutputTarget:
    """The JUnit target, resolved (`resolve_output`): inside the project it is written by a
    walk from the project that follows no link, and an existing file that is not a JUnit
    report is kept unless --force."""
    target = resolve_output(path, project, "--junit")
    if os.path.lexists(target.path) and not force and not _is_junit(target.path):
        raise ConfigError(
            f"--junit: {path} exists and is not a JUnit report; refusing to overwrite it "
            "(--force replaces it)"
        )
    return target


def check_summary_file(path: Path, project: Path) -> Path:
    """$GITHUB_STEP_SUMMARY, resolved: appended to only outside the project, so a summary
    never lands in the project's config or sources (gpulaunch.yaml, train.py), whatever
    name or link leads there."""
    flag = f"${SUMMARY_ENV}"
    target = resolve_output(path, project, flag)
    if target.root is not None:
        raise ConfigError(
            f"{flag}: {path} is inside the project ({target.root}); the step summary is "
            "appended only to a file outside it"
        )
    if _not_regular(target.path):
        raise ConfigError(f"{flag}: {path} is not a regular file; refusing to append to it")
    return target.path


def _not_regular(path: Path) -> bool:
    """Something is there, and it is not a regular file (a link, a folder, a FIFO)."""
    return os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode)


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
    """Replace the report at the path `check_junit_file` resolved; `root`: walk from there
    without following a link."""
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
    """Append to $GITHUB_STEP_SUMMARY (GitHub creates the file; other steps append too), at
    the path `check_summary_file` resolved: never through a link, only to a regular file."""
    with open_stream(path, root=path.absolute().parent, append=True) as out:
        out.write(_ANSI.sub("", summary_markdown(result)))
