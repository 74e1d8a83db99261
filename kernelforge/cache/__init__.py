"""The versioned on-disk artifact cache: layout, index, store, verify, stats, clean.

Imports neither torch nor cutlass; the runtime's only read is `load_index_for_runtime`.
"""
from kernelforge.cache.clean import CleanReport, clean
from kernelforge.cache.entry import Entry
from kernelforge.cache.index import load_index_for_runtime
from kernelforge.cache.layout import SCHEMA_VERSION, Layout
from kernelforge.cache.stats import StatsReport, stats
from kernelforge.cache.store import CacheStore, Store
from kernelforge.cache.verify import Problem, VerifyReport, verify

__all__ = [
    "SCHEMA_VERSION", "CacheStore", "CleanReport", "Entry", "Layout", "Problem", "StatsReport", "Store",
    "VerifyReport", "clean", "load_index_for_runtime", "stats", "verify",
]
