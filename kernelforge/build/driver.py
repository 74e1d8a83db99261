"""The parallel build driver: keys for every variant, the shared runtime, then compile workers.

Up-to-date variants are found from the index alone (no compiler import), so a no-op build of
the whole catalog is fast. Missing variants go to worker processes; each worker keeps its
CuTe-DSL import and warm compiler state across many variants. Every variant is built under
its key's lock through `CacheStore.get_or_build`, so concurrent builders never compile a key
twice and a failure leaves nothing behind.

Faults (see pool.py): a worker that dies fails only the variant it was building, and a fresh
worker takes over; an interrupt (Ctrl-C, or `Terminated` raised for SIGTERM) terminates every
worker at once, removes their staging dirs and propagates; workers die with the builder, and
staging dirs left by dead processes are removed by the next build.
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..cache import CacheStore, Entry
from ..cache.store import tmp_dir_is_stale
from ..errors import CacheNotWritable
from ..sources import source_hash
from .freshness import check_selection
from .keys import runtime_key, variant_key
from .pool import WorkerError, WorkerLost, WorkerPool, signals_held
from .shard import shard_of
from .toolchain import current_toolchain_id, toolchain

MODULE_FILE = "module.so"


@dataclass
class VariantResult:
    """Outcome of one variant: "built", "up to date" or "failed" (with the compiler message)."""

    name: str
    status: str
    seconds: float = 0.0
    key: str = ""
    error: str = ""
    coords: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why it was (or would be) built: the key ingredient that changed, or the damage
    peak_rss_mb: float = 0.0  # the compile worker's peak resident set so far (0: not compiled here)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kernelforge/cli/json_schemas.py, kind "build"): the status in snake_case."""
        return {"name": self.name, "status": self.status.replace(" ", "_"), "key": self.key,
                "seconds": round(self.seconds, 3), "peak_rss_mb": round(self.peak_rss_mb, 1), "reason": self.reason,
                "error": self.error}


