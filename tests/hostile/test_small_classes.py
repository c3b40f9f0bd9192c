"""Issue 29 §6, the smaller classes, each as a class with a table:

1. bidirectional controls are refused wherever line breaks are (one check, textcheck);
2. every `name` a Kubernetes export writes is a DNS-1035 label, and container args and env
   values reach the process as written (Kubernetes' `$(VAR)` expansion is escaped);
3. unquoted YAML env values keep the text as written (`+1`, `-0`, `.5`, dates ...);
4. a GPU list names each device once, however each was spelled (`0,00`, bus ids);
5. interactive jobs: typed keys never make the engine detach, an attach that ends anyway
   stops the job with one line, and a terminal over piped stdin is refused (`--tty`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpulaunch.textcheck import bad_char, parse_gpus, shown, single_line
from hostile.conftest import MINIMAL_CONFIG, Hostile

# ---------------------------------------------------------------------------------------------
# 1. Bidi controls: U+202A-U+202E, U+2066-U+2069 and the marks U+061C, U+200E, U+200F.

BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x061C, 0x200E, 0x200F)]
RUN = ("run", "train.py", "--dry-run")
RENDER = ("render",)
HEAD = 'version: 1\nname: hostile\nimage:\n  base: local/base:bookworm\n  python: "3.11"\n'
HEAD += "  torch: none\n"
IMAGE = "registry.example.com/ml/train@sha256:" + "ab" * 32
EXPORT = ("export", "k8s", "--image", IMAGE)


@pytest.mark.parametrize("char", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_every_bidi_control_is_refused_and_shown_escaped(char: str) -> None:
    with pytest.raises(ValueError, match=f"U\\+{ord(char):04X}"):
        single_line(f"safe{char}txt.exe")
    assert bad_char(f"a\nb{char}") == char  # a multi-line field still finds it
    assert shown(f"a{char}b") == f"a{ascii(char)[1:-1]}b"


def _u(index: int) -> str:
    """The index-th bidi control as a YAML double-quoted escape (each surface gets another)."""
    return f"\\u{ord(BIDI[index % len(BIDI)]):04x}"


def _c(index: int) -> str:
    return BIDI[index % len(BIDI)]


# (id, config text or None for the default, command, names in the error line). Every place
# that refuses a line break: config strings, the multi-line build steps, flags, --set, the
# export's SCRIPT and ARGS, and a pyproject dependency.
SURFACES: list[tuple[str, str | None, tuple[str, ...], tuple[str, ...]]] = [
    ("image-env", HEAD + f'  env:\n    A: "x{_u(0)}y"\n', RENDER, ("image.env", "A")),
    ("launch-env", MINIMAL_CONFIG + f'  env:\n    A: "x{_u(1)}y"\n', RUN, ("launch.env",)),
    ("name", MINIMAL_CONFIG.replace("hostile", f'"hostile{_u(2)}"'), RENDER, ("name",)),
    (
        "base",
        HEAD.replace("bookworm", f'bookworm{_u(3)}"').replace("base: ", 'base: "'),
        RENDER,
        ("image.base",),
    ),
    (
        "system-packages",
        HEAD + f'  system_packages: ["curl{_u(4)}"]\n',
        RENDER,
        ("image.system_packages",),
    ),
    (
        "pip-index",
        HEAD + f'  pip:\n    index_url: "https://x/{_u(5)}"\n',
        RENDER,
        ("image.pip.index_url",),
    ),
    ("build-step", HEAD + f'  run: ["echo {_u(6)}gnp.exe"]\n', RENDER, ("image.run",)),
    ("build-step-2nd-line", HEAD + f'  run: ["echo a\\necho {_u(7)}b"]\n', RENDER, ("image.run",)),
    (
        "build-step-esc-2nd-line",
        HEAD + '  run: ["echo a\\n\\u001b[2Jecho b"]\n',
        RENDER,
        ("image.run", "U+001B"),
    ),
    ("mount", MINIMAL_CONFIG + f'  mounts: [".:/data{_u(8)}"]\n', RUN, ("launch.mounts",)),
    (
        "profile-description",
        MINIMAL_CONFIG.replace("  gpus: 0\n", "  gpus: 0\n  profile: p\n")
        + f'profiles:\n  p:\n    description: "a{_u(9)}b"\n',
        RUN,
        ("profiles.p.description",),
    ),
    ("flag-env", None, (*RUN, "--env", f"A=x{_c(10)}y"), ("--env",)),
    ("flag-mount", None, (*RUN, "--mount", f".:/data{_c(11)}"), ("--mount",)),
    ("flag-nccl-ifname", None, (*RUN, "--nccl-ifname", f"eth0{_c(0)}"), ("--nccl-ifname",)),
    ("flag-profile", None, (*RUN, "--profile", f"default{_c(1)}"), ("--profile",)),
    ("flag-set", None, (*RUN, "--set", f"launch.env.A=x{_c(2)}"), ("--set",)),
    ("export-args", None, (*EXPORT, "train.py", "--", f"--out=a{_c(3)}b"), ("ARGS",)),
    ("export-script", None, (*EXPORT, f"train.py{_c(4)}"), ("SCRIPT",)),
    ("export-env", None, (*EXPORT, "--env", f"A=x{_c(5)}", "train.py"), ("--env",)),
    ("export-name", None, (*EXPORT, "--name", f"job{_c(6)}", "train.py"), ("--name",)),
]


@pytest.mark.parametrize(
    ("text", "command", "names"), [pytest.param(t, c, n, id=i) for i, t, c, n in SURFACES]
)
def test_bidi_controls_are_refused_where_line_breaks_are(
    hostile: Hostile, text: str | None, command: tuple[str, ...], names: tuple[str, ...]
) -> None:
    if text is not None:
        hostile.write_config(text)
    hostile.invoke_unchanged(*command).assert_clean_error(2, *names)


def test_bidi_in_a_pyproject_dependency_is_refused(hostile: Hostile) -> None:
    (hostile.project / "pyproject.toml").write_text(
        f'[project]\nname = "p"\nversion = "1"\ndependencies = ["numpy{_c(7)}"]\n'
    )
    hostile.write_config(HEAD + "  requirements: pyproject.toml\n")
    hostile.invoke_unchanged(*RENDER).assert_clean_error(2, "image.requirements")


# ---------------------------------------------------------------------------------------------
# 2. Kubernetes: DNS-1035 names, and text that reaches the process as written.

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
KINDS = ("job", "jobset", "pytorchjob")


def _export(hostile: Hostile, kind: str, *extra: str) -> list[dict[str, Any]]:
    outcome = hostile.invoke_unchanged(*EXPORT, "--kind", kind, "--nodes", "2", *extra)
    assert outcome.code == 0, outcome
    return [doc for doc in yaml.safe_load_all(outcome.stdout) if doc]


def _all_names(node: Any, under: str = "") -> list[str]:
    """Every `name` value in a manifest, except env variable names and label maps."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "name" and under != "env":
                found.append(value)
            elif key not in ("labels", "selector", "nodeSelector"):
                found += _all_names(value, key)
    elif isinstance(node, list):
        for item in node:
            found += _all_names(item, under)
    return found


