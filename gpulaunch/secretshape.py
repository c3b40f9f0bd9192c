"""What a secret looks like, stated once: masking hides these shapes, and the refusals (image.env,
dependency-file indexes, every file of the build context) refuse them.

A secret is recognised by its *value*, whatever variable holds it:
- credentials in a URL: `scheme://user:password@host`, or a lone user part on an http(s) URL
  (`https://TOKEN@github.com/...`); pip's `${VAR}` references and ssh's `git@host` hold none;
- a token in a query string (`?token=`, `&access_token=`, `X-Amz-Signature=` ...);
- an HTTP `Authorization`/`Bearer` credential;
- the published formats of well-known tokens (GitHub, GitLab, Hugging Face, AWS, PyPI, Slack,
  OpenAI/Anthropic, Google, Stripe, JSON web tokens, PEM private keys).

Names still matter where a value has no shape (`HF_TOKEN=hunter2`): `is_secret_name` is the
one list of secret-looking names.

The regular expressions are stdlib only, so masking costs no import; the file scanner of the
build context (`engine/context.py`) adds detect-secrets on top of these shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

MASK = "***"
_SECRET_NAME = re.compile(
    r"(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$|^KEY$|APIKEY)", re.IGNORECASE
)
# scheme://userinfo@ : everything between "//" and the last "@" before the host part.
URL_USERINFO = re.compile(
    r"(?P<scheme>\b(?P<name>[A-Za-z][A-Za-z0-9+.-]*)://)(?P<userinfo>[^/\s@]+)@"
)
# userinfo that only references variables (pip's ${VAR}, a shell's $VAR) holds no secret
_REFERENCE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
_SSH = frozenset({"ssh", "git+ssh", "ssh+git", "sftp"})

# Each shape: its kind, literal text it cannot match without (checked first with `in`, which is
# far quicker than any pattern, so a file with none of them costs no regex), and the pattern,
# whose group `v` is the secret itself (what masking replaces).
_SHAPES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "a GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        r"(?P<v>\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,}))",
    ),
    ("a GitLab token", ("glpat-",), r"(?P<v>\bglpat-[A-Za-z0-9_-]{20,})"),
    ("a Hugging Face token", ("hf_",), r"(?P<v>\bhf_[A-Za-z0-9]{30,})"),
    ("an AWS access key", ("AKIA", "ASIA"), r"(?P<v>\b(?:AKIA|ASIA)[0-9A-Z]{16})\b"),
    ("a PyPI token", ("pypi-AgE",), r"(?P<v>\bpypi-AgE[A-Za-z0-9_-]{40,})"),
    ("a Slack token", ("xox",), r"(?P<v>\bxox[abposr]-[A-Za-z0-9-]{10,})"),
    ("an OpenAI or Anthropic key", ("sk-",), r"(?P<v>\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{32,})"),
    ("a Google API key", ("AIza",), r"(?P<v>\bAIza[0-9A-Za-z_-]{35})"),
    ("a Stripe key", ("_live_",), r"(?P<v>\b[rs]k_live_[0-9A-Za-z]{20,})"),
    ("a JSON web token", ("eyJ",), r"(?P<v>\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]{10,})"),
    ("a private key", ("PRIVATE KEY",), r"(?P<v>-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----)"),
    (
        "an Authorization header",
        ("uthorization", "UTHORIZATION"),
        r"(?i:\bAuthorization\b['\"]?\s*[:=]\s*['\"]?(?:Bearer|Basic|Token)\s+)"
        r"(?P<v>[A-Za-z0-9._~+/-]{8,}=*)",
    ),
    ("a bearer token", ("Bearer",), r"\bBearer\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"),
    (
        "a token in a URL query",
        ("=",),
        r"[?&](?i:access_token|auth|auth_token|token|api_key|apikey|api-key|key|password"
        r"|passwd|secret|client_secret|sig|signature|x-amz-signature|x-amz-credential"
        r"|x-goog-signature)=(?P<v>[^&#\s'\"{}$<>%][^&#\s'\"]*)",
    ),
)
_TOKENS = tuple((kind, needles, re.compile(pattern)) for kind, needles, pattern in _SHAPES)


def is_secret_name(name: str) -> bool:
    """True for variable names whose values must never be shown (WANDB_API_KEY, HF_TOKEN)."""
    return bool(_SECRET_NAME.search(name))


def has_userinfo(url: str) -> bool:
    """Any `user@` or `user:password@` in a URL (a dependency file's index is refused for it)."""
    return URL_USERINFO.search(url) is not None


def userinfo_is_secret(scheme: str, userinfo: str) -> bool:
    """A password that is not a variable reference, or a lone user part on a non-ssh URL (a
    token used as the user name). `ssh://git@host` names a user, not a secret."""
    user, colon, password = userinfo.partition(":")
    if colon:
        return bool(password) and not _REFERENCE.fullmatch(password) and password != MASK
    return scheme.lower() not in _SSH and not _REFERENCE.fullmatch(user) and user not in (MASK, "")


def find(text: str) -> Iterator[tuple[int, str]]:
    """(offset, kind) of each secret in `text` by shape. Each pattern runs once over the whole
    text (not line by line), so a large file costs a few passes in the regex engine."""
    if "@" in text and "://" in text:
        for m in URL_USERINFO.finditer(text):
            if userinfo_is_secret(m["name"], m["userinfo"]):
                yield m.start("userinfo"), "credentials in a URL"
    for kind, needles, pattern in _TOKENS:
        if any(needle in text for needle in needles):
            for m in pattern.finditer(text):
                if m["v"] != MASK:
                    yield m.start("v"), kind


def secret_kind(text: str) -> str | None:
    """What secret `text` holds by shape ("a GitHub token", "credentials in a URL"), or None."""
    return next((kind for _offset, kind in find(text)), None)


def mask_shapes(text: str) -> str:
    """`text` with every secret shape replaced by ***: a URL's whole userinfo (user and
    password: `https://***@host`), and the value part of each token shape."""

    def userinfo(m: re.Match[str]) -> str:
        if m["name"].lower() in _SSH and ":" not in m["userinfo"]:
            return m.group(0)  # ssh://user@host names a user
        return f"{m['scheme']}{MASK}@"

    if "@" in text:
        text = URL_USERINFO.sub(userinfo, text)
    for _kind, needles, pattern in _TOKENS:
        if any(needle in text for needle in needles):
            text = pattern.sub(_masked_group, text)
    return text


def _masked_group(m: re.Match[str]) -> str:
    start, end = m.span("v")
    whole = m.group(0)
    return whole[: start - m.start()] + MASK + whole[end - m.start() :]
