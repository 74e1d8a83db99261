"""What push, pull, export and import share: selecting entries, checking bytes, publishing, reports.

Every transfer moves whole entries, compares keys first (an entry the destination already has
is never sent), checks every file's size and sha256 against the entry's metadata on arrival,
and publishes only through `CacheStore.publish`, so a reader of the local cache never sees a
half-arrived or unverified entry.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Mapping

from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import ARTIFACT_LIMIT_ENV, max_artifact_bytes, read_regular, too_large
from kernelforge.cache.read.layout import SCHEMA_VERSION
from kernelforge.cache.store import CacheStore
from kernelforge.errors import CacheError

# Runtime libraries first, so a kernel is never indexed before the library it links.
_KIND_ORDER = {"runtime": 0, "tuning": 1, "kernel": 2}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PUBLISH_FIELDS = ("kind", "op", "name", "variant", "arch", "toolchain_id", "toolchain", "source_hash",
                   "main_file", "build_time_s", "extra")


class TransferError(CacheError):
    """A transfer could not start or finish: bad URL or file, unreachable or read-only remote (CLI exit 2)."""


class Rejected(TransferError):
    """The source as a whole failed verification: an unsafe bundle, a malformed remote index (CLI exit 1)."""


@dataclass(frozen=True)
class Refusal:
    """One entry that was not transferred, and why (nothing of it reached the destination)."""

    key: str
    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} [{self.key[:12]}]: {self.reason}"


@dataclass
class TransferReport:
    """What a push, pull, export or import did."""

    action: str
    source: str
    dest: str
    selected: int = 0
    present: list[str] = field(default_factory=list)  # names the destination already had
    transferred: list[str] = field(default_factory=list)  # names sent and committed
    refused: list[Refusal] = field(default_factory=list)
    files: int = 0  # file objects actually moved (a push skips blobs the remote already holds)
    bytes: int = 0
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False  # nothing was written: `transferred`, files and bytes are what would be
    verified: bool | None = None  # `run_transfer(verify_after=True)`: whether the cache verified after it

    @property
    def ok(self) -> bool:
        return not self.refused

    def refuse(self, entry: Entry | Mapping[str, Any], reason: str) -> None:
        key = entry.key if isinstance(entry, Entry) else str(entry.get("key", "?"))
        name = entry.name if isinstance(entry, Entry) else str(entry.get("name", "?"))
        self.refused.append(Refusal(key, name, reason))

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "source": self.source, "dest": self.dest, "ok": self.ok,
                "selected": self.selected, "present": self.present, "transferred": self.transferred,
                "refused": [vars(r) for r in self.refused], "files": self.files, "bytes": self.bytes,
                "notes": self.notes}


def select_entries(entries: Mapping[str, Entry], *, only: Iterable[str] | None = None,
                   keys: Iterable[str] | None = None) -> list[Entry]:
    """Entries whose name or key matches any `only` glob and whose key is in `keys` (None: no filter),
    plus the runtime library each selected kernel links (when `entries` holds it), runtime first."""
    patterns = list(only or [])
    wanted = None if keys is None else set(keys)
    chosen: dict[str, Entry] = {}
    for key, entry in entries.items():
        if patterns and not any(fnmatchcase(entry.name, p) or fnmatchcase(key, p) for p in patterns):
            continue
        if wanted is not None and key not in wanted:
            continue
        chosen[key] = entry
    for entry in list(chosen.values()):
        rkey = runtime_key_of(entry)
        if rkey and rkey in entries:
            chosen.setdefault(rkey, entries[rkey])
    return sorted(chosen.values(), key=lambda e: (_KIND_ORDER.get(e.kind, 3), e.name, e.key))


def runtime_key_of(entry: Entry) -> str | None:
    """The key of the runtime library a kernel entry links, if it records one."""
    rkey = entry.extra.get("runtime_key") if entry.kind == "kernel" else None
    return rkey if isinstance(rkey, str) else None


def read_entries_index(data: bytes, fmt: str, where: str, name: str) -> dict[str, Any]:
    """The raw entries of a transfer index (a bundle's or a remote's: `{"schema", "format",
    "entries"}`); Rejected naming `where`/`name` if it is not JSON or not a `fmt` index."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise Rejected(f"{where}: {name} is not JSON ({exc})") from None
    if (not isinstance(obj, dict) or obj.get("schema") != SCHEMA_VERSION or obj.get("format") != fmt
            or not isinstance(obj.get("entries"), dict)):
        kind = fmt.removeprefix("kernelforge-")
        raise Rejected(f"{where}: {name} is not a kernelforge v{SCHEMA_VERSION} {kind} index")
    return obj["entries"]


