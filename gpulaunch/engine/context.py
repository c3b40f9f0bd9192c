"""The build context: exactly which entries the engine receives, their hash, their tar, and the
secret scan that refuses a context holding a credential.

One list drives both: the content hash is over the names, kinds, modes and contents of these
entries, and the classic builder receives a tar made from the same list (BuildKit gets the
same list as a folder of hard links, see `mirror`). Nothing here follows a symlink: a link is sent
and hashed as a link (its target text), as Docker sends it.

`.dockerignore` rules follow Docker's matcher (moby/patternmatcher): Go-style globs with
`**`, `!` exceptions, later rules win, a rule matching a folder matches everything below.
Credential files (`SECRET_FILES`) are left out at any depth whatever .dockerignore says,
files the Dockerfile references (a `ca_cert` named `*.pem`) are re-included whatever either
says, and the config file plus `.gpulaunch/` are always left out (launch.env may hold secrets).

In a git checkout the context is what the project would publish: a file git ignores (and is not
tracked) never enters it, on top of .dockerignore (`scan`'s `published`, from
gpulaunch.outside.git); files the Dockerfile reads are kept whatever git says, as they are
whatever .dockerignore says. Outside git, .dockerignore alone decides.

Every file that enters is scanned for secrets: by shape whenever the context is listed for a
build or a dry run (`refuse_secrets`), and by detect-secrets before the build itself
(`refuse_detected_secrets`).
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import re
import shutil
import stat
import tarfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Literal, Protocol

from gpulaunch.errors import ConfigError
from gpulaunch.fsio import identity

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
    "**/*.p12",
    "**/*.pfx",
    "**/.pgpass",
    "**/.npmrc",
    "**/.kube/config",
    "**/.config/gcloud",
    "**/.azure",
)
Kind = Literal["file", "dir", "link"]
_ESCAPE = set(".+()|{}$")
_CHUNK = 1 << 20


class Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


class Published(Protocol):
    """What git would publish (gpulaunch.outside.git.Published): the engine layer cannot
    import the git seam, so the caller asks git and hands the answer in."""

    def has(self, rel: str, is_dir: bool, /) -> bool: ...


@dataclass(frozen=True)
class Rule:
    pattern: str
    exclusion: bool  # a `!pattern`
    regex: re.Pattern[str]


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
    user: list[Rule],
    required: Iterable[str],
    never: Iterable[str] = (),
    outputs: Iterable[str] = (),
) -> list[Rule]:
    """`outputs` (folders jobs write: left out by default, so a user `!` rule brings one
    back), the user rules, then the credential files, then re-include the files the
    Dockerfile needs, then the fixed excludes (plus `never`: a config file given with --config
    under another name, launch.checkpoint_dir)."""
    rules = [_rule(_glob_escape(rel), False, "gpulaunch") for rel in outputs]
    rules += user
    rules += [_rule(pattern, False, "gpulaunch") for pattern in SECRET_FILES]
    rules += [_rule(_glob_escape(rel), True, "required file") for rel in required]
    rules += [_rule(name, False, "gpulaunch") for name in ALWAYS_EXCLUDED]
    rules += [_rule(_glob_escape(rel), False, "gpulaunch") for rel in never]
    return rules


def _glob_escape(rel: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", rel)


def excluded(rel: str, rules: list[Rule]) -> bool:
    """Docker's MatchesOrParentMatches: later rules win; a match on a parent folder counts."""
    parts = rel.split("/")
    paths = ["/".join(parts[: i + 1]) for i in range(len(parts))]  # its parents, then itself
    matched = False
    for rule in rules:
        if rule.exclusion == matched and any(rule.regex.match(p) for p in paths):
            matched = not rule.exclusion
    return matched


@dataclass(frozen=True)
class Entry:
    rel: str
    kind: Kind
    mode: int  # permission bits as COPY carries them
    link: str = ""  # a symlink's target text
    at: str = ""  # its path in the context sent (`place`); "" = rel

    @property
    def sent_as(self) -> str:
        return self.at or self.rel


# The context gpulaunch sends has two folders of its own naming, so no project name can
# collide with them and no COPY source needs escaping: CODE_DIR holds the project as `run`
# mounts it, which the final `COPY CODE_DIR /workspace` copies whole; INPUTS_DIR holds what
# only a build step reads (wheelhouses, a CA bundle), which that step mounts or copies to
# its own place and the code layer never holds (a source edit then writes only the code).
CODE_DIR = "workspace"
INPUTS_DIR = "inputs"


