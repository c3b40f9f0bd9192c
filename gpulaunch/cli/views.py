"""`gpulaunch versions`: the catalog matrix as a rich table or JSON."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.catalog.compat import matrix
from gpulaunch.catalog.request import ImageRequest, MatrixRow
from gpulaunch.catalog.resolver import resolve
from gpulaunch.errors import CatalogError

if TYPE_CHECKING:
    from rich.table import Table


def _rows(torch: str | None, cuda: str | None) -> list[MatrixRow]:
    """Filtered rows; an empty filter result is explained by the resolver's own error."""
    rows = matrix(torch, cuda)
    if not rows:
        if torch and cuda:
            resolve(ImageRequest(torch=torch, cuda=cuda))  # raises with alternatives
        what = " and ".join(f"{k} {v}" for k, v in (("torch", torch), ("cuda", cuda)) if v)
        raise CatalogError(f"versions: nothing in the catalog matches {what}")
    return rows


def matrix_json(torch: str | None, cuda: str | None) -> list[dict[str, Any]]:
    rows = []
    for row in _rows(torch, cuda):
        data = dataclasses.asdict(row)
        data["archs"] = list(row.archs)
        data["index_url"] = f"https://download.pytorch.org/whl/{row.variant}"
        rows.append(data)
    return rows


def _driver_cell(row: MatrixRow) -> str:
    """The driver every GPU needs, and the older branches some brands may use."""
    if not row.min_driver:
        return "-"
    text = row.min_driver
    if row.driver_branches:
        text += f" (or branch {', '.join(row.driver_branches)}*)"
    return text if row.driver_verified else text + " rule unverified"


TITLE = "PyTorch wheels x CUDA images (gpulaunch catalog)"
COLUMNS = (
    "torch",
    "wheel",
    "CUDA image",
    "python",
    "vision",
    "audio",
    "min driver",
    "GPU archs",
    "status",
)


def _cells(rows: list[MatrixRow]) -> tuple[list[str], list[list[str]], str]:
    """The table's headers, one list of cells per row, and its caption (both writers')."""
    overlaid = any(row.origin for row in rows)
    headers = [*COLUMNS, "overlay"] if overlaid else list(COLUMNS)
    body: list[list[str]] = []
    for row in rows:
        mark = "unverified" if not row.verified else row.confidence
        status = row.status if mark == "high" else f"{row.status} ({mark})"
        cells = [
            row.torch,
            row.variant,
            row.image,
            row.python_range,
            row.torchvision or "-",
            row.torchaudio or "-",
            _driver_cell(row),
            f"{row.archs[0]}…{row.archs[-1]}" if row.archs else "-",
            status,
        ]
        if overlaid:
            cells.append(Path(row.origin).name if row.origin else "-")
        body.append(cells)
    caption = (
        "min driver: what the image's NVIDIA_REQUIRE_CUDA needs for every GPU; "
        "* forward-compatibility branches, for the GPU brands the image lists "
        "(datacenter brands; GeForce/Titan only up to CUDA 12.4); rule unverified: an image "
        "newer than NVIDIA's Dockerfiles gpulaunch read (modelled, never a default); "
        "(unverified): a build, image or pairing no source showed (offered when asked for, "
        "with a warning; never a default)"
    )
    if overlaid:
        caption += "; overlay: the user catalog file a row comes from (--json: origin)"
    return headers, body, caption


def matrix_table(torch: str | None, cuda: str | None) -> Table:
    """The matrix as a rich table (a terminal: wrapped to its width)."""
    from rich.table import Table

    headers, body, caption = _cells(_rows(torch, cuda))
    table = Table(title=TITLE, caption=caption)
    for column in headers:
        table.add_column(column, no_wrap=column in ("torch", "wheel", "CUDA image", "overlay"))
    for cells in body:
        table.add_row(*cells)
    return table


def matrix_text(torch: str | None, cuda: str | None) -> str:
    """The same table as aligned plain text, one row per line and nothing cut or wrapped
    (stdout is a pipe or a file: grep/awk read it; rich would take longer than the rest)."""
    headers, body, caption = _cells(_rows(torch, cuda))
    widths = [max(len(cells[i]) for cells in [headers, *body]) for i in range(len(headers))]
    lines = [TITLE]
    for cells in [headers, *body]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    lines.append(caption)
    return "\n".join(lines) + "\n"
