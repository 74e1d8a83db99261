"""The versioned on-disk artifact cache: layout, index, store, verify, stats, clean.

Imports neither torch nor cutlass. Exports load lazily so that the runtime's one read,
`load_index_for_runtime`, does not pay for the store, locks or reports.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CleanReport": "cleaning", "clean": "cleaning", "Entry": "entry", "load_index_for_runtime": "index",
    "SCHEMA_VERSION": "layout", "Layout": "layout", "StatsReport": "statistics", "stats": "statistics",
    "CacheStore": "store", "Store": "store",
    "Problem": "verification", "VerifyReport": "verification", "verify": "verification",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelforge.cache' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kernelforge.cache.{module}"), name)
    globals()[name] = value
    return value
