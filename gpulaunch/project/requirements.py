"""pip requirements files, read the way pip reads them (pip's own line rules), with
`packaging`'s answer for each requirement: `-r`/`-c` includes relative to the including file,
index options, `--hash` continuations, direct URLs, local and editable installs, a BOM.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gpulaunch.errors import ConfigError
from gpulaunch.project.model import (
    TORCH_FAMILY,
    Dep,
    LocalInstall,
    Project,
    ReqFile,
    pick_extra,
    variant_of_url,
    wheel_name,
)

_INCLUDE = {"-r": "r", "--requirement": "r", "-c": "c", "--constraint": "c"}
_EDITABLE = ("-e", "--editable")
_INDEX = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links")
# Options pip accepts in a file that change nothing gpulaunch decides.
_IGNORED = (
    "--pre",
    "--prefer-binary",
    "--no-binary",
    "--only-binary",
    "--trusted-host",
    "--use-feature",
    "--hash",
    "--config-settings",
    "--global-option",
    "--no-index",
    "--require-hashes",
)
_VALUED = _IGNORED[2:9]  # the ignored options that take a value
_REQ_SUFFIXES = (".txt", ".in", ".pip")

# The common line, `name[extras] >=1.2,<3`, read without packaging's parser (5,000 lines cost
# 0.3 s through it): a plain name, plain extras, plain release-number specifiers with distinct
# operators. Anything else (URLs, markers, pre/post/dev/local versions, `===`, parentheses, a
# repeated operator that packaging would merge, a torch-family name) goes to packaging.
# tests/project/test_quick_requirements.py proves the two give the same answer.
_SP = "[ \t]*"
_NAME = "[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REL = "[0-9]+(?:\\.[0-9]+)*"
# `.*` only after == and !=; ~= needs two release numbers
_EQ = f"(?:==|!=){_SP}{_REL}(?:\\.\\*)?"
_COMPAT = f"~={_SP}[0-9]+(?:\\.[0-9]+)+"
_SPEC = f"(?:{_EQ}|{_COMPAT}|(?:<=|>=|<|>){_SP}{_REL})"
_SIMPLE = re.compile(
    f"(?P<name>{_NAME}){_SP}"
    f"(?:\\[(?P<extras>{_SP}{_NAME}{_SP}(?:,{_SP}{_NAME}{_SP})*)\\]{_SP})?"
    f"(?P<spec>{_SPEC}(?:{_SP},{_SP}{_SPEC})*)?"
)


def parse_requirement(text: str, where: str = "") -> Dep:
    """One PEP 508 string as packaging reads it (its canonical name, str(Requirement) and
    str(SpecifierSet)); InvalidRequirement when it is not one."""
    found = _SIMPLE.fullmatch(text)
    if found is not None:
        quick = _quick(found, where)
        if quick is not None:
            return quick
    req = Requirement(text)
    return Dep(canonicalize_name(req.name), str(req), str(req.specifier), req.url, where)


def _quick(found: re.Match[str], where: str) -> Dep | None:
    name = canonicalize_name(found["name"])
    if name in TORCH_FAMILY:
        return None  # the lines that decide the image: always packaging's answer
    spec = (found["spec"] or "").replace(" ", "").replace("\t", "")
    if "," in spec:
        specs = spec.split(",")
        if len({s[:2] if s[1] == "=" else s[:1] for s in specs}) != len(specs):
            return None  # packaging drops a duplicate (`>=1,>=1.0`): let it
        spec = ",".join(sorted(specs))
    extras = found["extras"]
    shown = ",".join(sorted({e.strip(" \t") for e in extras.split(",")})) if extras else ""
    text = found["name"] + (f"[{shown}]" if shown else "") + spec
    return Dep(name, text, spec, None, where)


class Line(NamedTuple):
    first: int  # physical line numbers, 1-based, inclusive
    last: int
    text: str


def read_text(path: Path, shown: str) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")  # a BOM is not part of the first line
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{shown}: cannot read: {err}") from None


def logical_lines(text: str) -> list[Line]:
    """pip's rules: a trailing backslash joins lines; `#` at the start or after whitespace
    starts a comment."""
    out: list[Line] = []
    buf: list[str] = []
    lines = text.splitlines()
    for number, raw in enumerate(lines, 1):
        if not buf:
            start = number
        buf.append(raw.removesuffix("\\"))
        if raw.endswith("\\") and number < len(lines):
            continue  # joined with the next line (the last one ends the text anyway)
        joined = _strip_comment(" ".join(buf)).strip()
        buf = []
        if joined:
            out.append(Line(start, number, joined))
    return out


_COMMENT = re.compile("[ \t]#")


def _strip_comment(line: str) -> str:
    if "#" not in line:
        return line
    if line.lstrip().startswith("#"):
        return ""
    found = _COMMENT.search(line)  # the first `#` after a space or tab
    return line[: found.start() + 1] if found else line


def split_options(text: str) -> tuple[str, list[str]]:
    """pip's split: the requirement is everything before the first token starting with `-`."""
    words = text.split()
    for i, word in enumerate(words):
        if word.startswith("-"):
            return " ".join(words[:i]), shlex.split(" ".join(words[i:]))
    return text, []


