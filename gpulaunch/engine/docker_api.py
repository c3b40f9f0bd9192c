"""The only place that talks to Docker: the docker SDK plus the docker CLI for BuildKit builds.

Tests fake this seam (or run it against a real engine, marker `docker`). Where the engine is
(DOCKER_HOST, else the active docker context's endpoint) and the TLS that reaches it are read
once, by docker's rules, in `api.address`, for the SDK, the stdlib client and the CLI alike.
Connecting and the first ping time out after a few seconds, so a hung engine is a quick exit
3; every later call has a deadline (GPULAUNCH_ENGINE_TIMEOUT, default 60 s) for the whole
answer, and an engine that answered the ping and then stops answering is an EngineError
naming its address."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulaunch.engine import refusals
from gpulaunch.engine.buildspec import (
    CLASSIC_DOCKERFILE,
    Builder,
    BuildRequest,
    DockerCli,
    secret_links,
    sigterm_raises,
)
from gpulaunch.engine.cliprobe import probe_cli
from gpulaunch.engine.context import mirror, write_tar
from gpulaunch.engine.failures import api_timeout, from_transport, short_text, stalls_raise
from gpulaunch.errors import (
    BuildError,
    ConfigError,
    EngineError,
)

if TYPE_CHECKING:
    from gpulaunch.engine.api.address import Address
    from gpulaunch.engine.api.containers import Image
    from gpulaunch.engine.api.http import Transport
    from gpulaunch.engine.podman import EngineKind, PodmanCli

MANAGED_LABEL = "io.gpulaunch.managed"
RUN_ID_LABEL = "io.gpulaunch.run-id"  # set only by `gpulaunch run`, never by an image
PROJECT_LABEL = "io.gpulaunch.project"
PROBE_SUFFIX = "-gpu-probe"  # ci/gpus.py's throw-away container: gl-PROJECT-RUNID-gpu-probe
RUN_ID_RE = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")  # runspec.new_run_id's format only
PING_TIMEOUT_S = 5  # connecting and the first ping: a hung engine must fail fast
# limits Podman sets itself once a container asks for any (see podman.libpod_spec)
PODMAN_OWN_LIMITS = frozenset({"nofile"})


def engine_address(env: Mapping[str, str]) -> str:
    """The URL `resolve_address` gives; EngineError when the docker context cannot be read,
    ConfigError when docker would not take the address. Everything that asks "is the engine
    on this machine?" asks here."""
    return resolve_address(env).url


def resolve_address(env: Mapping[str, str]) -> Address:
    """`api.address.resolve` (docker's rules), except where they end at docker's default
    socket and this user cannot open an engine there: then the user's own rootless Podman
    socket (`podman.rootless_socket`). A DOCKER_HOST or a docker context always wins."""
    from gpulaunch.engine.api.address import parse, resolve
    from gpulaunch.engine.podman import rootless_socket

    address = resolve(env)
    if env.get("DOCKER_HOST") or address.socket is None or address.url != parse("").url:
        return address
    podman = rootless_socket(env, address.socket)
    return address if podman is None else parse(f"unix://{podman}")


def is_remote(host: str) -> bool:
    """An engine on another machine (tcp://, ssh://): this machine's GPUs are not its GPUs.
    An address docker would not take is not this machine either."""
    from gpulaunch.engine.api.address import parse

    try:
        return parse(host).remote
    except ConfigError:
        return True


def remote_engine(env: Mapping[str, str]) -> str:
    """Why the engine is not on this machine, '' when it is: its address is remote, or the
    docker context naming it cannot be read (then its GPUs cannot be known here either).
    ConfigError when docker would not take the address (`engine_address`)."""
    try:
        host = engine_address(env)
    except EngineError as err:
        return err.message
    return f"the engine is remote ({host})" if is_remote(host) else ""


