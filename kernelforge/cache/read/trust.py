"""The trust boundary: which cache files may be read or loaded, and how they are opened.

Loading a module runs native code, so the runtime only opens files (1) named by relative
paths of plain components, (2) reached from the cache root without following any symlink
(each component opened with O_NOFOLLOW relative to its parent's descriptor), and (3) owned by
the current user or root and not writable by group or others, like ssh's StrictModes. The
ancestors of the root may be writable by others only if they are sticky (/tmp). Checksums are
computed on the very descriptor that is later loaded (see runtime/loader.py).

Shared caches (a group-writable directory, a cache owned by a service account) opt out with
KERNELFORGE_TRUST_SHARED_CACHE=1: then whoever can write the cache can run code in every
process that uses it, which is what the opt-out says.
"""
from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path

from kernelforge.errors import CacheError, UntrustedCache

TRUST_ENV = "KERNELFORGE_TRUST_SHARED_CACHE"
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


_STRUCTURAL = {"v1": {"artifacts", "runtime", "dispatch"}}


def _structural(prefix: tuple[str, ...]) -> bool:
    """Whether root/prefix is a directory no writer ever replaces (see TrustedRoot.open_dir)."""
    if len(prefix) <= 1:
        return not prefix or prefix[0] in _STRUCTURAL
    return len(prefix) == 2 and prefix[1] in _STRUCTURAL.get(prefix[0], ())


class MissingCacheFile(CacheError, FileNotFoundError):
    """A file the index names is not on disk."""


