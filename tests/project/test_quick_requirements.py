"""The quick reading of plain requirement lines (`name[extras]>=1,<2`) gives packaging's own
answer (canonical name, str(Requirement), str(SpecifierSet), URL) or the same refusal, on a
corpus of tricky lines and on generated ones; and only plain, non-torch lines skip packaging."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gpulaunch.project import requirements
from gpulaunch.project.model import Dep, Project
from gpulaunch.project.requirements import parse_requirement, read_requirements


def _packaging(text: str) -> Dep | str:
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return "invalid"
    return Dep(canonicalize_name(req.name), str(req), str(req.specifier), req.url)


def _ours(text: str) -> Dep | str:
    try:
        return parse_requirement(text)
    except InvalidRequirement:
        return "invalid"


TRICKY = [
    "numpy",
    "numpy>=1.21",
    "pkg-0001>=1.1,<3",
    "Pkg_Name.Sub>=01.2",
    "pkg >= 1.0",
    "pkg>= 1.0 , <2",
    "pkg\t>=1\t,\t<2",
    "pkg[ a , B ]>=1",
    "pkg [a]",
    "pkg[a,a]==1",
    "pkg[a,b,a]",
    "pkg[]",
    "pkg[a,]",
    "pkg[-a]",
    "pkg==1.0.*",
    "pkg!=1.*",
    "pkg>=1.0.*",
    "pkg<1.*",
    "pkg~=1",
    "pkg~=1.4",
    "pkg~=1.4.5",
    "pkg===1.0",
    "pkg===foo",
    "pkg>=1.0,>=1",
    "pkg>=1,<=1,==1",
    "pkg<2,<3",
    "pkg>=1.0a1",
    "pkg==1.0.post1",
    "pkg==1.0.dev0",
    "pkg==1.0+cu121",
    "pkg==1!2.0",
    "pkg==v1.0",
    "pkg>=1.0,",
    "pkg>=1.0 <2",
    "pkg>=1.0;python_version<'3.11'",
    "pkg>=1.0 ; sys_platform == 'linux'",
    "pkg (>=1.0)",
    "pkg(>=1.0,<2)",
    "pkg @ https://example.com/pkg-1.0.tar.gz",
    "pkg@https://example.com/x.whl",
    "-pkg",
    "pkg-",
    "_pkg",
    "pkg.",
    "1pkg>=1",
    "pkg=1.0",
    "pkg==",
    "pkg>=",
    "pkg==1..0",
    "pkg==1.",
    "pkg==.1",
    "pkg== 1.0",
    "pkg\u00e9>=1",
    "pkg>=\u0661",  # an Arabic-Indic digit: \\d would take it, packaging does not
    "torch==2.4.1",
    "torch>=2,<3",
    "TorchVision==0.19.1",
    "torch_audio>=2",
    "torch[opt-einsum]>=2.1",
    "a",
    "A.B-C_D",
    "pkg[a] >=1 , !=1.5 , <2",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_lines_read_as_packaging_reads_them(text: str) -> None:
    assert _ours(text) == _packaging(text)


_NAMES = st.one_of(
    st.sampled_from(["torch", "torchvision", "torchaudio", "Torch", "numpy", "a", "A.b-c_d"]),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,6}", fullmatch=True),
    st.text(alphabet="aZ9._- é", min_size=1, max_size=6),
)
_SPACE = st.sampled_from(["", " ", "\t", "  ", " \t"])
_VERSIONS = st.one_of(
    st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,2}){0,3}", fullmatch=True),
    st.sampled_from(["1.0.*", "1.*", "1.0a1", "1.0.post1", "1!2", "1+local", "01", "1.", "", "v1"]),
)
_OPS = st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~=", "===", "=", ""])


@st.composite
def _lines(draw: st.DrawFn) -> str:
    text = draw(_NAMES) + draw(_SPACE)
    if draw(st.booleans()):
        extras = draw(st.lists(_NAMES, max_size=3))
        sep = draw(st.sampled_from([",", " , ", ",\t"]))
        text += "[" + draw(_SPACE) + sep.join(extras) + draw(_SPACE) + "]" + draw(_SPACE)
    specs = [draw(_OPS) + draw(_SPACE) + draw(_VERSIONS) for _ in range(draw(st.integers(0, 3)))]
    text += draw(st.sampled_from([",", " , ", ",\t", " "])).join(specs)
    text += draw(st.sampled_from(["", "", " ", "; python_version<'3.12'", " @ https://h/x.whl"]))
    return text


@st.composite
def _plain_lines(draw: st.DrawFn) -> str:
    """Lines near the quick form (most take it, some just miss it)."""
    name = draw(st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._\-]{0,5}[A-Za-z0-9])?", fullmatch=True))
    text = name + draw(_SPACE)
    if draw(st.booleans()):
        extras = draw(st.lists(st.sampled_from(["a", "B", "c-d", "e.f", "a"]), min_size=1))
        text += "[" + draw(_SPACE) + (draw(_SPACE) + "," + draw(_SPACE)).join(extras) + "]"
    ops = draw(st.lists(st.sampled_from(["==", "!=", "<=", ">=", "<", ">", "~="]), max_size=4))
    versions = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,2}){0,3}(\.\*)?", fullmatch=True)
    specs = [op + draw(_SPACE) + draw(versions) for op in ops]
    return text + draw(_SPACE) + (draw(_SPACE) + "," + draw(_SPACE)).join(specs)


@settings(max_examples=1500, deadline=None)
@given(_lines())
def test_generated_lines_read_as_packaging_reads_them(text: str) -> None:
    assert _ours(text) == _packaging(text)


@settings(max_examples=1500, deadline=None)
@given(_plain_lines())
def test_generated_plain_lines_read_as_packaging_reads_them(text: str) -> None:
    assert _ours(text) == _packaging(text)


def test_only_torch_and_unusual_lines_reach_packaging(monkeypatch: pytest.MonkeyPatch) -> None:
    """packaging's parser sees the lines that can matter (torch family, URLs, markers,
    unusual versions), not the thousands of plain ones."""
    seen: list[str] = []

    class Counting(Requirement):
        def __init__(self, text: str) -> None:
            seen.append(text)
            super().__init__(text)

    monkeypatch.setattr(requirements, "Requirement", Counting)
    plain = ["numpy>=1.21", "pkg-0001>=1.1,<3", "x[a,b]==2.*", "y~=1.4"]
    special = ["torch==2.4.1", "torchvision>=0.19", "z>=1.0rc1", "w>=1; python_version<'4'"]
    for text in plain + special:
        parse_requirement(text)
    assert seen == special


def test_big_requirements_file_reads_the_same_as_packaging(tmp_path: Path) -> None:
    """A file of plain lines and torch lines: every Dep equals packaging's reading of it."""
    lines = ["torch==2.4.1", "torchvision>=0.19 ; python_version>='3.9'"]
    lines += [f"pkg-{i:04d}>=1.{i % 10},<3  # line {i}" for i in range(300)]
    lines += ["Other_Pkg [Extra,b] >= 2.0 , != 2.1", "dup>=1,>=1.0", "pre>=1.0a1"]
    (tmp_path / "requirements.txt").write_text("\n".join(lines) + "\n")
    project = Project()
    read_requirements(tmp_path, "requirements.txt", project)
    assert len(project.deps) == len(lines)
    for dep, line in zip(project.deps, lines, strict=True):
        want = _packaging(line.split("  #")[0])
        assert isinstance(want, Dep)
        assert (dep.name, dep.text, dep.specifier, dep.url) == (
            want.name,
            want.text,
            want.specifier,
            want.url,
        )


