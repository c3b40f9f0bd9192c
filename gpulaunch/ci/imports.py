"""The end of `build`: import the entry points' third-party modules in the image just built.

The same check as `smoke --imports` (its program, `IMPORT_PROGRAM` here, and init's walk
of the entry points' imports), run straight on the image: no job, no record, no project
mount (the image's own /workspace), no network, no GPU. It takes seconds and says which
module a job would fail to import, before the first run finds it after its own start-up.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TIMEOUT_S = 120.0  # imports that take longer are killed and reported as not finished
MEMORY = "import-checks.json"  # in the user's cache: checks that passed, by what they depend on
KEPT = 64

IMPORTS_MARK = "gpulaunch-imports:"
# Run in the image as `python -c PROGRAM CHECKS_JSON`: imports each module, says which fail
# and why, ends with one marked JSON line, exits 1 when any failed. No training starts.
IMPORT_PROGRAM = """\
import importlib, json, sys
checks = json.loads(sys.argv[1])
failed = []
for module, where, dist in checks:
    try:
        importlib.import_module(module)
    except BaseException as err:
        failed.append(module)
        said = "%s: %s" % (type(err).__name__, (str(err).splitlines() or [""])[0])
        top = (getattr(err, "name", None) or "").split(".")[0]
        if isinstance(err, ModuleNotFoundError) and top == module.split(".")[0]:
            said += "; add %r to the requirements" % dist
        print("%s: import %s failed in the image: %s" % (where, module, said), flush=True)
    else:
        print("ok: import %s" % module, flush=True)
print("%s %s" % (MARK, json.dumps({"checked": len(checks), "failed": failed})), flush=True)
sys.exit(1 if failed else 0)
""".replace("MARK", repr(IMPORTS_MARK))


Checks = list[tuple[str, str, str]]  # (module, file:line, distribution to suggest)


def import_checks(required: Any) -> Checks:
    """What IMPORT_PROGRAM is given for init's `required()` imports."""
    from gpulaunch.project.imports import load_table

    table = load_table()
    return [(i.module, i.where, table.candidates(i.module)[0]) for i in required]


def import_command(checks: Checks) -> list[str]:
    return ["python", "-c", IMPORT_PROGRAM, json.dumps(checks)]


def failed_imports(lines: list[str], checks: Checks) -> list[str] | None:
    """The modules asked about that the program's own summary (its last marked line) names;
    None when there is no summary. A module's import may print anything before it, and a
    module it was not asked about does not count."""
    marked = [line for line in lines if line.startswith(IMPORTS_MARK)]
    try:
        named = json.loads(marked[-1].removeprefix(IMPORTS_MARK))["failed"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(named, list):
        return None
    return [module for module, _, _ in checks if module in named]


@dataclass
class ImportCheck:
    """What the image said: modules checked, the failure lines of those that failed."""

    entries: list[str]
    checked: int = 0
    failed: list[str] = field(default_factory=list)  # "train.py:3: import x failed in ..."
    finished: bool = True
    seconds: float = 0.0
    remembered: bool = False  # passed before on the same dependency layers: not run again

    def lines(self) -> list[str]:
        shown = ", ".join(self.entries)
        took = f"in {self.seconds:.1f} s"
        if not self.finished:
            return [f"imports: the check of {shown} did not finish ({took}); `smoke --imports`"]
        if self.remembered:
            return [
                f"imports: all {self.checked} third-party imports of {shown} work (checked "
                "before on the same dependency layers; only the code changed)"
            ]
        if not self.failed:
            return [f"imports: all {self.checked} third-party imports of {shown} work ({took})"]
        head = f"imports: {len(self.failed)} of {self.checked} imports of {shown} fail ({took}):"
        return [head, *self.failed]


def check_image(
    engine: Any, image: str, project_name: str, root: Path, requirements: str | None
) -> ImportCheck | None:
    """None when the project has no entry point to check (no top-level script with a
    `__main__` block) or it imports nothing third-party."""
    from gpulaunch.project.imports import default_entries, walk
    from gpulaunch.project.pythonpath import import_paths

    entries = default_entries(root)
    found = walk(root, entries, paths=import_paths(root, requirements)) if entries else None
    if found is None or not found.required():
        return None
    required = found.required()
    # what the outcome depends on: every layer below the last (the project's code: the
    # checked modules are not the project's own) and the modules asked
    layers = engine.image_layers(image)
    key = _key(layers[:-1], sorted(i.module for i in required)) if layers else None
    if key is not None and key in _passed():
        return ImportCheck(found.entries, len(required), remembered=True)

    from gpulaunch.ci.gpus import throwaway
    from gpulaunch.engine.docker_api import PROJECT_LABEL
    from gpulaunch.engine.runspec import new_run_id

    checks = import_checks(required)
    name = f"gl-{project_name.replace('/', '-')}-{new_run_id()}-imports"
    labels = {PROJECT_LABEL: project_name}
    began = time.monotonic()
    container = throwaway(
        engine, image, name, import_command(checks), gpus=0, labels=labels, ipc=None
    )
    timer = threading.Timer(TIMEOUT_S, _kill, (container,))
    timer.start()
    try:
        container.wait()
        output = container.logs().decode("utf-8", errors="replace")
    finally:
        timer.cancel()
        engine.discard(container)
    result = ImportCheck(found.entries, len(checks), seconds=time.monotonic() - began)
    named = failed_imports(output.splitlines(), checks)
    if named is None:
        result.finished = False
        return result
    for module, where, _ in checks:
        if module in named:
            said = f"{where}: import {module} failed in the image:"
            lines = (x for x in output.splitlines() if x.startswith(said) and x.isprintable())
            result.failed.append(next(lines, said))
    if key is not None and not result.failed:
        _remember(key)
    return result


def _key(layers: list[str], modules: list[str]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps([layers, modules]).encode()).hexdigest()


def _passed() -> list[str]:
    from gpulaunch.fsio import cache_dir, read_cache

    data = read_cache(cache_dir() / MEMORY)
    keys = data.get("passed") if isinstance(data, dict) else None
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def _remember(key: str) -> None:
    from gpulaunch.fsio import cache_dir, cache_root, write_cache

    kept = [k for k in _passed() if k != key][-(KEPT - 1) :]
    write_cache(cache_dir() / MEMORY, {"passed": [*kept, key]}, root=cache_root())


def _kill(container: Any) -> None:
    from gpulaunch.engine.supervise import LOST

    with contextlib.suppress(*LOST):  # gone already, or the engine with it: nothing to stop
        container.kill()
