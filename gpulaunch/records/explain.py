"""Why a job failed, in one line: its output's tail and the container's end state matched
against known failure signatures (`gpulaunch/data/failures.yaml`).

An explanation keeps only text from the data file, the signature's id and at most one
matched line, masked and cut short: job output can hold secrets, and records are kept.
Values a signature takes from the output ({module}, {path}) are checked to be what they
claim (a module name, a path) before they are used.

The output is untrusted text, so the work of matching it is bounded by construction rather
than by tuning patterns: the matcher sees one line at a time, each cut to `MAX_LINE`
characters, and every pattern is checked when the data file is loaded (`check_pattern`) to
allow at most `MAX_WAYS` ways of matching from one position: no unbounded repeat of a part
that can itself match in several ways ((a|ab)*, (a+)*), no two unbounded repeats in one
pattern, no lookaround or back-reference. So no line costs more than a fixed amount, and
64 KiB of output costs time linear in its size, whatever a job prints.

Under torchrun the output ends with torchrun's own summary of a failure (its traceback
ending in ChildFailedError, then a block per failed rank). The explainer reads through it:
the summary names the first rank that failed (`engine.supervise.rank_failure`), and only
that rank's lines (`[rankN]:`), lines no rank prefix claims, and its block's traceback are
matched; the other ranks' lines are what followed from its failure (a peer that closed the
connection), torchrun's block is no error of the job's. When no known signature matches, the
explanation still names the rank, how it ended and its own last error line (`rank-failed`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.errors import CatalogError, ConfigError
from gpulaunch.masking import mask

if TYPE_CHECKING:
    from gpulaunch.engine.supervise import RankFailure

DATA_FILE = "gpulaunch/data/failures.yaml"
LINE_CAP = 200  # characters of the matched line kept
MAX_LINE = 1024  # characters of each output line the matcher reads (the rest is not read)
MAX_WAYS = 16 * (MAX_LINE + 1)  # one unbounded repeat and a few short optional parts
# colour (CSI) and title (OSC) escapes; an OSC ends at BEL or ST and runs no further than the
# next ESC, so no two matches scan the same text
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_VALUES = {
    "module": re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"),
    # absolute or relative to the job's working folder (/workspace): `Permission denied: 'out/x.pt'`
    "path": re.compile(r"[^\x00-\x1f\x7f'\"]{1,200}"),
}
NOT_EXPLAINED = (0, 130, 143)  # success, Ctrl-C, SIGTERM: nothing to explain
# a worker's line as torchrun passes it on: `[rank1]: ...` (torch 2.2+), `[default1]:...`
# (--tee, by local rank)
_RANK_PREFIX = re.compile(r"\[(rank|default)(\d{1,9})\]:")
# an error as a program prints it last: `KeyError: 'label'`, `x.py: error: ...` (argparse)
_ERROR_LINE = re.compile(
    r"(?:\[\w{1,16}\]:\s{0,4})?(?:[A-Za-z_][\w.]{0,200}(?:Error|Exception|Exit|Interrupt)"
    r"(?::|$)|[\w./-]{1,200}: error: |error: |fatal: )"
)
# torchrun's own log lines: glog style (W1205 10:38:40.714000 14072 torch/distributed/...,
# torch 2.2+) or logging's (WARNING:torch.distributed.elastic...:Sending process ..., older)
_TORCHRUN_LOG = re.compile(
    r"[DIWEF]\d{4} [\d:.]{8,20} {1,4}\d{1,9} [\w./-]{0,200}torch/distributed/"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):torch\.distributed\."
)
_TRACEBACK_FIELD = re.compile(r"\s{0,16}traceback\s{0,8}: ?")
_NO_TRACEBACK = ("To enable traceback see", "received by PID")
_ROOT_CAUSE = "Root Cause (first observed failure)"


@dataclass(frozen=True)
class Signature:
    id: str
    patterns: tuple[re.Pattern[str], ...]
    cause: str
    fix: str
    doc: str | None = None
    oom_killed: bool = False
    exit_codes: tuple[int, ...] = ()
    detail: str | None = None
    fix_own_package: str | None = None
    sources: tuple[str, ...] = ()
    rank_failed: bool = False  # matches any failure torchrun's summary names (a last resort)


@dataclass(frozen=True)
class Explanation:
    """A matched signature, filled in: what a record keeps and what the CLI prints."""

    id: str
    cause: str
    fix: str
    doc: str | None = None
    line: str | None = None  # the matched output line, masked and capped

    def text(self) -> str:
        """The one line printed last: `cause: ...; fix: ... (doc)`."""
        doc = f" (see {self.doc})" if self.doc else ""
        return f"cause: {self.cause}; fix: {self.fix}{doc}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Evidence:
    """What is known about a failed job: its output's tail, exit code and container state."""

    text: str
    exit_code: int | None = None
    oom_killed: bool = False
    project: Path | None = None  # for "is the missing module the project's own package"
    image: Any = None  # image.request.ResolvedImage of the job's image, when known
    env: Mapping[str, str] = field(default_factory=dict)  # for NVML (GPU facts)
    host: Any = None  # image.compat.HostGpus; None: probe NVML (`env`); False: unknown


