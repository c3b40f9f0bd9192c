"""The one writer: every file gpulaunch writes goes through here.

A project folder is hostile ground: any name in it may be a planted symlink pointing out of
the project, a FIFO or a device. So paths below `root` are walked with directory file
descriptors and O_NOFOLLOW (a symlinked parent such as `.gpulaunch -> /tmp/x` is refused,
not followed), the final name is checked with lstat and never replaced unless it is a
regular file, and whole files are written to a temp file in the same folder and renamed
over the target (rename replaces the name; it never writes through a link).
Streaming files (build logs) are created new with O_EXCL|O_NOFOLLOW.
Files read from such ground (and files gpulaunch reads back) are opened by `open_regular`:
never through a link, never a FIFO or device.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from gpulaunch.errors import ConfigError, FileExistsRefusal, GpulaunchError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(ConfigError):
    """A path gpulaunch must not write: a symlink, a non-regular file, outside its root."""


class DiskFull(GpulaunchError):
    """The disk (or the user's quota) is full: not bad input (exit 1, not 2)."""


def _cannot_write(shown: Path, err: OSError, what: str = "cannot write") -> GpulaunchError:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"{shown}: {what}: {err.strerror} (the disk or quota is full)")
    return ConfigError(f"{shown}: {what}: {err.strerror}")


def is_stdout(output: str) -> bool:
    """`-o -`, `-o /dev/stdout` and `-o /dev/fd/1` all mean standard output."""
    return output in ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _split(path: Path, root: Path | None) -> tuple[Path, list[str], str]:
    """(folder opened as-is, names below it walked without following links, final name)."""
    path = Path(os.path.abspath(path))
    if root is None:
        return path.parent, [], path.name
    root = Path(os.path.abspath(root))
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise UnsafePath(f"{path}: is outside {root}") from None
    parts = list(rel.parts)
    if not parts or ".." in parts:
        raise UnsafePath(f"{path}: is not a file inside {root}")
    return root, parts[:-1], parts[-1]


