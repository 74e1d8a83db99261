"""The versioned on-disk artifact cache: layout, index, store, verify, stats, clean.

Imports neither torch nor cutlass. Exports load lazily so that the runtime's one read,
`load_index_for_runtime`, does not pay for the store, locks or reports.
"""
from __future__ import annotations

from kernelforge.lazy import lazy_exports

_EXPORTS = {
    "CleanReport": "cleaning", "clean": "cleaning", "Entry": "entry", "load_index_for_runtime": "index",
    "SCHEMA_VERSION": "layout", "Layout": "layout", "StatsReport": "statistics", "stats": "statistics",
    "CacheStore": "store", "Store": "store",
    "Problem": "verification", "VerifyReport": "verification", "verify": "verification",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
