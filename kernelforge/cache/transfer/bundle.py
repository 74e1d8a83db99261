"""Offline bundles: a deterministic .tar.gz of cache entries, and its verified import.

Bundle members, sorted by name after the bundle index:

```
kernelforge-bundle.json                {"schema": 1, "format": "kernelforge-bundle", "entries": {key: Entry JSON}}
v1/artifacts/<key[:2]>/<key>/<files>   each entry's directory as in a cache, meta.json included
v1/runtime/<key>/<files>
v1/signatures/<sha256>.json            signed manifests covering exported entries (`kernelforge.cache.read.signing`)
```

Export is byte-for-byte reproducible (fixed mtimes, uid/gid 0, no user names, gzip header
without name or time). Import trusts nothing in the bundle: every member name must be one of
those shapes (no absolute paths, `..`, links, devices: any such member rejects the whole bundle
before anything is written), members are read through tarfile and never extracted by it, every
file is re-hashed against the entry's metadata in a private staging dir, and only intact entries
are published through `CacheStore.publish`.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import (
    ARTIFACT_LIMIT_ENV,
    INDEX_LIMIT_ENV,
    DestinationWriteError,
    FileTooLarge,
    hash_stream,
    max_artifact_bytes,
    max_index_bytes,
    open_regular,
    too_large,
    write_failure,
)
from kernelforge.cache.read.layout import META_NAME, SCHEMA_VERSION
from kernelforge.cache.read.signing import SIGNATURES_DIR
from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer.common import (
    Rejected,
    TransferError,
    TransferReport,
    load_local_files,
    parse_entries,
    publish_staged,
    quarantine_conflict,
    read_entries_index,
    runtime_missing,
    same_files,
    select_entries,
)
from kernelforge.cache.transfer.provenance import Authority, covering_manifests

BUNDLE_FORMAT = "kernelforge-bundle"
BUNDLE_INDEX = "kernelforge-bundle.json"
_V = f"v{SCHEMA_VERSION}"
_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_KEY = r"[A-Za-z0-9][A-Za-z0-9_.-]{1,254}"
_MEMBER = re.compile(rf"{_V}(/artifacts(/{_PART}(/{_KEY}(/{_PART})*)?)?|/runtime(/{_KEY}(/{_PART})*)?"
                     rf"|/{SIGNATURES_DIR}(/[0-9a-f]{{64}}\.json)?)?")


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def export_bundle(store: CacheStore, path: str | os.PathLike[str], *, only: Iterable[str] | None = None,
                  keys: Iterable[str] | None = None) -> TransferReport:
    """Write the selected entries (each re-hashed first; damaged ones are refused) to a .tar.gz."""
    dest = Path(path)
    if dest.is_dir():
        raise TransferError(f"bundle {dest} is a directory; give the file to write, e.g. {dest / 'kernels.tar.gz'}")
    if dest.exists() and not dest.is_file():
        raise TransferError(f"bundle {dest} exists and is not a regular file")
    if dest.resolve().is_relative_to(store.root.resolve()):
        raise TransferError(f"bundle {dest} is inside the cache it exports ({store.root}); write it elsewhere")
    report = TransferReport("export", str(store.root), str(dest))
    selected = select_entries(store.index(fresh=True), only=only, keys=keys)
    report.selected = len(selected)
    members: dict[str, bytes] = {}
    index: dict[str, Any] = {}
    for entry in selected:
        files = load_local_files(store, entry)
        if isinstance(files, str):
            report.refuse(entry, f"not exported: {files}")
            continue
        for rel, data in files.items():
            members[f"{_V}/{entry.path}/{rel}"] = data
        members[f"{_V}/{entry.path}/{META_NAME}"] = _json_bytes(entry.to_json())
        index[entry.key] = entry.to_json()
        report.transferred.append(entry.name)
        report.files += len(files)
        report.bytes += sum(len(d) for d in files.values())
    for name, document in covering_manifests(store, index):
        members[f"{_V}/{SIGNATURES_DIR}/{name}"] = document
    if not dest.parent.is_dir():
        raise TransferError(f"bundle {dest}: directory {dest.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}-", dir=dest.parent)
    except OSError as exc:
        raise TransferError(f"bundle {dest}: cannot write in {dest.parent} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            payload = _json_bytes({"schema": SCHEMA_VERSION, "format": BUNDLE_FORMAT, "entries": index})
            tar.addfile(_info(BUNDLE_INDEX, len(payload)), io.BytesIO(payload))
            for name in sorted(members):
                tar.addfile(_info(name, len(members[name])), io.BytesIO(members[name]))
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except OSError as exc:  # a full disk, a dest that turned into a directory meanwhile
        Path(tmp).unlink(missing_ok=True)
        raise TransferError(f"bundle {dest}: cannot write it ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return report


def member_problem(member: tarfile.TarInfo, staging: Path) -> str | None:
    """Why a tar member may not be imported (None: a regular file or directory of the bundle layout)."""
    name = member.name
    if not (member.isreg() or member.isdir()):
        kind = ("a symlink" if member.issym() else "a hard link" if member.islnk()
                else "a device" if member.isdev() else "not a regular file")
        return f"member {name!r} is {kind}"
    if name != BUNDLE_INDEX and not _MEMBER.fullmatch(name.rstrip("/") if member.isdir() else name):
        return f"member {name!r} is not a path of the bundle layout (absolute, '..', or unexpected)"
    data_filter = getattr(tarfile, "data_filter", None)  # Python >= 3.10.12 / 3.11.4 (PEP 706)
    if data_filter is not None:  # the stdlib's own check, as a second opinion to the two above
        try:
            data_filter(member, str(staging))
        except tarfile.FilterError as exc:  # type: ignore[attr-defined]
            return f"member {name!r}: {exc}"
    return None


@contextlib.contextmanager
def _open(path: Path, spool_dir: Path) -> Iterator[tuple[tarfile.TarFile, dict[str, tarfile.TarInfo]]]:
    """The bundle as a tar archive with its members by name, for the duration of the block.

    A gzip stream is first decompressed once into an unnamed file in `spool_dir`: reading members
    out of order from the compressed stream decompresses it again from the start at every backward
    seek (an entry's meta.json sorts before its module.so but is checked after it), which made
    importing an 820-entry bundle take minutes. A bundle that does not fit there is refused.

    Every member's declared size (its tar header) is checked against the caps of `fsio` before
    its data is read: while the gzip stream is decompressed (a member over the cap stops it
    there), and for an uncompressed archive once its headers are read."""
    if not path.is_file():
        raise TransferError(f"bundle {path} {'is not a file' if path.exists() else 'does not exist'}")
    limits = (max_index_bytes(), max_artifact_bytes())
    with contextlib.ExitStack() as stack:
        try:
            fd, _ = open_regular(path, follow=True)  # never waits on a FIFO swapped in since the check
            raw = stack.enter_context(os.fdopen(fd, "rb"))
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            if gzipped:
                try:  # beside the cache, which must hold the data anyway; else the system's temp dir
                    spool_dir.mkdir(parents=True, exist_ok=True)
                    spool = stack.enter_context(tempfile.TemporaryFile(dir=spool_dir))
                except OSError:  # a read-only cache: an import of entries it holds writes nothing
                    spool = stack.enter_context(tempfile.TemporaryFile())
                with gzip.open(raw, "rb") as gz:  # once, from the descriptor opened above
                    _spool_checked(gz, spool, path, limits)
                spool.seek(0)
                tar = stack.enter_context(tarfile.open(fileobj=spool, mode="r:"))
            else:
                tar = stack.enter_context(tarfile.open(fileobj=raw, mode="r:*"))
            members = tar.getmembers()  # reads the whole archive: a damaged stream fails here
        except DestinationWriteError as exc:
            raise TransferError(f"bundle {path}: {write_failure(exc, f'its decompressed copy in {spool_dir}')}; "
                                "nothing was imported") from None
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise Rejected(f"bundle {path} is not a readable tar archive ({exc}); nothing was imported") from None
        names: dict[str, tarfile.TarInfo] = {}
        for member in members:
            if member.name in names:
                raise Rejected(f"bundle {path} is unsafe: member {member.name!r} appears twice; nothing was imported")
            _check_size(member, path, limits)
            names[member.name] = member
        yield tar, names


def _check_size(member: tarfile.TarInfo, path: Path, limits: tuple[int, int]) -> None:
    """Rejected if a member's header declares more bytes than its cap (the index's, or a file's)."""
    limit, env = (limits[0], INDEX_LIMIT_ENV) if member.name == BUNDLE_INDEX else (limits[1], ARTIFACT_LIMIT_ENV)
    if member.size > limit:
        raise Rejected(f"bundle {path} is unsafe: member {member.name!r} is {too_large(member.size, limit, env)}; "
                       "nothing was imported")


class _Tee:
    """A file object that copies what is read from `src` into `sink` (writes fail as DestinationWriteError)."""

    def __init__(self, src: Any, sink: Any) -> None:
        self.src, self.sink = src, sink

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if data:
            try:
                self.sink.write(data)
            except OSError as exc:
                raise DestinationWriteError(exc.errno, exc.strerror, getattr(self.sink, "name", None)) from None
        return data


def _spool_checked(gz: Any, spool: Any, path: Path, limits: tuple[int, int]) -> None:
    """Decompress `gz` into `spool` in one pass, reading the tar headers on the way: a member whose
    header declares more than its cap is refused before its data is decompressed."""
    tee = _Tee(gz, spool)
    with tarfile.open(fileobj=tee, mode="r|") as stream:  # type: ignore[call-overload]
        for member in stream:
            _check_size(member, path, limits)
    while tee.read(1 << 20):  # what follows the end-of-archive blocks, byte for byte
        pass


def import_bundle(store: CacheStore, path: str | os.PathLike[str], *, authority: Authority | None = None,
                  audit: Callable[[Sequence[Entry]], str | None] | None = None,
                  dry_run: bool = False) -> TransferReport:
    """Import the entries of a bundle the cache lacks; each is re-hashed and published only if intact
    and signed by a trusted key (or the bundle is allowed unsigned); see `kernelforge.cache.transfer.provenance`.
    With `dry_run` every check runs (members, signatures, each file re-hashed) and nothing is written
    to the cache (a gzip bundle is spooled in the system's temp dir): the report says what would be."""
    src = Path(path)
    report = TransferReport("import", str(src), str(store.root), dry_run=dry_run)
    check = (authority or Authority.configured()).for_source(str(src), "import")
    try:
        _import(store, src, report, check, audit)
        if not dry_run:
            check.keep_manifests(store.root)
    except OSError as exc:  # the cache's disk is full, ...: stop, one line (CLI exit 2)
        done = len(report.transferred)
        raise TransferError(f"import of bundle {src} stopped: {write_failure(exc, f'the cache {store.root}')}; "
                            f"{done} entries were imported before, each complete (`kernelforge cache verify "
                            f"--cache {store.root}` checks them); run the import again") from None
    report.notes.extend(check.notes)
    return report


def _import(store: CacheStore, src: Path, report: TransferReport, check: Any,
            audit: Callable[[Sequence[Entry]], str | None] | None) -> None:
    spool_dir = Path(tempfile.gettempdir()) if report.dry_run else store.layout.tmp
    with _open(src, spool_dir) as (tar, members), \
            (contextlib.nullcontext() if report.dry_run else store.publishing_batch()):
        check_dir = store.layout.tmp / "bundle-check"  # a name for data_filter only: nothing is written
        problems = [p for m in members.values() if (p := member_problem(m, check_dir))]
        if problems:
            raise Rejected(f"bundle {src} is unsafe: {problems[0]}"
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                           + "; nothing was imported")
        raw = _read_index(tar, members, src)
        entries = parse_entries(raw, f"bundle {src}", report)
        signatures = sorted(n for n, m in members.items() if n.startswith(f"{_V}/{SIGNATURES_DIR}/") and m.isreg())
        check.add_manifests((n.rsplit("/", 1)[1], _read(tar, members[n])) for n in signatures)
        claimed = {BUNDLE_INDEX, *signatures}
        reason = audit([e for e in entries.values() if store.get(e.key) is None]) if audit is not None else None
        if reason is not None:
            raise Rejected(f"bundle {src}: {reason}; nothing was imported")
        arrived: set[str] = set()
        for entry in select_entries(entries):
            report.selected += 1
            prefix = f"{_V}/{entry.path}/"
            claimed.update(n for n in members if n.startswith(prefix) or n == prefix.rstrip("/"))
            held = store.get(entry.key)
            if held is not None and same_files(held, entry):
                report.present.append(entry.name)
                continue
            if held is not None and report.dry_run:
                quarantine_conflict(store, held, entry, "", str(src), report)  # reported, nothing staged
                continue
            if held is not None:
                staging = store.staging_dir()
                problem = _stage_entry(tar, members, entry, prefix, staging)
                if problem:
                    shutil.rmtree(staging, ignore_errors=True)
                quarantine_conflict(store, held, entry, problem or staging, str(src), report)
                continue
            why = check.refusal(entry) or runtime_missing(entry, store, arrived)
            if why is None and report.dry_run:  # the same checks, each file streamed to /dev/null
                why = _stage_entry(tar, members, entry, prefix, None)
            staging = store.staging_dir() if why is None and not report.dry_run else None
            if staging is not None:
                why = _stage_entry(tar, members, entry, prefix, staging)
            if why is not None:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
                report.refuse(entry, f"not imported from bundle {src}: {why}; nothing of it was published")
                continue
            if not report.dry_run:
                publish_staged(store, check.stamped(entry), staging)  # type: ignore[arg-type]
            arrived.add(entry.key)
            report.transferred.append(entry.name)
            report.files += len(entry.files)
            report.bytes += entry.size
        stray = sorted(n for n, m in members.items() if n not in claimed and not m.isdir())
        if stray:
            report.notes.append(f"ignored {len(stray)} member(s) of no indexed entry, e.g. {stray[0]}")


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A small member's bytes (an index, a meta.json, a manifest): its size was checked in `_open`."""
    f = tar.extractfile(member)
    return f.read(member.size) if f is not None else b""


def _read_index(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], src: Path) -> dict[str, Any]:
    member = members.get(BUNDLE_INDEX)
    if member is None or not member.isreg():
        raise Rejected(f"bundle {src} has no {BUNDLE_INDEX}; it is not a kernelforge bundle")
    return read_entries_index(_read(tar, member), BUNDLE_FORMAT, f"bundle {src}", BUNDLE_INDEX)


