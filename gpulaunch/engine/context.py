"""The build context: exactly which entries the engine receives, their hash and their tar.

One list drives both: the content hash is over the names, kinds, modes and contents of these
entries, and the classic builder receives a tar made from the same list (BuildKit gets the
same list as a folder of hard links, see `mirror`). Nothing here follows a symlink: a link is sent
and hashed as a link (its target text), as Docker sends it.

`.dockerignore` rules follow Docker's matcher (moby/patternmatcher): Go-style globs with
`**`, `!` exceptions, later rules win, a rule matching a folder matches everything below.
Credential files (`SECRET_FILES`: keys, `.netrc`, `.pypirc`, `.aws`, docker's config.json ...)
are left out at any depth whatever .dockerignore says, files the Dockerfile references (a
`ca_cert` named `*.pem`) are re-included whatever either says, and the config file plus
`.gpulaunch/` are always left out (launch.env may hold secrets).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import shutil
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol

from gpulaunch.errors import ConfigError

ALWAYS_EXCLUDED = ("gpulaunch.yaml", "gpulaunch.yml", ".gpulaunch", ".dockerignore")
# Credentials a project folder often holds: never copied into an image by `COPY . /workspace`.
SECRET_FILES = (
    "**/*.key",
    "**/*.pem",
    "**/.aws",
    "**/.netrc",
    "**/_netrc",
    "**/.docker/config.json",
    "**/.pypirc",
    "**/.git-credentials",
    "**/.ssh",
    "**/id_rsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
)
Kind = Literal["file", "dir", "link"]
_ESCAPE = set(".+()|{}$")
_CHUNK = 1 << 20


class Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


@dataclass(frozen=True)
class Rule:
    pattern: str
    exclusion: bool  # a `!pattern`
    regex: re.Pattern[str]

    def text(self) -> str:
        return ("!" if self.exclusion else "") + self.pattern


def _compile(pattern: str, source: str) -> re.Pattern[str]:
    """Docker's translation of one cleaned pattern to a regular expression."""
    out = "^"
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if i + 1 < n and pattern[i + 1] == "*":
                i += 1
                if i + 1 < n and pattern[i + 1] == "/":
                    i += 1
                out += ".*" if i + 1 == n else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch in _ESCAPE:
            out += "\\" + ch
        elif ch == "\\":
            if i + 1 < n:
                i += 1
                out += re.escape(pattern[i])
            else:
                out += "\\\\"
        else:
            out += ch
        i += 1
    try:
        return re.compile(out + "$", re.DOTALL)
    except re.error as err:
        raise ConfigError(f"{source}: invalid pattern {pattern!r}: {err}") from None


def parse_rules(text: str, source: str = ".dockerignore") -> list[Rule]:
    """Rules from .dockerignore text, normalised as Docker's ignorefile reader does."""
    rules: list[Rule] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if number == 1:
            raw = raw.lstrip("\ufeff")
        if raw.startswith("#"):
            continue
        line = raw.strip()
        if not line:
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
            if not line:
                raise ConfigError(f"{source}: line {number}: '!' without a pattern")
        rules.append(_rule(line, exclusion, f"{source}: line {number}"))
    return rules


def _rule(pattern: str, exclusion: bool, source: str) -> Rule:
    cleaned = posixpath.normpath(pattern)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if len(cleaned) > 1 and cleaned.startswith("/"):
        cleaned = cleaned[1:]
    return Rule(cleaned, exclusion, _compile(cleaned, source))


def effective_rules(
    user: list[Rule], required: Iterable[str], never: Iterable[str] = ()
) -> list[Rule]:
    """User rules, then the credential files, then re-include the files the Dockerfile needs,
    then the fixed excludes (plus `never`: a config file given with --config under another
    name)."""
    rules = list(user)
    rules += [_rule(pattern, False, "gpulaunch") for pattern in SECRET_FILES]
    rules += [_rule(_glob_escape(rel), True, "required file") for rel in required]
    rules += [_rule(name, False, "gpulaunch") for name in ALWAYS_EXCLUDED]
    rules += [_rule(_glob_escape(rel), False, "gpulaunch") for rel in never]
    return rules


