"""One masking function for everything gpulaunch shows or keeps: log lines, dry-run output,
labels and error messages.

Two kinds of secret are recognised: credentials in a URL (`scheme://user:token@host`) and
the value of a variable whose name looks secret (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`,
`*PASSWD*`, `*_KEY`, `*CREDENTIAL*`), written as `NAME=value` or `NAME: value`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MASK = "***"
_SECRET_NAME = re.compile(
    r"(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$|^KEY$|APIKEY)", re.IGNORECASE
)
# scheme://userinfo@ : everything between "//" and the last "@" before the host part.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@]+@)")
# NAME=value or NAME: value (env lines, --env flags, --build-arg, YAML-ish dumps).
# The value runs to the closing quote when the assignment or the value is quoted ('A=b c').
_NAME = r"\b[A-Za-z_][A-Za-z0-9_]*"
_SEP = r"(?:=|:[ \t]+)"
_ASSIGNMENT = re.compile(
    rf"(?P<q1>['\"])(?P<n1>{_NAME}){_SEP}[^'\"\n]*"
    rf"|(?P<n2>{_NAME}){_SEP}(?:(?P<q2>['\"])[^'\"\n]*|[^\s'\"]+)"
)


def is_secret_name(name: str) -> bool:
    """True for variable names whose values must never be shown (WANDB_API_KEY, HF_TOKEN)."""
    return bool(_SECRET_NAME.search(name))


def has_userinfo(url: str) -> bool:
    return _URL_USERINFO.search(url) is not None


def mask(text: str) -> str:
    """`text` with URL credentials and the values of secret-looking names replaced by ***."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)

    def assignment(m: re.Match[str]) -> str:
        name = m["n1"] or m["n2"]
        if not is_secret_name(name):
            return m.group(0)
        head = m.group(0)[: m.start("n1" if m["n1"] else "n2") - m.start() + len(name)]
        sep = m.group(0)[len(head) :][:1]
        sep += " " if sep == ":" else ""
        return f"{head}{sep}{m['q2'] or ''}{MASK}"

    return _ASSIGNMENT.sub(assignment, text)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """An environment for display: secret-looking names keep their name, lose their value."""
    return {k: MASK if is_secret_name(k) and v else mask(v) for k, v in env.items()}


def mask_data(data: object) -> object:
    """A JSON-like structure for display: `mask` on every string, secret-named keys blanked."""
    if isinstance(data, str):
        return mask(data)
    if isinstance(data, Mapping):
        return {
            k: MASK
            if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
            else mask_data(v)
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [mask_data(v) for v in data]
    return data
