"""What is in the cache: entry counts and bytes, in total and grouped (advisory, like `ccache -s`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.maintenance.gc import tree_bytes
from kernelforge.cache.maintenance.usage_summary import read_usage
from kernelforge.cache.read.layout import SCHEMA_VERSION
from kernelforge.cache.store import Store


@dataclass
class Group:
    """Entries and bytes of one group."""

    entries: int = 0
    bytes: int = 0


@dataclass
class StatsReport:
    """Totals plus groups by (kind, op, arch) and by toolchain_id."""

    root: Path
    schema: int = SCHEMA_VERSION
    entries: int = 0
    bytes: int = 0
    orphans: int = 0
    stale: int | None = None  # kernels this kernelforge would never serve (None: not checked)
    tree_bytes: int = 0  # every file under the root (index, views, usage, locks, tmp, quarantine too)
    disk_bytes: int = 0  # the same as du counts it (allocated blocks)
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # op -> hit/miss/load (advisory)
    by_kind_op_arch: dict[tuple[str, str, str], Group] = field(default_factory=dict)
    by_toolchain: dict[str, Group] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (tuple keys become row objects)."""
        return {
            "root": str(self.root), "schema": self.schema, "entries": self.entries,
            "bytes": self.bytes, "orphans": self.orphans, "stale": self.stale,
            "tree_bytes": self.tree_bytes, "disk_bytes": self.disk_bytes, "usage": self.usage,
            "by_kind_op_arch": [
                {"kind": k, "op": o, "arch": a, "entries": g.entries, "bytes": g.bytes}
                for (k, o, a), g in sorted(self.by_kind_op_arch.items())
            ],
            "by_toolchain": [
                {"toolchain_id": t, "entries": g.entries, "bytes": g.bytes}
                for t, g in sorted(self.by_toolchain.items())
            ],
        }


def stats(store: Store, *, keep_toolchain_id: str | None = None,
          keep_source_hashes: set[str] | None = None) -> StatsReport:
    """Count entries and bytes from the index (no re-hashing; sizes are as recorded at publish),
    the whole tree's size (apparent and as du counts it), the advisory usage counters per op, and
    (given what this kernelforge serves) the stale kernels `clean --stale` would remove."""
    report = StatsReport(root=store.root)
    check = keep_toolchain_id is not None or keep_source_hashes is not None
    report.stale = 0 if check else None
    for entry in store.iter_entries():
        if check and entry.kind == "kernel" and (
                (keep_toolchain_id is not None and entry.toolchain_id != keep_toolchain_id)
                or (keep_source_hashes is not None and entry.source_hash not in keep_source_hashes)):
            report.stale += 1  # type: ignore[operator]
        size = entry.size
        report.entries += 1
        report.bytes += size
        for group in (report.by_kind_op_arch.setdefault((entry.kind, entry.op, entry.arch), Group()),
                      report.by_toolchain.setdefault(entry.toolchain_id, Group())):
            group.entries += 1
            group.bytes += size
    report.orphans = len(store.orphans())
    report.tree_bytes, report.disk_bytes = tree_bytes(store.root)
    report.usage = read_usage(store.root).counts
    return report