def _glob_escape(rel: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", rel)


def excluded(rel: str, rules: list[Rule]) -> bool:
    """Docker's MatchesOrParentMatches: later rules win; a match on a parent folder counts."""
    parents = rel.split("/")[:-1]
    matched = False
    for rule in rules:
        if rule.exclusion != matched:
            continue
        hit = rule.regex.match(rel) is not None
        if not hit:
            hit = any(
                rule.regex.match("/".join(parents[: i + 1])) is not None
                for i in range(len(parents))
            )
        if hit:
            matched = not rule.exclusion
    return matched


@dataclass(frozen=True)
class Entry:
    rel: str
    kind: Kind
    mode: int  # permission bits as COPY carries them
    link: str = ""  # a symlink's target text


def scan(project: Path, rules: list[Rule]) -> list[Entry]:
    """Entries the engine receives, sorted; links are not followed, other nodes skipped."""
    exceptions = [r.pattern + "/" for r in rules if r.exclusion]
    entries: list[Entry] = []

    def walk(folder: Path, prefix: str) -> None:
        try:
            with os.scandir(folder) as it:
                items = sorted(it, key=lambda e: e.name)
        except OSError as err:
            shown = prefix.rstrip("/") or "."
            raise ConfigError(
                f"build context: cannot read {shown}: {err.strerror}",
                hint="add it to .dockerignore",
            ) from None
        for item in items:
            rel = prefix + item.name
            info = item.stat(follow_symlinks=False)
            skip = excluded(rel, rules)
            if stat.S_ISDIR(info.st_mode):
                if not skip:
                    entries.append(Entry(rel, "dir", stat.S_IMODE(info.st_mode)))
                # like Docker's walk: an excluded folder is entered only when a `!` rule
                # names a path below it (so a huge ignored data/ is never listed)
                if not skip or any(p.startswith(rel + "/") for p in exceptions):
                    walk(Path(item.path), rel + "/")
            elif skip:
                continue
            elif stat.S_ISLNK(info.st_mode):
                entries.append(Entry(rel, "link", 0o777, os.readlink(item.path)))
            elif stat.S_ISREG(info.st_mode):
                entries.append(Entry(rel, "file", stat.S_IMODE(info.st_mode)))

    walk(project, "")
    return entries


def hash_entries(digest: Digest, project: Path, entries: list[Entry]) -> None:
    """Names, kinds, modes and contents, each framed so no two lists hash alike."""
    for entry in entries:
        head = f"\0{entry.kind}\0{len(entry.rel)}:{entry.rel}\0{entry.mode:o}\0"
        digest.update(head.encode("utf-8", "surrogateescape"))
        if entry.kind == "link":
            digest.update(entry.link.encode("utf-8", "surrogateescape"))
        elif entry.kind == "file":
            with _open_entry(project, entry) as fh:
                size = 0
                for chunk in iter(lambda: fh.read(_CHUNK), b""):
                    size += len(chunk)
                    digest.update(chunk)
                digest.update(f"\0size:{size}".encode())


def _open_entry(project: Path, entry: Entry) -> IO[bytes]:
    try:
        fd = os.open(project / entry.rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"build context: cannot read {entry.rel}: {err.strerror}") from None
    return os.fdopen(fd, "rb")


def mirror(project: Path, entries: list[Entry], dest: Path) -> None:
    """A folder holding exactly `entries` (hard links where possible, else copies): the
    context BuildKit receives, so it gets what was hashed whatever the CLI's own rules."""
    for entry in entries:
        target = dest / entry.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "dir":
            target.mkdir(exist_ok=True)
            target.chmod(entry.mode)
        elif entry.kind == "link":
            os.symlink(entry.link, target)
        else:
            try:
                os.link(project / entry.rel, target, follow_symlinks=False)
            except OSError:
                with _open_entry(project, entry) as src, open(target, "xb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
                target.chmod(entry.mode)


def write_tar(out: IO[bytes], project: Path, entries: list[Entry], extra: dict[str, str]) -> None:
    """A context tar of exactly `entries`, plus generated files (the Dockerfile) from `extra`."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.rel)
            info.mode = entry.mode
            if entry.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = entry.link
                tar.addfile(info)
            else:
                with _open_entry(project, entry) as fh:
                    st = os.fstat(fh.fileno())
                    info.size = st.st_size
                    info.mtime = int(st.st_mtime)
                    tar.addfile(info, fh)
        for name, text in extra.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
