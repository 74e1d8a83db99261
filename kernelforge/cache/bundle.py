"""Offline bundles: a deterministic .tar.gz of cache entries, and its verified import.

Bundle members, sorted by name after the bundle index:

```
kernelforge-bundle.json                {"schema": 1, "format": "kernelforge-bundle", "entries": {key: Entry JSON}}
v1/artifacts/<key[:2]>/<key>/<files>   each entry's directory as in a cache, meta.json included
v1/runtime/<key>/<files>
v1/signatures/<sha256>.json            signed manifests covering exported entries (`kernelforge.cache.signing`)
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

from kernelforge.cache.entry import Entry
from kernelforge.cache.layout import META_NAME, SCHEMA_VERSION
from kernelforge.cache.provenance import Authority, covering_manifests
from kernelforge.cache.signing import SIGNATURES_DIR
from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer import (
    Rejected,
    TransferError,
    TransferReport,
    bytes_problem,
    load_local_files,
    parse_entries,
    publish_staged,
    quarantine_conflict,
    read_entries_index,
    runtime_missing,
    same_files,
    select_entries,
    stage_file,
)

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
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}-", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            payload = _json_bytes({"schema": SCHEMA_VERSION, "format": BUNDLE_FORMAT, "entries": index})
            tar.addfile(_info(BUNDLE_INDEX, len(payload)), io.BytesIO(payload))
            for name in sorted(members):
                tar.addfile(_info(name, len(members[name])), io.BytesIO(members[name]))
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
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
    importing an 820-entry bundle take minutes. A bundle that does not fit there is refused."""
    if not path.is_file():
        raise TransferError(f"bundle {path} {'is not a file' if path.exists() else 'does not exist'}")
    with contextlib.ExitStack() as stack:
        try:
            with open(path, "rb") as f:
                gzipped = f.read(2) == b"\x1f\x8b"
            if gzipped:
                try:  # beside the cache, which must hold the data anyway; else the system's temp dir
                    spool_dir.mkdir(parents=True, exist_ok=True)
                    spool = stack.enter_context(tempfile.TemporaryFile(dir=spool_dir))
                except OSError:  # a read-only cache: an import of entries it holds writes nothing
                    spool = stack.enter_context(tempfile.TemporaryFile())
                with gzip.open(path, "rb") as gz:
                    shutil.copyfileobj(gz, spool, 1 << 20)
                spool.seek(0)
                tar = stack.enter_context(tarfile.open(fileobj=spool, mode="r:"))
            else:
                tar = stack.enter_context(tarfile.open(path, "r:*"))
            members = tar.getmembers()  # reads the whole archive: a damaged stream fails here
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise Rejected(f"bundle {path} is not a readable tar archive ({exc}); nothing was imported") from None
        names: dict[str, tarfile.TarInfo] = {}
        for member in members:
            if member.name in names:
                raise Rejected(f"bundle {path} is unsafe: member {member.name!r} appears twice; nothing was imported")
            names[member.name] = member
        yield tar, names


def import_bundle(store: CacheStore, path: str | os.PathLike[str], *, authority: Authority | None = None,
                  audit: Callable[[Sequence[Entry]], str | None] | None = None) -> TransferReport:
    """Import the entries of a bundle the cache lacks; each is re-hashed and published only if intact
    and signed by a trusted key (or the bundle is allowed unsigned); see `kernelforge.cache.provenance`."""
    src = Path(path)
    report = TransferReport("import", str(src), str(store.root))
    check = (authority or Authority.configured()).for_source(str(src), "import")
    with _open(src, store.layout.tmp) as (tar, members), store.publishing_batch():
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
            if held is not None:
                quarantine_conflict(store, held, entry, _entry_files(tar, members, entry, prefix), str(src), report)
                continue
            files = (check.refusal(entry) or runtime_missing(entry, store, arrived)
                     or _entry_files(tar, members, entry, prefix))
            if isinstance(files, str):
                report.refuse(entry, f"not imported from bundle {src}: {files}; nothing of it was published")
                continue
            staging = store.staging_dir()
            for rel, data in files.items():
                stage_file(staging, rel, data)
            publish_staged(store, check.stamped(entry), staging)
            arrived.add(entry.key)
            report.transferred.append(entry.name)
            report.files += len(entry.files)
            report.bytes += entry.size
        stray = sorted(n for n, m in members.items() if n not in claimed and not m.isdir())
        if stray:
            report.notes.append(f"ignored {len(stray)} member(s) of no indexed entry, e.g. {stray[0]}")
    check.keep_manifests(store.root)
    report.notes.extend(check.notes)
    return report


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    return f.read() if f is not None else b""


def _read_index(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], src: Path) -> dict[str, Any]:
    member = members.get(BUNDLE_INDEX)
    if member is None or not member.isreg():
        raise Rejected(f"bundle {src} has no {BUNDLE_INDEX}; it is not a kernelforge bundle")
    return read_entries_index(_read(tar, member), BUNDLE_FORMAT, f"bundle {src}", BUNDLE_INDEX)


def _entry_files(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], entry: Entry,
                 prefix: str) -> dict[str, bytes] | str:
    """{rel: bytes} of the bundle's copy of `entry`, each re-hashed and meta.json cross-checked;
    or why it is not intact."""
    files: dict[str, bytes] = {}
    for rel, info in sorted(entry.files.items()):
        member = members.get(prefix + rel)
        if member is None or not member.isreg():
            return f"file {rel} is missing"
        data = _read(tar, member)
        problem = bytes_problem(data, info)
        if problem:
            return f"file {rel} {problem}"
        files[rel] = data
    meta = members.get(prefix + META_NAME)
    try:
        recorded = json.loads(_read(tar, meta)) if meta is not None and meta.isreg() else None
    except ValueError:
        recorded = None
    if recorded != entry.to_json():
        return f"its {META_NAME} is missing or disagrees with the bundle index"
    extra = sorted(n[len(prefix):] for n, m in members.items()
                   if n.startswith(prefix) and m.isreg() and n[len(prefix):] not in entry.files
                   and n[len(prefix):] != META_NAME)
    if extra:
        return f"it holds files its metadata does not list ({', '.join(extra[:3])})"
    return files