def context_path(rel: str, inputs: Iterable[str]) -> str:
    """Where project path `rel` lies in the context sent; the project root is never an input."""
    rel = posixpath.normpath(rel)
    inside = any(i != "." and (rel == i or rel.startswith(i + "/")) for i in inputs)
    top = INPUTS_DIR if inside else CODE_DIR
    return top if rel == "." else f"{top}/{rel}"


def place(entries: Iterable[Entry], inputs: Iterable[str]) -> list[Entry]:
    """`entries` with their place in the context sent (`context_path`)."""
    inputs = tuple(inputs)
    return [replace(e, at=context_path(e.rel, inputs)) for e in entries]


def scan(
    project: Path,
    rules: list[Rule],
    published: Published | None = None,
    required: Iterable[str] = (),
) -> list[Entry]:
    """Entries the engine receives, sorted; links are not followed, other nodes skipped.

    With `published` (a git checkout), what git would not publish is left out too, except the
    `required` paths (and what is below them): a folder git ignores is never even listed."""
    exceptions = [r.pattern + "/" for r in rules if r.exclusion]
    needed = tuple(dict.fromkeys(required))
    entries: list[Entry] = []

    def unpublished(rel: str, is_dir: bool) -> bool:
        if published is None or published.has(rel, is_dir):
            return False
        below = rel + "/"
        return not any(
            rel == r or rel.startswith(r + "/") or (is_dir and r.startswith(below)) for r in needed
        )

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
            is_dir = stat.S_ISDIR(info.st_mode)
            if unpublished(rel, is_dir):
                continue
            skip = excluded(rel, rules)
            if is_dir:
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


def drop_bare_parents(entries: list[Entry], paths: Iterable[str]) -> list[Entry]:
    """`entries` without the folders above `paths` (left-out folders like `logs/nccl`) that
    hold nothing sent: the job that made `logs/nccl` must not change the context by `logs/`."""
    parents = {p.rsplit("/", i)[0] for p in paths for i in range(1, p.count("/") + 1)}
    if not parents:
        return entries
    holding = {e.rel.rsplit("/", 1)[0] for e in entries if "/" in e.rel}
    holding = {h.rsplit("/", i)[0] for h in holding for i in range(h.count("/") + 1)}
    return [e for e in entries if not (e.kind == "dir" and e.rel in parents - holding)]


KNOWN_MIN_BYTES = 1 << 20  # files this big have their content digest remembered (`known`)
_RACY_NS = 2_000_000_000  # a file changed this recently may change again unseen in its tick


def hash_entries(
    digest: Digest,
    project: Path,
    entries: list[Entry],
    known: Mapping[str, str] | None = None,
    learned: dict[str, str] | None = None,
) -> None:
    """Names, kinds, modes and each file's content digest and size, each framed so no two
    lists hash alike (where each entry is sent follows from the Dockerfile, hashed beside).

    A file of KNOWN_MIN_BYTES or more (a wheel, a dataset) is read again only when its stat
    changed: `known` maps `stat_key` to the sha256 of its content, as an earlier build read
    it; `learned` receives the digests read now (the caller remembers them, see
    gpulaunch.image.build.content_digests)."""
    for entry in entries:
        head = f"\0{entry.kind}\0{len(entry.rel)}:{entry.rel}\0{entry.mode:o}\0"
        digest.update(head.encode("utf-8", "surrogateescape"))
        if entry.kind == "link":
            digest.update(entry.link.encode("utf-8", "surrogateescape"))
        elif entry.kind == "file":
            with _open_entry(project, entry) as fh:
                st = os.fstat(fh.fileno())
                key = stat_key(entry.rel, st) if st.st_size >= KNOWN_MIN_BYTES else ""
                content = (known or {}).get(key) if key else None
                if content is None:
                    content = hashlib.file_digest(fh, "sha256").hexdigest()
                    size = fh.tell()  # what was read: the stat may be outrun by a writer
                    settled = time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS
                    if key and size == st.st_size and settled and learned is not None:
                        learned[key] = content  # (a change within the same tick: not learned)
                else:
                    size = st.st_size
                digest.update(f"{content}\0size:{size}".encode())


