"""One way to reach an engine (issue 29 §4): one parser for engine addresses (docker's rules),
the stdlib client only for a local unix socket, every other engine through the docker SDK with
docker's TLS; and every call bounded in total time and size.

The fakes here speak HTTP by hand on raw sockets, so they see exactly the bytes a client sends:
a TLS engine on 127.0.0.1 (a CA, server and client certificate made by `openssl` for the
test, the client certificate required), a plain listener that records every byte, and unix
engines that drip an answer or never end it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpulaunch.engine.api.address import Address, parse, resolve
from gpulaunch.engine.docker_api import Engine, engine_address, is_remote
from gpulaunch.engine.runspec import RunPlan, create_body
from gpulaunch.errors import ConfigError, EngineError

SECRET = "glSECRET-4d1f0c"  # a job's env value: it must never cross the wire in clear text
CID = "c0ffee" * 10 + "abcd"
VERSION = {"ApiVersion": "1.41", "Version": "20.10.24", "MinAPIVersion": "1.12"}
Behaviour = Callable[[socket.socket], None]


# -- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    folder: Path  # ca.pem, cert.pem, key.pem: a client's DOCKER_CERT_PATH
    server_cert: Path
    server_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate."""
    work = tmp_path_factory.mktemp("certs")
    client = work / "client"
    client.mkdir()
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *key, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=gpulaunch test CA", cwd=work)  # fmt: skip
    for name, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        _openssl("req", *key, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=work)  # fmt: skip
        ext = work / f"{name}.ext"
        ext.write_text(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                 "-CAcreateserial", "-days", "2", "-extfile", ext.name,
                 "-out", f"{name}-cert.pem", cwd=work)  # fmt: skip
    (client / "ca.pem").write_bytes((work / "ca.pem").read_bytes())
    (client / "cert.pem").write_bytes((work / "client-cert.pem").read_bytes())
    (client / "key.pem").write_bytes((work / "client-key.pem").read_bytes())
    return Certs(client, work / "server-cert.pem", work / "server-key.pem")


# -- a fake engine on raw sockets -------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str  # without the SDK's /v1.xx prefix
    body: bytes
    tls: bool  # it arrived inside a TLS session
    client_cert: bool  # that session presented a client certificate the CA signed


@dataclass
class RawEngine:
    """An engine on `listener`: the few calls a create makes, or a scripted `behaviour` for
    paths ending so. `received` holds every byte each connection sent before any TLS."""

    listener: socket.socket
    tls: ssl.SSLContext | None = None
    behaviour: dict[str, Behaviour] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def close(self) -> None:
        self.stop.set()
        self.listener.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        seen = bytearray()
        self.received.append(b"")
        index = len(self.received) - 1
        try:
            if self.tls is not None:
                peek = conn.recv(5, socket.MSG_PEEK)
                self.received[index] = peek
                conn = self.tls.wrap_socket(conn, server_side=True)
            with conn:
                self._requests(conn, seen, index)
        except (OSError, ssl.SSLError):
            pass

    def _requests(self, conn: socket.socket, seen: bytearray, index: int) -> None:
        tls = isinstance(conn, ssl.SSLSocket)
        buf = b""
        while not self.stop.is_set():
            while b"\r\n\r\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buf += chunk
                if not tls:
                    seen += chunk
                    self.received[index] = bytes(seen)
                if not tls and not buf[:1].isalpha():  # not HTTP (a TLS hello): as dockerd
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                    return
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            while len(buf) < length:
                buf += conn.recv(65536)
            body, buf = buf[:length], buf[length:]
            path = target.split("?", 1)[0]
            if path.startswith("/v1."):
                path = "/" + path.split("/", 2)[2]
            cert = tls and bool(conn.getpeercert())  # type: ignore[attr-defined]
            self.requests.append(Request(method, path, body, tls, cert))
            for suffix, act in self.behaviour.items():
                if path.endswith(suffix):
                    act(conn)
                    return
            conn.sendall(_answer(method, path))


