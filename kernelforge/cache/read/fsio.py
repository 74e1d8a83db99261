"""File-system primitives of the cache: atomic replace, directory fsync, the umask (writers);
reads that never open a FIFO or device, under size caps (everyone); sizes as users write them."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from kernelforge.errors import CacheError

# Attempts of `open_regular` at a path that concurrent writers keep renaming new files onto.
_OPEN_ATTEMPTS = 8


def atomic_write_text(path: Path, payload: str) -> None:
    """Write `path` atomically (temp file in the same dir, fsync, os.replace, fsync dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide the cache from other users
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def make_dirs(path: Path, mode: int = 0o755) -> None:
    """Create `path` and its missing parents, each with at most `mode` (a umask only takes bits
    away). `Path.mkdir(parents=True)` and `os.makedirs` give the parents the umask's mode, which
    may be group-writable, and the trust policy refuses a group-writable cache directory
    (cache/read/trust.py): the runtime's own records must never make the user's cache untrusted."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            pass


def current_umask() -> int:
    """The process umask, read without changing it (Linux /proc), else by a set-and-restore."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it survives a power loss (best effort off Linux)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- reading: every file the cache's tools read goes through `open_regular` ----
#
# A FIFO, socket or device planted in a cache (or a bundle, a merge source) must never make a
# command wait forever or read a device: each file is lstat'ed first (nothing that is not a
# regular file is opened at all), opened with O_NONBLOCK (a swap to a FIFO in between cannot
# block the open) and O_NOFOLLOW, and fstat'ed again before its first byte is read. Sizes are
# checked against a cap before anything is read or allocated.

ARTIFACT_LIMIT_ENV = "KERNELFORGE_MAX_ARTIFACT_BYTES"
INDEX_LIMIT_ENV = "KERNELFORGE_MAX_INDEX_BYTES"
DEFAULT_MAX_ARTIFACT_BYTES = 256 * 2**20  # per file of an entry (the largest real module is ~1 MB)
DEFAULT_MAX_INDEX_BYTES = 256 * 2**20  # an index (cache, bundle or remote) or a meta.json
MIN_LIMIT_BYTES = 2**20  # the smallest cap accepted: a real meta.json is a few KB
_CHUNK = 1 << 20


class NotRegularFile(OSError):
    """A path the cache reads is a FIFO, socket, device, directory or symlink (never opened or read)."""


class FileTooLarge(OSError):
    """A file is larger than the cap it is read under (refused before it is read)."""


class DestinationWriteError(OSError):
    """Writing the copy failed (e.g. ENOSPC), as opposed to reading the source (see `copy_regular`)."""


def file_kind(mode: int) -> str:
    """What a stat mode is, for messages: 'a regular file', 'a FIFO', 'a socket', ..."""
    import stat

    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def special_kind(mode: int) -> str | None:
    """'a FIFO', 'a socket', 'a character device' or 'a block device'; None for anything else."""
    import stat

    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return file_kind(mode)
    return None


_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
MAX_SIZE = 10**18  # 1000P: far beyond any disk; larger values are typos (and int(inf) would raise)


def parse_size(text: str) -> int:
    """'500M' -> 500_000_000, '1.5GiB' -> 1610612736, '1024' -> 1024 (ccache's units: k/M/G/T are
    powers of 1000, Ki/Mi/Gi/Ti of 1024; a trailing B is optional). ValueError when unparsable.
    The size caps below and `cache gc`/`cache limit` read sizes with it."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]i?)?[bB]?\s*", str(text), re.ASCII)
    if not m:
        raise ValueError(f"size {text!r}: expected a number (ASCII digits) with an optional unit (e.g. 500M, "
                         "2G, 1.5GiB)")
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if not value <= MAX_SIZE:
        raise ValueError(f"size {text!r}: out of range (at most {MAX_SIZE // 10**15}P)")
    return int(value)


def _limit(env: str, default: int) -> int:
    value = os.environ.get(env, "").strip()
    if not value:
        return default
    try:
        limit = parse_size(value)
    except ValueError:
        limit = 0
    if limit < MIN_LIMIT_BYTES:
        # A cap below any real metadata file would make every entry look damaged (and debris to `clean`).
        raise CacheError(f"${env}={value!r}: expected a size of at least 1MiB (e.g. 268435456, 256MiB, 1G)")
    return limit


def max_artifact_bytes() -> int:
    """The largest file of an entry any transfer reads ($KERNELFORGE_MAX_ARTIFACT_BYTES, default
    256 MiB); CacheError for an unusable value."""
    return _limit(ARTIFACT_LIMIT_ENV, DEFAULT_MAX_ARTIFACT_BYTES)


def max_index_bytes() -> int:
    """The largest index or metadata file read ($KERNELFORGE_MAX_INDEX_BYTES, default 256 MiB)."""
    return _limit(INDEX_LIMIT_ENV, DEFAULT_MAX_INDEX_BYTES)


def limits_problem() -> str | None:
    """The one-line error of an unusable $KERNELFORGE_MAX_ARTIFACT_BYTES or
    $KERNELFORGE_MAX_INDEX_BYTES (checked once when a command starts), or None."""
    try:
        max_artifact_bytes()
        max_index_bytes()
    except CacheError as exc:
        return str(exc)
    return None


def too_large(size: int, limit: int, env: str = ARTIFACT_LIMIT_ENV) -> str:
    """The one-line reason for a file of `size` bytes over `limit`."""
    return f"{size} bytes, over the limit of {limit} bytes (${env} sets it)"


def open_regular(path: str | os.PathLike[str], *, follow: bool = False,
                 limit: int | None = None, limit_env: str = ARTIFACT_LIMIT_ENV) -> tuple[int, os.stat_result]:
    """(read-only descriptor, its stat) of the regular file `path`, opened without blocking and
    (unless `follow`) without following a symlink; the caller closes it.

    Raises NotRegularFile for anything else (a FIFO is never opened), FileTooLarge above `limit`
    bytes, or the OSError of the open.

    A file atomically replaced by another between the stat and the open (an index or table that
    a concurrent writer renames into place) is opened again: the descriptor always matches the
    stat that checked it. Replaced on every attempt, it raises NotRegularFile saying so."""
    import errno
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    for _ in range(_OPEN_ATTEMPTS):
        st0 = os.stat(path) if follow else os.lstat(path)
        if not stat.S_ISREG(st0.st_mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file ({file_kind(st0.st_mode)})", str(path))
        fd = os.open(path, flags)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotRegularFile(errno.EINVAL, f"not a regular file ({file_kind(st.st_mode)})", str(path))
            if (st.st_dev, st.st_ino) != (st0.st_dev, st0.st_ino):
                os.close(fd)
                continue  # renamed over between the stat and the open: look again
            if limit is not None and st.st_size > limit:
                raise FileTooLarge(errno.EFBIG, too_large(st.st_size, limit, limit_env), str(path))
        except BaseException:
            os.close(fd)
            raise
        return fd, st
    raise NotRegularFile(errno.EAGAIN, f"replaced by another file while being opened, {_OPEN_ATTEMPTS} times",
                         str(path))


def read_regular(path: str | os.PathLike[str], limit: int | None = None, *, follow: bool = False,
                 head: bool = False, limit_env: str = INDEX_LIMIT_ENV) -> bytes:
    """The bytes of the regular file `path` (see `open_regular`), at most `limit` of them: a
    larger file raises FileTooLarge before it is read, unless `head` asks for its first bytes."""
    import errno

    limit = max_index_bytes() if limit is None else limit
    fd, _ = open_regular(path, follow=follow, limit=None if head else limit, limit_env=limit_env)
    try:
        parts = []
        want = limit + 1 - (1 if head else 0)
        while want > 0:
            chunk = os.read(fd, min(want, _CHUNK))
            if not chunk:
                break
            parts.append(chunk)
            want -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > limit:  # it grew after the check
        raise FileTooLarge(errno.EFBIG, too_large(len(data), limit, limit_env), str(path))
    return data


def hash_stream(read, write=None, *, limit: int | None = None) -> tuple[str, int]:
    """(sha256 hex digest, size) of what `read(n)` returns until it is exhausted, in 1 MiB chunks,
    each passed to `write` too; FileTooLarge as soon as more than `limit` bytes came (nothing more
    is read). Errors of `write` are raised as DestinationWriteError."""
    import errno
    import hashlib

    h = hashlib.sha256()
    size = 0
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if limit is not None and size > limit:
            raise FileTooLarge(errno.EFBIG, f"more than {limit} bytes")
        h.update(chunk)
        if write is not None:
            try:
                write(chunk)
            except OSError as exc:
                raise DestinationWriteError(exc.errno, exc.strerror, exc.filename) from None
    return h.hexdigest(), size


def copy_regular(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
                 limit: int | None = None) -> tuple[str, int]:
    """Copy the regular file `src` (see `open_regular`; not followed if a symlink) to the new file
    `dst`, hashing on the way: (sha256, size) of the bytes written. A failure to write `dst`
    (ENOSPC, ...) raises DestinationWriteError; one of `src`, its own OSError."""
    fd, _ = open_regular(src, limit=limit)
    try:
        try:
            out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            raise DestinationWriteError(exc.errno, exc.strerror, str(dst)) from None
        try:
            return hash_stream(lambda n: os.read(fd, n), lambda chunk: _write_all(out, chunk), limit=limit)
        except DestinationWriteError as exc:
            raise DestinationWriteError(exc.errno, exc.strerror, str(dst)) from None
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_failure(exc: OSError, what: str) -> str:
    """One line for a failed write of `what` (ENOSPC and EDQUOT say so plainly)."""
    import errno

    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot write {what}: no space left on the device{where}"
    return f"cannot write {what}: {exc.strerror or exc}{where}"