def stat_key(rel: str, st: os.stat_result) -> str:
    """What a file's content digest is remembered by: its name, device, inode, size and
    both times in ns (a rewrite changes ctime, which no one sets back)."""
    parts = identity(st)
    return hashlib.sha256(f"{rel}\0{parts}".encode("utf-8", "surrogateescape")).hexdigest()


def _open_entry(project: Path, entry: Entry) -> io.BufferedReader:
    try:
        fd = os.open(project / entry.rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"build context: cannot read {entry.rel}: {err.strerror}") from None
    return os.fdopen(fd, "rb")


def mirror(project: Path, entries: list[Entry], dest: Path) -> None:
    """Make the folder `dest` hold exactly `entries`, each at its place (`Entry.sent_as`), and
    CODE_DIR even when empty: the context BuildKit receives, so it gets what was hashed
    whatever the CLI's own rules.

    `dest` is kept from build to build: a file of KNOWN_MIN_BYTES or more (a wheel) is a hard
    link, kept while it is still the project's file (the same inode), so its ctime, which the
    tag cache and the content digests key on, is left alone; everything else found there is
    removed (no link in it followed) and made again: small files are fresh copies."""
    wanted = {CODE_DIR: Entry(CODE_DIR, "dir", 0o755)}
    for entry in entries:
        parts = entry.sent_as.split("/")
        for i in range(1, len(parts)):  # folders above an entry that no entry names
            wanted.setdefault("/".join(parts[:i]), Entry("", "dir", 0o755))
        wanted[entry.sent_as] = entry
    kept = _sweep(project, dest, "", wanted)
    for name, entry in sorted(wanted.items()):
        target = dest / name
        if entry.kind == "dir":
            target.mkdir(exist_ok=True)
            target.chmod(entry.mode)
        elif entry.kind == "link":
            os.symlink(entry.link, target)
        elif name not in kept:
            st = os.lstat(project / entry.rel)
            if st.st_size < KNOWN_MIN_BYTES or not _linked(project / entry.rel, target):
                with _open_entry(project, entry) as src, open(target, "xb") as out:
                    shutil.copyfileobj(src, out, _CHUNK)
                    os.fchmod(out.fileno(), entry.mode)
                    os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))


def _sweep(project: Path, folder: Path, prefix: str, wanted: Mapping[str, Entry]) -> set[str]:
    """Remove from `folder` all but the folders `wanted` names and the links of big project
    files an earlier build made (still the same file); the names of the links kept."""
    kept: set[str] = set()
    with os.scandir(folder) as it:
        items = list(it)
    for item in items:
        entry = wanted.get(prefix + item.name)
        if item.is_dir(follow_symlinks=False):
            if entry is not None and entry.kind == "dir":
                kept |= _sweep(project, Path(item.path), prefix + item.name + "/", wanted)
            else:
                shutil.rmtree(item.path)
        elif entry is not None and entry.kind == "file" and _same(project / entry.rel, item):
            kept.add(prefix + item.name)
        else:
            os.unlink(item.path)
    return kept


def _same(source: Path, item: os.DirEntry[str]) -> bool:
    try:
        st = item.stat(follow_symlinks=False)
        return st.st_size >= KNOWN_MIN_BYTES and os.path.samestat(st, os.lstat(source))
    except OSError:
        return False


def _linked(source: Path, target: Path) -> bool:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        return False
    return True