class Engine:
    """Docker seam. Construct cheaply; connects on first use."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(os.environ if env is None else env)
        self._client: Any = None  # the docker SDK: build, push, pull, prune's removals
        self._api: Transport | None = None  # everything else (gpulaunch.engine.api)
        self._cli: DockerCli | bool | None = False  # False = not probed yet
        self._identity: str | None = None
        self._kind: EngineKind | None = None
        self._podman_no_rlimits = False  # see _podman_limits_refused

    # -- connection -------------------------------------------------------------------
    @property
    def address(self) -> Address:
        """Where the engine is and the TLS that reaches it (`resolve_address`)."""
        return resolve_address(self.env)

    @property
    def host(self) -> str:
        return self.address.url

    def client(self) -> Any:
        """The docker SDK (build, push, pull), connected as `api.sdk.connected`
        says: the same address, TLS and ssh client as every other call."""
        if self._client is None:
            import docker

            from gpulaunch.engine.api.sdk import connected

            # the engine's /version is the reachability check (a separate /_ping would be
            # one more round trip on every command)
            client = connected(docker.DockerClient, self.address, PING_TIMEOUT_S)
            client.api.timeout = api_timeout(self.env)
            stalls_raise(client.api, self.host)
            self._client = client
        return self._client

    def api(self) -> Transport:
        """The engine's HTTP API, pinged on first use with PING_TIMEOUT_S; only a local unix
        socket gets the stdlib client, every other engine the SDK's session and its TLS."""
        if self._api is None:
            from gpulaunch.engine.api.http import HttpTransport

            address, timeout = self.address, api_timeout(self.env)
            if address.socket is not None:
                transport: Transport = HttpTransport(address.url, address.socket, timeout)
            else:
                from gpulaunch.engine.api.sdk import SdkTransport

                transport = SdkTransport(address, timeout)
            transport.ping(PING_TIMEOUT_S)
            self._api = transport
        return self._api

    def _ask(
        self,
        what: str,
        path: str,
        query: dict[str, Any] | None = None,
        caught: type[EngineError] | None = None,
    ) -> Any:
        """GET `path`, an error answer worded by `_worded`."""
        with _worded(what, caught):
            return self.api().call("GET", path, query)

    def identity(self) -> str:
        """Which engine this is, for caches of what it can do: its address, version and
        kernel, from the `/version` answer the first contact already got. (Not /info's ID: it
        costs every run a call of about 7 ms, and Podman's changes each time anyway.)"""
        if self._identity is None:
            with _worded("cannot read the engine's version"):
                version = self._version()
            parts = (self.host, version.get("Version"), version.get("KernelVersion"))
            self._identity = "|".join(str(p) for p in parts)[:400]
        return self._identity

    def _version(self) -> dict[str, Any]:
        """The engine's `/version` answer: the ping's, when the transport kept it."""
        api = self.api()
        if api.version is None:
            api.version = api.call("GET", "/version")
        return api.version if isinstance(api.version, dict) else {}

    def kind(self) -> EngineKind:
        """Docker or Podman, from the engine's `/version` answer (asked once; on Podman its
        `/info` too: rootless or not decides the user namespace). An engine that does not
        answer counts as Docker: its next call says what is wrong."""
        from gpulaunch.engine.api.http import ApiError
        from gpulaunch.engine.podman import (
            LIBPOD_INFO,
            EngineKind,
            engine_kind,
            known_kind,
            remember_kind,
        )

        if self._kind is None:
            found: EngineKind | None = None
            with contextlib.suppress(ApiError):
                found = engine_kind(self._version())
                if found.podman:
                    found = engine_kind(self._version(), self.api().call("GET", LIBPOD_INFO))
            self._kind = found or EngineKind("docker", "?")
            if found is not None and known_kind(self.host) != found:
                remember_kind(self.host, found)  # for --dry-run, which asks no daemon
        return self._kind

    def known_kind(self) -> EngineKind | None:
        """What a real command found at this address (for --dry-run: no daemon is asked);
        None when not known or the address cannot be read (the run itself will say why)."""
        from gpulaunch.engine.podman import known_kind
        from gpulaunch.errors import GpulaunchError

        try:
            return known_kind(self.host)
        except GpulaunchError:
            return None

    def refused_ulimits(self) -> set[str]:
        """The ulimits this engine refused on an earlier run (remembered for a day)."""
        return refusals.refused_ulimits(self.identity())

    def remember_refused_ulimit(self, name: str) -> None:
        refusals.remember_refused_ulimit(self.identity(), name)

    def network_names(self) -> set[str]:
        """Networks the engine has (one cheap API call; used on real runs only)."""
        found = self._ask("cannot list the engine's networks", "/networks") or []
        return {str(n.get("Name")) for n in found}

    def facts(self) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        """`docker version`, `docker info` and the local image tags (for `doctor`), through
        the stdlib client: one listing, where the SDK's `images.list()` inspects each image."""
        from gpulaunch.engine.api.containers import repo_tags

        with _worded("cannot read the engine's version and info"):
            images = self.api().call("GET", "/images/json") or []
            tags = [t for image in images if isinstance(image, dict) for t in repo_tags(image)]
            return self._version(), dict(self.api().call("GET", "/info")), tags

    # -- builders ---------------------------------------------------------------------
    def docker_cli(self) -> DockerCli | None:
        """A docker CLI that can build with BuildKit, or None (then the SDK's classic builder)."""
        if self._cli is False:
            self._cli = probe_cli(self._cli_env())
        return self._cli if isinstance(self._cli, DockerCli) else None

    def _cli_env(self) -> dict[str, str]:
        """The docker CLI's environment: the same address and TLS as the SDK's (a context's
        TLS files lie as DOCKER_CERT_PATH wants them: ca.pem, cert.pem, key.pem)."""
        env = dict(self.env)
        address = self.address
        env.setdefault("DOCKER_HOST", address.url)
        if address.tls is not None:
            env["DOCKER_TLS_VERIFY" if address.tls.verify else "DOCKER_TLS"] = "1"
            env["DOCKER_CERT_PATH"] = address.tls.folder
        env["DOCKER_BUILDKIT"] = "1"
        return env

    def podman_cli(self) -> PodmanCli | None:
        """`podman` on PATH, aimed at this engine: how a build on Podman reaches Buildah."""
        from gpulaunch.engine.podman import find_cli

        return find_cli(self.env, self.host)

    def builder_key(self) -> tuple[object, ...]:
        """What `builder_kind` depends on, without probing (for the tag cache's key)."""
        from gpulaunch.engine.cliprobe import cli_key

        podman = self.podman_cli()
        return (*cli_key(self._cli_env()), None if podman is None else podman.path)

    def builder_kind(self) -> Builder:
        """BuildKit's Dockerfile (cache, bind and secret mounts) when a client can build it:
        the docker CLI with BuildKit, or podman (Buildah), decided without a daemon."""
        if self.docker_cli() is not None or self.podman_cli() is not None:
            return "buildkit"
        return "classic"

    # -- images -----------------------------------------------------------------------
    def image_exists(self, ref: str) -> bool:
        return self.image_id(ref) is not None

    def image_id(self, ref: str) -> str | None:
        image = self._image(ref)
        return None if image is None else image.id

    def image_layers(self, ref: str) -> list[str]:
        """The image's layer digests, base first (RootFS.Layers); [] when there is none."""
        image = self._image(ref)
        return [] if image is None else image.layers

    def _image(self, ref: str) -> Image | None:
        """The engine's image `ref`, None when it has none."""
        from gpulaunch.engine.api.containers import inspect_image

        with _worded(f"image {ref}"):
            return inspect_image(self.api(), ref)

    def remove_if_dangling(self, image_id: str) -> None:
        """Remove an image gpulaunch built that a rebuild left without any tag (the engine's
        refusal, or an image already gone, is ignored)."""
        from gpulaunch.engine.api.containers import inspect_image
        from gpulaunch.engine.api.http import ApiError, path_of

        with contextlib.suppress(ApiError):
            image = inspect_image(self.api(), image_id)
            if image is not None and not image.tags and MANAGED_LABEL in image.labels:
                query = {"force": 0, "noprune": 0}
                self.api().call("DELETE", path_of("/images/{}", image_id), query)

    def push(self, local: str, repository: str, tag: str, on_line: Callable[[str], None]) -> str:
        """Tag `local` as repository:tag, push it; the digest the engine reports (or '')."""
        from docker.errors import DockerException

        digest = ""
        with _worded(f"push to {repository}", DockerException):
            self.client().images.get(local).tag(repository, tag)
            for item in self.client().api.push(repository, tag=tag, stream=True, decode=True):
                if item.get("error"):
                    raise EngineError(f"push to {repository}: {item['error']}")
                digest = (item.get("aux") or {}).get("Digest", digest)
                on_line(" ".join(str(item.get(k, "")) for k in ("id", "status")).strip())
        return str(digest)

    def pull(self, ref: str) -> None:
        """Make `ref` (NAME@sha256:... or NAME:TAG) present, pulling it when it is not."""
        from docker.errors import DockerException

        if not self.image_exists(ref):
            with _worded(f"pull {ref}", DockerException):
                self.client().images.pull(ref)

    def tag(self, source: str, target: str) -> None:
        from gpulaunch.engine.api.http import path_of

        repo, _, tag = target.rpartition(":")
        query = {"repo": repo, "tag": tag, "force": 0}
        with _worded(f"tag {source} as {target}"):
            self.api().call("POST", path_of("/images/{}/tag", source), query)

    def build(
        self, req: BuildRequest, on_line: Callable[[str], None], builder: Builder | None = None
    ) -> None:
        """Build an image, reporting each output line; BuildError on failure. On Podman,
        whose API has no BuildKit session, `podman build` (Buildah) builds."""
        if builder != "classic" and self.kind().podman:
            podman = self.podman_cli()
            if podman is None:
                raise EngineError(
                    "the engine is Podman: its API has no BuildKit, and no podman CLI (Buildah) "
                    "was found on PATH",
                    hint="install podman, or use --builder classic",
                )
            self._build_cli(podman, req, on_line)
            return
        cli = self.docker_cli()
        if builder == "buildkit" and cli is None:
            raise EngineError(
                "--builder buildkit: no docker CLI with BuildKit (docker buildx) was found",
                hint="install the docker buildx plugin, or use --builder classic",
            )
        if cli is not None and builder != "classic":
            self._build_cli(cli, req, on_line)
        else:
            self._build_sdk(req, on_line)

    def _build_cli(self, cli: DockerCli, req: BuildRequest, on_line: Callable[[str], None]) -> None:
        """BuildKit through the docker CLI. Its context is a private folder holding exactly
        the hashed entries (`context.mirror`), in `.gpulaunch/`: the CLI's own .dockerignore
        handling never sees the project, and nothing else is sent.

        The folder is the same path every build (`_context_folder`): BuildKit keys its
        incremental transfer by the context's path, so an unchanged wheelhouse is not sent
        again after a source edit, and its links are not made again."""
        import tempfile

        from gpulaunch.fsio import make_dirs

        state = req.context / ".gpulaunch"
        make_dirs(state, root=req.context)  # refuses a planted link
        with (
            sigterm_raises(),
            tempfile.TemporaryDirectory(prefix="gpulaunch-build-") as tmp,
            _context_folder(state) as context,
        ):
            dockerfile = Path(tmp) / "Dockerfile"
            dockerfile.write_text(req.dockerfile, encoding="utf-8")
            with secret_links(Path(tmp), req.secrets):  # in memory, closed after the build
                mirror(req.context, list(req.entries), context)
                argv = cli.build_argv(req, dockerfile, context)
                code = self._run_cli(cli, argv, on_line)
        if code != 0:
            raise BuildError(f"{Path(cli.path).name} build failed (exit {code})")

    def _run_cli(self, cli: DockerCli, argv: list[str], on_line: Callable[[str], None]) -> int:
        on_line("$ " + " ".join(argv))
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                env=self._cli_env(),
            )
        except OSError as err:
            raise EngineError(f"cannot start {cli.path}: {err.strerror}") from None
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            return proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise

    def _build_sdk(self, req: BuildRequest, on_line: Callable[[str], None]) -> None:
        """The classic builder through the SDK, fed a context tar we make ourselves from the
        hashed entries: nothing is written into the project, and the Dockerfile (listed in
        the tar's own .dockerignore) is removed by the daemon before any COPY."""
        import tempfile

        from docker.errors import APIError, DockerException

        if req.secrets:
            raise ConfigError(
                "image.pip: index credentials need BuildKit secrets; the classic builder "
                "would keep them in the image history; build with BuildKit"
            )
        client = self.client()
        with sigterm_raises(), tempfile.TemporaryFile(prefix="gpulaunch-context-") as tar:
            extra = {
                CLASSIC_DOCKERFILE: req.dockerfile,
                ".dockerignore": f".dockerignore\n{CLASSIC_DOCKERFILE}\n",
            }
            write_tar(tar, req.context, list(req.entries), extra)
            tar.seek(0)
            try:
                stream = client.api.build(
                    fileobj=tar,
                    custom_context=True,
                    dockerfile=CLASSIC_DOCKERFILE,
                    tag=req.tags[0],
                    buildargs=req.build_args,
                    network_mode=None if req.network == "default" else req.network,
                    nocache=req.no_cache,
                    labels=req.labels or None,
                    rm=True,
                    forcerm=True,
                    decode=True,
                )
                for chunk in stream:
                    if "stream" in chunk:
                        for line in str(chunk["stream"]).splitlines():
                            on_line(line)
                    elif "error" in chunk:
                        on_line(str(chunk["error"]).rstrip())
                        raise BuildError(f"docker build failed: {str(chunk['error']).strip()}")
                    elif "status" in chunk:
                        on_line(str(chunk["status"]))
            except (APIError, DockerException) as err:
                raise BuildError(f"docker build failed: {short_text(err)}") from None
        for extra_tag in req.tags[1:]:
            self.tag(req.tags[0], extra_tag)

    # -- prune: the project's older images (`image/prune.py` decides) -------------------
    # Listed through the stdlib client: `build` lists images after every new image (prune's
    # notice), and the SDK's import would cost it more than the answer.
    def managed_images(self) -> list[dict[str, Any]]:
        """Images labelled `MANAGED_LABEL=true`: id, tags, created (seconds), size (bytes,
        shared layers included), labels. Which a project owns is `image.prune.owned`'s rule."""
        from gpulaunch.engine.api.containers import repo_tags

        label = json.dumps({"label": [f"{MANAGED_LABEL}=true"]})
        rows = self._ask("cannot list images", "/images/json", {"filters": label}, EngineError)
        return [
            {
                "id": str(row.get("Id") or ""),
                "tags": repo_tags(row),
                "created": _count(row.get("Created")),
                "size": _count(row.get("Size")),
                "labels": {str(k): str(v) for k, v in row["Labels"].items()}
                if isinstance(row.get("Labels"), dict)
                else {},
            }
            for row in rows or []
            if isinstance(row, dict)
        ]

    def image_users(self) -> list[dict[str, str]]:
        """Every container in the engine, in any state and whoever made it, with the id of the
        image it uses (name, state, image_id): an image one of them uses is never pruned."""
        rows = self._ask("cannot list containers", "/containers/json", {"all": 1}, EngineError)
        return [
            {
                "name": str(row["Names"][0]).lstrip("/")
                if row.get("Names")
                else str(row.get("Id") or "")[:12],
                "state": str(row.get("State") or ""),
                "image_id": str(row.get("ImageID") or ""),
            }
            for row in rows or []
            if isinstance(row, dict)
        ]

    def remove_image(self, ref: str) -> dict[str, str]:
        """Remove an image by id, or one tag of it, never forced: the engine itself refuses an
        image a container (running or stopped) uses, and an id that more than one reference
        names. {"outcome": "deleted" | "untagged" | "gone" | "refused", "reason": the engine's
        refusal}; other engine errors are EngineError."""
        from docker.errors import APIError, DockerException, NotFound

        try:  # the transport's failures are EngineError already (`stalls_raise`); an answer
            # that is not JSON is requests' JSONDecodeError, a ValueError, after it
            answer = self.client().api.remove_image(ref, force=False, noprune=False)
        except NotFound:
            return {"outcome": "gone", "reason": ""}
        except (DockerException, ValueError) as err:
            if isinstance(err, APIError) and err.status_code == 409:
                return {"outcome": "refused", "reason": short_text(err)}
            raise EngineError(f"cannot remove image {ref}: {short_text(err)}") from None
        deleted = any(isinstance(item, dict) and item.get("Deleted") for item in answer or [])
        return {"outcome": "deleted" if deleted else "untagged", "reason": ""}

    # -- containers (the stdlib client: `run` and ps/logs/stop never import the SDK) -----
    def create_container(
        self, body: dict[str, Any], before_start: Callable[[Any], None] | None = None
    ) -> Any:
        """Create and start a container from `runspec.create_body`; `before_start` runs
        between the two (to attach its output). One created but not started is removed."""
        from gpulaunch.engine.api.containers import Container, create, refusal
        from gpulaunch.engine.api.http import ApiError

        api = self.api()
        body = dict(body)
        name = str(body.pop("name"))
        container = None
        try:
            if self.kind().podman:
                ident = self._create_on_podman(name, body)
            else:
                ident = create(api, name, body)
            container = Container.get(api, ident)
            if before_start is not None:
                before_start(container)
            container.start()
            return container
        except BaseException as err:  # the container goes on every way out
            self.discard(container)
            if isinstance(err, ApiError):
                refused = refusal(err, str(body.get("Image")))
                if self._podman_limits_refused(refused, body):
                    return self.create_container({**body, "name": name}, before_start)
                raise refused from None
            if from_transport(err):  # the SDK's session (an ssh:// engine) dropped
                raise EngineError(f"Docker engine: {short_text(err)}") from None
            raise

    def _create_on_podman(self, name: str, body: dict[str, Any]) -> str:
        """Podman's own create (`podman.libpod_spec`): GPUs as CDI devices, each checked
        against the CDI specs on this machine first (a remote engine's are not here)."""
        from gpulaunch.engine.podman import LIBPOD_CREATE, check_cdi, gpu_devices, libpod_spec

        wanted = gpu_devices(body)
        if wanted and not is_remote(self.host):
            check_cdi(wanted)
        rlimits = not (self._podman_no_rlimits or self.refused_ulimits() & PODMAN_OWN_LIMITS)
        spec = libpod_spec(body, name, rlimits=rlimits, keep_id=self.kind().rootless is True)
        return str(self.api().call("POST", LIBPOD_CREATE, None, spec)["Id"])

    def cdi_devices(self) -> dict[str, str]:
        """The CDI devices the spec files on this machine define (name -> file): what Podman
        (and a Docker with CDI enabled) can hand a container."""
        from gpulaunch.engine.podman import cdi_devices

        return cdi_devices()

    def _podman_limits_refused(self, refused: EngineError, body: Mapping[str, Any]) -> bool:
        """Podman refused a limit the body never asked for (one it adds itself, see
        `podman.libpod_spec`): the job then runs with no ulimits sent, remembered for this
        engine as "nofile" so the next run creates once. Already without them: False (no loop)."""
        from gpulaunch.errors import RlimitRefused

        if not isinstance(refused, RlimitRefused) or self._podman_no_rlimits:
            return False
        asked = {u.get("Name") for u in (body.get("HostConfig") or {}).get("Ulimits") or []}
        if refused.rlimit in asked or not self.kind().podman:
            return False
        self._podman_no_rlimits = True
        for limit in sorted(PODMAN_OWN_LIMITS):
            self.remember_refused_ulimit(limit)
        return True

    @staticmethod
    def discard(container: Any) -> None:
        if container is None:
            return
        try:
            container.remove(force=True)
        except EngineError:
            pass  # already gone (or being removed), or the engine itself went away
        except Exception as err:  # the engine went away meanwhile: nothing left to remove
            if not from_transport(err):
                raise

    def _container(self, ident: str, what: str) -> Any:
        """The container `ident`, or None when there is none; EngineError on other errors."""
        from gpulaunch.engine.api.containers import Container
        from gpulaunch.engine.api.http import ApiError

        try:
            return Container.get(self.api(), ident)
        except ApiError as err:
            if err.status == 404:
                return None
            raise EngineError(f"{what}: {short_text(err)}") from None

    def find_leftover(self, name: str, run_id: str) -> Any:
        """The container `name` of run `run_id` if it exists (created but perhaps never
        started); a container of that name that is not this run's is left alone."""
        container = self._container(name, f"container {name!r}")
        if container is None:
            return None
        return container if self.run_id_of(container) == run_id else None

    def run_id_of(self, container: Any) -> str | None:
        """The run id `gpulaunch run` gave this container, or None when it is not ours.

        Only a run id of `new_run_id`'s format counts (`docker run -l io.gpulaunch.run-id=x` by
        hand, or a stranger's tool, is not ours). Containers inherit their image's labels, so a
        label counts only when the container's own value differs from what its image carries:
        `docker run IMG` of an image with a run-id label must not look like a gpulaunch job.
        """
        labels = container.labels or {}
        run_id = labels.get(RUN_ID_LABEL)
        if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
            return None
        image = container.image  # gone: nothing was inherited
        inherited = {} if image is None else image.labels
        return None if inherited.get(RUN_ID_LABEL) == run_id else run_id

    def is_job(self, container: Any) -> bool:
        """A container `run` made, by all it set together: its own run id (`run_id_of`), the
        managed label, a project label, and the name `run` gives it (gl-PROJECT-RUNID, or the
        GPU probe's). Labels copied by hand onto `docker run` do not pass: the name carries
        the run id too, and the engine gives a name to one container only."""
        run_id = self.run_id_of(container)
        labels = container.labels or {}
        project = labels.get(PROJECT_LABEL)
        if run_id is None or labels.get(MANAGED_LABEL) != "true":
            return False
        if not isinstance(project, str) or not project:
            return False
        stem = f"gl-{project.replace('/', '-')}-{run_id}"
        return str(container.name) in (stem, stem + PROBE_SUFFIX)

    def list_managed(self, all_states: bool = False) -> list[Any]:
        """Containers `gpulaunch run` started (`is_job`): what `ps` lists."""
        query = {"all": int(all_states), "filters": json.dumps({"label": [RUN_ID_LABEL]})}
        rows = self._ask("cannot list containers", "/containers/json", query) or []
        found = [self._container(str(row["Id"]), "cannot list containers") for row in rows]
        return [c for c in found if c is not None and self.is_job(c)]

    def get_managed(self, ident: str) -> Any:
        """The container `ident` if `run` started it (`is_job`): what `logs` and `stop` touch."""
        container = self._container(ident, f"container {ident!r}")
        if container is None:
            raise EngineError(f"no container {ident!r}")
        if not self.is_job(container):
            raise EngineError(
                f"container {ident!r} was not started by `gpulaunch run`; not touching it"
            )
        return container


