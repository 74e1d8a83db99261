"""The release steps of `kernelforge build`: the reproducibility check's output (--check-reproducible)."""
from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console

from ..cache import CacheStore
from ..errors import KernelforgeError


def check_reproducible_cmd(variants: Sequence[Any], store: CacheStore, *, sample: int, jobs: int | None,
                           shard: tuple[int, int] | None, out: Console, err: Console, as_json: bool = False) -> int:
    """Run the check, print one line per artifact and a summary (`as_json`: then the report as
    JSON on stdout, kind "build_reproducible"); return the exit code (0 all OK, 1 any DIFFERS or
    FAILED, 2 nothing of the selection is cached or no toolchain: one error line, no JSON)."""
    from ..build.reproducible import DIFFERS, FAILED, OK, check_reproducible

    try:
        report = check_reproducible(variants, store, sample=sample, jobs=jobs, shard=shard)
    except KernelforgeError as exc:
        err.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return 2
    if not report.results:
        err.print(f"error: none of the {len(variants)} selected variant(s) is in {store.root}; "
                  "build them first", highlight=False, markup=False, soft_wrap=True)
        return 2
    for r in report.results:
        line = f"{r.status} {r.name} [{r.key[:12]}] cached {r.cached_sha256 or '-'} rebuilt {r.rebuilt_sha256 or '-'}"
        out.print(line + (f" ({r.detail})" if r.detail else ""), highlight=False, markup=False, soft_wrap=True)
    bad = sum(r.status != OK for r in report.results)
    out.print(f"reproducible: {len(report.results) - bad} OK, {bad} not, of {len(report.results)} artifact(s) "
              f"rebuilt ({len(report.results) - 1} of {report.cached} cached variant(s) + the runtime library) "
              f"in {report.seconds:.1f}s", highlight=False)
    if as_json:
        from .json_schemas import emit, snake

        emit("build_reproducible", {
            "cache_root": str(store.root), "ok": report.ok, "sample": sample, "cached": report.cached,
            "seconds": round(report.seconds, 3),
            "counts": {snake(s): sum(r.status == s for r in report.results) for s in (OK, DIFFERS, FAILED)},
            "results": [{"name": r.name, "key": r.key, "status": snake(r.status), "cached_sha256": r.cached_sha256,
                         "rebuilt_sha256": r.rebuilt_sha256, "detail": r.detail} for r in report.results]})
    return 0 if report.ok else 1
