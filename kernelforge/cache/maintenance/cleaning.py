"""Remove entries (all, stale toolchain, or stale sources) and orphan directories."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.maintenance.verification import special_files
from kernelforge.cache.store import CacheStore, Store


@dataclass
class CleanReport:
    """What `clean` removed."""

    root: Path
    removed: list[str] = field(default_factory=list)  # keys
    removed_bytes: int = 0
    orphans_removed: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left in place, and why (text output only)

    def to_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "removed": self.removed, "removed_bytes": self.removed_bytes,
                "orphans_removed": [str(p) for p in self.orphans_removed]}


def clean(store: Store, *, all: bool = False, keep_toolchain_id: str | None = None,
          keep_source_hashes: set[str] | None = None, orphans: bool = True, dry_run: bool = False) -> CleanReport:
    """Remove every entry (`all`), or kernels built by another toolchain or from sources not kept
    and the runtime libraries no kept kernel links.

    With no criteria only debris (entry dirs without a usable meta.json, abandoned staging dirs)
    is removed; an intact entry the index lost is kept for `cache repair`.
    Entries leave the index before their directories are deleted, so readers never see half an entry.
    With `dry_run` nothing is touched: the report names what would be removed.
    """
    report = CleanReport(root=store.root)
    doomed = []
    entries = list(store.iter_entries())
    for entry in entries:
        # Tuning tables name builds by tuning values, not by toolchain: they stay until --all
        # (the runtime ignores their choices for ops whose kernel sources changed).
        if all or (entry.kind == "kernel" and (
                (keep_toolchain_id is not None and entry.toolchain_id != keep_toolchain_id)
                or (keep_source_hashes is not None and entry.source_hash not in keep_source_hashes))):
            doomed.append(entry)
    if not all:
        # A runtime library goes only when no kept kernel links it: its toolchain id can
        # change (compile options) while its key, and the kernels that use it, do not.
        gone = {e.key for e in doomed}
        linked = {e.extra.get("runtime_key") for e in entries if e.kind == "kernel" and e.key not in gone}
        doomed.extend(e for e in entries if e.kind == "runtime" and e.key not in linked
                      and keep_toolchain_id is not None and e.toolchain_id != keep_toolchain_id)
    if doomed:
        if not dry_run:
            store.remove(e.key for e in doomed)
        report.removed = [e.key for e in doomed]
        report.removed_bytes = sum(e.size for e in doomed)
    if dry_run:  # the same lists, nothing deleted
        report.orphans_removed = store.orphans() if orphans or all else []
        if all:
            report.orphans_removed += [d for d, _ in store.unindexed() if d not in report.orphans_removed]
    else:
        if orphans or all:
            report.orphans_removed = store.delete_orphans(store.orphans())
        if all:
            report.orphans_removed += store.delete_orphans([d for d, _ in store.unindexed()],
                                                           unindexed_entries=True)
    if isinstance(store, CacheStore):
        # never opened nor waited on; not debris clean may delete (it could be someone's pipe)
        report.notes.extend(f"left {path}: it is {kind}, not a regular file; `kernelforge cache repair` moves it "
                            "to quarantine/" for path, kind in special_files(store))
    return report