def _strip_comment_by_char(line: str) -> str:
    """pip's comment rule, one character at a time (the reader's former code)."""
    if line.lstrip().startswith("#"):
        return ""
    for i, char in enumerate(line):
        if char == "#" and i > 0 and line[i - 1] in " \t":
            return line[:i]
    return line


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="a#  \t=@:/-\u00a0", max_size=12))
def test_comment_rule_is_pips(line: str) -> None:
    assert requirements._strip_comment(line) == _strip_comment_by_char(line)


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("pkg @ https://user:pw@host/x.whl", True),
        ("--extra-index-url https://tok@host/simple", True),
        ("pkg @ https://${USER}:${TOKEN}@host/x.whl", False),
        ("pkg>=1", False),
        ("pkg @ https://host/x.whl", False),
    ],
)
def test_credential_check_passes_lines_without_an_at_sign_only(text: str, refused: bool) -> None:
    """The quick pass for lines without `@` never hides a credential."""
    project = Project()
    requirements.refuse_credential(text, "r.txt:1", project)
    assert bool(project.invalid) == refused


def _logical_lines_joined_each_time(text: str) -> list[tuple[int, int, str]]:
    """pip's continuation rule as the reader first wrote it (every line through the join)."""
    out: list[tuple[int, int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not buf:
            start = number
        if raw.endswith("\\"):
            buf.append(raw[:-1])
            continue
        buf.append(raw)
        joined = _strip_comment_by_char(" ".join(buf)).strip()
        buf = []
        if joined:
            out.append((start, number, joined))
    if buf:
        joined = _strip_comment_by_char(" ".join(buf)).strip()
        if joined:
            out.append((start, start + len(buf) - 1, joined))
    return out


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="a# \t\\\n\r-", max_size=30))
def test_continuation_rule_is_pips(text: str) -> None:
    got = [tuple(line) for line in requirements.logical_lines(text)]
    assert got == _logical_lines_joined_each_time(text)