# (config name, the name the export derives)
DERIVED = [
    ("2024-llm", "job-2024-llm"),
    ("9", "job-9"),
    ("team/trainer_v2.x", "team-trainer-v2-x"),
    ("7/x", "job-7-x"),
    ("a" * 80, "a" * 40),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("project", "derived"), DERIVED, ids=[d for _, d in DERIVED])
def test_every_exported_name_is_dns_1035(
    hostile: Hostile, kind: str, project: str, derived: str
) -> None:
    hostile.write_config(MINIMAL_CONFIG.replace("name: hostile", f"name: {json.dumps(project)}"))
    docs = _export(hostile, kind, "train.py")
    assert docs[-1]["metadata"]["name"] == derived
    names = [name for doc in docs for name in _all_names(doc)]
    assert derived in names and ("trainer" in names or "pytorch" in names), names
    for name in names:
        assert len(name) <= 63 and DNS_1035.fullmatch(name), name
    for doc in docs:
        if doc["kind"] in ("Service", "Job"):
            kubernetes_validate.validate(doc, "1.29", strict=True)


@pytest.mark.parametrize("name", ["1abc", "-a", "a-", "a_b", "Job", "a" * 41, "a.b", ""])
def test_a_name_flag_that_is_not_dns_1035_is_refused(hostile: Hostile, name: str) -> None:
    line = hostile.invoke_unchanged(*EXPORT, "--name", name, "train.py").assert_clean_error(
        2, "--name"
    )
    assert "DNS" in line or not name, line