def _open_dir(base: Path, names: list[str], create: bool, shown: Path) -> int:
    """An fd for base/names..., each name opened with O_NOFOLLOW (created when `create`)."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise _cannot_write(shown, err, f"cannot open {base}") from None
    walked = base
    try:
        for name in names:
            walked = walked / name
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            kind = "a symbolic link" if _is_link(walked) else "not a folder"
            raise UnsafePath(
                f"{shown}: {walked} is {kind}; gpulaunch does not write through it"
            ) from None
        raise _cannot_write(shown, err) from None
    return fd


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(path.lstat().st_mode)
    except OSError:
        return False


def _check_target(fd: int, name: str, shown: Path, force: bool) -> None:
    try:
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(f"{shown}: is a symbolic link; gpulaunch does not write through it")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"{shown}: is not a regular file; refusing to replace it")
    if not force:
        raise FileExistsRefusal(f"{shown}: already exists; use --force to overwrite")


def write_file(
    path: Path,
    content: str | bytes,
    *,
    root: Path | None = None,
    force: bool = False,
    mode: int = 0o644,
) -> None:
    """Write a whole file atomically (temp + rename) without following any link below `root`.

    `root` is the folder gpulaunch trusts (the project); folders between it and the file are
    created as needed. Without `root` only the final name is checked.
    """
    shown = Path(path)
    base, names, name = _split(shown, root)
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd = _open_dir(base, names, True, shown)
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    try:
        _check_target(fd, name, shown, force)
        try:
            out = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600, dir_fd=fd,
            )  # fmt: skip
        except OSError as err:
            raise _cannot_write(shown, err) from None
        try:
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            if isinstance(err, IsADirectoryError):
                raise UnsafePath(f"{shown}: is a folder; refusing to replace it") from None
            if isinstance(err, OSError):
                raise _cannot_write(shown, err) from None
            raise
    finally:
        os.close(fd)


def make_dirs(path: Path, *, root: Path) -> None:
    """Create `path` (and folders above it up to `root`) without following links."""
    shown = Path(path)
    base, names, name = _split(shown, root)
    os.close(_open_dir(base, [*names, name], True, shown))


@contextlib.contextmanager
def open_stream(path: Path, *, root: Path, append: bool = False) -> Iterator[TextIO]:
    """A text file for streaming (a log, a record): without `append` it is created new
    (O_EXCL); with `append` an existing regular file is extended. Never through a link,
    never a FIFO or device (opened non-blocking and checked before the first write)."""
    shown = Path(path)
    base, names, name = _split(shown, root)
    fd = _open_dir(base, names, True, shown)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    flags |= os.O_APPEND if append else os.O_EXCL
    try:
        try:
            out = os.open(name, flags, 0o644, dir_fd=fd)
        except FileExistsError:
            raise UnsafePath(f"{shown}: already exists; refusing to reuse it") from None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UnsafePath(
                    f"{shown}: is a symbolic link; gpulaunch does not write through it"
                ) from None
            if err.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without reader, a folder
                raise UnsafePath(f"{shown}: is not a regular file; refusing it") from None
            raise _cannot_write(shown, err) from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise UnsafePath(f"{shown}: is not a regular file; refusing to write to it")
    os.set_blocking(out, True)
    with os.fdopen(out, "w", encoding="utf-8", errors="replace", newline="\n") as fh:
        yield fh


def identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """A file as every cache keys it by its stat: device, inode, size, mtime and ctime in ns.
    A file replaced by rename with the same size and mtime (cp -p, rsync -t, an archive, an
    install that keeps a wheel's times) is another inode; `touch -r` after an edit, or a
    rewrite in place, still moves the ctime, which no one sets back."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# -- caches: speed only, never trusted --------------------------------------------------
def _xdg(variable: str, *default: str) -> Path:
    """$variable/gpulaunch, else ~/default/gpulaunch (a relative value is ignored, as XDG
    says)."""
    value = os.environ.get(variable, "")
    return (Path(value) if os.path.isabs(value) else Path.home().joinpath(*default)) / "gpulaunch"


def state_dir() -> Path:
    """$GPULAUNCH_STATE_DIR, else $XDG_STATE_HOME/gpulaunch, else ~/.local/state/gpulaunch:
    the record key lives here; no job's mount may reach it (launch/exposure.py)."""
    value = os.environ.get("GPULAUNCH_STATE_DIR", "")
    return Path(value) if os.path.isabs(value) else _xdg("XDG_STATE_HOME", ".local", "state")


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/gpulaunch, else ~/.cache/gpulaunch (the XDG default)."""
    return _xdg("XDG_CACHE_HOME", ".cache")


def cache_root() -> Path:
    """The folder a user-cache write walks from: the nearest existing folder above
    `cache_dir()` ($XDG_CACHE_HOME may not exist yet), so the writer makes each folder below
    it without following a link."""
    root = cache_dir().parent
    while not root.is_dir() and root != root.parent:
        root = root.parent
    return root


class NotRegular(ValueError):
    """A name that holds no regular file to read: a symbolic link (`link`), a folder, a FIFO
    or a device. Its text is the reason: "is a symbolic link" or "is not a regular file"."""

    def __init__(self, *, link: bool) -> None:
        super().__init__("is a symbolic link" if link else "is not a regular file")
        self.link = link


def open_regular(
    path: Path, *, dir_fd: int | None = None, follow: bool = False
) -> tuple[int, os.stat_result]:
    """A read-only descriptor on a regular file, and its stat: the one way gpulaunch opens a
    file to read it (`dir_fd`: the folder `path` is relative to, from `open_dir`).

    Opened non-blocking (a planted FIFO never hangs a command), without following a link
    unless `follow` (a name the user gave), and judged by the open descriptor, so nothing can
    be swapped in between the check and the read. FileNotFoundError when there is none;
    NotRegular for a link or anything but a regular file; OSError (the OS's reason) else.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegular(link=True) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(link=False)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_dir(base: Path, names: Iterable[str]) -> int | None:
    """The reader's walk: a descriptor for the folder base/names..., each name below `base`
    opened without following a link (as the writer walks it); None when one is missing, a
    link, not a folder or cannot be opened (nothing is created)."""
    try:
        return _open_dir(base, list(names), False, base)
    except GpulaunchError:
        return None


def read_back(path: Path, limit: int, dir_fd: int | None = None, *, follow: bool = False) -> bytes:
    """The bytes of a file gpulaunch wrote and now reads back (a record, a cache, a log), or
    of a project file it reads as untrusted input, opened by `open_regular`.

    FileNotFoundError when there is none; ValueError saying why for anything `open_regular`
    refuses or anything over `limit` bytes.
    """
    try:
        fd, _ = open_regular(path, dir_fd=dir_fd, follow=follow)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise ValueError(f"cannot be read: {err.strerror}") from None
    if len(raw) > limit:
        raise ValueError(f"is larger than {limit} bytes")
    return raw


def read_json_back(path: Path, limit: int) -> object:
    """`read_back` parsed as JSON; ValueError (why) for text that is not JSON, not UTF-8, or
    nested too deep for the parser."""
    import json

    raw = read_back(path, limit)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    except RecursionError:
        raise ValueError("is nested too deep to be one gpulaunch wrote") from None
    except ValueError as err:
        raise ValueError(f"is not valid JSON ({err})") from None


def read_cache(path: Path) -> object:
    """A cache file's JSON (at most 4 MiB), or None when it is missing or anything
    `read_json_back` refuses: a cache only saves work, so any doubt means recomputing. The
    caller still checks the shape of what it gets."""
    try:
        return read_json_back(path, 4 * 1024 * 1024)
    except (OSError, ValueError):
        return None


def write_cache(path: Path, data: object, *, root: Path) -> None:
    """Write a cache file through the safe writer; a failure is ignored (the next run
    recomputes). Never called by --dry-run."""
    import json

    with contextlib.suppress(ConfigError, DiskFull, OSError, ValueError, TypeError):
        write_file(path, json.dumps(data, sort_keys=True), root=root, force=True, mode=0o600)
