"""The cache's one storage interface and its local-filesystem implementation.

Publishing follows Triton's cache: build into a private staging dir, `os.replace` it into place,
and record the key in index.json LAST. The index is the commit marker, so a crash at any point
leaves either a complete entry or an orphan directory that `clean` removes, never a half entry.
Lock order is always key lock, then index lock.

Transfers publish many entries in a row (`import`, `pull`, `merge`): inside `publishing_batch()`
each entry is moved into place as above, but the index (and its dispatch views, rewritten whole)
is written once per `BATCH_INDEX_EVERY` entries and at the end, not once per entry: rewriting
the whole index per entry makes importing a bundle quadratic in its size (docs/performance.md).
A crash inside a batch leaves at most that many intact entries
unindexed: `kernelforge build` re-indexes them, `kernelforge cache repair` too.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Protocol

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import NotRegularFile, current_umask, fsync_dir, read_regular
from kernelforge.cache.read.index import read_index_checked, write_index
from kernelforge.cache.read.integrity import file_problems, sha256_file  # noqa: F401  (sha256_file: re-exported)
from kernelforge.cache.read.layout import META_NAME, Layout, check_key, check_kind
from kernelforge.cache.read.trust import TrustedRoot
from kernelforge.cache.read.views import DispatchViews
from kernelforge.errors import CacheError

if TYPE_CHECKING:
    from filelock import FileLock

BuildFn = Callable[[Path], Mapping[str, Any]]

# A staging dir from another host cannot be checked for a live owner; after this long it is stale.
FOREIGN_TMP_MAX_AGE_S = 24 * 3600
_HOST = "".join(c if c.isalnum() else "_" for c in socket.gethostname()) or "host"
BATCH_INDEX_EVERY = 128  # entries published between two index writes inside `publishing_batch`


class Store(Protocol):
    """What callers (build driver, runtime, CLI) may use; a remote or read-only layer implements the same."""

    root: Path

    def index(self, *, fresh: bool = False) -> dict[str, Entry]: ...
    def get(self, key: str, *, fresh: bool = False) -> Entry | None: ...
    def entry_dir(self, entry: Entry) -> Path: ...
    def iter_entries(self) -> Iterator[Entry]: ...
    def get_or_build(self, key: str, build: BuildFn) -> tuple[Entry, bool]: ...
    def refresh_views(self) -> bool: ...
    def remove(self, keys: Iterable[str]) -> int: ...
    def orphans(self) -> list[Path]: ...
    def unindexed(self) -> list[tuple[Path, Entry | None]]: ...
    def delete_orphans(self, paths: Iterable[Path], *, unindexed_entries: bool = False) -> list[Path]: ...
    def quarantine(self, path: Path, reason: str) -> Path: ...
    def writable_problem(self) -> str | None: ...


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tmp_dir_is_stale(path: Path) -> bool:
    """Whether a staging/trash dir's owner is gone: same host and dead pid, or a foreign dir older than a day."""
    try:
        _, rest = path.name.split("-", 1)
        host, pid_text, _ = rest.rsplit("-", 2)
        pid = int(pid_text)
    except ValueError:
        host, pid = "", -1
    if host == _HOST and pid > 0:
        return pid != os.getpid() and not _pid_alive(pid)
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    return age > FOREIGN_TMP_MAX_AGE_S


