"""The outside systems and what they receive: the Docker seam (`docker_api.py`, which imports
the docker SDK for builds, pushes and pulls, and `api/`, the engine's HTTP API on the standard
library for everything else; `api/sdk.py` reaches ssh:// engines through the SDK), the build
request and context, the container run spec, container supervision, host mode, and NVML.

May import only the shared top-level modules (`config`, `errors`, `fsio`, `masking`,
`textcheck`, `yamlio`, `cpulist`); never `image`, `launch` or `cli`. A new outside system
(a registry, kubectl, Slurm) gets its own module here, with timeouts on every call.
"""
