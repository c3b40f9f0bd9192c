"""A small client of the Docker engine's HTTP API, on the standard library only.

`run` (on an image already built) and `ps` / `stop` / `logs` talk to the engine through it, so
they never import the docker SDK and the HTTP stack under it (requests, urllib3: about 120 ms
of imports, more than the whole container start). `address.py` reads where the engine is
(DOCKER_HOST, the docker context, docker's TLS settings) once, by docker's rules, for every
client. `http.py` speaks to a local unix socket only, through http.client (its connection's
`connect` opens the socket, as docker-py's transport does); every other engine (tcp:// with its
TLS, ssh:// through the system ssh client, npipe://) is reached through the SDK's own session
(`sdk.py`), behind the same two calls, so no request body travels unencrypted to an engine
the user reaches with TLS. `containers.py` holds the container object `ps`, `logs`, `stop` and
the supervisor use. Every call has a timeout (GPULAUNCH_ENGINE_TIMEOUT); only waits and output
streams wait for as long as the job runs, as the SDK's did.

May import only the standard library, `gpulaunch.errors` and `gpulaunch.engine.failures`
(docker, requests and urllib3 only inside `sdk.py`'s functions); `docker_api.Engine` is its one
user outside tests.
"""
