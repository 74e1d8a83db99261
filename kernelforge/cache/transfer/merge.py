"""Merge caches (e.g. the shards of a release build) into one, through the destination's publish.

For each source entry (runtime libraries first, then kernels and tuning tables): its meta.json
must agree with the source index; its listed files are copied into a staging dir under the
destination's tmp/ and the copies must match the recorded sizes and sha256, so what is checked
is what gets published. Then:

* a key the destination lacks is published (atomically, index last, like a build);
* a key the destination has with the same files (same sha256 each) is skipped;
* a key the destination has with other bytes is a conflict: it is refused and reported with
  both sha256s, and the destination's entry stays as it was.

* a key the destination has with other bytes is a conflict: the incoming copy is moved to the
  destination's quarantine/ (with REASON.txt) and never served, whatever its `created` date.

An entry the destination lacks is published only if a manifest signed by a trusted key vouches
for its bytes, or the source is allowed unsigned (`kernelforge.cache.transfer.provenance`); the
destination records its origin and keeps the manifests. A refused entry (conflict, unsigned,
damaged source entry, or a kernel whose runtime library is in neither cache) is never
published; the other entries still are, each one complete.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kernelforge.cache.maintenance.verification import special_files
from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.fsio import (
    DestinationWriteError,
    copy_regular,
    hash_stream,
    max_artifact_bytes,
    open_regular,
    too_large,
    write_failure,
)
from kernelforge.cache.read.index import read_index_checked
from kernelforge.cache.read.signing import SIGNATURES_DIR, read_manifests
from kernelforge.cache.store import CacheStore
from kernelforge.cache.transfer.provenance import Authority, SourceCheck
from kernelforge.errors import CacheError

_KIND_ORDER = {"runtime": 0, "kernel": 1, "tuning": 2}  # a kernel is merged only after its runtime


@dataclass(frozen=True)
class Refused:
    """A source entry that was not merged, and why."""

    source: Path
    key: str
    name: str
    reason: str
    dest_sha256: str = ""  # set for conflicts
    source_sha256: str = ""

    @property
    def conflict(self) -> bool:
        return bool(self.dest_sha256)

    def __str__(self) -> str:
        shas = (f" (destination sha256 {self.dest_sha256}, source sha256 {self.source_sha256})"
                if self.conflict else "")
        return f"{self.name} [{self.key}] from {self.source}: {self.reason}{shas}"


@dataclass
class MergeReport:
    """What `merge` did: names merged, names already present with identical bytes, refusals."""

    dest: Path
    sources: list[Path]
    merged: list[str] = field(default_factory=list)
    identical: list[str] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)  # where conflicting incoming copies went
    dry_run: bool = False  # nothing was written: `merged` names what would be published
    would_publish: dict[str, Entry] = field(default_factory=dict)  # dry run: key -> entry it would publish

    @property
    def ok(self) -> bool:
        return not self.refused

    @property
    def conflicts(self) -> list[Refused]:
        return [r for r in self.refused if r.conflict]

    def to_dict(self) -> dict[str, Any]:
        return {"dest": str(self.dest), "sources": [str(s) for s in self.sources], "ok": self.ok,
                "merged": len(self.merged), "identical": len(self.identical),
                "conflicts": len(self.conflicts), "refused": [{**vars(r), "source": str(r.source)}
                                                             for r in self.refused],
                "quarantined": self.quarantined, "notes": self.notes}


def _file_digests(files: dict[str, dict[str, Any]]) -> dict[str, tuple[str, int]]:
    return {rel: (str(info["sha256"]), int(info["size"])) for rel, info in files.items()}


def _source_entries(source: CacheStore) -> tuple[list[Entry], list[tuple[str, str, str]]]:
    """The source's indexed entries (merge order) and its malformed ones as (key, name, reason)."""
    raw, problem = read_index_checked(source.layout.index)
    if problem:
        raise CacheError(f"source cache {source.root}: {problem}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each malformed entry is reported below
        entries = source.index(fresh=True)
    bad = [(key, str(data.get("name", "?")) if isinstance(data, dict) else "?",
            "malformed index entry (wrong path, names or fields)") for key, data in raw.items() if key not in entries]
    ordered = sorted(entries.values(), key=lambda e: (_KIND_ORDER.get(e.kind, 9), e.name, e.key))
    return ordered, bad


def _stage_copy(source: CacheStore, entry: Entry, dest: CacheStore,
                dry_run: bool = False) -> tuple[Path | None, str]:
    """Copy the entry's listed files into a fresh staging dir of `dest` and check them against
    the source's record; (staging dir, "") or (None, why not). With `dry_run` the same checks run
    on the source's files in place and nothing is written: (None, "") when they pass."""
    meta, why = source.read_meta_checked(source.entry_dir(entry))
    if meta is None or meta.to_json() != entry.to_json():
        return None, (f"its meta.json is unusable ({why})" if meta is None
                      else "its meta.json disagrees with the source index")
    limit = max_artifact_bytes()
    big = [(rel, size) for rel, (_, size) in sorted(_file_digests(entry.files).items()) if size > limit]
    if big:
        return None, f"file {big[0][0]} is {too_large(big[0][1], limit)}"
    if dry_run:
        return None, _check_in_place(source, entry, limit)
    staging = dest.staging_dir()
    for rel, (sha, size) in sorted(_file_digests(entry.files).items()):
        src = source.entry_dir(entry) / rel
        target = staging / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # never opens a FIFO or device, never follows a symlink; hashes what it writes
            found, found_size = copy_regular(src, target, limit=limit)
        except DestinationWriteError:
            shutil.rmtree(staging, ignore_errors=True)
            raise  # the destination cannot take it (a full disk): the merge stops (see `merge`)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return None, f"file {src} unreadable ({exc.strerror or exc})"
        if (found, found_size) != (sha, size):
            shutil.rmtree(staging, ignore_errors=True)
            return None, (f"file {rel} does not match its recorded sha256 (recorded {sha}, "
                          f"{size} bytes; found {found}, {found_size} bytes)")
    return staging, ""


def _check_in_place(source: CacheStore, entry: Entry, limit: int) -> str:
    """`_stage_copy`'s file checks for a dry run, on the source's files (opened as `copy_regular`
    opens them: never a FIFO, device or symlink): "" if each matches its recorded sha256 and size."""
    for rel, (sha, size) in sorted(_file_digests(entry.files).items()):
        src = source.entry_dir(entry) / rel
        try:
            fd, _ = open_regular(src, limit=limit)
            try:
                found, found_size = hash_stream(lambda n, fd=fd: os.read(fd, n), limit=limit)
            finally:
                os.close(fd)
        except OSError as exc:
            return f"file {src} unreadable ({exc.strerror or exc})"
        if (found, found_size) != (sha, size):
            return (f"file {rel} does not match its recorded sha256 (recorded {sha}, "
                    f"{size} bytes; found {found}, {found_size} bytes)")
    return ""


def _publish_copy(dest: CacheStore, entry: Entry, staging: Path) -> Entry:
    """Publish a checked staging copy under the entry's key; the entry `dest` then holds."""
    data = entry.to_json()
    for name in ("key", "files", "created", "path"):  # publish records these itself
        data.pop(name)
    try:
        return dest.publish(entry.key, staging, **data)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def merge_one(source: CacheStore, entry: Entry, dest: CacheStore, report: MergeReport,
              check: SourceCheck | None = None) -> None:
    """Merge one source entry into `dest`, recording the outcome in `report`."""
    # The parsed index is reused while index.json is unchanged (each write replaces it), and includes
    # what a publishing batch has moved into place but not yet indexed.
    # A dry run (report.dry_run) takes the same decisions, treating what it would have published as held.
    held = dest.get(entry.key) or report.would_publish.get(entry.key)
    published = held is None
    if held is None:
        rkey = entry.extra.get("runtime_key")
        why = check.refusal(entry) if check is not None else None
        if why is not None:
            staging = None
        elif (entry.kind == "kernel" and rkey is not None and dest.get(str(rkey)) is None
              and str(rkey) not in report.would_publish):
            why = f"its runtime library {str(rkey)[:12]} is not in the destination (not merged)"
            staging = None
        else:
            staging, why = _stage_copy(source, entry, dest, dry_run=report.dry_run)
        if why:
            report.refused.append(Refused(source.root, entry.key, entry.name, why))
            return
        if report.dry_run or staging is None:  # passed every check; nothing is written
            report.would_publish[entry.key] = entry
            report.merged.append(entry.name)
            return
        # publish keeps an entry another writer published meanwhile: compared below like any other
        held = _publish_copy(dest, check.stamped(entry) if check is not None else entry, staging)
    if _file_digests(held.files) != _file_digests(entry.files):
        report.refused.append(Refused(source.root, entry.key, entry.name, "conflicting bytes for one key",
                                      held.sha256, entry.sha256))
        if report.dry_run:  # the incoming copy would go to quarantine/
            return
        staging, why = _stage_copy(source, entry, dest)
        if staging is not None:
            report.quarantined.append(str(dest.quarantine(
                staging, f"conflict: incoming {entry.name} [{entry.key}] from {source.root} has sha256 "
                         f"{entry.sha256}; this cache keeps its own entry (sha256 {held.sha256})")))
    else:
        (report.merged if published else report.identical).append(entry.name)


def merge(sources: Iterable[str | os.PathLike[str] | CacheStore], dest: CacheStore,
          authority: Authority | None = None,
          audit: Callable[[Sequence[Entry]], str | None] | None = None, *, dry_run: bool = False) -> MergeReport:
    """Merge every entry of each source cache into `dest` (see the module docstring); `authority`
    defaults to the configured trusted keys with no opt-in for unsigned sources. `audit` (e.g. the
    build layer's `--rebuild-sample` check) sees a source's entries `dest` lacks first; a reason
    it returns refuses every entry of that source.

    With `dry_run` every check runs (signatures, runtime libraries, the source's files re-hashed in
    place, conflicts) and nothing is written to `dest`: the report names what would be merged.

    Raises CacheError for a source whose index is unusable (before anything of it is merged)."""
    stores = [s if isinstance(s, CacheStore) else CacheStore(s) for s in sources]
    report = MergeReport(dest.root, [s.root for s in stores], dry_run=dry_run)
    problem = None if dry_run else dest.writable_problem()
    if problem:
        raise CacheError(problem)
    for source in stores:
        if not source.root.is_dir():
            raise CacheError(f"source cache {source.root} does not exist")
        if source.root.resolve() == dest.root.resolve():
            raise CacheError(f"source cache {source.root} is the destination itself")
        entries, bad = _source_entries(source)
        report.refused.extend(Refused(source.root, key, name, reason) for key, name, reason in bad)
        reason = audit([e for e in entries if dest.get(e.key) is None]) if audit is not None else None
        if reason is not None:
            report.refused.extend(Refused(source.root, e.key, e.name, reason) for e in entries)
            continue
        check = (authority or Authority.configured()).for_source(str(source.root), "merge")
        check.add_manifests(read_manifests(source.layout.schema_root / SIGNATURES_DIR))
        report.notes.extend(f"source cache {source.root}: {path} is {kind}, not a regular file: never read "
                            "(`kernelforge cache repair` there moves it to quarantine/)"
                            for path, kind in special_files(source))
        try:
            with dest.publishing_batch() if not dry_run else contextlib.nullcontext():
                for entry in entries:
                    merge_one(source, entry, dest, report, check)
            if not dry_run:
                check.keep_manifests(dest.root)
        except OSError as exc:  # the destination's disk is full, ...: stop, one line (CLI exit 2)
            raise CacheError(f"{write_failure(exc, f'the destination cache {dest.root}')}; the merge stopped after "
                             f"{len(report.merged)} merged entries, each complete (`kernelforge cache verify "
                             f"--cache {dest.root}` checks them, `cache repair` indexes any it names)") from None
        report.notes.extend(check.notes)
    if not dry_run:
        dest.refresh_views()
    return report