# (path into the Job document, bad value): a name the lint must find wherever it is
LINT = [
    ("spec.template.spec.containers.0.name", "Trainer"),
    ("spec.template.spec.containers.0.ports.0.name", "1c10d"),
    ("spec.template.spec.volumes.0.name", "d_shm"),
    ("spec.template.spec.containers.0.volumeMounts.0.name", "9dshm"),
    ("metadata.name", "7job"),
]


@pytest.mark.parametrize(("path", "value"), LINT, ids=[p.split(".", 4)[-1] for p, _ in LINT])
def test_lint_checks_every_name(hostile: Hostile, path: str, value: str) -> None:
    from gpulaunch.export.lint import lint_manifests

    docs = _export(hostile, "job", "train.py")
    assert lint_manifests(docs) == []
    target: Any = docs[1]
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target[key]
    target[keys[-1]] = value
    problems = lint_manifests(docs)
    assert any(repr(value) in p and "DNS" in p for p in problems), problems


def _kubelet_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of command, args and env values (third_party/forked/golang/
    expansion): `$$` is `$`, `$(NAME)` is NAME's value when defined, anything else stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2 : close]
                    out.append(env.get(name, f"$({name})"))
                    i = close + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


DOLLARS = ["$(HOME)", "$$(HOME)", "$$", "a$b", "$", "cost=$5", "$(A)$(B)", "$(", "$(PET_NNODES)"]


@pytest.mark.parametrize("kind", KINDS)
def test_args_and_env_reach_the_process_as_written(hostile: Hostile, kind: str) -> None:
    env = "".join(f"    V{i}: {json.dumps(text)}\n" for i, text in enumerate(DOLLARS))
    hostile.write_config(MINIMAL_CONFIG + "  env:\n" + env)
    docs = _export(hostile, kind, "train.py", "--", *DOLLARS)
    defined = {"HOME": "/root", "A": "1", "B": "2", "PET_NNODES": "2"}
    containers = [spec["containers"][0] for doc in docs for spec in _pod_specs(doc)]
    assert containers
    for container in containers:
        args = [_kubelet_expand(a, defined) for a in container["args"]]
        assert args[-len(DOLLARS) :] == DOLLARS
        values = {e["name"]: e.get("value") for e in container["env"]}
        for i, text in enumerate(DOLLARS):
            assert _kubelet_expand(values[f"V{i}"], defined) == text, (text, values[f"V{i}"])


def _pod_specs(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        if "containers" in node:
            return [node]
        return [s for value in node.values() for s in _pod_specs(value)]
    if isinstance(node, list):
        return [s for value in node for s in _pod_specs(value)]
    return []


# ---------------------------------------------------------------------------------------------
# 3. YAML: an unquoted env value is the text as written.

AS_WRITTEN = ["+1", "-0", "+0", "0x10", "1e3", ".5", "-.inf", "+.5", "2024-01-01", "1_000", "07"]
AS_WRITTEN += ["2001-12-14t21:59:43.10-05:00", "1:0", "0o17", "-00", "+12"]


@pytest.mark.parametrize("text", AS_WRITTEN)
def test_an_unquoted_env_value_keeps_its_text(hostile: Hostile, text: str) -> None:
    hostile.write_config(
        HEAD + f"  env:\n    A: {text}\nlaunch:\n  gpus: 0\n  env:\n    B: {text}\n"
    )
    outcome = hostile.invoke_unchanged(*RUN, "--json")
    assert outcome.code == 0, outcome
    assert f'"B": "{text}"' in outcome.stdout, outcome.stdout
    rendered = hostile.invoke_unchanged(*RENDER)
    assert rendered.code == 0, rendered
    assert f"A={json.dumps(text)}" in rendered.stdout or f"A={text}" in rendered.stdout, (
        rendered.stdout
    )
    over = hostile.invoke_unchanged(*RUN, "--json", "--set", f"launch.env.C={text}")
    assert f'"C": "{text}"' in over.stdout, over.stdout


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("7", 7), ("-5", -5), ("4096", 4096)])
def test_canonical_decimals_are_still_integers(hostile: Hostile, text: str, value: int) -> None:
    from gpulaunch.yamlio import parse_yaml_text

    assert parse_yaml_text(f"a: {text}\n", "t.yaml") == {"a": value}


