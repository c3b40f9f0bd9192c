"""One masking function for everything gpulaunch shows or keeps: log lines, dry-run output,
labels and error messages.

What is a secret is stated once, in `gpulaunch.secretshape`: values by their shape (URL
credentials, query tokens, bearer headers, well-known token formats), plus the value of a
variable whose name looks secret (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*_KEY`,
`*CREDENTIAL*`) where it is *assigned*:
- `NAME=value` anywhere (env lines, --env flags, --build-arg);
- `NAME: value` where a line starts with it (a YAML or header line: the value runs to the line's
  end, or to `,`/`}` in a flow mapping), and inside a line when the value is quoted or one
  word ending the line. A field path (`launch.env.HF_TOKEN: must be a single line`) or a name
  followed by prose (`key HF_TOKEN: value is empty`) is left whole: masking never mangles an
  error message; a secret value inside one is still masked by its shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpulaunch.secretshape import MASK, has_userinfo, is_secret_name, mask_shapes

__all__ = ["MASK", "has_userinfo", "is_secret_name", "mask", "mask_data", "mask_env"]

_NAME = r"\b[A-Za-z_][A-Za-z0-9_]*"
# NAME=value; the value runs to the closing quote when the assignment or the value is quoted
# ('A=b c'). A query parameter (`?token=`) is a URL's part: its shape masks it.
_ASSIGN = re.compile(
    rf"(?P<q1>['\"])(?P<n1>{_NAME})=[^'\"\n]*"
    rf"|(?<![?&])(?P<n2>{_NAME})=(?:(?P<q2>['\"])[^'\"\n]*|[^\s'\"]+)"
)
# NAME: value at the start of a line (indented, a `- ` list item, or in a `{...}` mapping).
_LINE = re.compile(
    rf"(?P<lead>(?:^|[{{,])[ \t]*(?:-[ \t]+)?)(?P<n>{_NAME})(?P<sep>:[ \t]+)"
    r"(?P<v>(?P<q>['\"])[^'\"\n]*|[^\n,}]*[^\s,}])",
    re.MULTILINE,
)
# NAME: value inside a line (a log line's `[rank0] HF_TOKEN: abc`): a quoted value, or one word
# that ends the line or a list; field paths and prose are left whole (module docstring).
_INLINE = re.compile(
    rf"(?<![.\[\]])(?P<n>{_NAME})(?P<sep>:[ \t]+)"
    r"(?:(?P<q>['\"])[^'\"\n]*|[^\s'\",;)}\]]+(?=[ \t]*(?:$|[,;)}\]])))",
    re.MULTILINE,
)


def mask(text: str) -> str:
    """`text` with secret shapes and the values assigned to secret-looking names as ***."""
    text = mask_shapes(text)

    def assignment(m: re.Match[str]) -> str:
        name = m["n1"] or m["n2"]
        if not is_secret_name(name):
            return m.group(0)
        head = m.group(0)[: m.start("n1" if m["n1"] else "n2") - m.start() + len(name)]
        return f"{head}={m['q2'] or ''}{MASK}"

    def line(m: re.Match[str]) -> str:
        if not is_secret_name(m["n"]):
            return m.group(0)
        lead = m.groupdict().get("lead") or ""
        return f"{lead}{m['n']}{m['sep']}{m['q'] or ''}{MASK}"

    return _INLINE.sub(line, _LINE.sub(line, _ASSIGN.sub(assignment, text)))


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