def write_tar(out: IO[bytes], project: Path, entries: list[Entry], extra: dict[str, str]) -> None:
    """A context tar of exactly `entries` at their places (and CODE_DIR, even when empty),
    plus generated files (the Dockerfile) from `extra`."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        code = tarfile.TarInfo(CODE_DIR)
        code.type, code.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(code)
        for entry in entries:
            info = tarfile.TarInfo(entry.sent_as)
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


# -- the secret scan ---------------------------------------------------------------------------

SCAN_MAX_BYTES = 2 * 1024 * 1024  # larger files are data (weights, archives), not config
_BINARY_PROBE = 8192
BASELINE = ".secrets.baseline"  # detect-secrets' own allow list, made in the project folder
_ALLOW = re.compile(r"pragma:\s*allowlist[ -]secret")
_ALLOW_NEXT = re.compile(r"pragma:\s*allowlist[ -]nextline[ -]secret")
# detect-secrets' plugins that judge by randomness alone: in source code and data they flag
# every checksum and id, so they are not used; the shape and keyword plugins are.
_NOISY_PLUGINS = ("Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector")


@dataclass(frozen=True, order=True)
class Finding:
    rel: str
    line: int
    kind: str


def refuse_secrets(project: Path, entries: Iterable[Entry]) -> None:
    """ConfigError naming the first `file:line` of the context that holds a secret by shape.

    Each regular file that enters the context is read (no link followed) and searched for
    gpulaunch.secretshape's shapes (URL credentials, query tokens, bearer headers, token
    formats): stdlib only and quick (each pattern runs only over a file holding its literal
    part), so dry runs scan too. Binaries (a NUL byte in the first 8 KiB) and files over 2 MiB
    are skipped: they are data, and reading them would make every build of a large project slow.

    Known false positives are allowed the way detect-secrets allows them: a line ending in
    `# pragma: allowlist secret` (or one after `# pragma: allowlist nextline secret`), or an
    entry in `.secrets.baseline` (`detect-secrets scan --all-files > .secrets.baseline` in the
    project folder) not audited as a real secret: it allows its own finding (file, hashed
    secret) and a shape finding on the line it lists.
    """
    texts = {rel: data.decode("utf-8", "replace") for rel, data in _scanned(project, entries)}
    if texts:
        _refuse(_shapes(texts, _baseline(project)))


def refuse_detected_secrets(
    project: Path, entries: Iterable[Entry], known_clean: frozenset[str] = frozenset()
) -> frozenset[str]:
    """`refuse_secrets` with detect-secrets (its keyword and token plugins and its filters for
    obvious non-secrets), for the build itself: about 0.1 s to import and a few ms a file, so
    files are keyed by what a verdict depends on (detect-secrets' version and plugins, the
    file's name, whose type picks the keyword patterns, its text, and what .secrets.baseline
    allows in it) and a key in `known_clean` (what earlier builds found clean) is not scanned
    again. Returns the keys of the files found clean, for the caller to remember."""
    scanner = f"detect-secrets {_scanner_version()} -{','.join(_NOISY_PLUGINS)}"
    allowed = _baseline(project)
    keys: dict[str, str] = {}
    for rel, data in _scanned(project, entries):
        # a file clean only because the baseline allows a finding is clean only while it does
        hashes = sorted(h for name, h in allowed.hashes if name == rel)
        lines = sorted(n for name, n in allowed.lines if name == rel)
        head = f"{scanner}\0{rel}\0{hashes}\0{lines}\0".encode("utf-8", "surrogateescape")
        keys[rel] = hashlib.sha256(head + data).hexdigest()
    todo = [rel for rel, key in keys.items() if key not in known_clean]
    if todo:
        _refuse(_detect_secrets(project, todo, allowed))
    return frozenset(keys.values())


def _scanner_version() -> str:
    """detect-secrets' version as its package states it (`detect_secrets/__version__.py`),
    read without importing it: a rebuild whose files are all known clean imports nothing of
    it, and importlib.metadata alone would cost a source-edit rebuild about 7 ms."""
    from importlib.util import find_spec

    spec = find_spec("detect_secrets")
    if spec is None or spec.origin is None:
        return "unknown"
    try:
        text = Path(spec.origin).with_name("__version__.py").read_text("utf-8", "replace")
    except OSError:
        return "unknown"
    return text.strip()


def _refuse(findings: list[Finding]) -> None:
    if not findings:
        return
    findings.sort()
    first = findings[0]
    others = len({(f.rel, f.line) for f in findings}) - 1
    more = f" (and {others} more line{'s' if others > 1 else ''})" if others else ""
    raise ConfigError(
        f"build context: {first.rel}:{first.line}: holds a secret ({first.kind}), which would "
        f"be copied into the image{more}",
        hint="remove it, or keep the file out of the context (.gitignore or .dockerignore); "
        "a false positive: end the line with `# pragma: allowlist secret`, or record it in "
        f"{BASELINE} (`detect-secrets scan --all-files > {BASELINE}` in the project folder)",
    )


def _scanned(project: Path, entries: Iterable[Entry]) -> Iterator[tuple[str, bytes]]:
    """Each file entry's name and bytes, but a binary, an oversized or an empty file: told
    from the head and the size alone, so a wheelhouse is not read to be skipped."""
    for entry in entries:
        if entry.kind != "file":
            continue
        with _open_entry(project, entry) as fh:
            if os.fstat(fh.fileno()).st_size > SCAN_MAX_BYTES:
                continue
            head = fh.read(_BINARY_PROBE)
            if b"\0" in head:
                continue
            data = head + fh.read(SCAN_MAX_BYTES + 1 - len(head))
        if data and len(data) <= SCAN_MAX_BYTES:
            yield entry.rel, data


@dataclass(frozen=True)
class _Allowed:
    """What `.secrets.baseline` allows: detect-secrets' findings by (file, hashed secret), and
    gpulaunch's shape findings on a line the baseline lists for that file."""

    hashes: frozenset[tuple[str, str]] = frozenset()
    lines: frozenset[tuple[str, int]] = frozenset()