@contextlib.contextmanager
def _worded(what: str, caught: type[Exception] | None = None) -> Iterator[None]:
    """An engine's error answer (`caught`: another error) as EngineError "WHAT: its
    message", on one line."""
    from gpulaunch.engine.api.http import ApiError

    errors = ApiError if caught is None else caught
    try:
        yield
    except errors as err:
        raise EngineError(f"{what}: {short_text(err)}") from None


def _count(value: Any) -> int:
    """A non-negative whole number from an engine reply (anything else: 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@contextlib.contextmanager
def _context_folder(state: Path) -> Iterator[Path]:
    """`state/build-context` while this process holds its lock, kept from build to build
    (`context.mirror` makes it hold exactly what is sent); a fresh temp folder in `state`,
    removed after, when another build holds it or it cannot be made."""
    import fcntl
    import shutil
    import stat
    import tempfile

    from gpulaunch.fsio import open_stream

    stable = state / "build-context"
    with open_stream(state / "build-context.lock", root=state.parent, append=True) as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISDIR(os.lstat(stable).st_mode):
                    os.unlink(stable)  # a planted link or file: never followed
            os.makedirs(stable, mode=0o700, exist_ok=True)
            folder, temporary = stable, False
        except OSError:
            folder, temporary = Path(tempfile.mkdtemp(prefix="build-context-", dir=state)), True
        try:
            yield folder
        finally:
            if temporary:
                shutil.rmtree(folder, ignore_errors=True)
