"""What goes into the image: the version catalog (data model, request parsing, resolver,
driver and architecture compatibility, the host check), the `init` use case (the project
model itself is `gpulaunch.project`), the Dockerfile render, and the build (content-hash tag,
progress, log).

May import `gpulaunch.project`, `gpulaunch.engine` (the Docker seam, the build context) and
the shared modules at the top of the package (`config`, `errors`, `fsio`, `masking`,
`textcheck`, `yamlio`, `cpulist`); never `gpulaunch.launch` or `gpulaunch.cli`. Never prints
or exits: errors are raised.
"""
