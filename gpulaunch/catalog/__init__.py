"""Catalog facts that are not the torch x CUDA matrix: the driver rule each image enforces
(NVIDIA_REQUIRE_CUDA, NGC release floors), read from YAML under gpulaunch/data/; and keeping
the catalog current: user overlay catalogs (overlay.py), `catalog update` from PyPI (update.py,
pypi_facts.py), the staleness warning (staleness.py) and dev/catalog-check (verify.py).

Sits between `gpulaunch.image` and `gpulaunch.engine` in the layers: may import
`gpulaunch.engine`, `gpulaunch.outside` (PyPI) and the shared modules (`config`, `errors`,
`yamlio`, `textcheck`, `fsio`, `masking`); never `gpulaunch.image`, `gpulaunch.launch` or
`gpulaunch.cli`. Never prints or exits: errors are raised.
"""
