"""`gpulaunch versions` to a pipe or file: a plain aligned table with the rich table's own
columns and cells (nothing cut or wrapped); to a terminal: the rich table."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulaunch.catalog.compat import matrix
from gpulaunch.cli.app import app
from gpulaunch.cli.views import matrix_table


def _plain_cells(output: str) -> tuple[list[str], list[list[str]], str, str]:
    """Title, caption, header cells and row cells, cut at the header's column starts."""
    lines = output.splitlines()
    title, header, rows, caption = lines[0], lines[1], lines[2:-1], lines[-1]
    names = header.split("  ")
    names = [n.strip() for n in names if n.strip()]
    starts = [header.index(name) for name in names]
    cut = [
        [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        for line in rows
    ]
    return names, cut, title, caption


def _rich_cells(torch: str | None) -> tuple[list[str], list[list[str]], str, str]:
    table = matrix_table(torch, None)
    headers = [str(column.header) for column in table.columns]
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    return (
        headers,
        [list(row) for row in zip(*columns, strict=True)],
        str(table.title),
        str(table.caption),
    )


@pytest.mark.parametrize("args", [[], ["--torch", "2.4"], ["--cuda", "12.1"]])
def test_plain_table_holds_the_rich_tables_cells(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["versions", *args], catch_exceptions=False)
    assert result.exit_code == 0
    torch = args[1] if args[:1] == ["--torch"] else None
    cuda = args[1] if args[:1] == ["--cuda"] else None
    headers, cells, title, caption = _plain_cells(result.stdout)
    if cuda is None:
        assert (headers, cells, title, caption) == _rich_cells(torch)
    assert len(cells) == len(matrix(torch, cuda)) > 0
    assert all(len(line) == len(line.rstrip()) for line in result.stdout.splitlines())


def test_a_terminal_gets_the_rich_table(tmp_path: Path) -> None:
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "250", "GPULAUNCH_NO_STALE_WARNING": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulaunch", "versions", "--torch", "2.4.1"],
        stdout=child,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env=env,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=60) == 0
    os.close(main)
    shown = b"".join(chunks).decode()
    assert "┃ torch" in shown and "│ 2.4.1 │ cu121" in shown


def test_piped_versions_loads_no_rich_yaml_or_pydantic(tmp_path: Path) -> None:
    """The plain writer and the catalog's JSON copy: nothing heavy for a piped `versions`."""
    script = (
        "import sys\n"
        "sys.argv = ['gpulaunch', 'versions']\n"
        "from gpulaunch.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('rich', 'yaml', 'pydantic', 'jinja2', 'docker')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)), file=sys.stderr)\n"
    )
    env = {**os.environ, "GPULAUNCH_NO_STALE_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.stdout.startswith("PyTorch wheels x CUDA images"), proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "[]"