def _answer(method: str, path: str) -> bytes:
    status, body = 200, b""
    if path == "/_ping":
        body = b"OK"
    elif path == "/version":
        body = json.dumps(VERSION).encode()
    elif path == "/containers/create":
        status, body = 201, json.dumps({"Id": CID, "Warnings": []}).encode()
    elif method == "GET" and path.endswith("/json"):
        attrs = {"Id": CID, "Name": "/gl-p", "Config": {"Labels": {}}, "State": {}}
        body = json.dumps(attrs).encode()
    else:
        status = 204
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _tcp_listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def tls_engine(certs: Certs) -> Iterator[RawEngine]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_cert, certs.server_key)
    context.load_verify_locations(certs.folder / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED  # as dockerd --tlsverify
    engine = RawEngine(_tcp_listener(), context)
    yield engine
    engine.close()


@pytest.fixture
def plain_engine() -> Iterator[RawEngine]:
    engine = RawEngine(_tcp_listener())
    yield engine
    engine.close()


def _plan() -> RunPlan:
    return RunPlan(
        image="img:tag",
        name="gl-p",
        command=["true"],
        env={"HF_TOKEN": SECRET},
        mounts=[],
        user="1000:1000",
        gpus=0,
        labels={},
        network="none",
        ulimits={},
    )


def _context(home: Path, host: str, tls_from: Path | None, skip: bool = False) -> dict[str, str]:
    """A docker context `remote` (docker CLI's layout) as the current one; its TLS files
    copied from `tls_from` into contexts/tls/<sha256>/docker."""
    config = home / ".docker"
    digest = hashlib.sha256(b"remote").hexdigest()
    meta = config / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": skip}
    (meta / "meta.json").write_text(
        json.dumps({"Name": "remote", "Endpoints": {"docker": endpoint}})
    )
    (config / "config.json").write_text(json.dumps({"currentContext": "remote"}))
    if tls_from is not None:
        tls = config / "contexts" / "tls" / digest / "docker"
        tls.mkdir(parents=True)
        for name in ("ca.pem", "cert.pem", "key.pem"):
            (tls / name).write_bytes((tls_from / name).read_bytes())
    return {"DOCKER_CONFIG": str(config), "HOME": str(home), "PATH": ""}


def _tls_env(how: str, port: int, certs: Certs, home: Path) -> dict[str, str]:
    """Ways a user asks for a TLS engine: DOCKER_TLS_VERIFY as docker's CLI reads it (also
    with the address spelled with spaces or without a scheme), or a context's TLS files."""
    verify = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs.folder), "PATH": ""}
    if how == "verify":
        return {**verify, "DOCKER_HOST": f"tcp://127.0.0.1:{port}"}
    if how == "spaces":
        return {**verify, "DOCKER_HOST": f"  tcp://127.0.0.1:{port}\t"}
    if how == "no-scheme":
        return {**verify, "DOCKER_HOST": f"127.0.0.1:{port}"}
    if how == "context":
        return _context(home, f"tcp://127.0.0.1:{port}", certs.folder)
    raise AssertionError(how)


TLS_WAYS = ["verify", "spaces", "no-scheme", "context"]


# -- TLS: the job's settings travel encrypted, or not at all -----------------------------------


