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
for its bytes, or the source is allowed unsigned (`kernelforge.cache.provenance`); the
destination records its origin and keeps the manifests. A refused entry (conflict, unsigned,
damaged source entry, or a kernel whose runtime library is in neither cache) is never
published; the other entries still are, each one complete.
"""
from __future__ import annotations

import os
import shutil
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kernelforge.cache.entry import Entry
from kernelforge.cache.index import read_index_checked
from kernelforge.cache.provenance import Authority, SourceCheck
from kernelforge.cache.signing import SIGNATURES_DIR, read_manifests
from kernelforge.cache.store import CacheStore, sha256_file
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


def _stage_copy(source: CacheStore, entry: Entry, dest: CacheStore) -> tuple[Path | None, str]:
    """Copy the entry's listed files into a fresh staging dir of `dest` and check them against
    the source's record; (staging dir, "") or (None, why not)."""
    meta = source.read_meta(source.entry_dir(entry))
    if meta is None or meta.to_json() != entry.to_json():
        return None, "its meta.json is missing or disagrees with the source index"
    staging = dest.staging_dir()
    for rel, (sha, size) in sorted(_file_digests(entry.files).items()):
        src = source.entry_dir(entry) / rel
        target = staging / rel
        try:
            if not stat.S_ISREG(os.lstat(src).st_mode):
                raise CacheError("not a regular file")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target, follow_symlinks=False)
        except (OSError, CacheError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return None, f"file {rel} unreadable ({exc})"
        found, found_size = sha256_file(target)
        if (found, found_size) != (sha, size):
            shutil.rmtree(staging, ignore_errors=True)
            return None, (f"file {rel} does not match its recorded sha256 (recorded {sha}, "
                          f"{size} bytes; found {found}, {found_size} bytes)")
    return staging, ""


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
    held = dest.get(entry.key)
    published = held is None
    if held is None:
        rkey = entry.extra.get("runtime_key")
        why = check.refusal(entry) if check is not None else None
        if why is not None:
            staging = None
        elif entry.kind == "kernel" and rkey is not None and dest.get(str(rkey)) is None:
            why = f"its runtime library {str(rkey)[:12]} is not in the destination (not merged)"
            staging = None
        else:
            staging, why = _stage_copy(source, entry, dest)
        if staging is None:
            report.refused.append(Refused(source.root, entry.key, entry.name, why))
            return
        # publish keeps an entry another writer published meanwhile: compared below like any other
        held = _publish_copy(dest, check.stamped(entry) if check is not None else entry, staging)
    if _file_digests(held.files) != _file_digests(entry.files):
        report.refused.append(Refused(source.root, entry.key, entry.name, "conflicting bytes for one key",
                                      held.sha256, entry.sha256))
        staging, why = _stage_copy(source, entry, dest)
        if staging is not None:
            report.quarantined.append(str(dest.quarantine(
                staging, f"conflict: incoming {entry.name} [{entry.key}] from {source.root} has sha256 "
                         f"{entry.sha256}; this cache keeps its own entry (sha256 {held.sha256})")))
    else:
        (report.merged if published else report.identical).append(entry.name)


def merge(sources: Iterable[str | os.PathLike[str] | CacheStore], dest: CacheStore,
          authority: Authority | None = None,
          audit: Callable[[Sequence[Entry]], str | None] | None = None) -> MergeReport:
    """Merge every entry of each source cache into `dest` (see the module docstring); `authority`
    defaults to the configured trusted keys with no opt-in for unsigned sources. `audit` (e.g. the
    build layer's `--rebuild-sample` check) sees a source's entries `dest` lacks first; a reason
    it returns refuses every entry of that source.

    Raises CacheError for a source whose index is unusable (before anything of it is merged)."""
    stores = [s if isinstance(s, CacheStore) else CacheStore(s) for s in sources]
    report = MergeReport(dest.root, [s.root for s in stores])
    problem = dest.writable_problem()
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
        with dest.publishing_batch():
            for entry in entries:
                merge_one(source, entry, dest, report, check)
        check.keep_manifests(dest.root)
        report.notes.extend(check.notes)
    dest.refresh_views()
    return report
