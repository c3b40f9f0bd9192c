"""Run records are sealed: an HMAC-SHA256 over the record, keyed by a secret kept outside
every project, so a record a job (or anyone who can write the project) forged or edited is
not read back as one gpulaunch wrote.

Why a seal as well as the mask: a container job never sees `.gpulaunch/` (launch/exposure.py
lays an empty read-only tmpfs over it), but a `--no-container` job, a co-worker's checkout, a
cloned or copied tree can all write `.gpulaunch/runs/`. The key is
`$GPULAUNCH_STATE_DIR/record-key` (default `$XDG_STATE_HOME/gpulaunch`, else
`~/.local/state/gpulaunch`), 32 random bytes, mode 0600, made by the first record written;
a key that is a link, not a regular file, not yours, readable by others or of the wrong
length is refused (exit 2), never used. No container mount may reach it (`run` refuses one
that would, unless --allow-unsafe-mounts). A job that runs on the host as you can read it:
such a job can already do anything you can, so it gains nothing by forging a record.

Records from another user or machine (another key) are not read: history skips them with a
warning and rerun refuses them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

from gpulaunch.errors import ConfigError
from gpulaunch.fsio import NotRegular, open_regular, state_dir, write_file

SEAL_FIELD = "seal"
KEY_NAME = "record-key"
_KEY_BYTES = 32


def _read_key(path: Path) -> bytes | None:
    """The key's 32 bytes; None when there is no key yet. ConfigError for anything but a key
    only this user can read (a key an attacker planted or could read is no key at all)."""
    try:
        fd, info = open_regular(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigError(
            f"{path}: the record key cannot be read: {err.strerror}; {_FIX}"
        ) from None
    except NotRegular as err:
        raise ConfigError(f"{path}: the record key {err}; {_FIX}") from None
    try:
        if info.st_uid != os.geteuid():
            why = f"belongs to uid {info.st_uid}, not to you"
        elif stat.S_IMODE(info.st_mode) & 0o077:
            why = f"has mode {stat.S_IMODE(info.st_mode):04o}, not 0600"
        else:
            data = os.read(fd, _KEY_BYTES + 1)
            why = "" if len(data) == _KEY_BYTES else f"holds {len(data)} bytes, not {_KEY_BYTES}"
    finally:
        os.close(fd)
    if why:
        raise ConfigError(f"{path}: the record key {why}; {_FIX}")
    return data


_FIX = "remove it (gpulaunch makes a new one; records sealed with the old key are then skipped)"


def record_key(create: bool) -> bytes | None:
    """This user's record key; made (0600, through the one writer) when `create` and missing."""
    folder = state_dir()
    path = folder / KEY_NAME
    key = _read_key(path)
    if key is not None or not create:
        return key
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
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