class CacheStore:
    """A cache rooted at a local directory (see read/layout.py for what goes where)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.layout = Layout(self.root)
        self._memo: tuple[tuple[int, ...], dict[str, Entry]] | None = None
        self._pending: dict[str, Entry] | None = None  # published, not yet indexed (inside a batch)

    def __repr__(self) -> str:
        return f"CacheStore({str(self.root)!r})"

    # ---- reading (never creates anything, so it works on a read-only root) ----

    def _index_signature(self) -> tuple[int, ...] | None:
        try:
            st = self.layout.index.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def index(self, *, fresh: bool = False) -> dict[str, Entry]:
        """key -> Entry from index.json; missing/corrupt index -> {} (with a warning), bad entries skipped.
        Inside a `publishing_batch`, the entries it has moved into place but not yet indexed too.

        Parsed indexes are reused while index.json's inode/size/times are unchanged (every write
        replaces the file), so per-key `get` calls stay cheap; `fresh=True` always re-reads, and is
        what every decision taken under a lock uses.
        """
        signature = self._index_signature()
        if fresh or signature is None or self._memo is None or self._memo[0] != signature:
            entries = self._parse_index(signature)
        else:
            entries = self._memo[1]
        return {**entries, **self._pending} if self._pending else dict(entries)

    def _parse_index(self, signature: tuple[int, ...] | None) -> dict[str, Entry]:
        """Read and parse index.json (remembered under `signature`, taken before the read)."""
        raw, problem = read_index_checked(self.layout.index)
        if problem:
            warnings.warn(problem, RuntimeWarning, stacklevel=3)
        entries: dict[str, Entry] = {}
        for key, data in raw.items():
            try:
                entry = Entry.from_json(data)
                if entry.key != key:
                    raise CacheError(f"indexed under {key!r} but names itself {entry.key!r}")
                self.layout.resolve(entry.path)
            except (CacheError, TypeError) as exc:
                warnings.warn(f"kernelforge cache: skipping malformed index entry {key!r}: {exc}",
                              RuntimeWarning, stacklevel=3)
                continue
            entries[key] = entry
        # The signature was taken before the read: if the file changed in between, the next call re-reads.
        if problem is None and signature is not None:
            self._memo = (signature, entries)
        return entries

    def get(self, key: str, *, fresh: bool = False) -> Entry | None:
        """The entry for `key` if it is in the index and its directory exists, else None."""
        entry = self.index(fresh=fresh).get(key)
        if entry is None or not self.entry_dir(entry).is_dir():
            return None
        return entry

    def entry_dir(self, entry: Entry) -> Path:
        """Absolute directory of an entry."""
        return self.layout.resolve(entry.path)

    def iter_entries(self) -> Iterator[Entry]:
        """Indexed entries, sorted by kind, op, name, arch, key."""
        yield from sorted(self.index().values(), key=lambda e: (e.kind, e.op, e.name, e.arch, e.key))

    def unindexed(self) -> list[tuple[Path, Entry | None]]:
        """Entry-shaped directories absent from the index, each with the Entry its meta.json
        records (None: no usable meta.json naming this directory's key)."""
        indexed = {self.entry_dir(e) for e in self.index(fresh=True).values()}
        return [(d, self.read_meta(d)) for d in self.layout.artifact_dirs() if d not in indexed]

    def read_meta(self, directory: Path) -> Entry | None:
        """The Entry recorded in `directory`/meta.json if it names this directory's key and kind."""
        return self.read_meta_checked(directory)[0]

    def read_meta_checked(self, directory: Path) -> tuple[Entry | None, str]:
        """(the Entry `directory`/meta.json records, "") or (None, why it is unusable). A FIFO,
        socket or device named meta.json is never opened (see `fsio.read_regular`)."""
        try:
            entry = Entry.from_json(json.loads(read_regular(directory / META_NAME).decode("utf-8")))
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, exc.strerror or str(exc)
        except (ValueError, CacheError, TypeError) as exc:
            return None, f"unusable ({exc})"
        if self.layout.entry_dir(entry.key, entry.kind) != directory:
            return None, "names another key or kind"
        return entry, ""

    def orphans(self) -> list[Path]:
        """Debris: unindexed entry directories without a usable meta.json, and staging/trash dirs
        whose owner is gone. An unindexed directory holding a recorded entry is not debris:
        `kernelforge cache repair` re-indexes it (or quarantines it if its files are damaged)."""
        found = [d for d, entry in self.unindexed() if entry is None]
        if self.layout.tmp.is_dir():
            found.extend(p for p in sorted(self.layout.tmp.iterdir()) if p.is_dir() and tmp_dir_is_stale(p))
        return found

    def writable_problem(self) -> str | None:
        """Why this cache cannot be written (one line), or None if it can (checked without writing)."""
        probe = self.root
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            return f"cache root {self.root}: {probe} is not a directory"
        for path in (self.layout.schema_root, self.root, probe):
            if path.exists():
                if not os.access(path, os.W_OK | os.X_OK):
                    return f"cache root {self.root} is not writable ({path}: permission denied)"
                break
        return None

    # ---- locking and staging ----

    def lock(self, key: str) -> FileLock:
        """The cross-process lock of one key (reentrant within a thread: one instance per path)."""
        from filelock import (
            FileLock,  # only writers pay for it; the runtime's read path never locks
        )

        path = self.layout.key_lock(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(path), is_singleton=True)

    def _index_lock(self) -> FileLock:
        from filelock import FileLock

        self.layout.locks.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.layout.index_lock), is_singleton=True)

    def staging_dir(self) -> Path:
        """A fresh private directory under tmp/ (same filesystem as the artifacts, so os.replace is atomic)."""
        self.layout.tmp.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"stage-{_HOST}-{os.getpid()}-", dir=self.layout.tmp))

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an entry directory out of the way into quarantine/ (never deleted by repair), with
        a note saying why; the caller drops it from the index. Returns its new place."""
        self.layout.quarantine.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        dest = Path(tempfile.mkdtemp(prefix=f"{path.name[:16]}-{stamp}-", dir=self.layout.quarantine))
        os.replace(path, dest / path.name)
        (dest / "REASON.txt").write_text(reason + "\n", encoding="utf-8")
        return dest

    def quarantine_entry(self, key: str, reason: str) -> Path | None:
        """Drop `key` from the index and move its directory to quarantine/ (None: it was not indexed)."""
        with self.lock(key):
            with self._index_lock():
                raw = self._read_index_for_write()
                data = raw.pop(key, None)
                if data is None:
                    return None
                write_index(self.layout.index, raw)
            directory = self.layout.entry_dir(key, data.get("kind", "kernel"))
            return self.quarantine(directory, reason) if directory.exists() else None

    def _read_index_for_write(self) -> dict[str, dict[str, Any]]:
        raw, problem = read_index_checked(self.layout.index)
        if problem:
            raise CacheError(f"{problem}; nothing was written. Run `kernelforge cache repair --cache {self.root}` "
                             "first (it rebuilds the index from the entries' meta.json)")
        return raw

    def _discard(self, path: Path) -> None:
        # Rename first so a reader never sees a half-deleted entry; the rmtree may then take its time.
        self.layout.tmp.mkdir(parents=True, exist_ok=True)
        trash = Path(tempfile.mkdtemp(prefix=f"trash-{_HOST}-{os.getpid()}-", dir=self.layout.tmp))
        try:
            os.replace(path, trash / "x")
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(trash, ignore_errors=True)

    # ---- writing ----

    def _hash_files(self, staging: Path) -> dict[str, dict[str, Any]]:
        files: dict[str, dict[str, Any]] = {}
        for dirpath, dirnames, filenames in os.walk(staging):
            for name in dirnames + filenames:
                if (Path(dirpath) / name).is_symlink():
                    raise CacheError(f"{Path(dirpath) / name}: symlinks cannot be published into the cache")
            for name in filenames:
                path = Path(dirpath) / name
                rel = path.relative_to(staging).as_posix()
                if rel == META_NAME:
                    raise CacheError(f"{path}: {META_NAME} is reserved for the cache's own metadata")
                try:
                    digest, size = sha256_file(path, fsync=True)
                except NotRegularFile as exc:
                    raise CacheError(f"{path}: only regular files can be published, this is {exc.strerror}") from None
                files[rel] = {"sha256": digest, "size": size}
            # mkdtemp makes 0700 directories: give them the umask's mode so other users can read
            os.chmod(dirpath, 0o777 & ~current_umask())
        return dict(sorted(files.items()))

    def publish(self, key: str, staging: Path, *, kind: str, op: str, name: str, variant: dict[str, Any],
                arch: str, toolchain_id: str, toolchain: dict[str, Any], source_hash: str, main_file: str,
                build_time_s: float, extra: dict[str, Any] | None = None) -> Entry:
        """Publish a filled staging dir as entry `key` (consumes `staging` if it lies under tmp/).

        If `key` is already a valid entry, the staging dir is discarded and the existing entry returned.
        """
        check_key(key)
        check_kind(kind)
        staging = Path(staging)
        if not staging.is_dir():
            raise CacheError(f"staging directory {staging} does not exist")
        if staging.resolve().parent != self.layout.tmp.resolve():
            # Outside tmp/ the rename might cross filesystems; copy into a private staging dir instead.
            own = self.staging_dir()
            shutil.copytree(staging, own, dirs_exist_ok=True)
            staging = own
        files = self._hash_files(staging)
        if main_file not in files:
            shutil.rmtree(staging, ignore_errors=True)
            raise CacheError(f"build of {name!r} produced no {main_file!r} (files: {', '.join(files) or 'none'})")
        entry = Entry(
            key=key, kind=kind, op=op, name=name, variant=dict(variant), arch=arch,
            toolchain_id=toolchain_id, toolchain=dict(toolchain), source_hash=source_hash, files=files,
            main_file=main_file, build_time_s=float(build_time_s),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            path=self.layout.entry_rel(key, kind), extra=dict(extra or {}),
        )
        with open(staging / META_NAME, "w", encoding="utf-8") as f:
            json.dump(entry.to_json(), f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(staging)

        batch = self._pending is not None
        with self.lock(key):
            # In a batch the index was checked when it began, and the parsed index is reused while
            # index.json is unchanged (every write replaces the file, so its signature changes).
            existing = self.get(key, fresh=not batch)
            if existing is not None:
                shutil.rmtree(staging, ignore_errors=True)
                return existing
            if not batch:
                self._read_index_for_write()  # refuse before anything moves if the index is corrupt
            final = self.layout.entry_dir(key, kind)
            if final.exists():  # not indexed (checked above): debris, or damage; keep it for inspection
                self.quarantine(final, f"replaced by a new build of {name}")
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, final)
            fsync_dir(final.parent)
            if batch:
                self._pending[key] = entry  # type: ignore[index]
            else:
                with self._index_lock():
                    raw = self._read_index_for_write()
                    raw[key] = entry.to_json()
                    write_index(self.layout.index, raw)
        if batch and len(self._pending) >= BATCH_INDEX_EVERY:  # type: ignore[arg-type]
            self._index_pending()
        return entry

    @contextlib.contextmanager
    def publishing_batch(self) -> Iterator[None]:
        """Within the block, `publish` records entries in the index once per `BATCH_INDEX_EVERY`
        and when the block ends (also on an exception: what was moved into place is intact);
        see the module docstring. Raises CacheError before anything moves if the index is corrupt."""
        if self._pending is not None:  # nested: the outer batch indexes
            yield
            return
        self._read_index_for_write()
        self._pending = {}
        try:
            yield
        finally:
            try:
                self._index_pending()
            finally:
                self._pending = None

    def _index_pending(self) -> None:
        """Record the batch's published entries in the index (one write)."""
        if not self._pending:
            return
        with self._index_lock():
            raw = self._read_index_for_write()
            for key, entry in self._pending.items():
                raw.setdefault(key, entry.to_json())  # another writer's record of a key stands
            write_index(self.layout.index, raw)
        self._pending.clear()

    def get_or_build(self, key: str, build: BuildFn) -> tuple[Entry, bool]:
        """Return (entry, built): the cached entry, or build it once under the key's lock and publish it.

        `build(staging_dir)` fills the dir and returns publish's keyword arguments (kind, op, name, ...).
        If it raises, the staging dir is removed and the exception propagates; the cache is unchanged.
        """
        entry = self.get(key)
        if entry is not None:
            return entry, False
        with self.lock(key):
            entry = self.get(key, fresh=True) or self._adopt(key)  # another process may have built it
            if entry is not None:
                return entry, False
            staging = self.staging_dir()
            try:
                meta = build(staging)
                if not isinstance(meta, Mapping):
                    raise CacheError(f"build for key {key} returned {type(meta).__name__}, "
                                     "expected a mapping of publish() arguments")
                entry = self.publish(key, staging, **meta)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return entry, True

    def _adopt(self, key: str) -> Entry | None:
        """Index an intact entry of `key` the index lost (its meta.json names it and every file
        matches), instead of rebuilding it; None if there is none. Call with the key's lock held."""
        for kind in ("kernel", "runtime"):
            directory = self.layout.entry_dir(key, kind)
            entry = self.read_meta(directory) if directory.is_dir() else None
            if entry is not None and not file_problems(entry, directory):
                with self._index_lock():
                    raw = self._read_index_for_write()
                    raw[key] = entry.to_json()
                    write_index(self.layout.index, raw)
                return entry
        return None

    def refresh_views(self) -> bool:
        """Rewrite the runtime's dispatch views if they do not match the index (e.g. a cache
        written by an older kernelforge); returns whether it rewrote them."""
        views = DispatchViews(self.layout.root, TrustedRoot(self.layout.root, enforce=False))
        if not self.layout.index.exists() or views.manifest is not None:
            return False
        with self._index_lock():
            write_index(self.layout.index, self._read_index_for_write())  # a new generation, then views
        return True

    def remove(self, keys: Iterable[str]) -> int:
        """Remove entries: drop them from the index first, then delete their directories. Returns the count."""
        wanted = set(keys)
        if not wanted:
            return 0
        with self._index_lock():
            raw = self._read_index_for_write()
            removed = {k: raw.pop(k) for k in sorted(wanted) if k in raw}
            if removed:
                write_index(self.layout.index, raw)
        for key, data in removed.items():
            try:
                path = self.layout.resolve(data["path"])
            except (CacheError, KeyError, TypeError):
                continue
            with self.lock(key):
                current, problem = read_index_checked(self.layout.index)
                if problem or key in current:
                    continue  # rebuilt and republished since we dropped it (or cannot tell)
                if path.exists():
                    self._discard(path)
        return len(removed)

    def delete_orphans(self, paths: Iterable[Path], *, unindexed_entries: bool = False) -> list[Path]:
        """Delete the given orphan dirs, skipping any that stopped being orphans (e.g. a publish in flight);
        with `unindexed_entries`, intact entries the index lacks count as orphans too (`clean --all`)."""
        from filelock import Timeout

        deleted: list[Path] = []
        for path in paths:
            path = Path(path)
            if path.parent == self.layout.tmp:
                if path.is_dir() and tmp_dir_is_stale(path):
                    shutil.rmtree(path, ignore_errors=True)
                    deleted.append(path)
                continue
            try:
                lock = self.lock(check_key(path.name))
            except CacheError:
                lock = None  # not a key-shaped name: nobody can be publishing it
            try:
                if lock is not None:
                    lock.acquire(blocking=False)
            except Timeout:
                continue  # its key is being built or published right now
            try:
                gone = ([d for d, _ in self.unindexed()] if unindexed_entries else self.orphans())
                if path.is_dir() and path in gone:
                    self._discard(path)
                    deleted.append(path)
            finally:
                if lock is not None:
                    lock.release()
        return deleted