def _baseline(project: Path) -> _Allowed:
    """The baseline's entries that were not audited as real secrets (`is_secret: true`)."""
    import json

    try:
        fh = _open_entry(project, Entry(BASELINE, "file", 0))
    except ConfigError:
        return _Allowed()
    with fh:
        raw = fh.read(SCAN_MAX_BYTES + 1)
    try:
        results = json.loads(raw)["results"] if len(raw) <= SCAN_MAX_BYTES else None
    except (ValueError, KeyError, TypeError):
        results = None
    if not isinstance(results, dict):
        raise ConfigError(f"{BASELINE}: not a detect-secrets baseline (no results mapping)")
    items = [
        (str(name), item)
        for name, listed in results.items()
        if isinstance(listed, list)
        for item in listed
        if isinstance(item, dict) and item.get("is_secret") is not True
    ]
    return _Allowed(
        frozenset((name, str(item.get("hashed_secret"))) for name, item in items),
        frozenset(
            (name, item["line_number"])
            for name, item in items
            if type(item.get("line_number")) is int
        ),
    )


def _detect_secrets(project: Path, rels: list[str], allowed: _Allowed) -> list[Finding]:
    import logging

    with _offline_requests():
        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings

        logging.getLogger("detect-secrets").disabled = True  # its stderr handler
        logging.captureWarnings(False)  # its import routes every Python warning to logging
        found: list[Finding] = []
        with default_settings() as settings:  # imports every plugin module, once
            settings.disable_plugins(*_NOISY_PLUGINS)
            for rel in rels:
                if rel == BASELINE:  # its hashes are no secrets (detect-secrets skips it too)
                    continue
                for secret in scan_file(str(project / rel)):
                    if (rel, secret.secret_hash) not in allowed.hashes:
                        found.append(Finding(rel, secret.line_number or 0, secret.type))
    return found


class OfflineRequest(Exception):
    """What detect-secrets' verifiers get from `requests` while gpulaunch scans."""


@contextmanager
def _offline_requests() -> Iterator[None]:
    """detect-secrets' plugins import `requests` only to verify a finding with its provider's
    API, which a scan never asks for. While they import and scan, `requests` is a stand-in
    whose calls raise (their verifiers' "cannot verify"): no scan can reach the network, and
    the scan does not pay requests' and urllib3's import (about 60 ms of a source-edit
    rebuild). A real requests already imported (the docker SDK's) is left as it is, and a
    later `import requests` gets the real one."""
    import sys
    import types

    if "requests" in sys.modules:
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise OfflineRequest("gpulaunch's secret scan sends no request")

    exceptions = types.ModuleType("requests.exceptions")
    exceptions.RequestException = OfflineRequest  # type: ignore[attr-defined]
    stand_in = types.ModuleType("requests")
    stand_in.__dict__.update(
        exceptions=exceptions, RequestException=OfflineRequest, Response=object,
        get=refuse, post=refuse, request=refuse,
    )  # fmt: skip
    sys.modules.update({"requests": stand_in, "requests.exceptions": exceptions})
    try:
        yield
    finally:
        for name in ("requests", "requests.exceptions"):
            if sys.modules.get(name) in (stand_in, exceptions):
                del sys.modules[name]


def _shapes(texts: dict[str, str], allowed: _Allowed) -> list[Finding]:
    from gpulaunch.secretshape import find

    found: list[Finding] = []
    for rel, text in texts.items():
        for offset, kind in find(text):
            start = text.rfind("\n", 0, offset) + 1
            number = text.count("\n", 0, start) + 1
            line = text[start : (text.find("\n", offset) + 1 or len(text) + 1) - 1]
            before = text[text.rfind("\n", 0, max(start - 1, 0)) + 1 : max(start - 1, 0)]
            if _ALLOW.search(line) or _ALLOW_NEXT.search(before) or (rel, number) in allowed.lines:
                continue
            found.append(Finding(rel, number, kind))
    return found
