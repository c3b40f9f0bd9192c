"""Run records are sealed: an HMAC-SHA256 over the record, keyed by a secret kept outside
every project, so a record a job (or anyone who can write the project) forged or edited is
not read back as one gpulaunch wrote.

Why a seal and not only a read-only folder: the project is mounted read-write at /workspace,
and a `--no-container` job, a co-worker's checkout or a copied tree can all write
`.gpulaunch/runs/`. The key is `$GPULAUNCH_STATE_DIR/record-key` (default
`$XDG_STATE_HOME/gpulaunch`, else `~/.local/state/gpulaunch`), 32 random bytes, mode 0600,
made by the first record written. It is never mounted into a container (unless you mount
your home folder, which `run` warns about). A job that runs on the host as you can read it:
such a job can already do anything you can, so it gains nothing by forging a record.

Records from another user or machine (another key) are not read: history skips them with a
warning and rerun refuses them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

SEAL_FIELD = "seal"
KEY_NAME = "record-key"
_KEY_BYTES = 32


def state_dir() -> Path:
    """$GPULAUNCH_STATE_DIR, else $XDG_STATE_HOME/gpulaunch, else ~/.local/state/gpulaunch."""
    value = os.environ.get("GPULAUNCH_STATE_DIR", "")
    if os.path.isabs(value):
        return Path(value)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "gpulaunch"


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(_KEY_BYTES + 1)
    return data if len(data) == _KEY_BYTES else None


def record_key(create: bool) -> bytes | None:
    """This user's record key; made (0600, through the one writer) when `create` and missing."""
    folder = state_dir()
    path = folder / KEY_NAME
    key = _read_key(path)
    if key is not None or not create:
        return key
    from gpulaunch.fsio import write_file

    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        from gpulaunch.errors import ConfigError

        raise ConfigError(f"{folder}: cannot make the key's folder: {err.strerror}") from None
    write_file(path, os.urandom(_KEY_BYTES), root=folder, mode=0o600)
    return _read_key(path)


def _digest(record: dict[str, Any], key: bytes) -> str:
    body = {k: v for k, v in record.items() if k != SEAL_FIELD}
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return "hmac-sha256:" + hmac.new(key, text.encode("ascii"), hashlib.sha256).hexdigest()


def seal(record: dict[str, Any]) -> dict[str, Any]:
    """`record` with its seal (the key is made on first use); GpulaunchError when it cannot be."""
    key = record_key(create=True)
    if key is None:
        from gpulaunch.errors import ConfigError

        raise ConfigError(f"{state_dir() / KEY_NAME}: cannot read the record key")
    return {**record, SEAL_FIELD: _digest(record, key)}


def check(record: dict[str, Any]) -> None:
    """ValueError unless `record` carries this user's seal over exactly its content; the seal
    is then taken off (readers see the record as it was written)."""
    claimed = record.get(SEAL_FIELD)
    if not isinstance(claimed, str):
        raise ValueError("not sealed by gpulaunch (no seal: written by hand or by a job)")
    key = record_key(create=False)
    if key is None or not hmac.compare_digest(claimed, _digest(record, key)):
        raise ValueError(
            "its seal does not match (edited, written by a job, or sealed by another "
            "user's or machine's gpulaunch)"
        )
    del record[SEAL_FIELD]