def shared_cache_trusted() -> bool:
    """Whether the ownership policy is switched off ($KERNELFORGE_TRUST_SHARED_CACHE=1)."""
    return os.environ.get(TRUST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def ownership_problem(st: os.stat_result, *, ancestor: bool = False) -> str | None:
    """Why a file or directory with this stat may not be trusted, or None if it may.

    Trusted: owned by the current user or root, and not writable by group or others (an
    ancestor directory of the cache root may be, if it is sticky, like /tmp).
    """
    if shared_cache_trusted():
        return None
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"is owned by {_owner(st.st_uid)}, not by you ({_owner(me)}) or root"
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable and not (ancestor and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit)
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted(root: Path, path: Path, problem: str) -> UntrustedCache:
    """The error for one untrusted path, naming the fix and the opt-out."""
    fix = (f"`chown -R $(id -u) {root}`" if "owned by" in problem
           else f"`kernelforge cache repair --cache {root}` (removes group/other write permission)")
    return UntrustedCache(
        f"refusing to use kernelforge cache {root}: {path} {problem}; anyone who can write it could run "
        f"code in this process. Fix: {fix}, or set {TRUST_ENV}=1 if the cache is meant to be shared "
        "with everyone who can write it")


def check_component(part: str, what: str) -> str:
    """`part` if it is a plain path component (no separators, no '.' or '..', no leading dot)."""
    if not isinstance(part, str) or not _COMPONENT.fullmatch(part):
        raise CacheError(f"{what}: {part!r} is not a plain file or directory name inside the cache")
    return part


class TrustedRoot:
    """Opens files below one cache root under the trust policy (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], *, enforce: bool = True) -> None:
        self.root = Path(root)
        self.enforce = enforce  # False: plain reads for writers and reports (still no symlinks)
        self._real: Path | None = None
        self._dirs: dict[tuple[str, ...], int] = {}  # structural directories, checked (see open_dir)
        self._dirs_lock = threading.Lock()

    def __del__(self) -> None:
        for fd in getattr(self, "_dirs", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass

    def _real_root(self) -> Path:
        """The root's real path, its ancestors checked once (the root itself is checked on each open)."""
        if self._real is None:
            real = Path(os.path.realpath(self.root))
            for anc in reversed(real.parents):
                try:
                    st = os.stat(anc)
                except OSError:
                    continue
                problem = ownership_problem(st, ancestor=True) if self.enforce else None
                if problem:
                    raise untrusted(self.root, anc, problem)
            self._real = real
        return self._real

    def open_dir(self, parts: list[str] | tuple[str, ...]) -> int:
        """A descriptor of root/parts (each component trusted, no symlink followed); caller closes it.

        Descriptors of the structural directories (the root, v1/ and its artifacts/, runtime/,
        dispatch/) are kept after their first check, so loading a module opens only its prefix
        and entry directories (docs/performance.md, `benchmarks/bench_load.py`). Those directories
        are created once and never replaced by any writer. The two-hex prefixes below artifacts/ are not kept: up to
        256 more descriptors would grow the process's descriptor table (see runtime/loader.py)."""
        parts = tuple(parts)
        with self._dirs_lock:
            depth = max((n for n in range(len(parts) + 1) if parts[:n] in self._dirs), default=-1)
            fd = os.dup(self._dirs[parts[:depth]]) if depth >= 0 else -1
        path = self._real_root().joinpath(*parts[:max(depth, 0)])
        if depth < 0:
            try:
                fd = os.open(path, _DIR_FLAGS)
            except OSError as exc:
                raise _open_error(path, exc) from None
            depth = 0
            self._check_and_keep(fd, path, ())
        try:
            for n in range(depth, len(parts)):
                part = check_component(parts[n], "cache path")
                path = path / part
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _open_error(path, exc) from None
                os.close(fd)
                fd = nfd
                self._check_and_keep(fd, path, parts[:n + 1])
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_and_keep(self, fd: int, path: Path, prefix: tuple[str, ...]) -> None:
        self._check(fd, path)
        if _structural(prefix):
            with self._dirs_lock:
                if prefix not in self._dirs:
                    self._dirs[prefix] = os.dup(fd)

    def open_file(self, parts: list[str] | tuple[str, ...]) -> int:
        """A read-only descriptor of the regular file root/parts, checked like open_dir; caller closes it."""
        *dirs, name = parts
        dfd = self.open_dir(dirs)
        try:
            return self.open_file_at(dfd, name, self._real_root().joinpath(*dirs))
        finally:
            os.close(dfd)

    def open_file_at(self, dfd: int, name: str, dir_path: Path) -> int:
        """A read-only descriptor of the regular file `name` in the trusted directory `dfd`
        (which is `dir_path`, for messages), checked like open_file; caller closes it."""
        check_component(name, "cache file")
        path = dir_path / name
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except OSError as exc:
            raise _open_error(path, exc) from None
        try:
            st = self._check(fd, path)
            if not stat.S_ISREG(st.st_mode):
                raise CacheError(f"{path} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def holds_regular_file(self, parts: list[str] | tuple[str, ...]) -> bool:
        """Whether root/parts is a regular file that the policy trusts, as is every directory down
        to it (none a symlink), checked with lstat alone: for a file that is only tested for, never
        read, where a descriptor would grow a fresh CUDA process's descriptor table (see
        runtime/loader.py). False for anything absent, unreadable or untrusted."""
        try:
            path = self._real_root()
            kinds = [stat.S_ISDIR] * len(parts) + [stat.S_ISREG]
            for part, is_kind in zip(("", *parts), kinds):
                path = path / check_component(part, "cache path") if part else path
                st = os.lstat(path)
                if not is_kind(st.st_mode) or (self.enforce and ownership_problem(st)):
                    return False
        except (OSError, CacheError):
            return False
        return True

    def read_bytes(self, parts: list[str] | tuple[str, ...]) -> bytes:
        """The content of root/parts, opened with open_file."""
        fd = self.open_file(parts)
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def _check(self, fd: int, path: Path) -> os.stat_result:
        st = os.fstat(fd)
        problem = ownership_problem(st) if self.enforce else None
        if problem:
            raise untrusted(self.root, path, problem)
        return st


def _open_error(path: Path, exc: OSError) -> CacheError:
    import errno

    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
        return UntrustedCache(f"{path} is a symlink; the cache never follows symlinks "
                              f"(run `kernelforge cache repair` to quarantine the entry)")
    if exc.errno == errno.ENOENT:
        return MissingCacheFile(f"{path} does not exist")
    return CacheError(f"{path} cannot be opened ({exc.strerror})")