def parse_entries(raw: Mapping[str, Any], where: str, report: TransferReport) -> dict[str, Entry]:
    """Entries of a foreign index (remote or bundle); malformed ones, and those declaring a file
    larger than `fsio.max_artifact_bytes()`, are refused in `report` (nothing of them is read)."""
    limit = max_artifact_bytes()
    out: dict[str, Entry] = {}
    for key, data in raw.items():
        try:
            entry = Entry.from_json(data)
            if entry.key != key:
                raise CacheError(f"listed under {key!r} but names itself {entry.key!r}")
            bad = [rel for rel, info in entry.files.items() if not _SHA256.fullmatch(str(info["sha256"]))]
            if bad:
                raise CacheError(f"file {bad[0]!r} has no sha256 hex digest")
            sizes = {rel: info["size"] for rel, info in entry.files.items()}
            bad = [rel for rel, size in sizes.items() if not isinstance(size, int) or isinstance(size, bool)
                   or size < 0]
            if bad:
                raise CacheError(f"file {bad[0]!r} has no size in bytes")
            big = [rel for rel, size in sizes.items() if size > limit]
            if big:
                report.refuse(entry, f"{where}: file {big[0]} declares {too_large(sizes[big[0]], limit)}; "
                                     "nothing of it was read")
                continue
        except (CacheError, TypeError, KeyError) as exc:
            name = data.get("name", "?") if isinstance(data, Mapping) else "?"
            report.refuse({"key": key, "name": name}, f"{where}: malformed metadata ({exc})")
            continue
        out[key] = entry
    return out


def bytes_problem(data: bytes, info: Mapping[str, Any]) -> str | None:
    """Why `data` is not the file `info` ({sha256, size}) records, or None if it is."""
    if len(data) != int(info["size"]):
        return f"has {len(data)} bytes, its metadata records {info['size']}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != info["sha256"]:
        return f"sha256 mismatch (recorded {str(info['sha256'])[:16]}, received {digest[:16]})"
    return None


def stage_file(staging: Path, rel: str, data: bytes) -> None:
    """Write one verified file into a staging dir (`rel` was validated by Entry.from_json)."""
    path = staging.joinpath(*rel.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as f:
        f.write(data)


def runtime_missing(entry: Entry, store: CacheStore, arriving: set[str]) -> str | None:
    """Why a kernel cannot be published next to its runtime library, or None if it can."""
    rkey = runtime_key_of(entry)
    if rkey is None or rkey in arriving or store.get(rkey) is not None:
        return None
    return f"its runtime library [{rkey[:12]}] is neither in the cache nor among the verified arrivals"


def load_local_files(store: CacheStore, entry: Entry) -> dict[str, bytes] | str:
    """{rel: bytes} of a local entry, each checked against its metadata; or why it cannot be sent."""
    directory = store.entry_dir(entry)
    out: dict[str, bytes] = {}
    limit = max_artifact_bytes()
    for rel, info in sorted(entry.files.items()):
        path = directory.joinpath(*rel.split("/"))
        if path.is_symlink():
            return f"local file {rel} is a symlink"
        try:
            data = read_regular(path, limit, limit_env=ARTIFACT_LIMIT_ENV)
        except OSError as exc:
            return f"local file {rel} is unreadable ({exc.strerror or exc})"
        problem = bytes_problem(data, info)
        if problem:
            return f"local file {rel} {problem}; run `kernelforge cache repair --cache {store.root}`"
        out[rel] = data
    return out


def same_files(a: Entry, b: Entry) -> bool:
    """Whether two entries of one key hold the same files with the same bytes."""
    return ({rel: str(i["sha256"]) for rel, i in a.files.items()}
            == {rel: str(i["sha256"]) for rel, i in b.files.items()})


def quarantine_conflict(store: CacheStore, held: Entry, entry: Entry, files: dict[str, bytes] | Path | str,
                        source: str, report: TransferReport) -> None:
    """Refuse an incoming entry whose key the cache holds with other bytes: the cache keeps its own
    entry (a later date means nothing), the incoming copy goes to quarantine/ for inspection
    (in a dry run, `report.dry_run`, it is only reported)."""
    where = "; the incoming copy would go to quarantine/" if report.dry_run else ""
    if not isinstance(files, str) and not report.dry_run:
        if isinstance(files, Path):  # a staging dir already holding the verified files
            staging = files
        else:
            staging = store.staging_dir()
            for rel, data in files.items():
                stage_file(staging, rel, data)
        moved = store.quarantine(staging, f"conflict: incoming {entry.name} [{entry.key}] from {source} has sha256 "
                                          f"{entry.sha256}; this cache keeps its own entry (sha256 {held.sha256})")
        where = f"; the incoming copy is in {moved}"
    report.refuse(entry, f"CONFLICT: this cache holds the key with other bytes (sha256 {held.sha256[:16]}, "
                         f"incoming {entry.sha256[:16]}); its own entry is kept{where}")


def publish_staged(store: CacheStore, entry: Entry, staging: Path) -> Entry:
    """Publish a staging dir holding exactly `entry`'s verified files as `entry` (its metadata kept,
    `created` becomes the time it arrived). Consumes `staging`."""
    try:
        return store.publish(entry.key, staging, **{f: getattr(entry, f) for f in _PUBLISH_FIELDS})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
