"""Hostile secrets on their way into an image: none is baked by default.

Three sources: `image.env` (ENV is in every layer and `docker history`), a credential in a
requirements or pyproject URL (the file is copied into the image with the project), and
credential files in the project tree (`COPY . /workspace`). The first two are refused (exit
2, one line naming the field or the file:line, the token never printed, nothing written); the
third is left out of the build context at any depth; `image.ca_cert` must be a certificate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulaunch.image.build import context_entries
from hostile.conftest import MINIMAL_CONFIG, Hostile

TOKEN = "tok3nSECRETvalue42"
COMMANDS = [("render",), ("build", "--dry-run"), ("run", "--dry-run", "train.py")]


def _with_image(extra: str) -> str:
    return MINIMAL_CONFIG.replace("launch:\n", extra + "launch:\n")


def _refused(hostile: Hostile, command: tuple[str, ...], *names: str) -> None:
    outcome = hostile.invoke_unchanged(*command)
    outcome.assert_clean_error(2, *names)
    assert TOKEN not in outcome.stdout + outcome.stderr


# -- image.env: a secret-looking name or a URL credential is refused --------------------------
ENV_CASES = [
    ("hf-token", "HF_TOKEN", TOKEN),
    ("lower-case", "hf_token", TOKEN),
    ("key-in-the-middle", "AWS_ACCESS_KEY_ID", TOKEN),
    ("api-key", "WANDB_API_KEY", TOKEN),
    ("secret", "AWS_SECRET_ACCESS_KEY", TOKEN),
    ("password", "DB_PASSWORD", TOKEN),
    ("url-credential", "PIP_INDEX_URL", f"https://user:{TOKEN}@pypi.example/simple"),
    ("url-token-only", "MIRROR", f"https://{TOKEN}@example.com/x"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(("name", "value"), [pytest.param(n, v, id=i) for i, n, v in ENV_CASES])
def test_a_secret_in_image_env_is_refused(
    hostile: Hostile, command: tuple[str, ...], name: str, value: str
) -> None:
    hostile.write_config(_with_image(f"  env:\n    {name}: {json.dumps(value)}\n"))
    _refused(hostile, command, f"image.env.{name}", "launch.env")


def test_a_plain_image_env_is_kept(hostile: Hostile) -> None:
    hostile.write_config(_with_image("  env:\n    OMP_NUM_THREADS: '4'\n"))
    outcome = hostile.invoke_unchanged("render")
    assert outcome.code == 0, outcome.stderr
    assert "OMP_NUM_THREADS" in outcome.stdout


# -- a credential in a requirements/pyproject URL: the file would be copied into the image ----
CRED = f"https://u:{TOKEN}@pkgs.example"  # a URL with a credential
REQ = "requirements.txt"
WHEEL = "six-1.0-py3-none-any.whl"
PYPROJECT = '[project]\nname = "x"\nversion = "1"\ndependencies = ["six @ {url}"]\n'
REQ_CASES = [
    ("extra-index", REQ, f"--extra-index-url {CRED}/simple\nsix\n", f"{REQ}:1"),
    ("extra-index-equals", REQ, f"six\n--extra-index-url={CRED}/simple\n", f"{REQ}:2"),
    ("index-short", REQ, f"-i https://{TOKEN}@h/simple\n", f"{REQ}:1"),
    ("find-links", REQ, f"-f {CRED}/wheels\n", f"{REQ}:1"),
    ("direct-url", REQ, f"six @ {CRED}/{WHEEL}\n", f"{REQ}:1"),
    ("vcs", REQ, f"git+https://{TOKEN}@github.com/o/r.git#egg=r\n", f"{REQ}:1"),
    ("continued-line", REQ, f"six \\\n  --extra-index-url {CRED}/s\n", f"{REQ}:1"),
    ("included-file", REQ, "-r sub/more.txt\n", "sub/more.txt:2"),
    ("pyproject", "pyproject.toml", PYPROJECT.format(url=f"{CRED}/{WHEEL}"), "pyproject.toml"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    ("entry", "text", "where"), [pytest.param(e, t, w, id=i) for i, e, t, w in REQ_CASES]
)
def test_a_credential_in_a_requirements_url_is_refused(
    hostile: Hostile, command: tuple[str, ...], entry: str, text: str, where: str
) -> None:
    (hostile.project / entry).write_text(text)
    (hostile.project / "sub").mkdir()
    (hostile.project / "sub" / "more.txt").write_text(
        f"six\n--extra-index-url https://u:{TOKEN}@h/simple\n"
    )
    hostile.write_config(_with_image(f"  requirements: {entry}\n"))
    _refused(hostile, command, "image.requirements", where, "credential")


def test_pip_env_references_in_a_url_hold_no_secret(hostile: Hostile) -> None:
    (hostile.project / "requirements.txt").write_text(
        "--extra-index-url https://${PIP_USER}:${PIP_TOKEN}@pkgs.example/simple\nsix\n"
    )
    hostile.write_config(_with_image("  requirements: requirements.txt\n"))
    outcome = hostile.invoke_unchanged("render")
    assert outcome.code == 0, outcome.stderr


# -- ca_cert: a PEM certificate, never a private key -------------------------------------------
def _pem(kind: str) -> str:
    return f"-----BEGIN {kind}-----\nMIIB\n-----END {kind}-----\n"


_CERT = _pem("CERTIFICATE")
CERT_CASES = [
    ("private-key", _pem("PRIVATE KEY"), "private key"),
    ("rsa-key", _pem("RSA PRIVATE KEY"), "private key"),
    ("ec-key", _pem("EC PRIVATE KEY"), "private key"),
    ("cert-and-key", _CERT + _pem("ENCRYPTED PRIVATE KEY"), "private key"),
    ("empty", "", "not a PEM certificate"),
    ("text", "hello\n", "not a PEM certificate"),
    ("public-key", _pem("PUBLIC KEY"), "not a PEM certificate"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize(("text", "names"), [pytest.param(t, n, id=i) for i, t, n in CERT_CASES])
def test_ca_cert_must_be_a_certificate(
    hostile: Hostile, command: tuple[str, ...], text: str, names: str
) -> None:
    (hostile.project / "corp-ca.pem").write_text(text)
    hostile.write_config(_with_image("  ca_cert: corp-ca.pem\n"))
    hostile.invoke_unchanged(*command).assert_clean_error(2, "image.ca_cert", names)


def test_a_certificate_bundle_is_accepted(hostile: Hostile) -> None:
    (hostile.project / "corp-ca.pem").write_text(_CERT + _CERT)
    hostile.write_config(_with_image("  ca_cert: corp-ca.pem\n"))
    assert hostile.invoke_unchanged("render").code == 0


# -- credential files are never in the build context, at any depth -----------------------------
SECRET_PATHS = [
    "server.key",
    "deep/er/server.key",
    "deep/tls.pem",
    "sub/.aws/credentials",
    ".aws/config",
    "sub/.netrc",
    "_netrc",
    "sub/.docker/config.json",
    "sub/.pypirc",
    ".pypirc",
    "sub/.git-credentials",
    "sub/.ssh/id_rsa",
    "sub/id_ed25519",
]
IGNORES = ["", "*\n!sub\n!deep\n!.aws\n!_netrc\n!.pypirc\n!server.key\n", "!**\n"]


@pytest.mark.parametrize("ignore", IGNORES, ids=["none", "allow-list", "re-include-all"])
def test_credential_files_never_reach_the_context(tmp_path: Path, ignore: str) -> None:
    for rel in [*SECRET_PATHS, "sub/train.py", "ca/corp.pem"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(TOKEN)
    rels = {e.rel for e in context_entries(tmp_path, ignore, ("ca/corp.pem",))}
    assert not rels & set(SECRET_PATHS)
    assert "ca/corp.pem" in rels  # the configured ca_cert is the one .pem sent
    assert "sub/train.py" in rels or ignore.startswith("*")


def test_a_config_given_with_config_is_never_sent(hostile: Hostile) -> None:
    conf = hostile.project / "conf" / "prod.yaml"
    conf.parent.mkdir()
    conf.write_text(MINIMAL_CONFIG)
    before = hostile.invoke_unchanged("build", "--dry-run", "--json", "--config", str(conf))
    assert before.code == 0, before.stderr
    conf.write_text(MINIMAL_CONFIG + "# edited\n")
    after = hostile.invoke_unchanged("build", "--dry-run", "--json", "--config", str(conf))
    assert json.loads(after.stdout)["tag"] == json.loads(before.stdout)["tag"]


def test_build_dry_run_shows_where_the_secret_really_comes_from(hostile: Hostile) -> None:
    """The dry-run line names the secret file where a build writes it (its private temp
    folder), not a path relative to wherever the line is pasted; the value stays masked."""
    import tempfile

    (hostile.project / "requirements.txt").write_text("six\n")
    extra = f"https://u:{TOKEN}@pkgs.example/simple"
    hostile.write_config(
        _with_image(f"  requirements: requirements.txt\n  pip: {{extra_index_urls: [{extra}]}}\n")
    )
    outcome = hostile.invoke_unchanged("build", "--dry-run", "--builder", "buildkit")
    assert outcome.code == 0, outcome.stderr
    assert TOKEN not in outcome.stdout + outcome.stderr
    folder = Path(tempfile.gettempdir()) / "gpulaunch-build-XXXXXXXX"
    assert f"--secret id=gl_pip_extra_index_urls,src={folder}/gl_pip_extra_index_urls" in (
        outcome.stdout
    )
    assert f"# each --secret src is a link in {folder}" in outcome.stdout
