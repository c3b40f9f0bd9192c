"""A small client of the Docker engine's HTTP API, on the standard library only.

`run` (on an image already built) and `ps` / `stop` / `logs` talk to the engine through it, so
they never import the docker SDK and the HTTP stack under it (requests, urllib3: about 120 ms
of imports, more than the whole container start). `http.py` speaks to a unix socket or a
plain tcp:// engine; engines the SDK reaches some other way (ssh://, https://, npipe://) are
reached through the SDK's own session (`sdk.py`), behind the same two calls. `containers.py`
holds the container object `ps`, `logs`, `stop` and the supervisor use. Every call has a
timeout (GPULAUNCH_ENGINE_TIMEOUT); only waits and output streams wait for as long as the job
runs, as the SDK's did.

May import only the standard library, `gpulaunch.errors` and `gpulaunch.engine.replies`
(docker, requests and urllib3 only inside `sdk.py`'s functions); `docker_api.Engine` is its one
user outside tests.
"""
