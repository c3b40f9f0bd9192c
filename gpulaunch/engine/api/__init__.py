"""A small client of the Docker engine's HTTP API, on the standard library only.

`run` (on an image already built) and `ps` / `stop` / `logs` talk to the engine through it, so
they never import the docker SDK and the HTTP stack under it (requests, urllib3: about 120 ms
of imports, more than the whole container start). `http.py` speaks to a local unix socket
only; every other engine (tcp:// with its TLS, ssh://, npipe://) is reached through the SDK's
own session (`sdk.py`) behind the same two calls, so no request body travels unencrypted to an
engine the user reaches with TLS. Every call has a timeout (GPULAUNCH_ENGINE_TIMEOUT); only
waits and output streams last as long as the job runs.

May import only the standard library, `gpulaunch.errors` and `gpulaunch.engine.failures`
(docker, requests and urllib3 only inside `sdk.py`'s functions); `docker_api.Engine` is its one
user outside tests.
"""
