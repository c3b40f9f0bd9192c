"""The project folders besides the root that go on PYTHONPATH, as `render`, `run` and
`smoke --imports` all need them: the tree's `src/` or setup.py `package_dir` (layout), unless
the entry installs the project (discover). Its own module so that neither of those two
imports the other's caller: `run` reads the tree alone and imports discover only when a
folder was found and an entry may install it."""

from __future__ import annotations

from pathlib import Path

from gpulaunch.errors import ConfigError
from gpulaunch.project.layout import find_import_paths
from gpulaunch.project.model import Project


def import_paths(root: Path, entry: str | None = None) -> list[str]:
    """[] when the project cannot be read (render names why)."""
    model = Project()
    find_import_paths(root, model)
    if entry is not None and model.import_paths:  # unless the entry installs the project
        from gpulaunch.project.discover import read_project

        try:
            model = read_project(root, entry)
        except ConfigError:
            return []
    return [p for p, _ in model.import_paths]
