"""Whole-string checks shared by the config schema and the command-line flags.

One validator per kind of value, so a flag and the config field it overrides accept exactly
the same strings. Every check raises ValueError (pydantic and the flag parsers wrap it with
the field or flag name). No heavy imports: the CLI uses this before loading pydantic.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

# What str.splitlines() splits on, plus every control/format-breaking category below.
_LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_BAD_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})
# Bidirectional controls (Unicode's Bidi_Control property, the "Trojan Source" set): the
# embeddings and overrides U+202A-U+202E, the isolates U+2066-U+2069 and the implicit marks
# ALM U+061C, LRM U+200E and RLM U+200F. Invisible, they reorder what a terminal, an editor
# or a review shows, so a value reads as something it is not; no gpulaunch value needs one.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_GPUS = 4096  # more than any machine has; stops 10**20 reaching the engine


def _refused(char: str) -> bool:
    """The one test for a character no single-line value may hold and no terminal is shown."""
    return char in _LINE_BREAKS or char in _BIDI or unicodedata.category(char) in _BAD_CATEGORIES


def shown(value: str, keep: str = "\n\t") -> str:
    """`value` safe to print on a terminal: control characters (ESC sequences, CR, C1 codes)
    and bidi overrides from labels, records or engine replies become visible escapes
    (`\\x1b`), so nobody else's text can move the cursor, retitle the window or hide a line."""
    if not any(_refused(c) for c in value):
        return value
    return "".join(c if c in keep or not _refused(c) else ascii(c)[1:-1] for c in value)


def bad_char(value: str) -> str | None:
    """A line-breaking, control or bidi character in `value`, or None.

    The first one that no value accepts comes before a newline or tab, which multi-line
    fields (build steps) allow: a caller that accepts those two can test the answer alone
    and still never miss an ESC or a bidi override further along."""
    found = None
    for char in value:
        if _refused(char):
            if char not in "\n\t":
                return char
            found = found or char
    return found


def single_line(value: str) -> str:
    """`value` unchanged, or ValueError when it has a newline, a Unicode line separator, a
    control character (tab included) or a bidi control: such a string can break a Dockerfile
    or shell line, or show a reviewer something other than what runs."""
    char = bad_char(value)
    if char is not None:
        raise ValueError(
            f"must be a single line without control characters (found U+{ord(char):04X})"
        )
    return value


def env_key(key: str) -> str:
    if not ENV_KEY.fullmatch(key):
        raise ValueError(f"{key!r} is not a valid environment variable name")
    return key


def env_item(key: str, value: str) -> tuple[str, str]:
    """One environment entry (config `env:` or `--env KEY=VALUE`)."""
    env_key(key)
    try:
        single_line(value)
    except ValueError as err:
        raise ValueError(f"{key}: value {err}") from None
    return key, value


def ascii_int(text: str) -> int | None:
    """int(text) for plain ASCII digits only ("٣" or "1_000" are not numbers here)."""
    if text and text.isascii() and text.isdigit():
        return int(text)
    return None


def split_mount(spec: str) -> tuple[str, str, bool]:
    """`host:container[:ro|rw]` -> (host, normalised absolute container path, read_only).

    The text is checked whole: no line breaks, no commas (docker's --mount is comma
    separated, so `data:/d,source=/etc` would smuggle a second source), an empty host path
    is refused (it would silently mount the project) and the container path must be
    absolute with no `..`.
    """
    single_line(spec)
    if "," in spec:
        raise ValueError(f"{spec!r}: commas are not allowed in mount paths")
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"{spec!r} is not host:/container[:ro]")
    host, target = parts[0], parts[1]
    if not host.strip():
        raise ValueError(f"{spec!r}: the host path is empty")
    if not target.startswith("/"):
        raise ValueError(f"{spec!r}: container path {target!r} must be absolute")
    pieces = target.split("/")
    if ".." in pieces:
        raise ValueError(f"{spec!r}: container path {target!r} must not contain '..'")
    norm = "/" + "/".join(p for p in pieces if p not in ("", "."))
    return host, norm, len(parts) == 3 and parts[2] == "ro"


