"""The other dependency files: setup.cfg (configparser), setup.py (a literal
`install_requires` read with `ast`, never run), Pipfile (tomllib), conda environment files
(YAML, with their `pip:` section) and PEP 723 `# /// script` blocks."""

from __future__ import annotations

import ast
import configparser
import re
import tomllib
from pathlib import Path
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.project.model import LocalInstall, Project, variant_of_url
from gpulaunch.project.pyproject import load_toml, source_urls
from gpulaunch.project.requirements import (
    read_extra,
    read_requirement_texts,
    read_text,
    split_options,
)

# conda names that are not pip distributions (conda's `pytorch` is pip's `torch`)
_CONDA_SKIP = {
    "python",
    "pip",
    "cpuonly",
    "pytorch-cuda",
    "cudatoolkit",
    "cuda",
    "pytorch-mutex",
    "mkl",
    "cudnn",
    "nccl",
    "libgcc",
    "_libgcc_mutex",
    "cuda-toolkit",
    "blas",
}


def read_setup_cfg(root: Path, rel: str, project: Project, entry: bool) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        text = read_text(root / rel, rel)
        parser.read_string(text)
    except configparser.Error as err:
        raise ConfigError(f"{rel}: cannot parse: {err}") from None
    project.sources.append(f"{rel} (setuptools [options])")
    requires = parser.get("options", "python_requires", fallback="").strip()
    if requires:
        project.set_python(requires, f"{rel} python_requires")
    lines = parser.get("options", "install_requires", fallback="").splitlines()
    if entry:
        read_requirement_texts([x.strip() for x in lines if x.strip()], rel, project, text)
        project.install_project = True


def read_setup_py(root: Path, rel: str, project: Project, entry: bool) -> None:
    try:
        source = read_text(root / rel, rel)
        tree = ast.parse(source)
    except SyntaxError as err:
        project.not_understood.append(f"{rel}: cannot parse ({err.msg})")
        return
    project.sources.append(f"{rel} (setuptools setup())")
    found = False
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"
        ):
            continue
        for kw in node.keywords:
            if kw.arg == "python_requires" and isinstance(kw.value, ast.Constant):
                project.set_python(str(kw.value.value), f"{rel} python_requires")
            if kw.arg == "install_requires":
                found = True
                try:
                    value = ast.literal_eval(kw.value)
                except ValueError:
                    project.not_understood.append(
                        f"{rel}: install_requires is computed, not a literal list; "
                        "list the dependencies in requirements.txt"
                    )
                    continue
                if entry and isinstance(value, (list, tuple)):
                    read_requirement_texts([str(v) for v in value], rel, project, source)
            if kw.arg == "extras_require" and entry:
                try:  # a literal extras_require: as pyproject's optional-dependencies
                    extras = ast.literal_eval(kw.value)
                except ValueError:
                    extras = None
                if isinstance(extras, dict):
                    read_extra(rel, extras, project, source, "extra")
    if entry:
        project.install_project = True
        if not found:
            project.notes.append(f"{rel}: no install_requires found")


def read_pipfile(root: Path, rel: str, project: Project, entry: bool) -> None:
    source, data = load_toml(root / rel, rel)
    project.sources.append(f"{rel} (pipenv)")
    sources = source_urls(data.get("source"))
    version = data.get("requires", {}).get("python_version")
    if isinstance(version, str):
        project.set_python(f"=={version}.*", f"{rel} [requires]")
    texts: list[str] = []
    for name, value in (data.get("packages") or {}).items():
        table = value if isinstance(value, dict) else {"version": value}
        if "path" in table:
            project.add_local(LocalInstall(str(table["path"]), bool(table.get("editable")), rel))
            continue
        if "git" in table:
            texts.append(f"{name} @ git+{table['git']}")
            continue
        spec = str(table.get("version", "*"))
        texts.append(name + ("" if spec == "*" else spec))
        index = sources.get(table.get("index"))
        if name == "torch" and index:
            project.set_variant(variant_of_url(index), f"{rel} [packages] torch (index {index})")
    if entry:
        read_requirement_texts(texts, rel, project, source)
    if data.get("dev-packages"):
        project.notes.append(f"{rel}: [dev-packages] not installed")


