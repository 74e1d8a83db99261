"""`kernelforge build --check-reproducible`: rebuild a sample of cached artifacts and compare bytes.

A sample of the selection's cached variants, plus the shared runtime library, is rebuilt by
the normal driver into a private temporary cache root (another path, other staging dirs) and
each rebuilt file is compared with the cached file's bytes on disk. Equal bytes under equal
keys are what lets shards built on different machines be merged (`kernelforge cache merge`).
"""
from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..cache import CacheStore, Entry
from ..cache.store import sha256_file
from ..sources import source_hash
from .driver import build_variants
from .keys import runtime_key, variant_key
from .shard import shard_of
from .toolchain import toolchain

OK, DIFFERS, FAILED = "OK", "DIFFERS", "FAILED"


@dataclass
class ReproResult:
    """One artifact: the cached and rebuilt sha256 of its main file, and the verdict."""

    name: str
    key: str
    status: str
    cached_sha256: str = ""
    rebuilt_sha256: str = ""
    detail: str = ""


@dataclass
class ReproReport:
    """What `check_reproducible` compared (`cached` = how many selected variants were cached)."""

    results: list[ReproResult] = field(default_factory=list)
    cached: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.status == OK for r in self.results)


def sample_cached(keyed: Sequence[tuple[Any, str]], store: CacheStore, n: int,
                  seed: int = 0) -> tuple[list[tuple[Any, str]], int]:
    """(A sample of at most `n` of the (variant, key) pairs cached in `store`, how many were cached).

    Seeded, and drawn from the pairs sorted by key, so the same cache gives the same sample."""
    cached = sorted(((v, k) for v, k in keyed if store.get(k) is not None), key=lambda p: p[1])
    picked = random.Random(seed).sample(cached, min(n, len(cached)))
    return sorted(picked, key=lambda p: p[1]), len(cached)


def compare_entry(cached_store: CacheStore, cached: Entry, rebuilt_store: CacheStore,
                  rebuilt: Entry | None) -> ReproResult:
    """Compare the cached entry's files on disk with a rebuilt entry's."""
    on_disk = {rel: sha256_file(cached_store.entry_dir(cached) / rel)[0] for rel in cached.files}
    main = on_disk.get(cached.main_file, "")
    if rebuilt is None:
        return ReproResult(cached.name, cached.key, FAILED, main, detail="the rebuild produced no entry")
    fresh = {rel: sha256_file(rebuilt_store.entry_dir(rebuilt) / rel)[0] for rel in rebuilt.files}
    differing = sorted(rel for rel in on_disk.keys() | fresh.keys() if on_disk.get(rel) != fresh.get(rel))
    tampered = sorted(rel for rel, sha in on_disk.items() if sha != cached.files[rel]["sha256"])
    detail = "; ".join(filter(None, [
        f"files differ: {', '.join(differing)}" if differing else "",
        f"cached bytes do not match the cache's own record: {', '.join(tampered)}" if tampered else ""]))
    return ReproResult(cached.name, cached.key, DIFFERS if differing or tampered else OK, main,
                       fresh.get(rebuilt.main_file, ""), detail)


def check_reproducible(variants: Sequence[Any], store: CacheStore, *, sample: int = 4, seed: int = 0,
                       jobs: int | None = None, shard: tuple[int, int] | None = None) -> ReproReport:
    """Rebuild a sample of `variants` cached in `store`, and the runtime library, in a private
    temporary cache root; compare the bytes (see the module docstring)."""
    t0 = time.perf_counter()
    tc = toolchain()
    keyed = shard_of([(v, variant_key(v.canonical(), source_hash(v.op), tc)) for v in variants], shard)
    picked, n_cached = sample_cached(keyed, store, sample, seed)
    report = ReproReport(cached=n_cached)
    if not picked:
        return report
    scratch = CacheStore(Path(tempfile.mkdtemp(prefix="kf-reproducible-")) / "cache")
    try:
        build = build_variants([v for v, _ in picked], scratch, jobs=jobs)
        errors = {r.key: r.error for r in build.results if r.status == "failed"}
        rkey = runtime_key(tc)
        for key in [rkey, *(k for _, k in picked)]:
            cached = store.get(key)
            if cached is None:
                report.results.append(ReproResult(f"runtime-{key[:12]}", key, FAILED,
                                                  detail="not in the cache (built by no build of this toolchain)"))
                continue
            result = compare_entry(store, cached, scratch, scratch.get(key))
            result.detail = errors.get(key, result.detail)
            report.results.append(result)
    finally:
        shutil.rmtree(scratch.root.parent, ignore_errors=True)
    report.seconds = time.perf_counter() - t0
    return report