@dataclass
class BuildReport:
    """What a build did, variant by variant."""

    results: list[VariantResult]
    seconds: float
    cache_root: Path
    runtime_built: bool = False
    stale_removed: int = 0  # staging dirs of dead processes removed at the start
    replaced: list[tuple[str, str]] = field(default_factory=list)  # damaged entries quarantined: (name, why)

    def to_dict(self) -> dict[str, Any]:
        return {"cache_root": str(self.cache_root), "seconds": round(self.seconds, 3),
                "runtime_built": self.runtime_built, "stale_removed": self.stale_removed,
                "replaced": [{"name": n, "reason": r} for n, r in self.replaced],
                "counts": {s.replace(" ", "_"): self.count(s)
                           for s in ("built", "up to date", "failed", "would build")},
                "variants": [r.to_dict() for r in self.results]}

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> list[VariantResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed


def _build_runtime(store: CacheStore, tc: dict[str, Any], tc_id: str) -> tuple[Entry, bool]:
    from .link import link_runtime, runtime_lib_name

    rkey = runtime_key(tc)

    def build(staging: Path) -> dict[str, Any]:
        t0 = time.perf_counter()
        link_runtime(staging, rkey)
        return dict(kind="runtime", op="runtime", name=f"runtime-{rkey[:12]}", variant={},
                    arch="host", toolchain_id=tc_id, toolchain=tc, source_hash="",
                    main_file=runtime_lib_name(rkey), build_time_s=time.perf_counter() - t0)

    return store.get_or_build(rkey, build)


def _compile_one(variant: Any, key: str, root: str, runtime_path: str, runtime_key_: str,
                 tc: dict[str, Any], tc_id: str) -> VariantResult:
    """Worker body: compile, link and publish one variant (runs in a worker process)."""
    store = CacheStore(Path(root))
    t0 = time.perf_counter()

    def build(staging: Path) -> dict[str, Any]:
        from .compile import compile_variant
        from .link import link_module

        obj = staging / "module.o"
        compile_variant(variant, obj)
        final_dir = store.layout.entry_dir(key, "kernel")
        link_module(obj, staging / MODULE_FILE, Path(runtime_path), final_dir)
        obj.unlink()
        return dict(kind="kernel", op=variant.op, name=variant.name, variant=variant.canonical(),
                    arch=variant.arch, toolchain_id=tc_id, toolchain=tc, source_hash=source_hash(variant.op),
                    main_file=MODULE_FILE, build_time_s=time.perf_counter() - t0,
                    extra={"symbol": variant.symbol, "runtime_key": runtime_key_,
                           # what the runtime matches on, so it never needs the spec package
                           "dispatch": {a: variant.get(a) for a in variant.schema.dispatch_axes
                                        if a not in ("arch", variant.schema.kclass_axis)}})

    try:
        _, built = store.get_or_build(key, build)
    except Exception as exc:  # reported per variant; the others still build
        msg = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return VariantResult(variant.name, "failed", time.perf_counter() - t0, key, msg[-4000:],
                             peak_rss_mb=_peak_rss_mb())
    return VariantResult(variant.name, "built" if built else "up to date", time.perf_counter() - t0, key,
                         peak_rss_mb=_peak_rss_mb())


def _peak_rss_mb() -> float:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    except (ImportError, OSError):
        return 0.0


def _worker_init() -> None:
    from .hermetic import pin_compile_env

    pin_compile_env()  # before the DSL reads its environment
    # Import the compiler once per worker: the first compile in a process pays ~1 s of set-up.
    try:
        import cutlass.cute  # noqa: F401
    except Exception:  # each variant's compile then reports the import error by name
        pass


def remove_stale_staging(store: CacheStore) -> int:
    """Remove the staging/trash dirs under tmp/ whose owner is gone (same host, dead pid); return the count.

    Writes nothing when nothing is stale, so a no-op build leaves the cache untouched.
    """
    tmp = store.layout.tmp
    stale = [p for p in sorted(tmp.iterdir()) if p.is_dir() and tmp_dir_is_stale(p)] if tmp.is_dir() else []
    return len(store.delete_orphans(stale)) if stale else 0


def _outcome_result(store: CacheStore, variant: Any, key: str, outcome: Any) -> VariantResult:
    if isinstance(outcome, VariantResult):
        return outcome
    if isinstance(outcome, WorkerLost):
        if store.get(key, fresh=True) is not None:  # it died after publishing: the entry is complete
            return VariantResult(variant.name, "built", 0.0, key)
        msg = (f"worker process died while building this variant ({outcome.reason}); "
               "nothing was published; build again to retry it")
    elif isinstance(outcome, WorkerError):
        msg = outcome.message
    else:
        msg = f"unexpected worker result {outcome!r}"
    return VariantResult(variant.name, "failed", 0.0, key, msg)


def _compile_all(store: CacheStore, todo: list[tuple[Any, str]], args: tuple[Any, ...], jobs: int,
                 report: Callable[[VariantResult], None], on_begin: Callable[[str], None] | None = None) -> None:
    tasks = [(v, key, *args) for v, key in todo]
    on_send = (lambda i: on_begin(todo[i][0].name)) if on_begin else None
    with WorkerPool(_compile_one, jobs, initializer=_worker_init) as pool:
        for index, outcome in pool.run(tasks, on_send=on_send):
            report(_outcome_result(store, *todo[index], outcome))


def rebuild_reasons(store: CacheStore, plan: Any, tc: dict[str, Any]) -> dict[str, str]:
    """key -> why each variant to build is not up to date (damage, or the key ingredient that
    changed against the nearest cached entry; see cache/maintenance/keydiff.py)."""
    from ..cache.maintenance.keydiff import miss_reason

    damaged = {key: reason for key, _, reason in plan.damaged}
    entries = list(store.index().values()) if plan.todo else []
    out = {}
    for v, key in plan.todo:
        if key in damaged:
            out[key] = f"damaged cached entry: {damaged[key]}"
        else:
            out[key] = miss_reason(entries, v.name, v.op, str(v.get("arch")), v.canonical(), source_hash(v.op), tc)
    return out


def build_variants(
    variants: Sequence[Any],
    store: CacheStore,
    *,
    jobs: int | None = None,
    on_result: Callable[[VariantResult], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    verify: bool = False,
    shard: tuple[int, int] | None = None,
    on_begin: Callable[[str], None] | None = None,
    dry_run: bool = False,
    explain: bool = True,
) -> BuildReport:
    """Build every variant not already in `store` (or damaged there: see freshness.py; `verify`
    re-hashes what is cached); report each variant's outcome.

    With `shard` (I, N), only the variants of that 1-based key partition (see shard.py), and the
    runtime library, which every shard builds.

    `on_begin(name)` is called as a variant is handed to a compile worker. `dry_run` builds and
    writes nothing: the report lists each variant as "up to date" or "would build", with the
    reason (`explain`: the key ingredient that changed, see `rebuild_reasons`)."""
    t0 = time.perf_counter()
    tc = toolchain()
    tc_id = current_toolchain_id()
    keyed = shard_of([(v, variant_key(v.canonical(), source_hash(v.op), tc)) for v in variants], shard)
    plan = check_selection(store, keyed, runtime_key(tc), deep=verify)
    reasons = rebuild_reasons(store, plan, tc) if explain or dry_run else {}
    if dry_run:
        results = [VariantResult(v.name, "up to date", 0.0, key) for v, key in plan.fresh]
        results += [VariantResult(v.name, "would build", 0.0, key, reason=reasons.get(key, "")) for v, key in plan.todo]
        order = {v.name: i for i, v in enumerate(variants)}
        results.sort(key=lambda r: order.get(r.name, 0))
        return BuildReport(results, time.perf_counter() - t0, store.layout.root, False, 0,
                           [(name, reason) for _, name, reason in plan.damaged])
    writable = store.writable_problem() is None
    if plan.writes and not writable:
        raise CacheNotWritable(f"{store.writable_problem()}: {len(plan.todo)} variant(s) to build, "
                               f"{len(plan.damaged)} damaged entr(ies) to replace")
    stale_removed = remove_stale_staging(store) if writable else 0
    plan.quarantine_damaged(store)
    results = [VariantResult(v.name, "up to date", 0.0, key) for v, key in plan.fresh]
    todo = plan.todo
    if on_start:
        on_start(len(todo))
    for r in results:
        if on_result:
            on_result(r)

    def add(r: VariantResult) -> None:
        r.reason = r.reason or reasons.get(r.key, "")
        results.append(r)
        if on_result:
            on_result(r)

    runtime_built = False
    if todo or plan.runtime_missing or (shard is not None and writable):
        rt_entry, runtime_built = _build_runtime(store, tc, tc_id)
    if todo:
        rt_path = str(store.entry_dir(rt_entry) / rt_entry.main_file)
        args = (str(store.layout.root), rt_path, rt_entry.key, tc, tc_id)
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
        try:
            _compile_all(store, todo, args, jobs, add, on_begin)
        finally:
            with signals_held():  # the staging dirs of workers killed by an interrupt or a crash
                remove_stale_staging(store)
    order = {v.name: i for i, v in enumerate(variants)}
    results.sort(key=lambda r: order.get(r.name, 0))
    if writable:
        store.refresh_views()
    return BuildReport(results, time.perf_counter() - t0, store.layout.root, runtime_built, stale_removed,
                       [(name, reason) for _, name, reason in plan.damaged])