def parse_gpus(value: object) -> int | str:
    """A GPU request: a count, "all", or a comma list of distinct indices/UUIDs/bus ids.

    Shared by `launch.gpus` and `--gpus`: ASCII digits only, no duplicates, at most MAX_GPUS.
    """
    if isinstance(value, bool):
        raise ValueError("must be a count, 'all' or a list like '0,2'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        if value > MAX_GPUS:
            raise ValueError(f"{value} is more GPUs than any machine has (at most {MAX_GPUS})")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a count, 'all' or a list like '0,2'")
    single_line(value)
    text = value.strip(" ").replace(" ", "")
    count = ascii_int(text)
    if count is not None:
        if len(text) > 1 and text.startswith("0"):  # YAML 1.1 read `022` as octal 18
            raise ValueError(f"{value!r}: a count has no leading zero (a list is '0,2')")
        return parse_gpus(count)
    if text == "all":
        return text
    items = text.split(",")
    if not all(_GPU_ID.fullmatch(item) for item in items):
        raise ValueError(f"{value!r} is not a count, 'all' or a list like '0,2'")
    for item in items:
        index = ascii_int(item)
        if index is not None and index >= MAX_GPUS:
            raise ValueError(f"GPU index {item} is out of range (at most {MAX_GPUS - 1})")
    # one device, one spelling: `00` is `0`, UUIDs ignore case, bus ids in sysfs' form
    normal = [
        str(int(i)) if i.isdigit() else normalize_bus_id(i) if ":" in i else i.lower()
        for i in items
    ]
    dupes = sorted({i for i in normal if normal.count(i) > 1})
    if dupes:
        raise ValueError(f"{value!r} names GPU {dupes[0]} twice")
    return ",".join(items)


# An index, a GPU/MIG UUID, or a PCI bus id with or without its domain (nvidia-smi writes
# 00000000:3B:00.0, sysfs 0000:3b:00.0, lspci 3b:00.0).
_GPU_ID = re.compile(
    r"[0-9]+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-fA-F-]+"
    r"|(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
)
_BUS_ID_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(text: str) -> str:
    """ "00000000:3B:00.0" (NVML), "3b:00.0" or "0000:3b:00.0" -> "0000:3b:00.0" (sysfs)."""
    m = _BUS_ID_RE.match(text.strip().lower())
    if m is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain = int(m["domain"] or "0", 16)
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"


# Kubernetes names and labels (apimachinery validation rules), shared by config and flags.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def dns_label(value: str, limit: int = 63) -> str:
    """An RFC 1123 label (a Service or Job name, a hostname part), at most `limit` characters."""
    if len(value) > limit or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS label (lowercase letters, digits and -, at most {limit})"
        )
    return value


def dns_1035(value: str, limit: int = 63) -> str:
    """An RFC 1035 label: an RFC 1123 label that starts with a letter. Kubernetes asks it of
    Service names (and of what the Job, JobSet and operator name after them)."""
    if len(value) > limit or not _DNS_1035.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS label that starts with a letter (DNS-1035: lowercase "
            f"letters, digits and -, at most {limit})"
        )
    return value


def dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a DNS subdomain name (lowercase, digits, - and .)")
    return value


def label_key(key: str) -> str:
    """A label key: optional DNS-subdomain prefix and `/`, then a name of at most 63."""
    prefix, slash, name = key.rpartition("/")
    ok = bool(_LABEL_NAME.fullmatch(name)) and len(name) <= 63
    if slash:
        ok = ok and bool(_DNS_SUBDOMAIN.fullmatch(prefix)) and len(prefix) <= 253
    if not ok:
        raise ValueError(f"{key!r} is not a valid label key (e.g. nvidia.com/gpu.product)")
    return key


def label_value(value: str) -> str:
    if (
        not isinstance(value, str)
        or len(value) > 63
        or not (value == "" or _LABEL_NAME.fullmatch(value))
    ):
        raise ValueError(f"{value!r} is not a valid label value (at most 63 of A-Z a-z 0-9 - _ .)")
    return value


_PRICE = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,6})?")


def parse_price(value: object) -> str:
    """A non-negative price as a decimal string ("2.49"); YAML gives "2.49" (no floats) or 3.
    (Here, not in config.py, so `run --price` needs no pydantic.)"""
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text is None or not _PRICE.fullmatch(text):
        raise ValueError(f"{value!r} is not a price (a number such as 2.49)")
    return text


_SIZE = re.compile(r"([0-9]+)([bkmgBKMG]?)")
SIZE_FACTORS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def docker_size(text: str) -> tuple[int, str]:
    """docker's size ("16g", "512m", "3000000") as (number, unit: "", "k", "m" or "g"): the
    one reading of `docker.shm_size` and `docker.memory` for the engine and the exports."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size like 16g")
    number, unit = match.groups()
    return int(number), unit.lower().replace("b", "")


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REPO = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9-]+)*(?::[0-9]{1,5})?"
)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class ImageRef(NamedTuple):
    """REGISTRY/PATH[:TAG][@sha256:...] split into its parts."""

    registry: str  # "" when the reference names none (Docker Hub or a local image)
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        return f"{self.registry}/{self.path}" if self.registry else self.path

    def __str__(self) -> str:
        out = self.repository + (f":{self.tag}" if self.tag else "")
        return out + (f"@{self.digest}" if self.digest else "")


def parse_ref(text: str) -> ImageRef:
    """Docker's reference grammar, the one reading of `image.base`, `launch.image`, --image
    and --push; a first part with `.` or `:` (or localhost) is a registry."""
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ValueError(f"{text!r} has an invalid digest (sha256:<64 hex>)")
    first, slash, remainder = rest.partition("/")
    registry = ""
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, rest = first, remainder
        if not _HOST.fullmatch(registry):
            raise ValueError(f"{registry!r} is not a registry host[:port]")
    path, tag = rest, ""
    if ":" in rest:
        path, _, tag = rest.rpartition(":")
        if not _TAG.fullmatch(tag):
            raise ValueError(f"{tag!r} is not a valid tag")
    if not _REPO.fullmatch(path):
        raise ValueError(f"{text!r} is not an image reference (REGISTRY/NAME[:TAG])")
    return ImageRef(registry, path, tag, digest)
