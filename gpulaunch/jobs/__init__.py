"""Use cases that start jobs: `run` (attached, detached, on the host) step by step.

May import records, export, launch, image, catalog, project, engine, outside and the shared
modules; never typer, click or rich (the CLI passes callables for what it shows).
"""
