"""The command line: the typer app (`app.py`: error mapping and shared options) and the
commands grouped by topic (`image.py`: init / render / versions / schema / build / catalog
update; `jobs.py`: run / shell / ps / logs / stop; `ci.py`: smoke / doctor;
`records.py`: history / rerun / explain; `cluster.py`: export / submit; `profiles.py`).
Views (`views.py`) turn results into rich tables.

The only layer that may import typer, print or exit. Each command parses its flags, calls
one core function from `image`, `launch` or `engine`, and prints; every domain error is
mapped to its exit code in `app.handle_errors`. A new command goes into the module of its
topic (or a new one beside them), registered by the import below.
"""

from gpulaunch.cli import (  # noqa: F401 - registers the commands
    ci,
    cluster,
    image,
    jobs,
    profiles,
    records,
)
from gpulaunch.cli.app import app, main

__all__ = ["app", "main"]