def _conda_text(spec: str) -> tuple[str, str]:
    """A conda match spec as a name and a PEP 440 specifier: "pytorch=2.1.0" -> ("pytorch",
    "==2.1.0"), "python >= 3.8" -> ("python", ">=3.8"), "numpy 1.24" -> ("numpy", "==1.24.*");
    a build string ("=py3.10_cuda11.8_0", "numpy 1.24 py310_0") is dropped."""
    spec = spec.split("::", 1)[-1].strip()
    end = re.search("[=<>!~ ]", spec)
    if end is None:
        return spec, ""
    name, rest = spec[: end.start()], spec[end.start() :].strip()
    if rest[:1] in "<>!~" or rest.startswith("=="):
        rest = "".join(rest.split())  # ">= 3.8, <4" -> ">=3.8,<4"
        return name, rest
    if rest.startswith("="):
        rest = rest[1:]
    version = rest.split()[0].split("=")[0] if rest.split() else ""
    version = version.rstrip("*").rstrip(".")
    if not version:
        return name, ""
    return name, f"=={version}" if version.count(".") >= 2 else f"=={version}.*"


def read_conda(root: Path, rel: str, project: Project, entry: bool) -> None:
    from gpulaunch.yamlio import parse_yaml_text

    try:
        source = read_text(root / rel, rel)
        data = parse_yaml_text(source, rel)
    except ConfigError as err:
        project.not_understood.append(f"{rel}: {err.message}")
        return
    deps = data.get("dependencies") if isinstance(data, dict) else None
    if not isinstance(deps, list):
        project.not_understood.append(f"{rel}: no dependencies list")
        return
    project.sources.append(f"{rel} (conda environment)")
    texts: list[str] = []
    conda_only: list[str] = []
    pip_lines: list[str] = []
    for item in deps:
        if isinstance(item, dict) and isinstance(item.get("pip"), list):
            pip_lines += [str(x) for x in item["pip"]]
            continue
        name, spec = _conda_text(str(item))
        where = f"{rel} {item}"
        if name == "python" and spec:
            project.set_python(spec, where)
        elif name in ("pytorch-cuda", "cudatoolkit", "cuda-toolkit") and spec:
            digits = spec.lstrip("=").rstrip(".*").split(".")
            if len(digits) >= 2:
                project.set_variant(f"cu{digits[0]}{digits[1]}", where)
        elif name == "cpuonly":
            project.set_variant("cpu", where)
        elif name in _CONDA_SKIP:
            continue
        else:
            texts.append(("torch" if name == "pytorch" else name) + spec)
            if name not in ("pytorch", "torchvision", "torchaudio"):
                conda_only.append(name)
    if entry:
        read_requirement_texts(texts, f"{rel} (conda)", project, source)
        _pip_section(rel, pip_lines, project, source)
        if conda_only:
            project.notes.append(
                f"{rel}: conda packages installed from PyPI under the same name: "
                + ", ".join(conda_only)
            )


def _pip_section(rel: str, lines: list[str], project: Project, source: str) -> None:
    texts = []
    for line in lines:
        req, options = split_options(line)
        editable = len(options) == 2 and options[0] in ("-e", "--editable")
        if not req and editable and "://" not in options[1]:
            # `conda env create` then the project itself: `- -e .` (the path is checked
            # to be inside the project where its dependencies are read)
            project.add_local(LocalInstall(options[1], True, f"{rel} pip: {line}"))
        elif options:
            project.not_understood.append(f"{rel} pip: {line!r} (options are not read here)")
        elif req:
            texts.append(req)
    read_requirement_texts(texts, f"{rel} pip:", project, source)


def script_block(text: str) -> dict[str, Any] | None:
    """The PEP 723 `script` block of a Python file (the reference algorithm, without regex)."""
    lines = text.splitlines()
    try:
        start = lines.index("# /// script")
    except ValueError:
        return None
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line == "# ///":
            try:
                return tomllib.loads("\n".join(body))
            except tomllib.TOMLDecodeError:
                return None
        if not (line == "#" or line.startswith("# ")):
            return None
        body.append(line[2:])
    return None


def read_script(root: Path, rel: str, project: Project, entry: bool) -> None:
    source = read_text(root / rel, rel)
    block = script_block(source)
    if block is None:
        project.not_understood.append(f"{rel}: a `# /// script` block that is not valid TOML")
        return
    project.sources.append(f"{rel} (PEP 723 script block)")
    requires = block.get("requires-python")
    if isinstance(requires, str):
        project.set_python(requires, f"{rel} requires-python")
    deps = block.get("dependencies")
    if entry and isinstance(deps, list):
        read_requirement_texts([str(d) for d in deps], rel, project, source)
