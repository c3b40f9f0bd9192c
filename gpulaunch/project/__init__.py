"""The project model: what a project's own files say about its dependencies.

Read by `init`, `render` and `build` alike: requirements files (with includes, constraints,
indexes, hashes, direct URLs and local installs), pyproject (PEP 621, poetry, uv, PDM),
setup.cfg / setup.py, Pipfile, conda environment files and PEP 723 script blocks, with
`packaging` and `tomllib` doing the parsing. `reconcile` weighs the project's torch, CUDA
variant and Python range against catalog rows handed in by the caller.

May import: gpulaunch.catalog, gpulaunch.config, gpulaunch.yamlio, gpulaunch.textcheck,
gpulaunch.errors and the standard library / packaging. Never gpulaunch.image or above.
"""
