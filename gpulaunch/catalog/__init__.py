"""The version catalog, one home: what exists (data.py: data/catalog.yaml's images, wheels
and the torch x CUDA matrix; driver_rule.py: the driver rule each image enforces;
python_install.py), what a config asks (request.py) and the nearest valid choice (resolver.py),
whether this host can run it (compat.py), and keeping it current: user overlay catalogs
(overlay.py), `catalog update` from PyPI (update.py, pypi_facts.py), the staleness warning
(staleness.py) and dev/catalog-check (verify.py).

The public face: `request.image_request(config)` is what a config asks, `resolver.resolve`
answers it with a `request.ResolvedImage` (or refuses with the nearest valid choice),
`compat.probe` and `compat.check` judge this host, `compat.matrix` is what `versions` shows.

Sits between `gpulaunch.project` and `gpulaunch.engine` in the layers: may
import `gpulaunch.engine` (NVML), `gpulaunch.outside` (PyPI) and the shared modules; never
`gpulaunch.image`, `gpulaunch.project`, `gpulaunch.launch` or `gpulaunch.cli`. Never prints or
exits: errors are raised.
"""
