"""Run records (.gpulaunch/runs/<id>.json), history and what a run cost.

May import launch, image, catalog, project, engine and the shared modules; never typer, click
or rich, and never jobs or ci (they call records, not the other way round).
"""
