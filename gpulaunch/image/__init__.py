"""What goes into the image: the `init` use case (the project model itself is
`gpulaunch.project`), the Dockerfile render, the build (content-hash tag, tag cache,
progress, log) and prune. The versions it builds come from `gpulaunch.catalog`.

May import `gpulaunch.project`, `gpulaunch.catalog`, `gpulaunch.engine` (the Docker seam, the
build context) and the shared modules at the top of the package (`config`, `errors`, `fsio`,
`masking`, `textcheck`, `yamlio`, `cpulist`, `planreads`); never `gpulaunch.launch` or
`gpulaunch.cli`. Never prints or exits: errors are raised.
"""