def _option_pairs(tokens: list[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    words = iter(tokens)
    for token in words:
        if token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            pairs.append((name, value))
        elif len(token) > 2 and token[:2] in ("-r", "-c", "-e", "-i", "-f") and token[1] != "-":
            pairs.append((token[:2], token[2:].strip()))
        elif token in (*_INCLUDE, *_EDITABLE, *_INDEX) or token in _VALUED:
            pairs.append((token, next(words, None)))  # the option's value
        else:
            pairs.append((token, None))
    return pairs


def _looks_local(arg: str) -> bool:
    if arg.startswith(("file:", "./", "../", "/", "~")) or arg in (".", ".."):
        return True
    lower = arg.lower()
    return lower.endswith((".whl", ".zip", ".tar.gz", ".tgz")) and "://" not in arg


class _Reader:
    def __init__(self, root: Path, project: Project) -> None:
        self.root = root.resolve()
        self.project = project
        self.seen: set[str] = set()

    def inside(self, base: Path, target: str, where: str) -> Path | None:
        path = (base / target).resolve()
        if not path.is_relative_to(self.root):
            self.project.not_understood.append(f"{where}: {target!r} is outside the project")
            return None
        return path

    def read(self, path: Path, role: str = "r") -> None:
        """`path`: resolved, inside the root (`inside`)."""
        rel = path.relative_to(self.root).as_posix()
        if rel in self.seen:
            return
        self.seen.add(rel)
        if not path.is_file():
            raise ConfigError(f"{rel}: included requirements file not found")
        record = ReqFile(rel)
        self.project.files.append(record)
        for line in logical_lines(read_text(path, rel)):
            self.line(path, rel, line, record, role)

    def line(self, path: Path, rel: str, line: Line, record: ReqFile, role: str) -> None:
        where = f"{rel}:{line.first}"
        refuse_credential(line.text, where, self.project)
        req_text, tokens = split_options(line.text)
        pairs = _option_pairs(tokens)
        for name, value in pairs:
            if name in _INCLUDE and value:
                if "://" in value:
                    self.project.not_understood.append(f"{where}: remote include {value} not read")
                    continue
                target = self.inside(path.parent, value, where)
                if target is not None:
                    self.read(target, _INCLUDE[name])
            elif name in _EDITABLE and value:
                self.local(value, True, where, record, line)
            elif name in _INDEX and value:  # a PyTorch index names the torch build
                self.project.set_variant(variant_of_url(value), f"{where} ({value})")
            elif name not in (*_IGNORED, *_INCLUDE, *_EDITABLE, *_INDEX):
                self.project.not_understood.append(f"{where}: option {name} ignored")
        if req_text:
            self.requirement(req_text, where, record, line, role)

    def local(self, arg: str, editable: bool, where: str, record: ReqFile, line: Line) -> None:
        if "://" in arg and not arg.startswith("file:"):
            # `-e git+https://...#egg=name`: a VCS requirement, installed as one
            self.requirement(arg, where, record, line, "r")
            return
        target = arg.removeprefix("file:").split("#", 1)[0].split("[", 1)[0]
        path = self.inside(self.root, target or ".", where)
        record.drop.append((line.first, line.last))
        if path is None:
            return
        rel = path.relative_to(self.root).as_posix() if path != self.root else "."
        self.project.add_local(LocalInstall(rel, editable, where))

    def requirement(self, text: str, where: str, record: ReqFile, line: Line, role: str) -> None:
        if _looks_local(text):
            self.local(text, False, where, record, line)
            return
        if "://" in text and "@" not in text.split("://", 1)[0]:
            text = _bare_url(text)
        try:
            req = parse_requirement(text, where)
        except InvalidRequirement as err:
            reason = f"{where}: {text!r} is not a requirement ({_first_line(err)})"
            self.project.not_understood.append(reason)
            return
        name = req.name
        if name in self.project.image_torch:
            record.drop.append((line.first, line.last))  # the image's torch step has it
        if role == "c":  # constraints install nothing, but a torch one binds the choice
            if name == "torch" and req.specifier:
                why = f"{where} (constraint torch{req.specifier})"
                self.project.torch_constraints.append((req.specifier, why))
            return
        if req.url:
            wheel = wheel_name(req.url)
            if wheel is not None and wheel[0] == name:
                req = replace(req, specifier=f"=={wheel[1]}")
                if name == "torch" and wheel[2].startswith("cp"):
                    digits = wheel[2][2:]
                    self.project.set_python(f"=={digits[0]}.{digits[1:]}.*", f"{where} (wheel)")
            if name in TORCH_FAMILY and name not in self.project.image_torch:
                record.drop.append((line.first, line.last))  # gpulaunch installs torch itself
        self.project.add_dep(req)


def _bare_url(url: str) -> str:
    """`git+https://host/x.git#egg=name` / a wheel URL -> `name @ url` for packaging."""
    wheel = wheel_name(url)
    if wheel is not None:
        return f"{wheel[0]} @ {url}"
    fragment = url.split("#", 1)[1] if "#" in url else ""
    for part in fragment.split("&"):
        if part.startswith("egg="):
            return f"{part[4:]} @ {url}"
    return url


def read_requirements(root: Path, entry: str, project: Project) -> None:
    """Read `entry` and everything it includes into `project` (files, deps, locals)."""
    reader = _Reader(root, project)
    path = reader.inside(root, entry, entry)
    if path is None:
        raise ConfigError(f"image.requirements: {entry!r} points outside the project")
    reader.read(path)


# userinfo that is only pip's ${VAR} references holds no secret itself
_ENV_USERINFO = re.compile(r"://\$\{[A-Z0-9_]+\}(?::\$\{[A-Z0-9_]+\})?@")


def refuse_credential(text: str, where: str, project: Project) -> None:
    """A secret in a dependency file (an index or source URL, a direct URL): the file that
    holds it is copied into the image with the project, so `render`/`build` refuse it (init
    warns). Judged by shape (gpulaunch.secretshape: URL credentials, query tokens, token
    formats), plus any userinfo on an index URL that is not only pip's `${VAR}` references."""
    from gpulaunch.masking import mask
    from gpulaunch.secretshape import has_userinfo, secret_kind

    if secret_kind(text) is None and not has_userinfo(_ENV_USERINFO.sub("://", text)):
        return
    reason = (
        f"{where}: {mask(text)} carries a credential, and this file is copied into the "
        "image; put the index in image.pip.extra_index_urls (passed as a BuildKit secret)"
    )
    project.not_understood.append(reason)
    project.invalid.append(reason)


_NAME_END = re.compile("[=<>!~[ ;@\"',]")


def _line_index(source: str) -> dict[str, int]:
    """Each name a dependency file's lines start with (`"torch>=2"`, `torch = "^2"`,
    `- pytorch=2.1`), canonical, to the first line that names it, so a refusal can point at
    it: built once per file (a lookup per dependency, not a scan)."""
    index: dict[str, int] = {}
    for number, raw in enumerate(source.splitlines(), 1):
        token = raw.strip().lstrip("-").strip().strip("\"'").split("::")[-1]
        token = _NAME_END.split(token, 1)[0]
        if token:
            index.setdefault(canonicalize_name(token), number)
    return index


def _line_of(index: dict[str, int], name: str) -> int | None:
    """The first line naming `name` or `pyname` (conda's `pytorch`)."""
    found = [n for n in (index.get(name), index.get(f"py{name}")) if n is not None]
    return min(found) if found else None


def read_requirement_texts(
    texts: list[str], where: str, project: Project, source: str | None = None
) -> None:
    """PEP 508 strings from pyproject/setup.cfg/Pipfile/conda: deps, locals, variants.
    `source` (the file's text) gives each its line: `pyproject.toml:7`."""
    lines = _line_index(source) if source is not None else None
    for text in texts:
        try:
            req = parse_requirement(text)
        except InvalidRequirement as err:
            refuse_credential(text, where, project)
            reason = f"{where}: {text!r} is not a requirement ({_first_line(err)})"
            project.not_understood.append(reason)
            project.invalid.append(reason)
            continue
        line = _line_of(lines, req.name) if lines is not None else None
        here = where
        if line is not None:
            first, _, rest = where.partition(" ")
            here = f"{first}:{line}" + (f" {rest}" if rest else "")
        refuse_credential(text, here, project)
        if req.url and req.url.startswith("file:"):
            target = req.url.removeprefix("file:").lstrip("/") or "."
            project.add_local(LocalInstall(PurePosixPath(target).as_posix(), False, here))
            continue
        project.add_dep(replace(req, text=text.strip(), where=here))
        project.inline.append(text.strip())


def read_extra(
    rel: str, extras: dict[Any, Any], project: Project, source: str, what: str
) -> str | None:
    """Install the group model.pick_extra picks for this image from pyproject's
    optional-dependencies or setup.py's extras_require: its name, or None."""
    picked = pick_extra(sorted(str(k) for k in extras), project.gpu)
    if picked is not None and isinstance(extras[picked], (list, tuple)):
        image = "a CUDA image" if project.gpu else "a CPU image"
        project.notes.append(f"{rel}: installing the {what} [{picked}] ({image})")
        texts = [str(v) for v in extras[picked]]
        read_requirement_texts(texts, f"{rel} [{picked}]", project, source)
    return picked


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def is_requirements_name(name: str) -> bool:
    return name.endswith(_REQ_SUFFIXES)
