"""Rebuild a damaged cache's index from what is on disk; quarantine what cannot be proven intact.

Every entry directory holds a meta.json written with its files. Repair re-hashes each entry
against its own meta.json: intact entries (indexed or not) make up the new index, damaged ones
move to quarantine/ (never deleted), index entries with no directory are dropped (a build
recreates them). It also removes group/other write permission from files the caller owns and
rewrites the dispatch views. Running it twice changes nothing the second time.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.maintenance.verification import (
    entry_file_problems,
    revoked_arrivals,
    special_files,
    trust_problems,
    unproven_arrivals,
    view_problems,
)
from kernelforge.cache.read.entry import Entry
from kernelforge.cache.read.index import read_index_checked, write_index
from kernelforge.cache.read.origin import origin_of
from kernelforge.cache.read.signing import SigningError, trusted_keys
from kernelforge.cache.store import CacheStore
from kernelforge.errors import CacheError


@dataclass
class RepairReport:
    """What `repair` did."""

    root: Path
    kept: int = 0
    reindexed: list[str] = field(default_factory=list)  # names of intact entries the index had lost
    quarantined: list[tuple[str, str, Path]] = field(default_factory=list)  # (name, reason, where)
    dropped: list[str] = field(default_factory=list)  # indexed names whose directory is gone
    permissions_fixed: list[Path] = field(default_factory=list)
    index_problem: str | None = None  # what was wrong with the index itself
    unfixable: list[str] = field(default_factory=list)  # e.g. files owned by another user
    views_rewritten: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.reindexed or self.quarantined or self.dropped or self.permissions_fixed
                    or self.index_problem or self.views_rewritten)

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "kept": self.kept, "reindexed": self.reindexed,
                "quarantined": [{"name": n, "reason": r, "to": str(p)} for n, r, p in self.quarantined],
                "dropped": self.dropped, "permissions_fixed": [str(p) for p in self.permissions_fixed],
                "index_problem": self.index_problem, "unfixable": self.unfixable,
                "views_rewritten": self.views_rewritten}


def repair(store: CacheStore) -> RepairReport:
    """Make the index, the views and the permissions agree with the intact entries on disk."""
    report = RepairReport(root=store.root)
    layout = store.layout
    with store._index_lock():
        # FIFOs, sockets and devices are never opened: outside entry directories (an index.json,
        # a view, config.json) they go to quarantine/ first; in an entry directory they make the
        # entry damaged below, and what is left of them (in an intact entry) goes afterwards.
        _quarantine_special(store, report, outside_entries=True)
        raw, report.index_problem = read_index_checked(layout.index)
        indexed: dict[str, Entry] = {}
        for key, data in raw.items():
            try:
                entry = Entry.from_json(data)
                if entry.key == key:
                    indexed[key] = entry
                    continue
            except (CacheError, TypeError, ValueError, KeyError):
                pass
            report.dropped.append(f"{data.get('name', key) if isinstance(data, dict) else key} (malformed index entry)")
        entries: dict[str, dict[str, Any]] = {}
        for directory in layout.artifact_dirs():
            meta, why = store.read_meta_checked(directory)
            if meta is None:
                _quarantine(store, report, directory.name, directory,
                            f"no usable meta.json naming this directory ({why})")
                continue
            problems = entry_file_problems(store, meta, directory)
            if problems:
                _quarantine(store, report, meta.name, directory,
                            "; ".join(" ".join(x for x in p if x) for p in problems))
                continue
            entries[meta.key] = meta.to_json()
            if meta.key in indexed and indexed[meta.key].to_json() == meta.to_json():
                report.kept += 1
            else:
                report.reindexed.append(meta.name)
        arrived = {k: Entry.from_json(d) for k, d in entries.items() if origin_of(d.get("extra"))}
        unproven, bad_manifests = unproven_arrivals(store, arrived)
        unproven.update(revoked_arrivals({k: e for k, e in arrived.items() if k not in unproven}, _trusted_or_none()))
        for file, why in bad_manifests:
            _quarantine(store, report, file, layout.schema_root / file, why)
        for key, why in unproven.items():
            data = entries.pop(key)
            _quarantine(store, report, data["name"], layout.entry_dir(key, data["kind"]), why)
            if data["name"] in report.reindexed:
                report.reindexed.remove(data["name"])
            elif key in indexed:
                report.kept -= 1
        report.dropped.extend(e.name for k, e in indexed.items() if k not in entries
                              and not any(q[0] == e.name for q in report.quarantined))
        _quarantine_special(store, report, outside_entries=False)
        _fix_permissions(store, report)
        stale_views = not report.index_problem and bool(view_problems(store, raw))
        if report.changed or stale_views or (not layout.index.exists() and entries):
            write_index(layout.index, entries, check_groups=True)
            report.views_rewritten = stale_views
    store.delete_orphans(p for p in store.orphans() if p.parent == layout.tmp)
    return report


def _trusted_or_none():
    """The configured trusted keys, or None where they are unusable (verify reports that; repair
    then quarantines nothing for revocation)."""
    try:
        return trusted_keys()
    except SigningError:
        return None


def _quarantine(store: CacheStore, report: RepairReport, name: str, directory: Path, reason: str) -> None:
    report.quarantined.append((name, reason, store.quarantine(directory, reason)))


def _quarantine_special(store: CacheStore, report: RepairReport, *, outside_entries: bool) -> None:
    """Move FIFOs, sockets and devices to quarantine/ (those outside entry directories only, or all)."""
    entry_dirs = set(store.layout.artifact_dirs()) if outside_entries else set()
    for path, kind in special_files(store):
        if entry_dirs and any(parent in entry_dirs for parent in path.parents):
            continue
        rel = path.relative_to(store.root).as_posix()
        _quarantine(store, report, rel, path, f"{rel} is {kind}, not a regular file")


def _fix_permissions(store: CacheStore, report: RepairReport) -> None:
    me = os.geteuid()
    for path, problem in trust_problems(store):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != me or stat.S_ISLNK(st.st_mode):
            report.unfixable.append(f"{path} {problem}")
            continue
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
        report.permissions_fixed.append(path)
