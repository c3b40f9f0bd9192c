"""Catalog facts that are not the torch x CUDA matrix: the driver rule each image enforces
(NVIDIA_REQUIRE_CUDA, NGC release floors), read from YAML under gpulaunch/data/.

Sits between `gpulaunch.image` and `gpulaunch.engine` in the layers: may import
`gpulaunch.engine` and the shared modules (`config`, `errors`, `yamlio`, `textcheck`, `fsio`,
`masking`); never `gpulaunch.image`, `gpulaunch.launch` or `gpulaunch.cli`. Never prints or
exits: errors are raised.
"""