def _stage_entry(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], entry: Entry, prefix: str,
                 staging: Path | None) -> str | None:
    """Copy the bundle's copy of `entry` into `staging`, each file streamed in chunks and re-hashed
    on the way (its declared size checked first), meta.json cross-checked; None if it is intact,
    else why not. A write that fails (a full disk) raises DestinationWriteError. With no `staging`
    (a dry run) the same checks run and the files go to /dev/null."""
    extra = sorted(n[len(prefix):] for n, m in members.items()
                   if n.startswith(prefix) and m.isreg() and n[len(prefix):] not in entry.files
                   and n[len(prefix):] != META_NAME)
    if extra:
        return f"it holds files its metadata does not list ({', '.join(extra[:3])})"
    meta = members.get(prefix + META_NAME)
    try:
        recorded = json.loads(_read(tar, meta)) if meta is not None and meta.isreg() else None
    except ValueError:
        recorded = None
    if recorded != entry.to_json():
        return f"its {META_NAME} is missing or disagrees with the bundle index"
    for rel, info in sorted(entry.files.items()):
        member = members.get(prefix + rel)
        if member is None or not member.isreg():
            return f"file {rel} is missing"
        if member.size != int(info["size"]):
            return f"file {rel} has {member.size} bytes, its metadata records {info['size']}"
        problem = _copy_member(tar, member, staging.joinpath(*rel.split("/")) if staging is not None else None, info)
        if problem:
            return f"file {rel} {problem}"
    return None


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path | None,
                 info: dict[str, Any]) -> str | None:
    """Stream one member into `target` (None: /dev/null), hashing it; why it is not the file `info`
    records, or None."""
    source = tar.extractfile(member)
    if source is None:
        return "is missing"
    try:
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        out = open(target, "xb") if target is not None else open(os.devnull, "wb")
    except OSError as exc:
        raise DestinationWriteError(exc.errno, exc.strerror, str(target)) from None
    with source, out:
        try:
            digest, _ = hash_stream(source.read, out.write, limit=int(info["size"]))
        except FileTooLarge:
            return f"has more bytes than its metadata records ({info['size']})"
        try:
            out.flush()
        except OSError as exc:
            raise DestinationWriteError(exc.errno, exc.strerror, str(target)) from None
    if digest != info["sha256"]:
        return f"sha256 mismatch (recorded {str(info['sha256'])[:16]}, received {digest[:16]})"
    return None
