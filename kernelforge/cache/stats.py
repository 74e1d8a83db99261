"""What is in the cache: entry counts and bytes, in total and grouped (advisory, like `ccache -s`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelforge.cache.layout import SCHEMA_VERSION
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
    by_kind_op_arch: dict[tuple[str, str, str], Group] = field(default_factory=dict)
    by_toolchain: dict[str, Group] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (tuple keys become row objects)."""
        return {
            "root": str(self.root), "schema": self.schema, "entries": self.entries,
            "bytes": self.bytes, "orphans": self.orphans,
            "by_kind_op_arch": [
                {"kind": k, "op": o, "arch": a, "entries": g.entries, "bytes": g.bytes}
                for (k, o, a), g in sorted(self.by_kind_op_arch.items())
            ],
            "by_toolchain": [
                {"toolchain_id": t, "entries": g.entries, "bytes": g.bytes}
                for t, g in sorted(self.by_toolchain.items())
            ],
        }


def stats(store: Store) -> StatsReport:
    """Count entries and bytes from the index (no re-hashing; sizes are as recorded at publish)."""
    report = StatsReport(root=store.root)
    for entry in store.iter_entries():
        size = entry.size
        report.entries += 1
        report.bytes += size
        for group in (report.by_kind_op_arch.setdefault((entry.kind, entry.op, entry.arch), Group()),
                      report.by_toolchain.setdefault(entry.toolchain_id, Group())):
            group.entries += 1
            group.bytes += size
    report.orphans = len(store.orphans())
    return report
