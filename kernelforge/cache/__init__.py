"""The versioned on-disk artifact cache, laid out by job: the read path, the store, maintenance, transfer.

```
cache/read/          the on-disk format and what the runtime's load path imports; no locks, no reports
    layout.py            where everything lives in a cache root (one schema version per subdirectory)
    entry.py             one entry's metadata (`Entry`)
    fsio.py              file primitives: atomic writes, reads that never open a FIFO, size caps
    trust.py             the trust boundary: which files may be opened, and how (`TrustedRoot`)
    integrity.py         whether an entry's files are the ones it records (sha256, sizes)
    index.py             index.json, the commit marker (`load_index_for_runtime`)
    views.py             the dispatch views: the runtime's per-group read of the index
    origin.py            the origin recorded for an entry that arrived from elsewhere
    usage.py             the runtime's advisory usage log (written by the runtime, read by maintenance)
    layers.py            which cache roots are read, in which order (the user cache, kernel wheels)
    signing.py           ed25519 keys, signed manifests and statements
    wheel_signature.py   a kernel wheel's signature, checked when a process opens it as a layer
    table_schema.py      the schema of a tuning table (an entry of kind "tuning")
cache/store.py       `CacheStore`: the one writer (build publishes through it; so do maintenance
                     and transfer), over read/'s format
cache/maintenance/   keeping one cache healthy: verification, repair, cleaning, gc, statistics,
                     usage_summary (folding the usage logs), keydiff (why a key is not cached)
cache/transfer/      moving entries between caches: common (what push, pull, export and import
                     share), provenance (which arrivals are accepted), merge, bundle, remote, and
                     commands (`run_transfer`: the one body of the four transfer commands)
```

Layers, each importing only those before it: read < store < maintenance < transfer (transfer may
verify what it imported; maintenance never moves entries between caches). The cache imports
nothing above it (release, runtime, ops, build, cli, families, tuner); only kernelforge.config,
errors, formats, registry and lazy. Neither torch nor cutlass is imported. Exports load lazily
so that the runtime's one read, `load_index_for_runtime`, does not pay for the store, locks or
reports.
"""
from __future__ import annotations

from kernelforge.lazy import lazy_exports

_EXPORTS = {
    "CleanReport": "maintenance.cleaning", "clean": "maintenance.cleaning", "Entry": "read.entry",
    "load_index_for_runtime": "read.index", "SCHEMA_VERSION": "read.layout", "Layout": "read.layout",
    "StatsReport": "maintenance.statistics", "stats": "maintenance.statistics",
    "CacheStore": "store", "Store": "store",
    "Problem": "maintenance.verification", "VerifyReport": "maintenance.verification",
    "verify": "maintenance.verification",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