@functools.cache
def _data() -> dict[str, Any]:
    from gpulaunch.yamlio import read_packaged

    try:
        raw = read_packaged("failures.yaml")
    except ConfigError as err:
        raise CatalogError(f"failure signatures: {err.message}") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{DATA_FILE}: expected a mapping with signatures")
    return raw


def package_of(module: str) -> str:
    """The pip package that installs `module` (`cv2` -> opencv-python-headless): the first
    candidate of the import-name table that init and the build's import check use."""
    from gpulaunch.project.imports import load_table

    return load_table().candidates(module)[0]


@functools.cache
def signatures() -> tuple[Signature, ...]:
    """The data file, checked: a broken file is a CatalogError naming the entry."""
    raw = _data()
    entries = raw.get("signatures")
    if not isinstance(entries, list):
        raise CatalogError(f"{DATA_FILE}: expected a list under signatures")
    return tuple(_signature(entry, i) for i, entry in enumerate(entries))


def _signature(entry: Any, index: int) -> Signature:
    where = f"{DATA_FILE}: signatures[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise CatalogError(f"{where}: expected a mapping with an id")
    where = f"{DATA_FILE}: {entry['id']}"
    known = {"id", "match", "oom_killed", "exit_codes", "cause", "fix", "doc", "detail"}
    if unknown := set(entry) - known - {"rank_failed", "source", "fix_own_package"}:
        raise CatalogError(f"{where}: unknown key {sorted(unknown)[0]}")
    for key in ("cause", "fix"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise CatalogError(f"{where}: {key} must be a non-empty line")
    try:
        patterns = tuple(check_pattern(p) for p in entry.get("match") or [])
    except (re.error, ValueError) as err:
        raise CatalogError(f"{where}: bad pattern: {err}") from None
    if not (
        patterns or entry.get("oom_killed") or entry.get("exit_codes") or entry.get("rank_failed")
    ):
        raise CatalogError(f"{where}: needs match, oom_killed, exit_codes or rank_failed")
    if entry.get("detail") not in (None, "module", *_DETAILS):
        raise CatalogError(f"{where}: unknown detail {entry['detail']!r}")
    source = entry.get("source") or []
    return Signature(
        id=entry["id"],
        patterns=patterns,
        cause=entry["cause"],
        fix=entry["fix"],
        doc=entry.get("doc"),
        oom_killed=bool(entry.get("oom_killed")),
        exit_codes=tuple(int(c) for c in entry.get("exit_codes") or []),
        rank_failed=bool(entry.get("rank_failed")),
        detail=entry.get("detail"),
        fix_own_package=entry.get("fix_own_package"),
        sources=tuple([source] if isinstance(source, str) else source),
    )


# -- bounded patterns ---------------------------------------------------------------------
_ONE_CHAR = {"LITERAL", "NOT_LITERAL", "ANY", "IN", "AT", "CATEGORY"}
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def check_pattern(pattern: object) -> re.Pattern[str]:
    """A signature's pattern, compiled, once its worst case is known to be bounded.

    It counts ways on the parse tree `re.compile` itself runs (`re._parser`), so it judges
    exactly what will run: a sequence multiplies, an alternation adds, a repeat of a
    fixed-width item counts its lengths, an unbounded one up to MAX_LINE. ValueError names
    what is refused; re.error a bad pattern."""
    import importlib

    if not isinstance(pattern, str):
        raise ValueError(f"{pattern!r} is not a string")
    compiled = re.compile(pattern, re.MULTILINE)
    parser: Any = importlib.import_module("re._parser")
    ways = _ways(list(parser.parse(pattern, re.MULTILINE)), pattern)
    if ways > MAX_WAYS:
        raise ValueError(
            f"{pattern!r} can match in too many ways (two unbounded repeats, or too many "
            "optional parts); bound one, e.g. .{0,80} or \\s{0,8}"
        )
    return compiled


def _ways(items: list[Any], pattern: str) -> int:
    """An upper bound on the ways `items` (a parsed sequence) can match from one position,
    capped just past MAX_WAYS; ValueError for a construct with no such bound."""
    total = 1
    for op, arg in items:
        name = str(op)
        if name in _ONE_CHAR:
            continue
        if name == "SUBPATTERN":
            total *= _ways(list(arg[-1]), pattern)
        elif name == "BRANCH":
            total *= sum(_ways(list(alt), pattern) for alt in arg[1])
        elif name in _REPEATS:
            low, high, body = arg
            inner = _ways(list(body), pattern)
            if high > MAX_LINE:  # unbounded ({n,}, *, +): no longer than a line
                if inner > 1:  # (a|ab)*, (a+)*: exponential in the line's length
                    raise ValueError(f"{pattern!r}: an unbounded repeat of a variable part")
                total *= MAX_LINE + 1
            else:
                count, power = 0, inner**low if low < 64 else MAX_WAYS + 1
                for _ in range(low, high + 1):
                    count = min(count + power, MAX_WAYS + 1)
                    power = min(power * inner, MAX_WAYS + 1)
                total *= count
        else:  # lookarounds, back-references, conditionals: not needed to match a log line
            raise ValueError(f"{pattern!r}: {name.lower()} is not allowed in a signature")
        total = min(total, MAX_WAYS + 1)  # past the budget the exact count does not matter
    return total


def _lines(text: str) -> list[str]:
    """The output as the matcher reads it: lines cut to MAX_LINE characters, escapes removed."""
    return [_ANSI.sub("", line[:MAX_LINE]) for line in text.splitlines()]


def explain(evidence: Evidence) -> Explanation | None:
    """The first signature that matches (data file order), filled in; None when none does.

    Under torchrun the failed rank's exit code stands for torchrun's 1 (a log file's evidence
    has no code of its own)."""
    lines = _lines(evidence.text)
    failure: RankFailure | None = None
    if _ROOT_CAUSE in evidence.text:  # torchrun's summary (the supervisor reads it too)
        from gpulaunch.engine.supervise import rank_failure

        failure = rank_failure(lines)
    code = evidence.exit_code
    if failure is not None:
        lines = _own_lines(lines, failure)
        code = failure.code if code in (None, 1) else code
    for sig in signatures():
        match = _last_match(sig, lines)
        if match is None and sig.rank_failed and failure is not None:
            return _fill_rank(sig, failure, lines)
        if match is None and not (
            (sig.oom_killed and evidence.oom_killed)
            or (code is not None and code in sig.exit_codes)
        ):
            continue
        found = _fill(sig, evidence, match)
        if failure is not None:  # the rank, named once: in the one line printed last
            found = dataclasses.replace(found, cause=f"rank {failure.rank}: {found.cause}")
        return found
    return None


def _own_lines(lines: list[str], failure: RankFailure) -> list[str]:
    """The failed rank's lines and those no rank claims, without torchrun's summary; the
    rank's traceback in the summary (a worker that records its error file) is kept."""
    start = _summary_start(lines, failure.start)
    own = [line for line in lines[:start] if _is_own(line, failure)]
    traceback: list[str] = []
    for line in lines[failure.start + 1 : failure.end]:
        field = _TRACEBACK_FIELD.match(line)
        if field or traceback:
            text = line[field.end() :] if field else line
            if not any(words in text for words in _NO_TRACEBACK):
                traceback.append(text)
    return [*own, *traceback, *lines[failure.end + 1 :]]


def _summary_start(lines: list[str], root: int) -> int:
    """Where torchrun's summary begins: its own traceback that ends in ChildFailedError (or
    the Failures block, when the traceback was cut off)."""
    at = next(
        (i for i in range(root, max(-1, root - 400), -1) if "ChildFailedError" in lines[i]), None
    )
    if at is None:
        return root
    while at > 0 and not _RANK_PREFIX.match(lines[at - 1]):
        above = lines[at - 1]
        if not (above.startswith(" ") or above.startswith("Traceback (most recent call last)")):
            break
        at -= 1
        if above.startswith("Traceback"):
            break
    return at


def _is_own(line: str, failure: RankFailure) -> bool:
    prefix = _RANK_PREFIX.match(line)
    if prefix is not None:
        number = int(prefix[2])
        return number == (failure.rank if prefix[1] == "rank" else failure.local_rank)
    return not _TORCHRUN_LOG.match(line)


def _fill_rank(sig: Signature, failure: RankFailure, lines: list[str]) -> Explanation:
    """`rank-failed`: the rank, how it ended, and its own last error line (an exception, an
    `error:` line), else its last line, said to be no more than that (masked, cut)."""
    error = next((line for line in reversed(lines) if _ERROR_LINE.match(line)), None)
    said = ": {}"
    if error is None:
        error = next((line for line in reversed(lines) if line.strip()), None)
        said = "; its last line: {}"
    if error is not None:  # the rank is named in the cause already
        error = error[prefix.end() :] if (prefix := _RANK_PREFIX.match(error)) else error
    line = mask(error.strip())[:LINE_CAP] if error else None
    values = {
        "rank": str(failure.rank),
        "local_rank": str(failure.local_rank),
        "ended": failure.ended(),
        "error": said.format(line) if line else "",
    }
    return Explanation(
        sig.id, sig.cause.format(**values), sig.fix.format(**values), sig.doc, line or None
    )


def explain_failure(evidence: Evidence) -> Explanation | None:
    """`explain`, for a job's end: nothing for success or a stop the user asked for."""
    if evidence.exit_code in NOT_EXPLAINED and not evidence.oom_killed:
        return None
    return explain(evidence)


def _last_match(sig: Signature, lines: list[str]) -> re.Match[str] | None:
    """The last occurrence of any of the signature's patterns (the latest is the cause): the
    last line with one, and in it the match that starts last."""
    if not sig.patterns:
        return None
    for line in reversed(lines):
        best: re.Match[str] | None = None
        for pattern in sig.patterns:
            for match in pattern.finditer(line):
                if best is None or match.start() > best.start():
                    best = match
        if best is not None:
            return best
    return None


def _fill(sig: Signature, evidence: Evidence, match: re.Match[str] | None) -> Explanation:
    values = {"module": "", "path": "", "package": ""}
    line = None
    if match is not None:
        for name, check in _VALUES.items():
            value = match.groupdict().get(name)
            if value and check.fullmatch(value):
                values[name] = mask(value)
        line = mask(match.string.strip())[:LINE_CAP] or None  # the matcher reads one line
    if values["module"]:
        values["package"] = package_of(values["module"])
    fix = sig.fix
    extra = None
    if sig.detail == "module":
        if sig.fix_own_package and _own_package(evidence.project, values["module"]):
            fix = sig.fix_own_package
    elif sig.detail:
        extra = _DETAILS[sig.detail](evidence)
    shown = {k: v or "?" for k, v in values.items()}
    cause, fix = sig.cause.format(**shown), fix.format(**shown)
    if extra:
        fix = f"{fix}; {extra}"
    return Explanation(sig.id, cause, fix, sig.doc, line)


# -- details: a sentence computed from the host and the image ----------------------------
def _own_package(root: Path | None, module: str) -> bool:
    """Is the missing module the project's own (a folder or a .py file at the project root
    or under src/)?"""
    top = module.split(".")[0]
    if not top or root is None:
        return False
    return any(
        (base / top).is_dir() or (base / f"{top}.py").is_file() for base in (root, root / "src")
    )


def _host(evidence: Evidence) -> Any:
    if evidence.host is not None:
        return evidence.host
    from gpulaunch.catalog.compat import probe
    from gpulaunch.engine.nvml import NvmlError

    try:
        return probe(evidence.env)
    except NvmlError:  # no NVML, a driver that refuses: the generic fix stands
        return None


def _fitting_build(host: Any) -> str | None:
    """`torch T + CUDA C (image.torch: T, image.cuda: C)` for the best build this host runs."""
    from gpulaunch.catalog.compat import host_builds

    try:
        rows = host_builds(host)
    except (CatalogError, ConfigError):
        return None
    if not rows:
        return None
    row = rows[0]
    return (
        f"this host runs torch {row.torch} with CUDA {row.cuda} "
        f"(image.torch: {row.torch}, image.cuda: {row.cuda})"
    )


def _gpu_arch(evidence: Evidence) -> str | None:
    host = _host(evidence)
    if not host or not host.names:
        return None
    parts = [f"the GPUs: {host.describe()}"]
    image = evidence.image
    if image is not None and getattr(image, "cuda_archs", None):
        parts.append(f"the image's build has archs {' '.join(image.cuda_archs)}")
    build = _fitting_build(host)
    if build:
        parts.append(build)
    return "; ".join(parts)


def _driver(evidence: Evidence) -> str | None:
    host = _host(evidence)
    if not host or not host.driver:
        return None
    build = _fitting_build(host)
    return f"driver {host.driver}: {build}" if build else f"driver {host.driver}"


_DETAILS: dict[str, Callable[[Evidence], str | None]] = {
    "gpu-arch": _gpu_arch,
    "driver": _driver,
}


TAIL_BYTES = 64 * 1024


def _read_log(path: Path, target: str, *, follow: bool = True) -> str:
    """The log's last TAIL_BYTES, as text (a log can be far larger than memory); opened by
    `open_regular`, so a FIFO, a device, a folder (or, with `follow=False`, a symbolic link)
    is a ConfigError instead of a read that never ends."""
    from gpulaunch.fsio import NotRegular, open_regular

    shown = f"RUN_ID|LOGFILE: {target}"
    try:
        fd, info = open_regular(path, follow=follow)
        with os.fdopen(fd, "rb") as handle:
            handle.seek(max(0, info.st_size - TAIL_BYTES))
            return handle.read(TAIL_BYTES).decode("utf-8", "replace")
    except NotRegular as err:
        why = "not read" if err.link else "only log files are read"
        raise ConfigError(f"{shown}: {err}; {why}") from None
    except OSError as err:
        raise ConfigError(f"{shown}: cannot read: {err.strerror}") from None


def explain_target(
    target: str, cwd: Path, project: Callable[[], Path]
) -> tuple[dict[str, Any] | None, str]:
    """`gpulaunch explain RUN_ID|LOGFILE`: (the explanation as a record keeps it, a label).

    A run id (the project found from `project()`) gives the recorded explanation, else its
    smoke log's (in the job-writable project, so never through a link); anything else is a
    regular file. ConfigError when it is neither."""
    from gpulaunch.records.store import is_run_id, load

    env = dict(os.environ)  # NVML: the GPU facts of a fix are this host's
    path = cwd / target
    if is_run_id(target) and not os.path.lexists(path):
        root = project()
        record = load(root, target)
        if record.explanation:
            return dict(record.explanation), f"run {target}"
        logs = sorted((root / ".gpulaunch" / "logs").glob(f"smoke-*-{target[-6:]}.log"))
        if not logs:
            return None, f"run {target} (exit {record.exit_code})"
        path = logs[-1]
        text = _read_log(path, target, follow=False)
        evidence = Evidence(text, record.exit_code, project=root, env=env)
    else:
        if not os.path.lexists(path):
            raise ConfigError(f"RUN_ID|LOGFILE: {target!r} is neither a run id nor a file")
        evidence = Evidence(_read_log(path, target), project=cwd, env=env)
    found = explain(evidence)
    return (None if found is None else found.to_json()), str(path)
