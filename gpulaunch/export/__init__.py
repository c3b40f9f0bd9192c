"""Exports of the same launch plan to other engines: Kubernetes manifests, Slurm batch scripts.

May import launch, image, catalog, project, engine, outside and the shared modules; never
typer, click or rich.
"""
