"""CI use cases: `smoke` (a short run with a timeout, JUnit XML, a step summary) and `doctor`.

May import jobs, records, launch, image, catalog, project, engine and the shared modules;
never typer, click or rich.
"""
