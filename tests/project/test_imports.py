"""What an entry point imports (gpulaunch/project/imports.py) and what `init` says of the
imports no dependency provides: a corpus of project shapes written here (no third-party
code), the packaged import-name table, the untrusted-tree reads, and `init --add-missing`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from gpulaunch.cli.app import app
from gpulaunch.errors import ConfigError
from gpulaunch.project.discover import read_project
from gpulaunch.project.imports import (
    MAX_FILE_BYTES,
    default_entries,
    load_table,
    missing,
    walk,
)


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def lines(root: Path, entries: list[str], image: tuple[str, ...] = ("torch",)) -> list[str]:
    project = read_project(root)
    found = walk(root, entries, paths=[p for p, _ in project.import_paths])
    return [m.line() for m in missing(found, project, image)]


def modules(root: Path, entries: list[str]) -> dict[str, bool]:
    """module -> optional, for every third-party import found."""
    return {i.module: i.optional for i in walk(root, entries).imports}


# -- the corpus -------------------------------------------------------------------------


def test_setup_py_project_importing_numpy_it_never_declares(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "setup.py": "from setuptools import setup\n"
            "setup(name='m', packages=['m'], install_requires=['torch', 'tqdm'])\n",
            "m/__init__.py": "",
            "m/data.py": "import numpy as np\nfrom tqdm import tqdm\n",
            "train.py": "import torch\nfrom m.data import np\n\nif __name__ == '__main__':\n"
            "    pass\n",
        },
    )
    assert default_entries(tmp_path) == ["train.py"]  # setup.py is never an entry
    assert lines(tmp_path, ["train.py"]) == [
        "m/data.py:1: import numpy — no dependency provides it; "
        "add 'numpy' (gpulaunch init --add-missing)"
    ]


def test_a_src_layout_is_followed(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "requirements.txt": "torch\n",
            "src/pkg/__init__.py": "from pkg.model import Net\n",
            "src/pkg/model.py": "import einops\n",
            "scripts/train.py": "import pkg\n",
        },
    )
    assert lines(tmp_path, ["scripts/train.py"]) == [
        "src/pkg/model.py:1: import einops — no dependency provides it; "
        "add 'einops' (gpulaunch init --add-missing)"
    ]


def test_a_namespace_package_of_the_project_is_its_own(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "tools/io/readers.py": "import braceexpand\n",  # no __init__.py anywhere
            "wandb/run-1/output.log": "",  # an output folder does not hide the real wandb
            "train.py": "from tools.io import readers\nimport tools.io.readers\nimport wandb\n",
        },
    )
    assert modules(tmp_path, ["train.py"]) == {"wandb": False, "braceexpand": False}
    shown = lines(tmp_path, ["train.py"])
    assert shown[0].startswith("train.py:3: import wandb — ")
    assert shown[1].startswith("tools/io/readers.py:1: import braceexpand — ")


def test_relative_imports_stay_in_the_package(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/cli.py": "from . import engine\nfrom .util import helper\n"
            "from .missing_module import x\n",
            "app/engine.py": "from ..outside import y\nimport mpi4py\n",
            "app/util/__init__.py": "",
            "app/util/helper.py": "import tiktoken\n",
        },
    )
    found = walk(tmp_path, [], ["app.cli"])
    # a relative import is the project's or nothing: never a distribution to add
    assert [i.module for i in found.imports] == ["mpi4py", "tiktoken"]
    assert [i.where for i in found.imports] == ["app/engine.py:2", "app/util/helper.py:1"]
    assert found.entries == ["app/cli.py"]


def test_python_dash_m_of_a_package_walks_its_main(tmp_path: Path) -> None:
    tree(tmp_path, {"tool/__init__.py": "", "tool/__main__.py": "import rich\n"})
    assert [i.module for i in walk(tmp_path, [], ["tool"]).imports] == ["rich"]


def test_guarded_imports_are_optional_and_never_missing(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": (
                "import sys\n"
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    import pandas\n"
                "try:\n    import apex\nexcept ImportError:\n    apex = None\n"
                "try:\n    import deepspeed\nexcept (ModuleNotFoundError, OSError):\n    pass\n"
                "if sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli\n"
                "try:\n    import wandb\nexcept ValueError:\n    pass\n"
                "def main():\n    import tiktoken\n"
            ),
        },
    )
    assert modules(tmp_path, ["train.py"]) == {
        "pandas": True,
        "apex": True,
        "deepspeed": True,
        "tomli": True,
        "wandb": False,  # a try that does not catch ImportError guards nothing
        "tiktoken": False,  # imported when main() runs: still required
    }
    assert [line.split(" — ")[0] for line in lines(tmp_path, ["train.py"])] == [
        "train.py:18: import wandb",
        "train.py:22: import tiktoken",
    ]


@pytest.mark.parametrize(
    ("module", "declared", "suggested"),
    [
        ("yaml", "pyyaml", "pyyaml"),
        ("cv2", "opencv-python", "opencv-python-headless"),
        ("sklearn.model_selection", "scikit-learn", "scikit-learn"),
        ("PIL.Image", "pillow", "pillow"),
        ("google.protobuf.message", "protobuf", "protobuf"),
    ],
)
def test_module_names_that_are_not_the_distribution_name(
    tmp_path: Path, module: str, declared: str, suggested: str
) -> None:
    tree(tmp_path, {"train.py": f"import {module}\n"})
    (missing_line,) = lines(tmp_path, ["train.py"])
    assert missing_line == (
        f"train.py:1: import {module} — no dependency provides it; "
        f"add '{suggested}' (gpulaunch init --add-missing)"
    )
    (tmp_path / "requirements.txt").write_text(f"{declared.upper()}>=1\n")
    assert lines(tmp_path, ["train.py"]) == []  # declared under its distribution name


def test_what_declared_distributions_always_install_is_provided(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "requirements.txt": "transformers\n",
            "train.py": "import numpy, tqdm, yaml, jinja2, huggingface_hub\nimport scipy\n",
        },
    )
    # numpy, tqdm, yaml (pyyaml), huggingface_hub: transformers; jinja2: torch (the image's)
    assert [line.split(" — ")[0] for line in lines(tmp_path, ["train.py"])] == [
        "train.py:2: import scipy"
    ]
    # without torch in the image (image.torch: none), jinja2 is missing too
    assert [line.split(" — ")[0] for line in lines(tmp_path, ["train.py"], image=())] == [
        "train.py:1: import jinja2",
        "train.py:2: import scipy",
    ]


def test_torch_family_goes_to_torch_extras_not_a_requirement(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": "import torchvision\n"})
    assert lines(tmp_path, ["train.py"]) == [
        "train.py:1: import torchvision — no dependency provides it; "
        "add torchvision to image.torch_extras"
    ]
    assert lines(tmp_path, ["train.py"], image=("torch", "torchvision")) == []


def test_stdlib_and_the_projects_own_modules_are_not_third_party(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": "import os, json, asyncio.subprocess, __future__\nimport utils\n"
            "from configs import base\n",
            "utils.py": "import logging\n",
            "configs/__init__.py": "",
            "configs/base.py": "from dataclasses import dataclass\n",
        },
    )
    assert walk(tmp_path, ["train.py"]).imports == []


def test_the_table_is_packaged_and_well_formed() -> None:
    table = load_table()
    assert table.candidates("cv2.dnn")[0] == "opencv-python-headless"
    assert table.candidates("Some_Module") == ("some-module",)
    assert {"numpy", "pillow", "torch"} <= table.closure(["torchvision"])


# -- the project is untrusted: bounded reads, no link followed, no execution -------------


def test_links_are_never_followed(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"secret.py": "import leaked_module\n"})
    root = tree(tmp_path / "p", {"train.py": "import linked\nimport inner.mod\n"})
    (root / "linked.py").symlink_to(outside / "secret.py")
    (root / "inner").symlink_to(outside)
    (outside / "mod.py").write_text("import also_leaked\n")
    found = walk(root, ["train.py"])
    assert found.imports == []  # the project's names, but nothing read through a link
    assert found.notes == [
        "imports: linked.py is a symbolic link; not followed",
        "imports: inner is a symbolic link; not followed",
    ]
    with pytest.raises(ConfigError, match=r"^--entry: 'linked.py' is a symbolic link$"):
        walk(root, ["linked.py"])


def test_entries_outside_the_project_are_refused(tmp_path: Path) -> None:
    tree(tmp_path / "p", {"train.py": ""})
    for entry in ("../x.py", "/etc/passwd", "missing.py", "train.txt", "a\nb.py", "x\u2028.py"):
        with pytest.raises(ConfigError, match=r"^--entry: "):
            walk(tmp_path / "p", [entry])


def test_a_script_name_with_a_line_break_is_never_an_entry(tmp_path: Path) -> None:
    guard = "import evil\nif __name__ == '__main__':\n    pass\n"
    tree(tmp_path, {"ok-train.py": guard, "x\n--index-url http:.py": guard})
    assert default_entries(tmp_path) == ["ok-train.py"]


def test_a_fifo_an_oversized_file_and_bad_syntax_are_notes(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {"train.py": "import fifo_mod\nimport big\nimport broken\n", "broken.py": "def (:\n"},
    )
    os.mkfifo(root / "fifo_mod.py")  # opened non-blocking: never a hang
    (root / "big.py").write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    found = walk(root, ["train.py"])
    assert found.imports == []
    assert found.notes == [
        "imports: fifo_mod.py is not a regular file; not read",
        f"imports: big.py is larger than {MAX_FILE_BYTES} bytes; not read",
        "imports: broken.py:1: not parsed (SyntaxError)",
    ]


def test_nothing_is_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tree(
        tmp_path,
        {"train.py": f"open({str(marker)!r}, 'w').write('x')\nimport numpy\n"
         "if __name__ == '__main__':\n    pass\n"},
    )  # fmt: skip
    assert [i.module for i in walk(tmp_path, default_entries(tmp_path)).imports] == ["numpy"]
    assert not marker.exists()


# -- init ---------------------------------------------------------------------------------

SETUP_PY = (
    "from setuptools import setup\n"
    "setup(name='proj', packages=['proj'], install_requires=['torch', 'pyyaml'])\n"
)
TRAIN = (
    "import yaml\nimport numpy as np\nfrom proj import model\n\n"
    "if __name__ == '__main__':\n    pass\n"
)


def invoke(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_init_names_each_missing_import_with_file_and_line(runner: CliRunner, in_tmp: Path) -> None:
    tree(
        in_tmp,
        {
            "setup.py": SETUP_PY,
            "proj/__init__.py": "",
            "proj/model.py": "import tiktoken\n",
            "train.py": TRAIN,
        },
    )
    code, _, err = invoke(runner, "init", "--yes", "--cuda", "cpu")
    assert code == 0, err
    assert (
        "train.py:2: import numpy — no dependency provides it; "
        "add 'numpy' (gpulaunch init --add-missing)\n"
        "proj/model.py:1: import tiktoken — no dependency provides it; "
        "add 'tiktoken' (gpulaunch init --add-missing)\n"
    ) in err
    assert "requirements: setup.py" in (in_tmp / "gpulaunch.yaml").read_text()
    assert not (in_tmp / "requirements-gpulaunch.txt").exists()  # only with --add-missing


def test_init_entry_flag_picks_what_is_checked(runner: CliRunner, in_tmp: Path) -> None:
    tree(in_tmp, {"requirements.txt": "torch\n", "tools/eval.py": "import lpips\n"})
    code, _, err = invoke(runner, "init", "--yes", "--cuda", "cpu")
    assert code == 0, err
    assert "pass --entry FILE" in err  # no top-level script with a __main__ block
    code, _, err = invoke(
        runner, "init", "--yes", "--cuda", "cpu", "--force", "--entry", "tools/eval.py"
    )
    assert code == 0, err
    assert "tools/eval.py:1: import lpips — no dependency provides it; add 'lpips'" in err


def test_init_add_missing_writes_the_owned_requirements_and_lists_it(
    runner: CliRunner, in_tmp: Path
) -> None:
    tree(
        in_tmp,
        {
            "requirements.txt": "torch\npyyaml\n",
            "train.py": "import yaml\nimport cv2\nimport numpy\nimport tiktoken\n"
            "if __name__ == '__main__':\n    pass\n",
        },
    )
    code, out, err = invoke(runner, "init", "--yes", "--cuda", "cpu", "--add-missing")
    assert code == 0, err
    assert out.startswith("wrote requirements-gpulaunch.txt\nwrote gpulaunch.yaml\n")
    owned = (in_tmp / "requirements-gpulaunch.txt").read_text()
    assert owned.splitlines()[3:] == [
        "-r requirements.txt",
        "opencv-python-headless  # train.py:2",
        "numpy  # train.py:3",
        "tiktoken  # train.py:4",
    ]
    assert "requirements: requirements-gpulaunch.txt" in (in_tmp / "gpulaunch.yaml").read_text()
    # the image installs it: the project's file through -r, then the added ones
    project = read_project(in_tmp, "requirements-gpulaunch.txt")
    assert {"torch", "pyyaml", "numpy", "tiktoken"} <= project.dist_names()
    # and the config now provides every import
    found = walk(in_tmp, ["train.py"])
    assert missing(found, project, ["torch"]) == []


def test_init_add_missing_writes_through_the_one_writer(
    runner: CliRunner, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpulaunch.fsio as fsio

    written: list[str] = []
    real = fsio.write_file

    def spy(path: Path, *args: object, **kwargs: object) -> None:
        written.append(Path(path).name)
        real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fsio, "write_file", spy)
    tree(in_tmp, {"train.py": "import einops\nif __name__ == '__main__':\n    pass\n"})
    code, _, err = invoke(runner, "init", "--yes", "--cuda", "cpu", "--add-missing")
    assert code == 0, err
    assert "requirements-gpulaunch.txt" in written
    assert (in_tmp / "requirements-gpulaunch.txt").read_text().endswith("\neinops  # train.py:1\n")


def test_init_add_missing_refuses_a_planted_link_and_changes_nothing(
    runner: CliRunner, in_tmp: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep\n")
    tree(in_tmp, {"train.py": "import einops\nif __name__ == '__main__':\n    pass\n"})
    (in_tmp / "requirements-gpulaunch.txt").symlink_to(target)
    before = snapshot(in_tmp)
    code, _, err = invoke(runner, "init", "--yes", "--cuda", "cpu", "--add-missing", "--force")
    assert code == 2
    assert err.splitlines()[-1] == (
        "gpulaunch: error: --add-missing: requirements-gpulaunch.txt is a symbolic link"
    )
    assert "Traceback" not in err
    assert snapshot(in_tmp) == before and target.read_text() == "keep\n"


def test_init_add_missing_for_a_conda_project_is_refused_with_nothing_written(
    runner: CliRunner, in_tmp: Path
) -> None:
    tree(
        in_tmp,
        {
            "environment.yml": "dependencies:\n  - python=3.11\n  - pip:\n    - torch\n",
            "train.py": "import einops\nif __name__ == '__main__':\n    pass\n",
        },
    )
    before = snapshot(in_tmp)
    code, _, err = invoke(runner, "init", "--yes", "--cuda", "cpu", "--add-missing")
    assert code == 2
    assert err.splitlines()[-1] == (
        "gpulaunch: error: --add-missing: environment.yml is not a pip requirements file or "
        "an installable project; add einops to it"
    )
    assert snapshot(in_tmp) == before


def test_init_undoes_the_owned_file_when_init_then_refuses(runner: CliRunner, in_tmp: Path) -> None:
    tree(in_tmp, {"train.py": "import einops\nif __name__ == '__main__':\n    pass\n"})
    before = snapshot(in_tmp)
    code, _, err = invoke(
        runner, "init", "--yes", "--cuda", "cpu", "--add-missing", "--name", "Bad Name!"
    )
    assert code == 2, err
    assert err.splitlines()[-1].startswith("gpulaunch: error: --name: ")
    assert snapshot(in_tmp) == before


def test_init_puts_back_a_users_owned_file_as_it_was_when_init_then_refuses(
    runner: CliRunner, in_tmp: Path
) -> None:
    """--force rewrites requirements-gpulaunch.txt; a refusal after that puts the user's own
    file back: its bytes and its mode (0600 stays 0600)."""
    tree(in_tmp, {"train.py": "import einops\nif __name__ == '__main__':\n    pass\n"})
    owned = in_tmp / "requirements-gpulaunch.txt"
    owned.write_text("# mine\nnumpy\n")
    owned.chmod(0o600)
    code, _, err = invoke(
        runner, "init", "--yes", "--cuda", "cpu", "--add-missing", "--force", "--name", "Bad!"
    )
    assert code == 2, err
    assert owned.read_text() == "# mine\nnumpy\n"
    assert owned.stat().st_mode & 0o777 == 0o600
