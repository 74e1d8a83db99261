"""Which build of a K-class serves a call: the GPU tuning table, else a documented heuristic.

The candidates of one dispatch group and K-class differ only in their tuning axes (threads per
CTA, elements per thread, ...); all compute identical bytes, they differ in speed. `kernelforge
tune` times them on a GPU for each bucket of M and stores the winners as a tuning table in the
cache. The runtime uses the newest table measured on a device of the same name and arch that
covers the call (older ones where a newer, partial table does not), for the ops whose kernel
sources match the table's; otherwise `heuristic_rank` decides, through the op family's
heuristic (`OpFamily.heuristic`). Each family states its heuristic in the `heuristic` function
of its family.py (kernelforge/families/<name>/family.py); docs/performance.md has the measurements.
"""
from __future__ import annotations

import json
from bisect import bisect_left
from pathlib import Path
from typing import Any, Mapping

from ..cache.read.table_schema import (  # noqa: F401  (SCHEMA, M_BUCKETS: re-exported)
    M_BUCKETS,
    SCHEMA,
    STAGING_OPS,
    validate_table,
)
from ..registry import builtin_families, find_family
from ..sources import source_hash

BUCKET_SAMPLE_M = (128, 2048, 16384)  # the M that `kernelforge tune` times for each bucket
# The built-in ops that have tuning axes, and those axes (from their op families).
TUNING_AXES = {name: f.tuning_axes for name, f in builtin_families().items() if f.tuning_axes}


def m_bucket(m: int) -> int:
    """Index of the M bucket of a call with m rows."""
    return bisect_left(M_BUCKETS, m)


def tuning_values(op: str, axes: Mapping[str, Any]) -> dict[str, Any]:
    """The tuning-axis values of a build (its variant axes minus the dispatch axes)."""
    fam = find_family(op)
    return {a: axes.get(a) for a in (fam.tuning_axes if fam is not None else ())}


def heuristic_rank(op: str, max_k: int, values: Mapping[str, Any]) -> tuple:
    """Sort key of a candidate when no tuning table applies: the smallest is chosen (the op
    family's heuristic; () for an op without one)."""
    fam = find_family(op)
    return fam.rank(max_k, values) if fam is not None else ()


class TuningTable:
    """A parsed tuning table: (group, K-class, M bucket) -> the winning tuning values."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        """Raises TableSchemaError (a ValueError) naming the key path of `data` that is wrong
        (`kernelforge.cache.read.table_schema`)."""
        validate_table(data)
        self.device: str = data["device"]
        self.arch: str = data["arch"]
        self.sources: dict[str, str] = dict(data["sources"])
        self.choices: dict[str, dict[str, list[dict[str, Any] | None]]] = data["choices"]
        self.staging: dict[str, int | None] | None = (data["staging"]["min_elements"] if "staging" in data
                                                      else None)

    def choice(self, op: str, group: str, kclass: str, bucket: int) -> dict[str, Any] | None:
        """The tuned values for this call, or None (not tuned, or built from other sources)."""
        if self.sources.get(op) != source_hash(op):
            return None
        per_bucket = self.choices.get(group, {}).get(kclass)
        if not per_bucket or bucket >= len(per_bucket):
            return None
        return per_bucket[bucket]

    def staging_rule(self) -> dict[str, int | None] | None:
        """The columnwise op's staged linear-scale rule measured on this card ("<format>.<outputs>"
        -> smallest input in elements, or None: never staged), or None: the table has none, or
        measured it on other kernel sources of either op it rests on."""
        if self.staging is None or any(self.sources.get(op) != source_hash(op) for op in STAGING_OPS):
            return None
        return self.staging

    @classmethod
    def read(cls, path: str | Path) -> TuningTable:
        """The table in the file `path`: OSError (a FIFO or device is never opened, see
        `kernelforge.cache.read.fsio.read_regular`), ValueError if it is not JSON or not a table."""
        from ..cache.read.fsio import read_regular

        return cls(json.loads(read_regular(path, follow=True)))


def table_entries_for(entries: list[dict[str, Any]], device: str, arch_name: str, op: str) -> list[dict[str, Any]]:
    """Tuning-table cache entries measured on `device` for `arch_name` on the kernel sources of
    `op` that this package ships, newest measurement first."""
    want = source_hash(op)
    mine = []
    for e in entries:
        variant = e.get("variant")
        axes = variant.get("axes") if isinstance(variant, dict) else None
        axes = axes if isinstance(axes, dict) else {}
        sources = axes.get("sources")
        if (axes.get("device") == device and axes.get("arch") == arch_name and isinstance(sources, dict)
                and sources.get(op) == want):
            mine.append((str(axes.get("measured", "")), str(e.get("created", "")), e))
    return [t[2] for t in sorted(mine, key=lambda t: t[:2], reverse=True)]
