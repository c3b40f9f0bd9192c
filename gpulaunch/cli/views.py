"""`gpulaunch versions`: the catalog matrix as a rich table or JSON."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.errors import CatalogError
from gpulaunch.image.compat import matrix
from gpulaunch.image.request import ImageRequest, MatrixRow
from gpulaunch.image.resolver import resolve

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


def matrix_table(torch: str | None, cuda: str | None) -> Table:
    from rich.table import Table

    rows = _rows(torch, cuda)
    overlaid = any(row.origin for row in rows)
    table = Table(title="PyTorch wheels x CUDA images (gpulaunch catalog)")
    for column in (
        "torch",
        "wheel",
        "CUDA image",
        "python",
        "vision",
        "audio",
        "min driver",
        "GPU archs",
        "status",
    ):
        table.add_column(column, no_wrap=column in ("torch", "wheel", "CUDA image"))
    if overlaid:
        table.add_column("overlay", no_wrap=True)
    for row in rows:
        status = row.status if row.confidence == "high" else f"{row.status} ({row.confidence})"
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
        table.add_row(*cells)
    table.caption = (
        "min driver: what the image's NVIDIA_REQUIRE_CUDA needs for every GPU; "
        "* forward-compatibility branches, for the GPU brands the image lists "
        "(datacenter brands; GeForce/Titan only up to CUDA 12.4); rule unverified: an image "
        "newer than NVIDIA's Dockerfiles gpulaunch read (modelled, never a default)"
    )
    if overlaid:
        table.caption += "; overlay: the user catalog file a row comes from (--json: origin)"
    return table