@pytest.mark.parametrize("text", ["+2", "-0", "+0"])
def test_a_number_field_refuses_signed_spellings(hostile: Hostile, text: str) -> None:
    hostile.write_config(MINIMAL_CONFIG + f"  nproc: {text}\n")
    hostile.invoke_unchanged(*RUN).assert_clean_error(2, "launch.nproc")


# ---------------------------------------------------------------------------------------------
# 4. GPU lists: one device, one entry, however it is spelled.

SAME_DEVICE = [
    "0,00",
    "1,001",
    "GPU-8f6c1e2a-0000-4b1c-9d3e-aa11bb22cc33,GPU-8F6C1E2A-0000-4B1C-9D3E-AA11BB22CC33",
    "MIG-ab12,MIG-AB12",
    "0000:3b:00.0,00000000:3B:00.0",
    "3b:00.0,0000:3b:00.0",
    "3B:00.0,00000000:3b:00.0",
    "0,0000:17:00.0,0000:17:00.0",
    "0000:3b:00.0,0000:3B:00.0",
]
DISTINCT = ["0,1", "3b:00.0,3b:00.1", "0001:3b:00.0,3b:00.0", "3b:00.0,3c:00.0", "GPU-a,GPU-b"]


@pytest.mark.parametrize("text", SAME_DEVICE)
def test_a_device_named_twice_is_refused(hostile: Hostile, text: str) -> None:
    hostile.invoke_unchanged(*RUN, "--gpus", text).assert_clean_error(2, "--gpus", "twice")
    hostile.write_config(MINIMAL_CONFIG.replace("gpus: 0", f"gpus: {json.dumps(text)}"))
    hostile.invoke_unchanged(*RUN).assert_clean_error(2, "launch.gpus", "twice")


@pytest.mark.parametrize("text", DISTINCT)
def test_distinct_devices_pass_as_written(text: str) -> None:
    assert parse_gpus(text) == text


# ---------------------------------------------------------------------------------------------
# 5. Interactive jobs: the engine's detach keys, and a terminal over piped stdin.


def _moby_escape(chunks: list[bytes], keys: list[int]) -> tuple[bytes, bool]:
    """What the engine passes to a tty job's stdin (moby/term's escapeProxy): the sequence is
    matched only on one-byte reads; a matched prefix is held, and given back on a mismatch.
    (passed bytes, detached)."""
    passed, pos = bytearray(), 0
    for chunk in chunks:
        if len(chunk) != 1 or chunk[0] != keys[pos]:
            passed += bytes(keys[:pos]) + chunk if pos else chunk
            pos = 0
            continue
        if pos == len(keys) - 1:
            return bytes(passed), True
        pos += 1
    return bytes(passed + bytes(keys[:pos])), False


def _key_bytes(spec: str) -> list[int]:
    """moby/term.ToBytes: `ctrl-@` .. `ctrl-_` are 0..31, one character is itself."""
    names = ["ctrl-@", *(f"ctrl-{c}" for c in "abcdefghijklmnopqrstuvwxyz"), "ctrl-["]
    names += ["ctrl-\\", "ctrl-]", "ctrl-^", "ctrl-_"]
    out = []
    for key in spec.split(","):
        assert key in names or len(key) == 1, key  # the engine refuses anything else
        out.append(names.index(key) if key in names else ord(key))
    return out