@pytest.mark.parametrize("how", TLS_WAYS)
def test_a_tls_engine_gets_the_create_body_over_tls(
    tls_engine: RawEngine, certs: Certs, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the stdlib-free path (`api`, what run uses) and the SDK client (build, push),
    verified against the engine's own CA even where REQUESTS_CA_BUNDLE names another list
    (requests would put it in place of the session's CA)."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certs.server_cert))  # not the engine's CA
    monkeypatch.setenv("CURL_CA_BUNDLE", str(certs.server_cert))
    engine = Engine(_tls_env(how, tls_engine.port, certs, tmp_path))
    container = engine.create_container(create_body(_plan()))
    assert container.id == CID
    assert engine.client().api.version()["ApiVersion"] == "1.41"
    create = next(r for r in tls_engine.requests if r.path == "/containers/create")
    assert SECRET in create.body.decode()
    assert all(r.tls and r.client_cert for r in tls_engine.requests)
    assert all(raw[:1] == b"\x16" for raw in tls_engine.received)  # each began a TLS hello


@pytest.mark.parametrize("how", TLS_WAYS)
def test_tls_asked_of_a_plain_listener_sends_no_request(
    plain_engine: RawEngine, certs: Certs, tmp_path: Path, how: str
) -> None:
    """The engine at that address speaks plain HTTP: the client's TLS hello fails, one line
    names the address, and no request (no body, no secret) ever reaches the listener."""
    engine = Engine(_tls_env(how, plain_engine.port, certs, tmp_path))
    for ask in (engine.api, engine.client):
        with pytest.raises(EngineError) as caught:
            ask()
        message = caught.value.message
        assert message.startswith(
            f"cannot reach the Docker engine at tcp://127.0.0.1:{plain_engine.port}"
        )
        assert "\n" not in message
    assert plain_engine.received and plain_engine.requests == []
    for raw in plain_engine.received:
        assert raw[:1] == b"\x16", raw[:40]  # a TLS handshake record, nothing else
        assert b"HTTP/1.1" not in raw and SECRET.encode() not in raw


def test_a_tcp_engine_without_tls_asked_is_reached_in_plain(plain_engine: RawEngine) -> None:
    """The control: nothing asks for TLS, so the same listener gets the plain request."""
    engine = Engine({"DOCKER_HOST": f"tcp://127.0.0.1:{plain_engine.port}", "PATH": ""})
    engine.create_container(create_body(_plan()))
    create = next(r for r in plain_engine.requests if r.path == "/containers/create")
    assert SECRET in create.body.decode() and not create.tls


def test_the_buildkit_cli_gets_the_same_tls(certs: Certs, tmp_path: Path) -> None:
    """The docker CLI (BuildKit builds) is handed the address and the context's TLS files as
    DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH: it never speaks plain either."""
    env = _context(tmp_path, "tcp://10.0.0.2:2376", certs.folder)
    cli_env = Engine(env)._cli_env()
    assert cli_env["DOCKER_HOST"] == "tcp://10.0.0.2:2376"
    assert cli_env["DOCKER_TLS_VERIFY"] == "1"
    folder = Path(cli_env["DOCKER_CERT_PATH"])
    assert sorted(p.name for p in folder.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
    skip = _context(tmp_path / "skip", "tcp://10.0.0.2:2376", None, skip=True)
    assert Engine(skip)._cli_env()["DOCKER_TLS"] == "1"
    assert "DOCKER_TLS_VERIFY" not in Engine(skip)._cli_env()
    only_path = {"DOCKER_HOST": "tcp://h:2376", "DOCKER_CERT_PATH": str(certs.folder)}
    assert Engine(only_path)._cli_env()["DOCKER_TLS"] == "1"  # the SDK encrypts: so does the CLI


def test_ssh_goes_through_the_system_ssh_client() -> None:
    from gpulaunch.engine.api.sdk import client_kwargs

    kwargs = client_kwargs(parse("ssh://user@gpu-box"))
    assert kwargs == {"base_url": "ssh://user@gpu-box", "use_ssh_client": True}
    assert resolve({"DOCKER_HOST": "ssh://gpu-box", "DOCKER_TLS_VERIFY": "1"}).tls is None


# -- one parser ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scheme", "url"),
    [
        ("unix:///var/run/docker.sock", "unix", "unix:///var/run/docker.sock"),
        ("", "unix", "unix:///var/run/docker.sock"),
        ("   ", "unix", "unix:///var/run/docker.sock"),
        ("unix://", "unix", "unix:///var/run/docker.sock"),
        (" unix:///run/x.sock\n", "unix", "unix:///run/x.sock"),
        ("tcp://10.0.0.2:2376", "tcp", "tcp://10.0.0.2:2376"),
        ("10.0.0.2:2376", "tcp", "tcp://10.0.0.2:2376"),
        ("ssh://user@gpu-box", "ssh", "ssh://user@gpu-box"),
        ("npipe:////./pipe/docker_engine", "npipe", "npipe:////./pipe/docker_engine"),
    ],
)
def test_addresses_read_as_docker_reads_them(text: str, scheme: str, url: str) -> None:
    address = parse(text)
    assert (address.scheme, address.url) == (scheme, url)
    assert engine_address({"DOCKER_HOST": text} if text.strip() else {"PATH": ""}) == url
    assert is_remote(text) is (scheme in ("tcp", "ssh"))
    assert (address.socket is not None) is (scheme == "unix")


def test_the_sdk_reads_every_address_the_same_way() -> None:
    """Parity with the docker SDK's own parser (docker.utils.parse_host) on what it is
    handed: the same kind of engine, the same place."""
    from docker.utils import parse_host

    for text in ("unix:///run/x.sock", " tcp://10.0.0.2:2376 ", "10.0.0.2:2376", "ssh://u@h"):
        address = parse(text)
        sdk = parse_host(address.url, tls=True)
        expected = {
            "unix": f"http+unix://{address.socket}",
            "tcp": "https://10.0.0.2:2376",
            "ssh": "ssh://u@h:22",
        }[address.scheme]
        assert sdk == expected


@pytest.mark.parametrize(
    "text",
    [
        "TCP://127.0.0.1:2376",  # docker's schemes are lower case: the CLI refuses this
        "Unix:///var/run/docker.sock",
        "https://127.0.0.1:2376",  # the SDK's alias, not docker's
        "http://127.0.0.1:2375",
        "fd://",
        "tcp://",
        "tcp://127.0.0.1:2376/\nx",
        "tcp://127.0.0.1 :2376",
        "unix:///run/x\u2028.sock",
    ],
)
def test_an_address_docker_would_not_take_is_exit_2_naming_docker_host(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Engine({"DOCKER_HOST": text, "PATH": ""}).api()
    assert caught.value.message.startswith("DOCKER_HOST: ")
    assert "\n" not in caught.value.message and "\u2028" not in caught.value.message
    assert is_remote(text)  # never this machine's GPUs


def test_an_uppercase_scheme_reaches_no_engine_from_the_cli(
    plain_engine: RawEngine, tmp_path: Path
) -> None:
    """`gpulaunch ps` with DOCKER_HOST=TCP://…: exit 2, one line naming DOCKER_HOST, and the
    listener there receives nothing (the SDK alone would have read it as tcp://, in plain)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "GPULAUNCH_"))}
    env.update(DOCKER_HOST=f"TCP://127.0.0.1:{plain_engine.port}", DOCKER_TLS_VERIFY="1")
    env.update(DOCKER_CONFIG=str(tmp_path / "none"), HOME=str(tmp_path), NO_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "gpulaunch", "ps"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x and not x.startswith("hint:")]
    assert len(lines) == 1 and "DOCKER_HOST" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert plain_engine.received == []


def test_a_context_with_tls_material_gets_tls_without_any_variable(
    certs: Certs, tmp_path: Path
) -> None:
    address: Address = resolve(_context(tmp_path, "tcp://10.0.0.2:2376", certs.folder))
    assert address.tls is not None and address.tls.verify
    assert address.tls.ca is not None and address.tls.ca.endswith("/docker/ca.pem")
    plain = resolve(_context(tmp_path / "plain", "tcp://10.0.0.2:2375", None))
    assert plain.tls is None  # the CLI's rule: no TLS files, no skip: plain


# -- every call bounded in time and size ---------------------------------------------------------


def _drip(conn: socket.socket) -> None:
    """An answer that promises 100 bytes and sends one a second (then gives up after 8)."""
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    for _ in range(8):
        time.sleep(1)
        conn.sendall(b" ")


def _endless(conn: socket.socket) -> None:
    """An answer without an end: 80 MiB of JSON-ish text, then the connection closes."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    block = b"[" + b" " * (1 << 20)
    for _ in range(80):
        conn.sendall(block)


@pytest.fixture
def unix_engine(tmp_path: Path) -> Iterator[RawEngine]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "engine.sock"))
    engine = RawEngine(sock)
    yield engine
    engine.close()


def _engine_at(engine: RawEngine, tmp_path: Path, **env: str) -> Engine:
    if engine.listener.family == socket.AF_UNIX:
        host = f"unix://{tmp_path / 'engine.sock'}"
    else:
        host = f"tcp://127.0.0.1:{engine.port}"
    return Engine({"DOCKER_HOST": host, "PATH": "", **env})


@pytest.mark.parametrize("where", ["unix", "tcp"])
def test_an_answer_that_drips_ends_at_the_deadline_of_the_whole_call(
    unix_engine: RawEngine, plain_engine: RawEngine, tmp_path: Path, where: str
) -> None:
    """GPULAUNCH_ENGINE_TIMEOUT=2 is the whole call's limit: a byte a second (each read well
    within 2 s) still ends the call at 2 s, with one line naming the wait."""
    fake = unix_engine if where == "unix" else plain_engine
    fake.behaviour["/info"] = _drip
    engine = _engine_at(fake, tmp_path, GPULAUNCH_ENGINE_TIMEOUT="2")
    engine.api()  # the ping
    start = time.monotonic()
    with pytest.raises(EngineError) as caught:
        engine.api().call("GET", "/info")
    took = time.monotonic() - start
    assert took < 2 + 1.5, took
    assert caught.value.message == (
        f"the Docker engine at {engine.host} stopped answering: no answer within 2 s"
    )
    assert "GPULAUNCH_ENGINE_TIMEOUT" in (caught.value.hint or "")


@pytest.mark.parametrize("where", ["unix", "tcp"])
def test_an_endless_answer_stops_at_the_size_bound(
    unix_engine: RawEngine, plain_engine: RawEngine, tmp_path: Path, where: str
) -> None:
    from gpulaunch.engine.api.http import BODY_LIMIT

    fake = unix_engine if where == "unix" else plain_engine
    fake.behaviour["/info"] = _endless
    engine = _engine_at(fake, tmp_path)
    with pytest.raises(EngineError) as caught:
        engine.api().call("GET", "/info")
    assert caught.value.message == (
        f"the Docker engine at {engine.host} stopped answering: an answer over {BODY_LIMIT:,} bytes"
    )


def test_the_unix_socket_is_the_only_engine_the_stdlib_client_dials(
    unix_engine: RawEngine, plain_engine: RawEngine, tmp_path: Path
) -> None:
    from gpulaunch.engine.api.http import HttpTransport
    from gpulaunch.engine.api.sdk import SdkTransport

    assert isinstance(_engine_at(unix_engine, tmp_path).api(), HttpTransport)
    assert isinstance(_engine_at(plain_engine, tmp_path).api(), SdkTransport)