TYPED = [
    b"\x10\x11",  # Ctrl-P Ctrl-Q, the engine's default detach keys
    b"\x10\x10\x11\x11",
    bytes(range(32)),  # every control key once, in order
    bytes(range(31, -1, -1)),
    b"\x1d\x1e\x00\x1f\x1d\x1e\x00",  # our sequence less its last key
    b"hello\x10\x11world\r",
]


@pytest.mark.parametrize("typed", TYPED, ids=[t[:6].hex() for t in TYPED])
def test_typed_keys_reach_the_job_and_never_detach(typed: bytes) -> None:
    from gpulaunch.engine.supervise import DETACH_KEYS

    keys = _key_bytes(DETACH_KEYS)
    assert keys[:2] != [0x10, 0x11] and len(keys) >= 8
    passed, detached = _moby_escape([bytes([b]) for b in typed], keys)
    assert not detached and passed == typed
    # the engine's default, which gpulaunch replaces, detaches on the first row
    assert _moby_escape([b"\x10", b"\x11"], [0x10, 0x11])[1]


class _Attachable:
    """A created container: records the attach query; its stream ends at once (detached)."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.kills: list[str] = []
        self.exited = threading.Event()

    def attach_socket(self, params: dict[str, Any]) -> Any:
        self.params = params
        return _EndedStream()

    def wait(self) -> dict[str, int]:
        assert self.exited.wait(30), "the job was never stopped"
        return {"StatusCode": 143}

    def kill(self, signal: str) -> None:
        self.kills.append(signal)
        self.exited.set()

    def resize(self, height: int, width: int) -> None:
        pass


class _EndedStream:
    def read(self, size: int) -> bytes:
        return b""

    def sendall(self, data: bytes) -> None:
        raise OSError("closed")

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Engine:
    def __init__(self, container: _Attachable) -> None:
        self.container = container
        self.discarded: list[Any] = []

    def network_names(self) -> set[str]:
        return {"bridge"}

    def refused_ulimits(self) -> set[str]:
        return set()

    def create_container(self, body: dict[str, Any], before_start: Any = None) -> Any:
        before_start(self.container)
        return self.container

    def discard(self, container: Any) -> None:
        self.discarded.append(container)


@pytest.mark.parametrize(("stdin", "tty"), [(True, True), (True, False)], ids=["tty", "pipe"])
def test_an_attach_that_ends_before_the_job_stops_it_with_one_line(
    monkeypatch: pytest.MonkeyPatch, stdin: bool, tty: bool
) -> None:
    import io

    from gpulaunch.engine import supervise as sup
    from gpulaunch.engine.runspec import RunPlan

    monkeypatch.setattr(sup, "DETACH_GRACE_S", 0.2)
    monkeypatch.setattr(sup, "_forward_stdin", lambda *_: None)
    plan = RunPlan(
        image="img:tag",
        name="gl-fake",
        command=["cat"],
        env={},
        mounts=[],
        user="1000:1000",
        gpus=0,
        labels={"io.gpulaunch.run-id": "abc123"},
        stop_timeout=3600,
    )
    plan.stdin, plan.tty = stdin, tty
    container = _Attachable()
    warnings: list[str] = []
    if not tty:  # without a terminal the stream ends with the job: nothing to stop
        threading.Timer(1.0, container.exited.set).start()
    code = sup.supervise(
        _Engine(container),  # type: ignore[arg-type]
        plan,
        out=io.BytesIO(),  # type: ignore[arg-type]
        err=io.BytesIO(),  # type: ignore[arg-type]
        warn=warnings.append,
    )
    assert container.params["detachKeys"] == sup.DETACH_KEYS
    if tty:
        assert code == 143 and container.kills == ["SIGTERM"]
        assert len(warnings) == 1 and "detached the terminal" in warnings[0], warnings
    else:
        assert container.kills == [] and warnings == []


def _stdin_of(kind: str, tmp: Any) -> int:
    if kind == "pipe":
        read, write = os.pipe()
        os.write(write, b"data\n")
        os.close(write)
        return read
    path = tmp / "input.txt"
    path.write_bytes(b"data\n")
    return os.open(path, os.O_RDONLY)


# (interactive flag, tty flag, stdin kind, (stdin, tty) chosen or None for refused)
CHOICES = [
    (None, True, "pipe", None),
    (True, True, "pipe", None),
    (None, True, "file", None),
    (True, True, "file", None),
    (False, True, "pipe", (False, True)),  # a terminal for output only, as docker run -t
    (None, None, "pipe", (True, False)),
    (None, False, "file", (True, False)),
]


@pytest.mark.parametrize(("interactive", "tty", "kind", "chosen"), CHOICES)
def test_a_terminal_over_piped_stdin_is_refused(
    tmp_path: Any, interactive: bool | None, tty: bool | None, kind: str, chosen: Any
) -> None:
    from gpulaunch.engine.supervise import choose
    from gpulaunch.errors import ConfigError

    fd = _stdin_of(kind, tmp_path)
    try:
        if chosen is None:
            with pytest.raises(ConfigError, match=r"^--tty: stdin is not a terminal"):
                choose(interactive, tty, stdin_fd=fd, stdout_fd=fd)
        else:
            assert choose(interactive, tty, stdin_fd=fd, stdout_fd=fd) == chosen
    finally:
        os.close(fd)


def test_run_tty_with_piped_stdin_is_a_clean_error(hostile: Hostile) -> None:
    read, write = os.pipe()
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        outcome = hostile.invoke_unchanged("run", "--tty", "--", "cat")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    outcome.assert_clean_error(2, "--tty", "not a terminal")


@pytest.mark.docker
@pytest.mark.parametrize("keys", [None, "gpulaunch"], ids=["engine-default", "gpulaunch"])
def test_ctrl_p_ctrl_q_on_the_real_engine(
    monkeypatch: pytest.MonkeyPatch, keys: str | None
) -> None:
    """The engine drops a terminal's attach on Ctrl-P Ctrl-Q typed key by key, while the job
    runs on (what gpulaunch met before); with gpulaunch's attach the keys reach the job's
    terminal (it echoes Ctrl-P as ^P) and the attach stays."""
    import time
    import uuid

    from engine_env import busybox_image, require_docker

    from gpulaunch.engine import supervise as sup
    from gpulaunch.engine.docker_api import Engine
    from gpulaunch.engine.runspec import RunPlan

    require_docker()
    run_id = uuid.uuid4().hex[:12]
    plan = RunPlan(
        image=busybox_image(),
        name=f"gltest-detach-{run_id}",
        command=["sh", "-c", "cat; echo END"],
        env={},
        mounts=[],
        user="0:0",
        gpus=0,
        labels={"io.gpulaunch.run-id": run_id},
        stop_timeout=2,
    )
    plan.ulimits = {}
    plan.stdin = plan.tty = True
    engine = Engine()
    attached: dict[str, Any] = {}
    if keys is None:  # the engine's own default: an attach that names no detach keys
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        monkeypatch.setattr(sup, "_attach_socket", lambda c, _s: c.attach_socket(params=params))
    container = sup.start(engine, plan, lambda _w: None, attached)
    sock, seen, ended = attached["socket"], bytearray(), threading.Event()

    def read() -> None:
        try:
            while chunk := sock.read(4096):
                seen.extend(chunk)
        except Exception:
            pass
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        time.sleep(0.5)
        for byte in b"a\x10\x11b\r":  # typed: one byte per write, as a raw terminal sends
            with contextlib.suppress(OSError):
                sock.sendall(bytes([byte]))
            time.sleep(0.2)
        ended.wait(3)
        container.reload()
        running = container.attrs["State"]["Running"]
        if keys is None:
            assert ended.is_set() and running and b"^P" not in seen, bytes(seen)
        else:
            assert not ended.is_set() and running and b"a^Pb" in seen, bytes(seen)
    finally:
        sock.close()
        engine.discard(container)
